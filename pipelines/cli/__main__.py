"""`python -m pipelines.cli`: the same as the `srag` console script."""

import sys

from pipelines.cli import main

sys.exit(main())
