"""``python -m eval``: see ``eval/cli.py`` (or ``bash eval/eval.sh --help``)."""

import sys

from eval.cli import main

sys.exit(main())
