"""``python -m hpcbench.doctor``: see :mod:`hpcbench.doctor.entry`."""

import sys

from hpcbench.doctor.entry import main

sys.exit(main())
