"""Reading the user's source: calls, operators and operands on a line, how names are spelled."""
