"""Where a failing step is replayed op by op and walked back to the op that made the bad
value.
"""
