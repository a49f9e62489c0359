#!/usr/bin/env bash
# Build the project's container images from docker/*.Dockerfile and save them as docker-archive tarballs
# (what `docker load` and `ctr -n k8s.io images import` read) in the tools cache:
#
#   ${ENSEMBLE_TOOLS_CACHE:-$HOME/.cache/ensemble-operator/tools}/images/<image>-<key>.tar   (+ .json)
#
# Usage: tools/build-images.sh [runtime-cpu|operator|runtime-gpu|all]...  (default: runtime-cpu operator)
#        tools/build-images.sh --print NAME    (the image's tarball, reference and key, as JSON; builds nothing)
#        TENSORRT=1 tools/build-images.sh runtime-gpu   (the GPU runtime with TensorRT: see below)
#
# <key> hashes everything that goes into an image: the Dockerfile, the base image, the dependency wheels, the
# project's sources and these scripts. An image whose tarball exists is not rebuilt.
#
# - Base image: BASE_IMAGE if set (e.g. python:3.11-slim, pulled by the daemon); otherwise a Debian bookworm
#   built here (debootstrap --variant=minbase, with python3, python3-venv and ca-certificates, from the
#   Debian mirror in /etc/apt/sources.list(.d)): no container registry needed.
# - Wheels: built on the host with `pip wheel` (PYTHON, a Python 3.11 like the images'): the dependencies
#   once per pyproject.toml, the project's own wheel per build. Images install them with `pip install
#   --no-index`; builds run with `--network none`. The project's wheel carries the native protocol core
#   (runtime/native, Rust, built by setuptools-rust with the host's cargo into CARGO_TARGET_DIR, default
#   <tools cache>/cargo-target, so a rebuild compiles only what changed); the host's glibc must not be newer than
#   the images' (both Debian bookworm here).
# - Docker: Debian's docker.io, a private daemon per run (tools/dockerd.sh), stopped at exit.
# - GPU runtime (runtime-gpu): onnxruntime-gpu with its CUDA and cuDNN wheels (its `cuda`/`cudnn` extras),
#   nvidia-ml-py and cuda-python, all from pypi.org; tagged gpu-<key>. TENSORRT=1 adds the `tensorrt` extra
#   (the TensorRT backend, ensemble-build-plan, onnxruntime's TensorRT provider): tagged gpu-trt-<key>, its
#   tarball runtime-gpu-trt-<key>.tar. TensorRT's packages on pypi.org are sdists that fetch the real wheels
#   from pypi.nvidia.com when pip builds them, so the host must reach that index (PIP_EXTRA_INDEX_URL=
#   https://pypi.nvidia.com lets pip take the wheels from it directly), or PIP_FIND_LINKS must name a directory
#   holding NVIDIA's tensorrt wheels. The choice is part of the wheels' and the image's keys.
# Needs root (debootstrap, dockerd). Missing Debian packages (docker.io, debootstrap) are installed.
# Concurrent runs are safe: base, wheels and each image are built under an flock into a temporary path that is
# renamed into place when complete.
set -euo pipefail

TOOLS_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "${TOOLS_DIR}/.." && pwd)"
CACHE="${ENSEMBLE_TOOLS_CACHE:-${HOME}/.cache/ensemble-operator/tools}/images"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-${ENSEMBLE_TOOLS_CACHE:-${HOME}/.cache/ensemble-operator/tools}/cargo-target}"
PYTHON="${PYTHON:-$(command -v python3.11 || command -v python3)}"
SUITE="bookworm"
BASE_PACKAGES="python3,python3-venv,ca-certificates"
REGISTRY="localhost" # image references are localhost/<name>:<tag>: never pulled from Docker Hub by mistake
case "${TENSORRT:-0}" in
    1 | yes | true) TENSORRT=1 ;;
    0 | no | false | "") TENSORRT=0 ;;
    *) printf '[build-images] TENSORRT=%s: use 1 or 0\n' "${TENSORRT}" >&2; exit 2 ;;
esac

log() { printf '[build-images] %s\n' "$*" >&2; }
sha() { sha256sum | cut -c1-64; }
short() { cut -c1-16; }

# name -> Dockerfile, pip extras, repository, tag prefix
dockerfile_of() {
    case "$1" in
        runtime-cpu) echo "${REPO}/docker/runtime-cpu.Dockerfile" ;;
        runtime-gpu) echo "${REPO}/docker/runtime.Dockerfile" ;;
        operator) echo "${REPO}/docker/operator.Dockerfile" ;;
        *) log "unknown image: $1 (runtime-cpu, runtime-gpu, operator)"; exit 2 ;;
    esac
}
trt_of() { # name -> 1 when the image carries TensorRT
    [[ "$1" == runtime-gpu ]] && echo "${TENSORRT}" || echo 0
}
extras_of() { # the extras whose wheels the build context holds
    case "$1" in
        runtime-cpu) echo runtime,examples ;;
        runtime-gpu) [[ "$(trt_of "$1")" == 1 ]] && echo runtime,gpu,tensorrt,examples || echo runtime,gpu,examples ;;
        operator) echo operator ;;
    esac
}
build_args_of() { # name -> docker build --build-arg options beyond BASE_IMAGE (part of the image's key)
    case "$1" in
        runtime-gpu) [[ "$(trt_of "$1")" == 1 ]] && echo "EXTRAS=runtime,gpu,tensorrt" || echo "EXTRAS=runtime,gpu" ;;
        *) echo "" ;;
    esac
}
repository_of() {
    case "$1" in runtime-*) echo "${REGISTRY}/ensemble-runtime" ;; operator) echo "${REGISTRY}/ensemble-operator" ;; esac
}
# The runtime images embed the example repository: the `examples` extra's wheels (scikit-learn, Pillow) let the
# build stage train its models in a throw-away venv; the image keeps Pillow (the Python models decode images),
# not scikit-learn (the demo's in-cluster client gets the held-out digits in a ConfigMap).
# Packages an image needs beyond the project's extras: the GPU runtime takes onnxruntime-gpu's CUDA and cuDNN
# wheels (its extras) rather than a CUDA base image.
more_of() {
    case "$1" in
        runtime-cpu) echo "" ;;
        runtime-gpu) echo "onnxruntime-gpu[cuda,cudnn]" ;;
        *) echo "" ;;
    esac
}
tag_prefix_of() {
    case "$1" in runtime-gpu) [[ "$(trt_of "$1")" == 1 ]] && echo "gpu-trt-" || echo "gpu-" ;; *) echo "" ;; esac
}
tarball_of() { # name key
    local variant=""; [[ "$(trt_of "$1")" == 1 ]] && variant="-trt"
    echo "${CACHE}/$1${variant}-$2.tar"
}

# The Debian mirror apt uses for ${SUITE} (deb822 .sources or one-line .list files).
debian_mirror() {
    local f uri=""
    for f in /etc/apt/sources.list.d/*.sources; do
        [[ -f "${f}" ]] || continue
        uri="$(awk -v suite="${SUITE}" '
            BEGIN { RS = ""; FS = "\n" }
            {
                uris = ""; ok = 0
                for (i = 1; i <= NF; i++) {
                    if ($i ~ /^URIs:/) { split($i, a, /[ \t]+/); uris = a[2] }
                    if ($i ~ /^Suites:/) { n = split($i, s, /[ \t]+/); for (j = 2; j <= n; j++) if (s[j] == suite) ok = 1 }
                }
                if (ok && uris != "") { print uris; exit }
            }' "${f}")"
        [[ -n "${uri}" ]] && { echo "${uri}"; return 0; }
    done
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [[ -f "${f}" ]] || continue
        uri="$(awk -v suite="${SUITE}" '$1 == "deb" { i = 2; if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ } if ($(i + 1) == suite) { print $i; exit } }' "${f}")"
        [[ -n "${uri}" ]] && { echo "${uri}"; return 0; }
    done
    echo "http://deb.debian.org/debian"
}

# --- keys (cheap: no network, no daemon) ---------------------------------------------------------------------

recipe_key() { cat "${TOOLS_DIR}/build-images.sh" "${TOOLS_DIR}/dockerd.sh" | sha; }

base_key() { printf '%s\n' "${SUITE}" "${BASE_PACKAGES}" "$(debian_mirror)" | sha | short; }
base_dir() { echo "${CACHE}/base-${SUITE}-$(base_key)"; }

# Dependency wheels of an image: keyed by pyproject.toml, the extras and more packages, and the host Python
# (its version and platform).
wheels_key() { # name
    { cat "${REPO}/pyproject.toml"; extras_of "$1"; more_of "$1"
      "${PYTHON}" -c 'import sys, sysconfig; print(sys.version, sysconfig.get_platform())'; } | sha | short
}
wheels_dir() { echo "${CACHE}/wheels-$1-$(wheels_key "$1")"; }

# What the project's wheel is built from (setuptools package-data included).
source_key() {
    (cd "${REPO}" && {
        printf '%s\n' pyproject.toml README.md
        find contract runtime operator examples -type f \
            \( -name '*.py' -o -name '*.pyi' -o -name '*.txt' -o -name '*.pbtxt' -o -name py.typed \
               -o -name '*.rs' -o -name Cargo.toml -o -name Cargo.lock \) \
            -not -path '*/__pycache__/*' -not -path 'examples/model_repository/*' -not -path '*.egg-info/*' \
            -not -path 'runtime/native/target/*'
    } | LC_ALL=C sort | xargs -d '\n' sha256sum) | sha
}

base_ref() { # the image reference the Dockerfiles build FROM
    if [[ -n "${BASE_IMAGE:-}" ]]; then echo "${BASE_IMAGE}"; else echo "${REGISTRY}/ensemble-base:${SUITE}-$(base_key)"; fi
}

base_identity() { # what identifies the base's content (a debootstrap's rootfs digest; else the reference)
    if [[ -n "${BASE_IMAGE:-}" ]]; then echo "${BASE_IMAGE}"; return 0; fi
    local d; d="$(base_dir)"
    [[ -f "${d}/rootfs.sha256" ]] && cat "${d}/rootfs.sha256" || echo "unbuilt"
}

wheels_identity() { # name
    local d; d="$(wheels_dir "$1")"
    [[ -f "${d}/SHA256SUMS" ]] && cat "${d}/SHA256SUMS" | sha || echo "unbuilt"
}

image_key() { # name
    {
        recipe_key
        sha <"$(dockerfile_of "$1")"
        build_args_of "$1"
        base_identity
        wheels_identity "$1"
        source_key
    } | sha | short
}

print_image() { # name -> JSON (tarball, reference, key, built, tensorrt)
    local name="$1" key; key="$(image_key "${name}")"
    local tar; tar="$(tarball_of "${name}" "${key}")"
    local built=false; [[ -f "${tar}" ]] && built=true
    local trt=false; [[ "$(trt_of "${name}")" == 1 ]] && trt=true
    printf '{"name": "%s", "key": "%s", "tarball": "%s", "reference": "%s:%s%s", "built": %s, "tensorrt": %s}\n' \
        "${name}" "${key}" "${tar}" "$(repository_of "${name}")" "$(tag_prefix_of "${name}")" "${key}" "${built}" \
        "${trt}"
}

# --- builds ------------------------------------------------------------------------------------------------

ensure_packages() {
    local missing=() cmd pkg
    for pair in dockerd:docker.io containerd:containerd runc:runc debootstrap:debootstrap; do
        cmd="${pair%%:*}"; pkg="${pair#*:}"
        command -v "${cmd}" >/dev/null 2>&1 || missing+=("${pkg}")
    done
    ((${#missing[@]} == 0)) && return 0
    log "installing Debian packages: ${missing[*]}"
    # Services must not start from the packages' postinst (a default dockerd would set FORWARD to DROP).
    local policy=/usr/sbin/policy-rc.d created=0
    if [[ ! -e "${policy}" ]]; then
        printf '#!/bin/sh\nexit 101\n' >"${policy}" && chmod 0755 "${policy}" && created=1
    fi
    local rc=0
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=600 \
        --no-install-recommends "${missing[@]}" >/dev/null || rc=$?
    ((created)) && rm -f "${policy}"
    return "${rc}"
}

locked() { # lockname command... : run under an exclusive flock on ${CACHE}/.lockname.lock
    local name="$1"; shift
    mkdir -p "${CACHE}"
    local lock
    exec {lock}>"${CACHE}/.${name}.lock"
    flock "${lock}"
    local rc=0
    "$@" || rc=$?
    exec {lock}>&-
    return "${rc}"
}

build_base() {
    local final; final="$(base_dir)"
    [[ -f "${final}/rootfs.sha256" ]] && return 0
    local mirror; mirror="$(debian_mirror)"
    local tmp; tmp="$(mktemp -d "${CACHE}/.tmp-base.XXXXXX")"
    log "base: debootstrap --variant=minbase ${SUITE} (${BASE_PACKAGES}) from ${mirror}"
    local start=${SECONDS}
    if ! debootstrap --variant=minbase --include="${BASE_PACKAGES}" "${SUITE}" "${tmp}/rootfs" "${mirror}" \
        >"${tmp}/debootstrap.log" 2>&1; then
        tail -20 "${tmp}/debootstrap.log" >&2
        rm -rf "${tmp}"
        log "base: debootstrap FAILED"
        return 1
    fi
    rm -rf "${tmp}"/rootfs/var/cache/apt/archives/*.deb "${tmp}"/rootfs/var/lib/apt/lists/* "${tmp}"/rootfs/var/log/*.log
    tar --numeric-owner --xattrs -C "${tmp}/rootfs" -cf "${tmp}/rootfs.tar" .
    rm -rf "${tmp}/rootfs"
    sha256sum <"${tmp}/rootfs.tar" | cut -c1-64 >"${tmp}/rootfs.sha256"
    chmod 0755 "${tmp}"
    mv -T "${tmp}" "${final}"
    log "base: built in $((SECONDS - start))s -> ${final}"
}

build_wheels() { # name
    local name="$1" final; final="$(wheels_dir "$1")"
    [[ -f "${final}/SHA256SUMS" ]] && return 0
    local tmp; tmp="$(mktemp -d "${CACHE}/.tmp-wheels.XXXXXX")"
    local requirements=("${REPO}[$(extras_of "${name}")]")
    [[ -n "$(more_of "${name}")" ]] && requirements+=($(more_of "${name}"))
    log "wheels: pip wheel ${requirements[*]} with ${PYTHON}"
    local start=${SECONDS}
    if ! "${PYTHON}" -m pip wheel --quiet --wheel-dir "${tmp}" "${requirements[@]}" >&2; then
        rm -rf "${tmp}"
        log "wheels: pip wheel FAILED"
        [[ "$(trt_of "${name}")" == 1 ]] && log "(TENSORRT=1: TensorRT's PyPI packages, tensorrt-cu*-libs, are sdists" \
            "that download their wheels from pypi.nvidia.com when built: the host must reach it (and may set" \
            "PIP_EXTRA_INDEX_URL=https://pypi.nvidia.com), or PIP_FIND_LINKS must name a directory of NVIDIA's" \
            "tensorrt wheels; without TENSORRT=1 the GPU image has no TensorRT)"
        return 1
    fi
    rm -f "${tmp}"/ensemble_operator-*.whl # the project's own wheel is built per image
    (cd "${tmp}" && sha256sum -- *.whl >SHA256SUMS)
    chmod 0755 "${tmp}"
    mv -T "${tmp}" "${final}"
    log "wheels: $(wc -l <"${final}/SHA256SUMS") wheels in $((SECONDS - start))s -> ${final}"
}

DOCKER="$(command -v /usr/bin/docker || command -v docker || true)"
DAEMON_DIR=""
DOCKER_HOST_URL=""

daemon() { # start the private daemon once per run
    [[ -n "${DOCKER_HOST_URL}" ]] && return 0
    DAEMON_DIR="$(mktemp -d "${TMPDIR:-/tmp}/ensemble-images-dockerd.XXXXXX")"
    DOCKER_HOST_URL="$(bash "${TOOLS_DIR}/dockerd.sh" start "${DAEMON_DIR}")"
}

stop_daemon() {
    [[ -n "${DAEMON_DIR}" ]] && bash "${TOOLS_DIR}/dockerd.sh" stop "${DAEMON_DIR}" || true
}

dk() { DOCKER_BUILDKIT=0 "${DOCKER}" -H "${DOCKER_HOST_URL}" "$@"; }

load_base() {
    local ref; ref="$(base_ref)"
    if [[ -n "${BASE_IMAGE:-}" ]]; then
        dk image inspect "${ref}" >/dev/null 2>&1 || dk pull "${ref}" >&2
        return 0
    fi
    dk image inspect "${ref}" >/dev/null 2>&1 && return 0
    dk import --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'CMD ["/bin/bash"]' "$(base_dir)/rootfs.tar" "${ref}" >/dev/null
}

build_image() { # name
    local name="$1" json; json="$(print_image "${name}")"
    local key tar ref
    key="$(sed -E 's/.*"key": "([^"]+)".*/\1/' <<<"${json}")"
    tar="$(tarball_of "${name}" "${key}")"
    ref="$(repository_of "${name}"):$(tag_prefix_of "${name}")${key}"
    if [[ -f "${tar}" ]]; then
        log "${name}: cached at ${tar}"
        return 0
    fi
    local build_args=() arg
    for arg in $(build_args_of "${name}"); do build_args+=(--build-arg "${arg}"); done
    local start=${SECONDS}
    local ctx; ctx="$(mktemp -d "${CACHE}/.tmp-${name}.XXXXXX")"
    mkdir -p "${ctx}/wheels"
    cp "$(dockerfile_of "${name}")" "${ctx}/Dockerfile"
    cp -l "$(wheels_dir "${name}")"/*.whl "${ctx}/wheels/"
    log "${name}: building ${ref} FROM $(base_ref)"
    if ! "${PYTHON}" -m pip wheel --quiet --no-deps --wheel-dir "${ctx}/wheels" "${REPO}" >&2 \
        || ! load_base \
        || ! dk build --network none --build-arg "BASE_IMAGE=$(base_ref)" ${build_args[@]+"${build_args[@]}"} \
            --tag "${ref}" "${ctx}" >"${ctx}/build.log" 2>&1 \
        || ! dk save --output "${ctx}/image.tar" "${ref}"; then
        [[ -f "${ctx}/build.log" ]] && tail -30 "${ctx}/build.log" >&2
        rm -rf "${ctx}"
        log "${name}: build FAILED"
        return 1
    fi
    dk image rm "${ref}" >/dev/null 2>&1 || true
    chmod 0644 "${ctx}/image.tar"
    mv "${ctx}/image.tar" "${tar}.tmp"
    printf '%s\n' "${json/\"built\": false/\"built\": true}" >"${tar%.tar}.json"
    mv "${tar}.tmp" "${tar}"
    rm -rf "${ctx}"
    log "${name}: built in $((SECONDS - start))s -> ${tar} ($(du -m "${tar}" | cut -f1) MB)"
}

prune() { # name: all but the newest KEEP_IMAGES tarballs of the image (worktrees of other branches share
    # the cache: keeping a few spares them a rebuild each time they alternate)
    local name="$1" f
    while read -r f; do
        rm -f "${f}" "${f%.tar}.json"
    done < <(ls -1t "${CACHE}/${name}"-*.tar 2>/dev/null | tail -n +"$((${KEEP_IMAGES:-3} + 1))")
    while read -r f; do # wheel sets of older pyproject.tomls
        rm -rf "${f}"
    done < <(ls -1dt "${CACHE}/wheels-${name}"-*/ 2>/dev/null | tail -n +"$((${KEEP_IMAGES:-3} + 1))")
}

build() { # name
    local name="$1"
    [[ -f "$(sed -E 's/.*"tarball": "([^"]+)".*/\1/' <<<"$(print_image "${name}")")" ]] && {
        log "${name}: cached"
        return 0
    }
    ensure_packages
    [[ -n "${BASE_IMAGE:-}" ]] || locked base build_base
    locked "wheels-${name}" build_wheels "${name}"
    daemon
    locked "${name}" build_image "${name}"
    locked "${name}" prune "${name}"
}

main() {
    if [[ "${1:-}" == "--print" ]]; then
        dockerfile_of "${2:?image name}" >/dev/null
        print_image "$2"
        return 0
    fi
    local targets=("$@") t
    ((${#targets[@]} == 0)) && targets=(runtime-cpu operator)
    trap stop_daemon EXIT
    mkdir -p "${CACHE}"
    for t in "${targets[@]}"; do
        if [[ "${t}" == "all" ]]; then
            for n in runtime-cpu operator runtime-gpu; do build "${n}"; done
        else
            dockerfile_of "${t}" >/dev/null
            build "${t}"
        fi
    done
}

main "$@"
