"""Pure core: no I/O, no clock. The detector, parsing, profiles, the deletion policy, discovery, model types,
taints, Event bodies, budget arithmetic and every vocabulary (an import-linter contract keeps it pure)."""
