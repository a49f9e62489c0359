"""ensemble-runtime: a Triton-compatible inference server for versioned model ensembles."""

__version__ = "0.1.0"
