#!/usr/bin/env bash
# The Compose rung on real containers (a step of .ci/run; needs root on Debian 12).
# Installs and starts Docker if needed (compose/ci/docker-up.sh), builds Toren's image and a
# Postgres image on a local debootstrap base (no registry is reachable in CI), then runs
# compose/ci/compose_test.py: up, a run surviving a SIGKILL of the container, SIGTERM drain,
# a Postgres restart, a long-lane run on the worker-long profile, down. Stops dockerd at the end if this script started it.
set -euo pipefail
cd "$(dirname "$0")/.."

eval "$(compose/ci/docker-up.sh)"
stop_dockerd() {
    if [ -n "${DOCKERD_PID:-}" ]; then
        kill "$DOCKERD_PID" 2>/dev/null || true
        wait "$DOCKERD_PID" 2>/dev/null || true
    fi
}
trap stop_dockerd EXIT

version=$(python3 -c 'import re; print(re.search(r"__version__ = \"(.+)\"", open("toren/version.py").read())[1])')
# builds behind a TLS-intercepting proxy need its CA for pip (the build's downloads only)
extra_ca=""
for cert in /usr/local/share/ca-certificates/*.crt; do
    [ -f "$cert" ] && extra_ca+="$(cat "$cert")"$'\n'
done

started=$(date +%s)
echo "compose-test: building local/toren:ci and local/postgres:ci" >&2
docker build -q -t local/toren:ci -f Dockerfile \
    --build-arg BASE_IMAGE=local/debian:bookworm --build-arg TOREN_VERSION="$version" \
    --build-arg EXTRA_CA_CERTS="$extra_ca" . >&2
docker build -q -t local/postgres:ci --build-arg BASE_IMAGE=local/debian:bookworm \
    compose/ci/postgres >&2
echo "compose-test: images built in $(( $(date +%s) - started )) s" >&2

# the second example (two trust domains) is at least a valid compose file
POSTGRES_PASSWORD=check TOREN_ENV_FILE=/dev/null \
    docker compose -f compose/trust-domains/docker-compose.yml config -q

TOREN_IMAGE=local/toren:ci POSTGRES_IMAGE=local/postgres:ci python3 compose/ci/compose_test.py
