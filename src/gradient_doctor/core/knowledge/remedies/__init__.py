"""Remedies: the fixes and not-fixes rules propose, built to name the user's setup."""
