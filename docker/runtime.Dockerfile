# GPU runtime image: the runtime with onnxruntime-gpu (CUDA and cuDNN from its `cuda`/`cudnn` extras, nvidia-*
# wheels from pypi.org), nvidia-ml-py and cuda-python (the `gpu` extra), and the example model repository.
# TensorRT is opt-in (EXTRAS=runtime,gpu,tensorrt; `make images GPU=1 TENSORRT=1`): without it the TensorRT
# backend's models are UNAVAILABLE ("the tensorrt package is not installed ...") and onnxruntime's
# TensorrtExecutionProvider, listed but unable to load libnvinfer, is left out with a logged note: ONNX models
# run on CUDAExecutionProvider (or on CPU, with a logged note, where no GPU is visible). TensorRT's pypi.org packages are sdists that fetch the real wheels from
# pypi.nvidia.com when pip builds them: a host that reaches that index runs
# `make images GPU=1 TENSORRT=1 PIP_EXTRA_INDEX_URL=https://pypi.nvidia.com` (or, offline, names a directory of
# NVIDIA's tensorrt 10 wheels in PIP_FIND_LINKS) and gets the gpu-trt-<key> tag.
# No CUDA base image: the wheels bring the CUDA libraries they need (nvidia-*, tensorrt-*-libs); the node's
# driver provides libcuda (NVIDIA container toolkit; which GPUs a pod sees is the device plugin's
# NVIDIA_VISIBLE_DEVICES, never a default of this image).
# `make images GPU=1` builds it (tools/build-images.sh): the build context holds `wheels/`, built on the host
# (`pip wheel '.[runtime,gpu,examples]' 'onnxruntime-gpu[cuda,cudnn]'`, plus `tensorrt` with TENSORRT=1: several
# GB); nothing is fetched here.
ARG BASE_IMAGE=python:3.11-slim

FROM ${BASE_IMAGE} AS build
# The project's extras installed in the image: runtime,gpu, or runtime,gpu,tensorrt (tools/build-images.sh).
ARG EXTRAS=runtime,gpu
COPY wheels /wheels
# onnxruntime (the runtime extra) and onnxruntime-gpu install the same package; the GPU build must win.
RUN python3 -m venv /opt/ensemble \
 && /opt/ensemble/bin/pip install --no-cache-dir --no-index --find-links /wheels \
      "ensemble-operator[${EXTRAS}]" "onnxruntime-gpu[cuda,cudnn]" "Pillow>=10.0" \
 && /opt/ensemble/bin/pip uninstall --yes onnxruntime onnxruntime-gpu \
 && /opt/ensemble/bin/pip install --no-cache-dir --no-index --find-links /wheels --no-deps onnxruntime-gpu
# The example models are trained in a throw-away venv: scikit-learn does not reach the image.
RUN python3 -m venv /opt/trainer \
 && /opt/trainer/bin/pip install --no-cache-dir --no-index --find-links /wheels "ensemble-operator[runtime,examples]" \
 && /opt/trainer/bin/python -m ensemble_examples /opt/ensemble/examples

FROM ${BASE_IMAGE}
RUN groupadd --gid 1000 ensemble \
 && useradd --uid 1000 --gid 1000 --no-log-init --create-home --home-dir /home/ensemble --shell /usr/sbin/nologin ensemble
COPY --from=build /opt/ensemble /opt/ensemble
# The CUDA, cuDNN (and, with TensorRT, TensorRT) libraries of the wheels, found by the dynamic loader
# (onnxruntime's CUDA and TensorRT providers dlopen them by soname).
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
