"""``python -m mixreplay.demo``: the same as ``mixreplay demo``."""

import sys

from mixreplay.demo.cli import main

if __name__ == "__main__":
    sys.exit(main())
