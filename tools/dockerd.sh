#!/usr/bin/env bash
# A private Docker daemon (Debian's docker.io) for building and running the project's images, isolated from
# anything else on the machine (a real node's containerd, another dockerd):
#
#   tools/dockerd.sh start DIR   # idempotent; prints the DOCKER_HOST to use
#   tools/dockerd.sh stop DIR    # idempotent; stops what `start DIR` started and removes DIR
#
# Everything lives in DIR: its own containerd (root, state, socket; CRI plugin off), and dockerd with its own
# data root, exec root, pidfile and socket. dockerd is given that containerd explicitly: left alone it would
# use a system containerd whose socket it finds at /run/containerd/containerd.sock (a real node's).
# No host networking changes: --iptables=false --ip-masq=false --bridge=none --ip-forward=false (Docker's
# default sets the FORWARD policy to DROP, which breaks pod-to-pod traffic on a CNI bridge). Without a
# bridge, containers run with `--network host` or `--network none` (builds: none).
# Needs root and the docker.io package (tools/build-images.sh installs it when missing).
set -euo pipefail

DOCKER="${DOCKER:-$(command -v /usr/bin/docker || command -v docker)}"

log() { printf '[dockerd] %s\n' "$*" >&2; }

alive() { # pidfile
    [[ -s "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null
}

wait_for() { # seconds description command...
    local deadline=$((SECONDS + $1)) what="$2"; shift 2
    until "$@" >/dev/null 2>&1; do
        if ((SECONDS >= deadline)); then
            log "timed out waiting for ${what}"
            return 1
        fi
        sleep 0.2
    done
}

start() { # dir
    local dir="$1"
    mkdir -p "${dir}/run"
    dir="$(cd "${dir}" && pwd)"
    local host="unix://${dir}/run/docker.sock"
    exec {lock}>"${dir}/.lock"
    flock "${lock}"
    if alive "${dir}/run/dockerd.pid" && "${DOCKER}" -H "${host}" version >/dev/null 2>&1; then
        echo "${host}"
        return 0
    fi
    if ! alive "${dir}/run/containerd.pid"; then
        cat >"${dir}/containerd.toml" <<EOF
version = 2
root = "${dir}/containerd"
state = "${dir}/run/containerd"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "${dir}/run/containerd.sock"
[ttrpc]
  address = "${dir}/run/containerd.sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
EOF
        setsid containerd --config "${dir}/containerd.toml" </dev/null >>"${dir}/containerd.log" 2>&1 &
        echo $! >"${dir}/run/containerd.pid"
        wait_for 60 containerd test -S "${dir}/run/containerd.sock" || { tail -20 "${dir}/containerd.log" >&2; return 1; }
    fi
    setsid dockerd \
        --containerd "${dir}/run/containerd.sock" \
        --data-root "${dir}/docker" \
        --exec-root "${dir}/run/docker" \
        --pidfile "${dir}/run/dockerd.pid" \
        --host "${host}" \
        --iptables=false --ip-masq=false --ip-forward=false --bridge=none \
        --userland-proxy=false \
        --storage-driver overlay2 \
        --log-level warn \
        </dev/null >>"${dir}/dockerd.log" 2>&1 &
    wait_for 120 dockerd "${DOCKER}" -H "${host}" version || { tail -20 "${dir}/dockerd.log" >&2; return 1; }
    echo "${host}"
}

stop_pid() { # pidfile name
    local pidfile="$1" pid
    alive "${pidfile}" || return 0
    pid="$(cat "${pidfile}")"
    kill -TERM "${pid}" 2>/dev/null || true
    local deadline=$((SECONDS + 60))
    while kill -0 "${pid}" 2>/dev/null; do
        if ((SECONDS >= deadline)); then
            log "$2 (${pid}) did not stop in 60 s: killing it"
            kill -KILL "${pid}" 2>/dev/null || true
            break
        fi
        sleep 0.2
    done
}

stop() { # dir
    local dir="$1"
    [[ -d "${dir}" ]] || return 0
    dir="$(cd "${dir}" && pwd)"
    local host="unix://${dir}/run/docker.sock"
    if alive "${dir}/run/dockerd.pid"; then
        # Containers left running (a test that failed half-way) go first, so no shim outlives the daemons.
        local ids; ids="$("${DOCKER}" -H "${host}" ps -q 2>/dev/null || true)"
        [[ -n "${ids}" ]] && "${DOCKER}" -H "${host}" rm -f ${ids} >/dev/null 2>&1 || true
    fi
    stop_pid "${dir}/run/dockerd.pid" dockerd
    stop_pid "${dir}/run/containerd.pid" containerd
    # Mounts the daemons left behind (overlay layers, netns, shm), deepest first.
    local m
    while read -r m; do
        umount -l "${m}" 2>/dev/null || true
    done < <(awk -v d="${dir}/" 'index($2, d) == 1 {print $2}' /proc/mounts | sort -r)
    rm -rf "${dir}"
}

case "${1:-}" in
    start) start "${2:?directory}" ;;
    stop) stop "${2:?directory}" ;;
    *) echo "usage: $0 start|stop DIR" >&2; exit 2 ;;
esac
