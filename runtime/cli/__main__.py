"""`python -m runtime.cli ARGS`: the `barrierflow` command."""

import sys

from runtime.cli import main

sys.exit(main())
