"""`python -m gradient_doctor`: the `gradient-doctor` command, where its script is not on PATH."""

import sys

from gradient_doctor.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
