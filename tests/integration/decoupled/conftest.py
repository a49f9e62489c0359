"""Decoupled models over a real runtime (the `triton` marker is registered in pyproject.toml)."""
