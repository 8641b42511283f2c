"""`python -m headrace [--verbose]`: run the operator (the chart's and the image's entry point)."""

from __future__ import annotations

import sys

from headrace.app import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
