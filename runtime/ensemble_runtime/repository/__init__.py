"""Model repository sources and version selection."""
