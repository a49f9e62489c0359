"""Custom resource API types and the CRD generator."""
