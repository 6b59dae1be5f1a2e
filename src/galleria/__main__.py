"""``python -m galleria`` runs the command line."""

import sys

try:
    from galleria.cli import main
except KeyboardInterrupt:  # Ctrl-C while the command line is still being imported
    print("galleria: interrupted", file=sys.stderr)
    sys.exit(130)

sys.exit(main())
