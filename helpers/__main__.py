"""`python -m helpers ...`: the course's command line (helpers.commands.cli)."""

import sys

from .commands.cli import main

sys.exit(main())
