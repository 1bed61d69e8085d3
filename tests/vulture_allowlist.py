"""Names vulture cannot see being used (called by frameworks or by reflection)."""
