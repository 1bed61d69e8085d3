"""``python -m watchdog`` -> :func:`watchdog.cli.main`."""

import sys

from watchdog.cli import main

if __name__ == "__main__":
    sys.exit(main())
