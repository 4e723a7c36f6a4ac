"""``python -m aiokpl``: the command line (see ``aiokpl --help``)."""

import sys

from ._cli import main

sys.exit(main())
