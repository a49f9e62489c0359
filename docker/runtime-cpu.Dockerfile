# CPU-only runtime image (onnxruntime, python backend).
#   docker build -f docker/runtime-cpu.Dockerfile -t ensemble-runtime:dev-cpu .
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY contract ./contract
COPY operator ./operator
COPY runtime ./runtime
COPY examples ./examples
RUN pip install ".[runtime]" && rm -rf /src
RUN useradd --uid 1000 --create-home runtime
USER 1000:1000
WORKDIR /tmp
EXPOSE 8000 8001 8002
ENTRYPOINT ["ensemble-runtime"]
