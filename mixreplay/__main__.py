"""``python -m mixreplay``: the ``mixreplay`` command (for when its script is not on PATH)."""

import sys

from mixreplay.cli import main

if __name__ == "__main__":
    sys.exit(main())
