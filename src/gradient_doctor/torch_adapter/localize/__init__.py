"""Where a failing step is replayed op by op (a dispatch mode: aten ops as the core's op
events, by module and user line) and where broken gradient paths are found.
"""
