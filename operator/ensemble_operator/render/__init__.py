"""Pure rendering of desired Kubernetes objects and runtime configuration."""
