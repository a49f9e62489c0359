# CPU runtime image: the runtime (onnxruntime, Python backend) and the example model repository.
# `make images` builds it (tools/build-images.sh): the build context holds `wheels/`, the project's wheel and
# its dependencies' built on the host (`pip wheel '.[runtime,examples]'`: the examples extra trains the example
# models at build time with scikit-learn, and their Python models use Pillow); nothing is fetched during the build.
# By hand, from the repository root:
#   pip wheel --wheel-dir build/ctx/wheels '.[runtime,examples]' && cp docker/runtime-cpu.Dockerfile build/ctx/Dockerfile
#   docker build -t ensemble-runtime:dev build/ctx
ARG BASE_IMAGE=python:3.11-slim

FROM ${BASE_IMAGE} AS build
COPY wheels /wheels
RUN python3 -m venv /opt/ensemble \
 && /opt/ensemble/bin/pip install --no-cache-dir --no-index --find-links /wheels "ensemble-operator[runtime,examples]" \
 && /opt/ensemble/bin/python -m ensemble_examples /opt/ensemble/examples

FROM ${BASE_IMAGE}
# uid/gid 1000 as the chart's and the operator's pods run (runAsUser/runAsGroup 1000). Named "ensemble":
# Debian's base-passwd already has a group "operator" (gid 37).
RUN groupadd --gid 1000 ensemble \
 && useradd --uid 1000 --gid 1000 --no-log-init --create-home --home-dir /home/ensemble --shell /usr/sbin/nologin ensemble
COPY --from=build /opt/ensemble /opt/ensemble
ENV PATH=/opt/ensemble/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 HOME=/tmp
USER 1000:1000
WORKDIR /tmp
EXPOSE 8000 8001 8002
# PID 1 is the runtime itself: it drains and exits on SIGTERM (ensemble_runtime.server).
ENTRYPOINT ["ensemble-runtime"]
# Without arguments it serves the example models (the operator's pods pass their own arguments).
CMD ["--model-repository", "/opt/ensemble/examples"]
