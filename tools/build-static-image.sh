#!/usr/bin/env bash
# A `FROM scratch` image holding one static Go program, as a docker-archive tarball (no daemon needed):
#
#   tools/build-static-image.sh hash SRC                          # key of SRC's image (sources + this builder)
#   tools/build-static-image.sh build SRC NAME TAG USER OUTDIR     # OUTDIR/NAME (binary), OUTDIR/image.tar
#
# SRC is a Go main module (go.mod + *.go, standard library only); the binary is built with CGO_ENABLED=0
# and -trimpath and becomes /NAME, the entrypoint, run as the numeric USER. tools/build-tools.sh caches the
# pause image with it (target `pause`); tests build their own images the same way (tests/infra/node_images.py).
set -euo pipefail

TOOLS_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

source_hash() { # src
    local src="$1"
    (
        cd "${src}"
        find . -type f \( -name '*.go' -o -name go.mod -o -name go.sum \) -print0 | LC_ALL=C sort -z \
            | xargs -0 sha256sum
        cat "${TOOLS_DIR}/image-archive.py" "${TOOLS_DIR}/build-static-image.sh" | sha256sum
    ) | sha256sum | cut -c1-16
}

build() { # src name tag user outdir
    local src="$1" name="$2" tag="$3" user="$4" out="$5"
    mkdir -p "${out}"
    (cd "${src}" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w" -o "${out}/${name}" .)
    python3 "${TOOLS_DIR}/image-archive.py" --binary "${out}/${name}" --tag "${tag}" --user "${user}" \
        --out "${out}/image.tar"
    printf '%s\n' "${tag}" >"${out}/tag"
}

case "${1:-}" in
    hash) source_hash "${2:?SRC}" ;;
    build) build "${2:?SRC}" "${3:?NAME}" "${4:?TAG}" "${5:?USER}" "${6:?OUTDIR}" ;;
    *) echo "usage: $0 hash SRC | build SRC NAME TAG USER OUTDIR" >&2; exit 2 ;;
esac
