"""`python -m orchestration.cli`: the `interlingua` command."""

import sys

from orchestration.cli import main

sys.exit(main())
