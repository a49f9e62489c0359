"""Transports: gRPC (KServe v2 / Triton), HTTP REST, health and metrics. Only this package imports grpc."""
