"""`python -m ringleader.stack create|status|outputs|delete ...`."""

import sys

from ringleader.stack.cli import main

raise SystemExit(main(["stack", *sys.argv[1:]]))
