"""`python -m ringleader.rank ... -- CMD`: the per-rank wrapper that mpirun starts."""

from ringleader.core.exiting import exit_at_once
from ringleader.rank.wrapper import main

exit_at_once(main())
