"""Kubernetes operator that reconciles Model and Ensemble resources into runtime workloads."""
