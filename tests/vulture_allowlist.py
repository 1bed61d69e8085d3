"""Names vulture cannot see being used (called by frameworks or by reflection)."""
# The context-manager protocol fixes __exit__'s parameter names (emulator.py, simpod.py).
exc_type  # noqa: F821, B018
tb  # noqa: F821, B018
