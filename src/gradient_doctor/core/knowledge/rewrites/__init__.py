"""Rewrites of the user's code: each turns a line (or the call that built something) into a fix."""
