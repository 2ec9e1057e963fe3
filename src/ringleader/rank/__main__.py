"""`python -m ringleader.rank ... -- CMD`: the per-rank wrapper that mpirun starts."""

import sys

from ringleader.rank.wrapper import main

sys.exit(main())
