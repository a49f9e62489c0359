# GPU runtime image: the runtime with onnxruntime-gpu (CUDA and cuDNN from its `cuda`/`cudnn` extras) and
# TensorRT, and the example model repository. No CUDA base image: the wheels bring the CUDA libraries they
# need (nvidia-*, tensorrt-*-libs); the node's driver provides libcuda (NVIDIA container toolkit; which GPUs
# a pod sees is the device plugin's NVIDIA_VISIBLE_DEVICES, never a default of this image).
# `make images GPU=1` builds it (tools/build-images.sh): the build context holds `wheels/`, built on the host
# (`pip wheel '.[runtime,gpu,examples]' 'onnxruntime-gpu[cuda,cudnn]'`: several GB; the examples extra trains
# the example models at build time with scikit-learn, their Python models use Pillow; TensorRT's PyPI
# packages fetch their wheels from pypi.nvidia.com, which the host must reach); nothing is fetched here.
ARG BASE_IMAGE=python:3.11-slim

FROM ${BASE_IMAGE} AS build
COPY wheels /wheels
# onnxruntime (the runtime extra) and onnxruntime-gpu install the same package; the GPU build must win.
RUN python3 -m venv /opt/ensemble \
 && /opt/ensemble/bin/pip install --no-cache-dir --no-index --find-links /wheels \
      "ensemble-operator[runtime,gpu,examples]" "onnxruntime-gpu[cuda,cudnn]" \
 && /opt/ensemble/bin/pip uninstall --yes onnxruntime onnxruntime-gpu \
 && /opt/ensemble/bin/pip install --no-cache-dir --no-index --find-links /wheels --no-deps onnxruntime-gpu \
 && /opt/ensemble/bin/python -m ensemble_examples /opt/ensemble/examples

FROM ${BASE_IMAGE}
RUN groupadd --gid 1000 ensemble \
 && useradd --uid 1000 --gid 1000 --no-log-init --create-home --home-dir /home/ensemble --shell /usr/sbin/nologin ensemble
COPY --from=build /opt/ensemble /opt/ensemble
# The CUDA, cuDNN and TensorRT libraries of the wheels, found by the dynamic loader (onnxruntime's CUDA and
# TensorRT providers dlopen them by soname).
RUN find /opt/ensemble/lib -maxdepth 5 -type d \( -path '*/site-packages/nvidia/*/lib' -o -name tensorrt_libs \) \
      >/etc/ld.so.conf.d/ensemble-cuda.conf \
 && ldconfig
ENV PATH=/opt/ensemble/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 HOME=/tmp \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility
USER 1000:1000
WORKDIR /tmp
EXPOSE 8000 8001 8002
ENTRYPOINT ["ensemble-runtime"]
CMD ["--model-repository", "/opt/ensemble/examples"]
