"""`python -m orchestration.cli`: the `interlingua` command."""

import sys

from orchestration.cli import console

sys.exit(console())
