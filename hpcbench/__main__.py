"""``python -m hpcbench``: the same as the ``hpcbench`` console script."""

import sys

from hpcbench.cli import main

sys.exit(main())
