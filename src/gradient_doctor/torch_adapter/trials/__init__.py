"""Fix trials: each remedy put in place, run from the last good state."""
