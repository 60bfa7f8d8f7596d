"""`python -m tfplus ...` runs the `tfplus` command (tfplus.cli)."""
import sys

from tfplus.cli import main

if __name__ == "__main__":
    sys.exit(main())
