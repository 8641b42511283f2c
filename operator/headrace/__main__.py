"""`python -m headrace`: run the operator."""

from __future__ import annotations

import sys

from headrace.cli import main

if __name__ == "__main__":
    sys.exit(main(["operator", *sys.argv[1:]]))
