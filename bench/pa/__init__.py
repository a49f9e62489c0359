"""Pieces of bench/perf_analyzer.py: CPU pinning and server processes, process-tree CPU time, the ONNX Runtime
baseline called directly, and the report (medians, ratios, table)."""
