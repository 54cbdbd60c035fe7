"""A script that fails before training: a ValueError raised two functions deep.

Expected: exit 1, status=problem with script_error "ValueError: ..."; the traceback on
stderr names this file's lines (load_rows, parse) and no frame of runpy or of the doctor.
"""

import sys


def parse(text):
    return [float(field) for field in text.split(",")]


def load_rows(lines):
    return [parse(line) for line in lines]


if __name__ == "__main__":
    rows = load_rows(["1.0,2.0", "3.0,three"])
    print(len(rows), file=sys.stderr)
