# Two commands (see README): `make demo` and `make test`. Both set everything up from the project's own files.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha256sum | cut -c1-12)
# The native protocol core (Rust, runtime/native): a change to it reinstalls, which rebuilds the extension. Cargo
# builds into a persistent target dir outside the repository, so a rebuild recompiles only what changed.
NATIVE := runtime/native
NATIVE_SOURCES := $(NATIVE)/Cargo.toml $(NATIVE)/Cargo.lock $(shell find $(NATIVE)/src -name '*.rs' 2>/dev/null)
export CARGO_TARGET_DIR ?= $(or $(ENSEMBLE_TOOLS_CACHE),$(HOME)/.cache/ensemble-operator/tools)/cargo-target
CARGO := nice cargo

.PHONY: setup demo demo-runtime test lint lint-native typecheck unit integration bench tools images crds fuzz property

$(STAMP): pyproject.toml $(NATIVE_SOURCES)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[runtime,operator,examples,dev]'
	rm -f $(VENV)/.installed-* && touch $(STAMP)

setup: $(STAMP)

# The main job end to end on the embedded cluster (control plane + a real node; needs root): builds the tools and
# images it lacks (first run: about 20 minutes on 2 cores, with progress), installs the chart, applies the example
# Models and Ensembles, runs the example client in the cluster, rolls a new model version in under load, cleans
# up. Later runs reuse what is built (about 3 minutes). On a cluster of yours (opt-in, see `python -m demo --help`):
# make demo DEMO_ARGS="--kubeconfig --runtime-image REF --operator-image REF --s3-endpoint URL".
DEMO_ARGS ?=
demo: setup
	$(BIN)/python -m demo $(DEMO_ARGS)

# The runtime alone on loopback ports, serving the example repository, with the example client (about 1 minute).
demo-runtime: setup
	$(BIN)/python -m ensemble_examples.demo

lint: setup lint-native
	$(BIN)/ruff check contract runtime operator examples/ensemble_examples tests bench e2e fuzz demo
	$(BIN)/lint-imports

# The Rust crate: formatting, clippy with warnings as errors, and its pure unit tests (no libpython needed).
lint-native:
	cd $(NATIVE) && $(CARGO) fmt --check
	cd $(NATIVE) && PYO3_PYTHON=$(abspath $(BIN)/python) $(CARGO) clippy --release --all-targets -- -D warnings
	cd $(NATIVE) && $(CARGO) test --release --no-default-features

# The Triton python models under bench/models and tests' model repositories are left out: they run in Triton's stub
# too, import its untyped triton_python_backend_utils, and repeat module names (model.py) mypy cannot tell apart.
typecheck: setup
	$(BIN)/mypy contract/ensemble_contract runtime/ensemble_runtime operator/ensemble_operator examples/ensemble_examples/*.py e2e fuzz demo \
		bench tests --exclude 'bench/models/[a-z][a-z_]*\.py$$' --exclude '^tests/.*/(flow_)?models/'

# Go-built control plane, MinIO and helm (cached outside the repo, keyed by version), the real node's
# kubelet, kube-proxy, containerd and pause image (plus Debian's runc, CNI plugins, iptables), the real
# Triton server as a test peer (from the nvidia-pytriton wheel) and NVIDIA's perf_analyzer (its wheel, run
# through Debian trixie's loader). Cold (empty Go caches): about 12 minutes on 2 cores; warm: seconds.
tools: setup
	bash tools/setup-node-packages.sh
	bash tools/build-tools.sh all
	bash tools/setup-triton.sh
	PYTHON=$(BIN)/python bash tools/setup-perf-analyzer.sh

unit: setup
	$(BIN)/pytest tests/unit -q

# The container images from docker/*.Dockerfile, saved as docker-archive tarballs in the tools cache
# (tools/build-images.sh; keyed by their inputs, rebuilt only when those change): the CPU runtime and the operator;
# GPU=1 adds the GPU runtime (localhost/ensemble-runtime:gpu-<key>: onnxruntime-gpu with its CUDA 13 and cuDNN
# wheels from pypi.org, nvidia-ml-py, cuda-python; no TensorRT. Cold on 2 cores: 1.7 GB of wheels in 30-55 s,
# the image in 6 min, 3.0 GB). GPU=1 TENSORRT=1 adds TensorRT 10 (gpu-trt-<key>), whose pypi.org packages fetch
# their wheels from pypi.nvidia.com: the host must reach that index (and may add
# PIP_EXTRA_INDEX_URL=https://pypi.nvidia.com), or PIP_FIND_LINKS must name a directory of NVIDIA's tensorrt
# wheels. `make test` builds neither (tests/integration/images/ runs one only if it is built).
# Wheels are built here and installed offline, FROM a Debian bookworm made with debootstrap, or FROM
# BASE_IMAGE=python:3.11-slim (pulled). Needs root; installs Debian's docker.io and debootstrap when missing.
# Cold: about 5 minutes on 2 cores; warm: <1 s.
TENSORRT ?= 0
images: setup
	PYTHON=$(BIN)/python TENSORRT=$(TENSORRT) bash tools/build-images.sh runtime-cpu operator $(if $(GPU),runtime-gpu)

test: setup lint typecheck tools images
	$(BIN)/pytest -q -p no:cacheprovider

# Coverage-guided fuzzing (atheris) of the gRPC and HTTP codecs and the config parser, from fuzz/corpus/.
# `make test` runs the same targets for 30 s each (tests/fuzz/test_fuzz_targets.py).
FUZZ_SECONDS ?= 60
fuzz: setup
	$(BIN)/python -m fuzz.run --seconds $(FUZZ_SECONDS)

# Property-based tests (hypothesis) against a real runtime; HYPOTHESIS_PROFILE=deep for 2,000 examples each.
property: setup
	$(BIN)/pytest tests/property -q

bench: setup
	$(BIN)/python bench/single_model.py
