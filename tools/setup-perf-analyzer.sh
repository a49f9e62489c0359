#!/usr/bin/env bash
# Install NVIDIA's perf_analyzer (the benchmark client of Triton) from the `perf-analyzer` wheel on PyPI, so
# bench/perf_analyzer.py and tests/integration/perf_analyzer/ can run it against the runtime and the peer:
#
#   ${ENSEMBLE_TOOLS_CACHE:-$HOME/.cache/ensemble-operator/tools}/perf-analyzer-<version>/
#     bin/perf_analyzer        the binary from the wheel (built against glibc 2.38 and GCC 13's libstdc++)
#     sysroot/                 Debian 13 (trixie)'s libc6, libstdc++6 and libgcc-s1, unpacked (dpkg-deb -x)
#     cudart/libcudart.so      from the nvidia-cuda-runtime-cu12 wheel: `--shared-memory system` dlopens it,
#                              GPU or not
#     perf_analyzer            the wrapper to run: starts the binary through trixie's loader with
#                              `--library-path` (trixie's libs first, then the host's for libssl, libz)
#
# Usage: tools/setup-perf-analyzer.sh              (install if missing; prints the wrapper's path)
#        tools/setup-perf-analyzer.sh --print-path (the wrapper's path; installs nothing)
#
# Idempotent and keyed by version: an install with its wrapper in place is reused. The .debs come from
# Debian's archive through apt with a temporary sources list and state directories (the machine's apt
# configuration is not changed); the wheels through `pip download`. Everything is assembled in a temporary
# directory and renamed into place last (the wrapper finds its files relative to itself).
set -euo pipefail

PA_VERSION="${PERF_ANALYZER_VERSION:-2.60.0}"
CUDART_VERSION="${CUDA_RUNTIME_WHEEL_VERSION:-12.9.79}"
SUITE="${PERF_ANALYZER_DEBIAN_SUITE:-trixie}"
MIRROR="${PERF_ANALYZER_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
KEYRING="${PERF_ANALYZER_DEBIAN_KEYRING:-/usr/share/keyrings/debian-archive-keyring.gpg}"
PYTHON="${PYTHON:-python3}"
CACHE="${ENSEMBLE_TOOLS_CACHE:-${HOME}/.cache/ensemble-operator/tools}"
FINAL="${CACHE}/perf-analyzer-${PA_VERSION}"
WRAPPER="${FINAL}/perf_analyzer"
LIBDIR="usr/lib/x86_64-linux-gnu"

log() { printf '[setup-perf-analyzer] %s\n' "$*" >&2; }

if [[ "${1:-}" == "--print-path" ]]; then
    echo "${WRAPPER}"
    exit 0
fi
if [[ -x "${WRAPPER}" ]]; then
    log "cached at ${FINAL}"
    echo "${WRAPPER}"
    exit 0
fi
if [[ "$(uname -m)" != "x86_64" ]]; then
    log "only x86_64 is set up here (the wheel used is manylinux_2_38_x86_64)"
    exit 1
fi
for tool in apt-get dpkg-deb flock; do
    command -v "${tool}" >/dev/null || { log "needs ${tool} (Debian's apt and dpkg)"; exit 1; }
done

mkdir -p "${CACHE}"
exec {lock}>"${CACHE}/.perf-analyzer.lock"
flock "${lock}"
if [[ -x "${WRAPPER}" ]]; then # installed by a concurrent run while we waited
    log "cached at ${FINAL}"
    echo "${WRAPPER}"
    exit 0
fi

start=${SECONDS}
work="$(mktemp -d "${CACHE}/.perf-analyzer-${PA_VERSION}.XXXXXX")"
trap 'rm -rf "${work}"' EXIT
mkdir -p "${work}/dl/wheels" "${work}/dl/debs" "${work}/dl/apt/lists/partial" "${work}/dl/apt/cache/archives/partial" \
    "${work}/dl/apt/parts" "${work}/bin" "${work}/sysroot" "${work}/cudart"

log "downloading perf-analyzer==${PA_VERSION} and nvidia-cuda-runtime-cu12==${CUDART_VERSION} (pip)"
# The perf-analyzer wheel is tagged manylinux_2_38: name the platform, or a glibc 2.36 host finds only the
# placeholder 0.1.0 (the cuda runtime wheel is manylinux_2_17). Both are py3-none: any interpreter will do.
"${PYTHON}" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    --platform manylinux_2_38_x86_64 --platform manylinux_2_17_x86_64 --python-version 3 --dest "${work}/dl/wheels" \
    "perf-analyzer==${PA_VERSION}" "nvidia-cuda-runtime-cu12==${CUDART_VERSION}"

log "downloading libc6, libstdc++6, libgcc-s1 from Debian ${SUITE} (apt, temporary sources list)"
echo "deb [signed-by=${KEYRING}] ${MIRROR} ${SUITE} main" >"${work}/dl/apt/sources.list"
apt_options=(
    -o "Dir::Etc::SourceList=${work}/dl/apt/sources.list"
    -o "Dir::Etc::SourceParts=${work}/dl/apt/parts"
    -o "Dir::State::Lists=${work}/dl/apt/lists"
    -o "Dir::Cache=${work}/dl/apt/cache"
    -o "APT::Architecture=amd64" -o "APT::Architectures=amd64"
    -o "APT::Sandbox::User=$(id -un)"
    -o "Debug::NoLocking=1"
)
apt-get "${apt_options[@]}" -qq update >&2
(cd "${work}/dl/debs" && apt-get "${apt_options[@]}" -qq download libc6 libstdc++6 libgcc-s1 >&2)

for deb in "${work}"/dl/debs/*.deb; do
    dpkg-deb -x "${deb}" "${work}/sysroot"
done
[[ -x "${work}/sysroot/${LIBDIR}/ld-linux-x86-64.so.2" ]] || { log "no loader in the unpacked libc6"; exit 1; }

"${PYTHON}" - "${work}" <<'EOF'
import pathlib, shutil, sys, zipfile

work = pathlib.Path(sys.argv[1])
wheels = work / "dl" / "wheels"
(pa,) = wheels.glob("perf_analyzer-*.whl")
(rt,) = wheels.glob("nvidia_cuda_runtime_cu12-*.whl")
with zipfile.ZipFile(pa) as z, z.open("perf_analyzer/bin/perf_analyzer") as src, open(work / "bin" / "perf_analyzer", "wb") as dst:
    shutil.copyfileobj(src, dst)
with zipfile.ZipFile(rt) as z:
    (name,) = [n for n in z.namelist() if n.endswith("/lib/libcudart.so.12")]
    with z.open(name) as src, open(work / "cudart" / "libcudart.so.12", "wb") as dst:
        shutil.copyfileobj(src, dst)
EOF
chmod 0755 "${work}/bin/perf_analyzer"
ln -s libcudart.so.12 "${work}/cudart/libcudart.so"

cat >"${work}/perf_analyzer" <<EOF
#!/bin/sh
# perf_analyzer ${PA_VERSION} through Debian ${SUITE}'s loader and libraries (written by tools/setup-perf-analyzer.sh)
here="\$(dirname "\$(readlink -f "\$0")")"
exec "\${here}/sysroot/${LIBDIR}/ld-linux-x86-64.so.2" \\
    --library-path "\${here}/sysroot/${LIBDIR}:\${here}/cudart:/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu\${LD_LIBRARY_PATH:+:\${LD_LIBRARY_PATH}}" \\
    "\${here}/bin/perf_analyzer" "\$@"
EOF
chmod 0755 "${work}/perf_analyzer"

version_text="$("${work}/perf_analyzer" --version 2>&1 || true)"
if [[ "${version_text}" != *"Perf Analyzer"* ]]; then
    log "perf_analyzer does not run: ${version_text:0:400}"
    exit 1
fi

chmod 0755 "${work}"
rm -rf "${work}/dl" "${FINAL}"
mv "${work}" "${FINAL}" # renamed last: the wrapper's presence at the final path marks the install complete
trap - EXIT
exec {lock}>&-
log "installed in $((SECONDS - start))s: ${version_text}"
echo "${WRAPPER}"
