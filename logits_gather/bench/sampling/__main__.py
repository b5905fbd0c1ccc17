"""Entry point: ``python -m logits_gather.bench.sampling`` (see the package docstring)."""

import sys

from .options import main

if __name__ == "__main__":
    sys.exit(main())
