"""The real Triton peer side by side with the runtime (the `triton` marker is registered in pyproject.toml)."""
