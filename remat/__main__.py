"""``python -m remat ...``: the command line (see remat.cli)."""

import sys

from .cli import main

sys.exit(main())
