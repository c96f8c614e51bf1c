"""SQLite, the embedded default: one writer at a time."""
