"""Configuration: the settings table (one row per setting), typed Settings, flags and the loader."""
