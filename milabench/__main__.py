"""`python -m milabench` is the same as the `milabench` console script."""

import sys

from milabench.cli import main

sys.exit(main())
