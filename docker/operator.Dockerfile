# Operator image. Build from the repository root:
#   docker build -f docker/operator.Dockerfile -t ensemble-operator:dev .
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY contract ./contract
COPY operator ./operator
COPY runtime ./runtime
COPY examples ./examples
RUN pip wheel --no-deps --wheel-dir /wheels . \
 && pip wheel --wheel-dir /wheels "kopf>=1.37" "kubernetes>=30.1" "pyyaml>=6.0" "cryptography>=42" \
      "pydantic>=2.7" "pydantic-settings>=2.3" "jsonschema>=4.20" "protobuf>=5.26"

FROM python:3.11-slim
RUN useradd --uid 1000 --create-home operator
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index --find-links /wheels /wheels/*.whl && rm -rf /wheels
USER 1000:1000
ENTRYPOINT []
CMD ["ensemble-operator"]
