"""`python -m helpers ...`: the course's command line (helpers.tools.cli)."""

import sys

from .tools.cli import main

sys.exit(main())
