"""``python -m watchdog`` -> :func:`watchdog.cli.main.main`."""

import sys

from watchdog.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
