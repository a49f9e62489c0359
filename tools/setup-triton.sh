#!/usr/bin/env bash
# Install the real NVIDIA Triton Inference Server (CPU, Python backend) as a benchmark / test peer, from the
# `nvidia-pytriton` wheel on PyPI (it ships a `tritonserver` binary, the Python backend and per-Python stubs),
# into a separate virtual environment outside the repository:
#
#   ${ENSEMBLE_TOOLS_CACHE:-$HOME/.cache/ensemble-operator/tools}/triton-<pytriton version>/
#     venv/                   python3.11 venv with nvidia-pytriton (+ numpy<2, which the stub imports)
#     server -> venv/.../pytriton/tritonserver   bin/tritonserver, backends/python/{libtriton_python.so,
#                                                triton_python_backend_stub (the 3.11 one, copied here)}
#     peer.env                KEY=VALUE lines that bench/triton_peer.py reads to launch the server
#
# Usage: tools/setup-triton.sh              (install if missing; prints the install directory)
#        tools/setup-triton.sh --print-dir  (the install directory; installs nothing)
#
# Idempotent: an install whose peer.env exists is reused. Concurrent runs serialise on a lock file; venvs
# are not relocatable, so the venv is built at its final path under the lock, and peer.env, written last,
# marks the install complete (a half-finished directory without it is removed and redone).
#
# Python: the stub embeds CPython 3.11 (it links libpython3.11.so.1.0). Its interpreter finds its prefix by
# searching PATH for `python3`, so the launcher puts venv/bin first on PATH (what pytriton itself does) and
# the base interpreter's LIBDIR first on LD_LIBRARY_PATH, so stub, stdlib and numpy are all the same 3.11.
set -euo pipefail

PYTRITON_VERSION="${PYTRITON_VERSION:-0.7.0}"
PYTHON="${TRITON_PEER_PYTHON:-python3.11}"
CACHE="${ENSEMBLE_TOOLS_CACHE:-${HOME}/.cache/ensemble-operator/tools}"
FINAL="${CACHE}/triton-${PYTRITON_VERSION}"

log() { printf '[setup-triton] %s\n' "$*" >&2; }

if [[ "${1:-}" == "--print-dir" ]]; then
    echo "${FINAL}"
    exit 0
fi

if [[ -f "${FINAL}/peer.env" ]]; then
    log "cached at ${FINAL}"
    echo "${FINAL}"
    exit 0
fi

mkdir -p "${CACHE}"
exec {lock}>"${CACHE}/.triton.lock"
flock "${lock}"
if [[ -f "${FINAL}/peer.env" ]]; then # installed by a concurrent run while we waited
    log "cached at ${FINAL}"
    echo "${FINAL}"
    exit 0
fi

if ! command -v "${PYTHON}" >/dev/null; then
    log "need ${PYTHON} (the Triton python-backend stub used here embeds CPython 3.11); set TRITON_PEER_PYTHON"
    exit 1
fi
start=${SECONDS}
rm -rf "${FINAL}" # a half-finished install (no peer.env): start over
log "installing nvidia-pytriton==${PYTRITON_VERSION} into ${FINAL}"
"${PYTHON}" -m venv "${FINAL}/venv"
VPY="${FINAL}/venv/bin/python"
"${VPY}" -m pip install --quiet --disable-pip-version-check "nvidia-pytriton==${PYTRITON_VERSION}" "numpy<2"

site="$("${VPY}" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
server="${site}/pytriton/tritonserver"
libs="${site}/nvidia_pytriton.libs"
pyver="$("${VPY}" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
pylibdir="$("${VPY}" -c 'import sysconfig; print(sysconfig.get_config_var("LIBDIR"))')"
stub="${server}/python_backend_stubs/${pyver}/triton_python_backend_stub"
[[ -x "${server}/bin/tritonserver" ]] || { log "no tritonserver binary in the wheel at ${server}/bin"; exit 1; }
[[ -f "${stub}" ]] || { log "no python backend stub for Python ${pyver} in the wheel"; exit 1; }
cp "${stub}" "${server}/backends/python/triton_python_backend_stub"
chmod 0755 "${server}/backends/python/triton_python_backend_stub"
ln -sfn "${server}" "${FINAL}/server"

# Check that the binary loads (all shared libraries resolve) and runs; `--help` exits 1, so check its text.
help="$(LD_LIBRARY_PATH="${libs}:${pylibdir}${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}" \
    "${server}/bin/tritonserver" --help 2>&1 || true)"
if [[ "${help}" != *"Usage: tritonserver"* ]]; then
    log "tritonserver does not run: ${help:0:400}"
    LD_LIBRARY_PATH="${libs}:${pylibdir}" ldd "${server}/bin/tritonserver" | grep 'not found' >&2 || true
    exit 1
fi

backends="$(cd "${server}/backends" && ls -d -- */ | tr -d / | tr '\n' ' ')"
tmp="$(mktemp "${FINAL}/.peer.env.XXXXXX")"
cat >"${tmp}" <<EOF
PYTRITON_VERSION=${PYTRITON_VERSION}
PYTHON_VERSION=${pyver}
TRITONSERVER=${server}/bin/tritonserver
BACKEND_DIRECTORY=${server}/backends
BACKENDS=${backends% }
LD_LIBRARY_PATH=${libs}:${pylibdir}
PATH_PREPEND=${FINAL}/venv/bin
EOF
mv "${tmp}" "${FINAL}/peer.env" # written last: its presence marks the install complete
exec {lock}>&-
log "installed in $((SECONDS - start))s (backends: ${backends% })"
echo "${FINAL}"
