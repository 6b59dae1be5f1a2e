"""``python -m galleria`` runs the command line."""

import sys

from galleria.cli import main

sys.exit(main())
