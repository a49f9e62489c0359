# GPU runtime image: CUDA + cuDNN base with onnxruntime-gpu and TensorRT.
#   docker build -f docker/runtime.Dockerfile -t ensemble-runtime:dev-gpu .
FROM nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04
ENV DEBIAN_FRONTEND=noninteractive PYTHONDONTWRITEBYTECODE=1 PIP_NO_CACHE_DIR=1
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3.11 python3.11-venv python3-pip \
 && rm -rf /var/lib/apt/lists/* \
 && python3.11 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
COPY pyproject.toml README.md ./
COPY contract ./contract
COPY operator ./operator
COPY runtime ./runtime
COPY examples ./examples
RUN pip install ".[runtime,gpu]" && rm -rf /src
RUN useradd --uid 1000 --create-home runtime
USER 1000:1000
WORKDIR /tmp
EXPOSE 8000 8001 8002
ENTRYPOINT ["ensemble-runtime"]
