"""`python -m automation`: see automation/cli.py."""

import sys

from automation.cli import main

sys.exit(main())
