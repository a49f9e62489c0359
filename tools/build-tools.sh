#!/usr/bin/env bash
# Build the real binaries the integration tests run (Kubernetes control plane, etcd, kwok, helm, MinIO)
# from Go sources fetched through the Go module proxy, and cache them outside the repository:
#
#   ${ENSEMBLE_TOOLS_CACHE:-$HOME/.cache/ensemble-operator/tools}/<name>-<version>/<binaries>
#
# Usage: tools/build-tools.sh [all|k8s|k8s-node|containerd|pause|etcd|kwok|helm|minio]...   (default: all)
#        tools/build-tools.sh --print-dir NAME                      (cache dir of NAME; builds nothing)
#
# Idempotent: a tool whose cache directory exists is skipped. Concurrent runs are safe: each tool is built
# under an exclusive flock into a temporary directory that is renamed into place only when complete.
# Versions: k8s and etcd are pinned by the wrapper modules tools/k8s/go.mod and tools/etcd/go.mod; the
# others by the constants below.
set -euo pipefail

KWOK_VERSION="v0.8.0"
HELM_VERSION="v4.3.1"
# MinIO no longer publishes semver tags usable by the Go toolchain; this pseudo-version is the newest
# commit of github.com/minio/minio on the module proxy (2026-02-12).
MINIO_VERSION="v0.0.0-20260212201848-7aac2a2c5b7c"
# The container runtime of the real node (tests/infra/node.py). v2 is the line kubelet 1.36 is tested with
# (Debian's 1.6 works but makes the kubelet fall back on deprecated CRI calls); runc comes from Debian.
CONTAINERD_VERSION="v2.2.9"

TOOLS_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${ENSEMBLE_TOOLS_CACHE:-${HOME}/.cache/ensemble-operator/tools}"

export CGO_ENABLED=0
export GOFLAGS="${GOFLAGS:--mod=mod}"

log() { printf '[build-tools] %s\n' "$*" >&2; }

# Version of a module required by one of the wrapper modules.
required_version() { # go.mod module
    awk -v m="$2" '$1 == m && $2 ~ /^v/ {print $2; exit} $1 == "require" && $2 == m {print $3; exit}' "$1"
}

k8s_version() { required_version "${TOOLS_DIR}/k8s/go.mod" k8s.io/kubernetes; }
etcd_version() { required_version "${TOOLS_DIR}/etcd/go.mod" go.etcd.io/etcd/server/v3; }

version_of() {
    case "$1" in
        k8s | k8s-node) k8s_version ;;
        etcd) etcd_version ;;
        kwok) echo "${KWOK_VERSION}" ;;
        helm) echo "${HELM_VERSION}" ;;
        minio) echo "${MINIO_VERSION}" ;;
        containerd) echo "${CONTAINERD_VERSION}" ;;
        pause) bash "${TOOLS_DIR}/build-static-image.sh" hash "${TOOLS_DIR}/pause" ;;
        *) log "unknown tool: $1"; exit 2 ;;
    esac
}

dir_of() { echo "${CACHE}/$1-$(version_of "$1")"; }

k8s_ldflags() { # the version stamps `kubectl version` and the components report
    local v; v="$(k8s_version)"
    local minor="${v#v1.}"; minor="${minor%%.*}"
    local date; date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    local ldflags="-s -w" pkg
    for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        ldflags+=" -X ${pkg}.gitVersion=${v} -X ${pkg}.gitMajor=1 -X ${pkg}.gitMinor=${minor}"
        ldflags+=" -X ${pkg}.gitTreeState=clean -X ${pkg}.buildDate=${date}"
    done
    echo "${ldflags}"
}

build_k8s() { # out
    local out="$1"
    (cd "${TOOLS_DIR}/k8s" && go build -trimpath -ldflags "$(k8s_ldflags)" -o "${out}/" \
        k8s.io/kubernetes/cmd/kube-apiserver \
        k8s.io/kubernetes/cmd/kube-controller-manager \
        k8s.io/kubernetes/cmd/kube-scheduler \
        k8s.io/kubernetes/cmd/kubectl)
}

# The node components (tests/infra/node.py): same wrapper module, version and flags as the control plane,
# but a tool of their own so that adding them did not change the cache directory of `k8s`.
build_k8s-node() { # out
    local out="$1"
    (cd "${TOOLS_DIR}/k8s" && go build -trimpath -ldflags "$(k8s_ldflags)" -o "${out}/" \
        k8s.io/kubernetes/cmd/kubelet \
        k8s.io/kubernetes/cmd/kube-proxy)
}

build_etcd() { # out
    local out="$1"
    (cd "${TOOLS_DIR}/etcd" && go build -trimpath -ldflags "-s -w" -o "${out}/etcd" go.etcd.io/etcd/server/v3)
}

build_kwok() { # out
    local out="$1"
    GOBIN="${out}" go install -trimpath -ldflags "-s -w" \
        "sigs.k8s.io/kwok/cmd/kwok@${KWOK_VERSION}"
    # The stage definitions (node/pod lifecycle) that kwok applies; kept next to the binary.
    local src; src="$(go env GOMODCACHE)/sigs.k8s.io/kwok@${KWOK_VERSION}/kustomize/stage"
    if [[ -d "${src}" ]]; then
        mkdir -p "${out}/stages"
        cp -r "${src}/." "${out}/stages/"
        chmod -R u+w "${out}/stages"
    fi
}

build_helm() { # out
    local out="$1"
    GOBIN="${out}" go install -trimpath \
        -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=${HELM_VERSION} -X helm.sh/helm/v4/internal/version.gitTreeState=clean" \
        "helm.sh/helm/v4/cmd/helm@${HELM_VERSION}"
}

build_minio() { # out
    local out="$1"
    GOBIN="${out}" go install -trimpath -ldflags "-s -w" "github.com/minio/minio@${MINIO_VERSION}"
}

build_containerd() { # out
    local out="$1" cmd
    for cmd in containerd containerd-shim-runc-v2 ctr; do
        GOBIN="${out}" go install -trimpath \
            -ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=${CONTAINERD_VERSION}" \
            "github.com/containerd/containerd/v2/cmd/${cmd}@${CONTAINERD_VERSION}"
    done
}

# The pod sandbox image (registry.k8s.io/pause cannot be pulled here): tools/pause in a FROM-scratch image,
# keyed by a hash of its source. The node pins and imports <dir>/image.tar.
PAUSE_IMAGE="registry.k8s.io/pause:3.10"
build_pause() { # out
    bash "${TOOLS_DIR}/build-static-image.sh" build "${TOOLS_DIR}/pause" pause "${PAUSE_IMAGE}" 65535 "$1"
}

build_one() { # name
    local name="$1" final; final="$(dir_of "${name}")"
    if [[ -d "${final}" ]]; then
        log "${name}: cached at ${final}"
        return 0
    fi
    mkdir -p "${CACHE}"
    exec {lock}>"${CACHE}/.${name}.lock"
    flock "${lock}"
    if [[ -d "${final}" ]]; then # built by a concurrent run while we waited
        log "${name}: cached at ${final}"
        exec {lock}>&-
        return 0
    fi
    local tmp; tmp="$(mktemp -d "${CACHE}/.tmp-${name}.XXXXXX")"
    log "${name}: building $(version_of "${name}") into ${final}"
    local start=${SECONDS}
    if ! "build_${name}" "${tmp}"; then
        rm -rf "${tmp}"
        exec {lock}>&-
        log "${name}: build FAILED"
        return 1
    fi
    chmod 0755 "${tmp}"
    mv -T "${tmp}" "${final}"
    exec {lock}>&-
    log "${name}: built in $(((SECONDS - start) / 60))m$(((SECONDS - start) % 60))s -> ${final}"
}

main() {
    if [[ "${1:-}" == "--print-dir" ]]; then
        dir_of "${2:?tool name}"
        return 0
    fi
    local targets=("$@")
    [[ ${#targets[@]} -eq 0 ]] && targets=(all)
    local t
    for t in "${targets[@]}"; do
        if [[ "${t}" == "all" ]]; then
            for n in etcd kwok helm minio containerd pause k8s k8s-node; do build_one "${n}"; done
        else
            version_of "${t}" >/dev/null
            build_one "${t}"
        fi
    done
}

main "$@"
