"""Fix trials: the remedies put in place, the saved states they start from, the patched
source.
"""
