"""The command line: ``main`` (watchdog.cli.main) and one module per verb (argparse and exit codes only)."""
