"""What runs every update: the guarded optimizer step, its one fused finite check, the
random state kept for a replay.
"""
