"""`python -m ringleader.report PATH [--out DIR]`."""

import sys

from ringleader.report.cli import main

sys.exit(main())
