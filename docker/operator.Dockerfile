# Operator image. `make images` builds it (tools/build-images.sh): the build context holds `wheels/`, the
# project's wheel and its dependencies' built on the host (`pip wheel '.[operator]'`); nothing is fetched
# during the build. By hand, from the repository root:
#   pip wheel --wheel-dir build/ctx/wheels '.[operator]' && cp docker/operator.Dockerfile build/ctx/Dockerfile
#   docker build -t ensemble-operator:dev build/ctx
ARG BASE_IMAGE=python:3.11-slim

FROM ${BASE_IMAGE} AS build
COPY wheels /wheels
RUN python3 -m venv /opt/ensemble \
 && /opt/ensemble/bin/pip install --no-cache-dir --no-index --find-links /wheels "ensemble-operator[operator]"

FROM ${BASE_IMAGE}
# uid/gid 1000 as the chart runs it (runAsUser/runAsGroup 1000). Not named "operator": Debian's
# base-passwd already has that group (gid 37), and `useradd operator` fails on it.
RUN groupadd --gid 1000 ensemble \
 && useradd --uid 1000 --gid 1000 --no-log-init --create-home --home-dir /home/ensemble --shell /usr/sbin/nologin ensemble
COPY --from=build /opt/ensemble /opt/ensemble
ENV PATH=/opt/ensemble/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
USER 1000:1000
WORKDIR /home/ensemble
# PID 1 is the operator itself: kopf stops on SIGTERM. The chart passes `args: ["ensemble-operator"]`.
ENTRYPOINT []
CMD ["ensemble-operator"]
