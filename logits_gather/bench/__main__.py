"""Entry point: ``python -m logits_gather.bench`` (see the package docstring)."""

import sys

from . import main

if __name__ == "__main__":
    sys.exit(main())
