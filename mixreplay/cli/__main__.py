"""``python -m mixreplay.cli``: the ``mixreplay`` command, as ``python -m mixreplay`` runs it."""

import sys

from mixreplay.cli import main

if __name__ == "__main__":
    sys.exit(main())
