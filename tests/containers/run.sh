#!/usr/bin/env bash
# The container tier: the worker image (deploy/Dockerfile) built and run for real, with testcontainers.
#
#     bash tests/containers/run.sh [pytest args...]        # as root; < 5 min warm, most of it the image build
#
# 1. Installs what it needs (idempotent): Debian docker.io, debootstrap, iproute2.
# 2. Outside any namespace, needing the network: a Debian bookworm root filesystem with python3 (debootstrap from
#    the mirror apt uses here) and the wheels of deploy/requirements.lock, both cached under $CACHE.
# 3. Inside private network, mount and pid namespaces (`unshare`): loopback only, so every byte of test traffic
#    stays on 127.0.0.1 and no bridge ever exists (dockerd --bridge=none, containers use host networking, which is
#    the namespace's own loopback). containerd and dockerd run there on scratch directories, the base image is
#    imported, then `pytest tests/containers -m containers`. When the namespace's first process exits the kernel
#    kills whatever is left in it and drops its mounts; the scratch directory is then removed.
#
# Exits non-zero, saying what failed, on any failure.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CACHE="${AGENT_RUNNER_CONTAINERS_CACHE:-/var/cache/agent-runner-containers}"
PY="$ROOT/.venv/bin/python"
BASE_IMAGE="localhost/debian-python:bookworm"
ROOTFS_TAR="$CACHE/debian-python-bookworm.tar"

# Seconds since the outer script started (the namespace half is a second bash, with its own $SECONDS).
export CONTAINERS_T0="${CONTAINERS_T0:-$(date +%s)}"
say() { printf '[containers %4ss] %s\n' "$(($(date +%s) - CONTAINERS_T0))" "$*"; }
fail() {
    printf '[containers %4ss] FAILED: %s\n' "$(($(date +%s) - CONTAINERS_T0))" "$*" >&2
    exit 1
}

# ------------------------------------------------------------------------------------ inside the namespaces
if [[ "${1:-}" == "--in-namespace" ]]; then
    shift
    WORK="$1"
    shift
    ip link set lo up
    # Loopback is the only interface: nothing here can reach a non-loopback address.
    if ip -o link show | grep -v ' lo:' | grep -q .; then fail "the network namespace has interfaces besides lo"; fi

    mkdir -p "$WORK/containerd" "$WORK/docker-data" "$WORK/docker-exec"
    printf 'version = 2\ndisabled_plugins = ["io.containerd.grpc.v1.cri"]\n' >"$WORK/containerd.toml"
    echo '{}' >"$WORK/daemon.json"
    # Our own containerd, so dockerd never picks up a system one running outside this namespace.
    containerd --config "$WORK/containerd.toml" --address "$WORK/containerd/containerd.sock" \
        --root "$WORK/containerd/root" --state "$WORK/containerd/state" >"$WORK/containerd.log" 2>&1 &
    CONTAINERD_PID=$!
    dockerd --config-file "$WORK/daemon.json" --host "unix://$WORK/docker.sock" \
        --containerd "$WORK/containerd/containerd.sock" \
        --data-root "$WORK/docker-data" --exec-root "$WORK/docker-exec" --pidfile "$WORK/docker.pid" \
        --bridge=none --iptables=false --ip-masq=false --ip6tables=false \
        >"$WORK/dockerd.log" 2>&1 &
    DOCKERD_PID=$!
    export DOCKER_HOST="unix://$WORK/docker.sock"
    DOCKER=/usr/bin/docker # Debian's client, matching its daemon (another `docker` may come first in PATH)

    stop_engine() {
        local ids
        ids="$($DOCKER ps -aq 2>/dev/null || true)"
        if [[ -n "$ids" ]]; then
            echo "containers: removing leftover containers: $ids" >&2
            # shellcheck disable=SC2086
            $DOCKER rm -f $ids >/dev/null 2>&1 || true
        fi
        kill -TERM "$DOCKERD_PID" 2>/dev/null || true
        for _ in $(seq 100); do kill -0 "$DOCKERD_PID" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$DOCKERD_PID" 2>/dev/null || true
        kill -TERM "$CONTAINERD_PID" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$CONTAINERD_PID" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$CONTAINERD_PID" 2>/dev/null || true
        wait 2>/dev/null || true
    }
    trap stop_engine EXIT

    for _ in $(seq 150); do
        $DOCKER version >/dev/null 2>&1 && break
        kill -0 "$DOCKERD_PID" 2>/dev/null || { tail -20 "$WORK/dockerd.log" >&2; fail "dockerd exited at start"; }
        sleep 0.1
    done
    $DOCKER version >/dev/null 2>&1 || { tail -20 "$WORK/dockerd.log" >&2; fail "dockerd not up after 15 s"; }
    say "dockerd up ($($DOCKER info --format '{{.ServerVersion}}, storage {{.Driver}}, cgroup {{.CgroupDriver}}'))"

    $DOCKER import --message "debootstrap bookworm minbase + python3" "$ROOTFS_TAR" "$BASE_IMAGE" >/dev/null ||
        fail "docker import of $ROOTFS_TAR"
    say "imported $BASE_IMAGE"

    export TESTCONTAINERS_RYUK_DISABLED=true TESTCONTAINERS_CONNECTION_MODE=docker_host
    export AGENT_RUNNER_CONTAINERS_BASE_IMAGE="$BASE_IMAGE" AGENT_RUNNER_CONTAINERS_WHEELS="$WHEELS"
    export AGENT_RUNNER_CONTAINERS_WORK="$WORK"
    status=0
    (cd "$ROOT" && "$PY" -m pytest tests/containers -q -m containers -p no:cacheprovider "$@") || status=$?
    if ((status != 0)); then
        echo "---- dockerd log (tail) ----" >&2
        tail -15 "$WORK/dockerd.log" >&2 || true
        fail "pytest tests/containers exited $status"
    fi
    exit 0
fi

# ------------------------------------------------------------------------------------------- on the host
[[ "$(id -u)" == 0 ]] || fail "must run as root (unshare, dockerd, debootstrap)"
[[ -x "$PY" ]] || fail "$PY missing: run 'make test' (or create .venv) first"

# 1. Packages. policy-rc.d keeps apt from starting the packaged docker service (and its bridge) on this host.
missing=()
for pkg in docker.io debootstrap iproute2; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
    say "installing ${missing[*]}"
    made_policy=""
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && made_policy=1
    fi
    apt_status=0
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "${missing[@]}" >/dev/null; } || apt_status=$?
    [[ -n "$made_policy" ]] && rm -f /usr/sbin/policy-rc.d
    ((apt_status == 0)) || fail "apt-get install ${missing[*]}"
fi
for tool in /usr/sbin/dockerd /usr/bin/docker /usr/bin/containerd /usr/sbin/debootstrap /usr/bin/unshare; do
    [[ -x "$tool" ]] || fail "$tool missing after install"
done
mkdir -p "$CACHE"

# The first http(s) Debian mirror for bookworm that apt is configured with, in either source format: one-line
# `deb URL bookworm ...` (sources.list, *.list) or deb822 stanzas (`URIs:` / `Suites:`, *.sources). Never fails
# the script by itself: prints nothing and returns 1 when there is none (missing files are the normal case).
# Takes apt's folder (default /etc/apt) so tests can run it on either form.
find_mirror() {
    if [[ -n "${AGENT_RUNNER_DEBIAN_MIRROR:-}" ]]; then
        echo "$AGENT_RUNNER_DEBIAN_MIRROR"
        return 0
    fi
    local apt="${1:-/etc/apt}" files=() f found=""
    for f in "$apt/sources.list" "$apt"/sources.list.d/*.list "$apt"/sources.list.d/*.sources; do
        [[ -f "$f" ]] && files+=("$f")
    done
    ((${#files[@]})) || return 1
    # One awk per file: mawk (Debian's default awk) has no ENDFILE, and a deb822 stanza may end at end of file.
    for f in "${files[@]}"; do
        found="$(awk '
            $1 == "deb" && $0 ~ /bookworm/ && $0 !~ /security/ {
                for (i = 2; i <= NF; i++) if ($i ~ /^https?:/) { print $i; exit }
            }
            function stanza() { if (uris ~ /^https?:/ && uris !~ /security/ && suites ~ /bookworm/) { print uris; done = 1; exit } }
            tolower($1) == "uris:" { uris = $2 }
            tolower($1) == "suites:" { suites = $0 }
            /^[[:space:]]*$/ { stanza(); uris = ""; suites = "" }
            END { if (!done) stanza() }
        ' "$f" 2>/dev/null || true)"
        [[ -n "$found" ]] && break
    done
    [[ -n "$found" ]] || return 1
    echo "$found"
}

# 2a. The base image's root filesystem: Debian bookworm minbase + python3, from the mirror apt is configured with.
if [[ ! -s "$ROOTFS_TAR" ]]; then
    say "finding the Debian mirror apt uses (one-line sources or deb822 .sources)"
    mirror="$(find_mirror)" || fail "found no Debian bookworm mirror in /etc/apt/sources.list, \
/etc/apt/sources.list.d/*.list or /etc/apt/sources.list.d/*.sources; set AGENT_RUNNER_DEBIAN_MIRROR to one"
    say "debootstrap bookworm from $mirror (once; cached in $CACHE)"
    rootfs="$(mktemp -d "$CACHE/rootfs.XXXXXX")" || fail "cannot create a scratch folder in $CACHE"
    cleanup_rootfs() {
        # debootstrap mounts /proc and /sys in the target; never leave them behind. No mount is the usual case.
        local m
        while read -r m; do umount -l "$m" || true; done < <(awk -v r="$rootfs/" 'index($2, r) == 1 { print $2 }' \
            /proc/mounts | sort -r)
        rm -rf "$rootfs" "$ROOTFS_TAR.tmp"
    }
    trap cleanup_rootfs EXIT
    debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates bookworm "$rootfs" "$mirror" \
        >"$CACHE/debootstrap.log" 2>&1 || { tail -20 "$CACHE/debootstrap.log" >&2; fail "debootstrap from $mirror \
(log: $CACHE/debootstrap.log)"; }
    # python:*-slim images have `python`; deploy/Dockerfile runs `python -m venv` before the venv exists.
    ln -sf python3 "$rootfs/usr/bin/python"
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    tar -C "$rootfs" -cf "$ROOTFS_TAR.tmp" . || fail "tar of the root filesystem into $ROOTFS_TAR.tmp"
    mv "$ROOTFS_TAR.tmp" "$ROOTFS_TAR" || fail "mv $ROOTFS_TAR.tmp $ROOTFS_TAR"
    cleanup_rootfs
    trap - EXIT
fi
say "base root filesystem: $ROOTFS_TAR ($(du -h "$ROOTFS_TAR" | cut -f1))"

# 2b. Wheels for the image build, which cannot reach PyPI: the lock's, plus setuptools to build the project.
lock_hash="$(cat "$ROOT/deploy/requirements.lock" "$ROOT/pyproject.toml" | sha256sum | cut -c1-16)"
WHEELS="$CACHE/wheels-$lock_hash"
if [[ ! -d "$WHEELS" ]]; then
    say "downloading wheels for deploy/requirements.lock into $WHEELS"
    tmp_wheels="$(mktemp -d "$CACHE/wheels.XXXXXX")"
    {
        "$PY" -m pip wheel -q --no-deps -r "$ROOT/deploy/requirements.lock" -w "$tmp_wheels" &&
            "$PY" -m pip download -q --no-deps --only-binary :all: "setuptools>=70.1" -d "$tmp_wheels"
    } 2> >(grep -v "is ignored: it is neither" >&2) || { rm -rf "$tmp_wheels"; fail "pip wheel / pip download"; }
    mv "$tmp_wheels" "$WHEELS"
fi
say "wheels: $WHEELS ($(find "$WHEELS" -name '*.whl' | wc -l) files)"

# 3. Everything else inside fresh network, mount and pid namespaces.
WORK="$(mktemp -d /tmp/agent-runner-containers.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
export WHEELS
status=0
unshare --net --mount --pid --fork --mount-proc -- bash "$ROOT/tests/containers/run.sh" --in-namespace "$WORK" "$@" ||
    status=$?
# The namespace is gone: its processes were killed with its first one, its mounts went with it.
rm -rf "$WORK"
trap - EXIT
if ((status != 0)); then fail "container tier (exit $status)"; fi
say "container tier passed"
