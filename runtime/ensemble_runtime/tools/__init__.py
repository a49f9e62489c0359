"""Command-line tools shipped with the runtime (`ensemble-build-plan`)."""
