# Toren's container image: one image for `toren serve --workers` (the default: API and workers
# in one container, a worker process per CPU), `toren serve`, `toren worker` and `toren dev`.
# See docs/deploy/compose.md.
#
#   docker build -t toren:0.1.0 --build-arg TOREN_VERSION=0.1.0 .
#
# Build arguments:
#   BASE_IMAGE       a Debian bookworm image with or without Python 3.11 (default: the official
#                    slim Python image; CI builds on a local debootstrap image, see compose/ci/)
#   TOREN_VERSION    the version the build must produce, checked against the checkout (pinned)
#   PLUGINS          space-separated plugin directories under plugins/ to install besides
#                    toren-postgres (default: the Anthropic and OpenAI providers and the MCP
#                    channel, toren-mcp)
#   AGENTS           the agent directories baked into /agents (default: the example crews);
#                    mount your own over /agents instead to keep them out of the image
#   EXTRA_CA_CERTS   PEM text of extra CA certificates for the build's downloads only (builds
#                    behind a TLS-intercepting proxy); not kept in the final image

ARG BASE_IMAGE=python:3.11-slim-bookworm

FROM ${BASE_IMAGE} AS build
ARG TOREN_VERSION=0.1.0
ARG PLUGINS="toren-anthropic toren-openai toren-mcp"
ARG EXTRA_CA_CERTS=""
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 DEBIAN_FRONTEND=noninteractive
# Debian's own Python where the base has none (a bare bookworm); the official image has one
RUN if ! python3 -c 'import ensurepip, venv' 2>/dev/null; then \
        apt-get update -q && apt-get install -y -q --no-install-recommends \
            python3 python3-venv ca-certificates && rm -rf /var/lib/apt/lists/*; \
    fi
RUN if [ -n "$EXTRA_CA_CERTS" ]; then \
        printf '%s\n' "$EXTRA_CA_CERTS" > /usr/local/share/ca-certificates/build-extra.crt \
        && update-ca-certificates >/dev/null; \
    fi
COPY pyproject.toml README.md LICENSE /src/
COPY toren /src/toren
COPY plugins /src/plugins
RUN set -eu; \
    if [ -n "$EXTRA_CA_CERTS" ]; then export PIP_CERT=/etc/ssl/certs/ca-certificates.crt; fi; \
    python3 -m venv /opt/toren; \
    /opt/toren/bin/pip install -q /src /src/plugins/toren-postgres \
        $(for plugin in $PLUGINS; do printf '/src/plugins/%s ' "$plugin"; done); \
    built=$(/opt/toren/bin/toren version --json \
            | /opt/toren/bin/python -c 'import json, sys; print(json.load(sys.stdin)["version"])'); \
    if [ "$built" != "$TOREN_VERSION" ]; then \
        echo "this checkout is Toren $built, but TOREN_VERSION=$TOREN_VERSION was asked for" >&2; \
        exit 1; \
    fi; \
    /opt/toren/bin/pip uninstall -q -y pip setuptools 2>/dev/null || true; \
    find /opt/toren -name __pycache__ -prune -exec rm -rf {} +

FROM ${BASE_IMAGE}
ARG TOREN_VERSION=0.1.0
ARG AGENTS=contrib/examples
LABEL org.opencontainers.image.title="toren" \
      org.opencontainers.image.version="${TOREN_VERSION}" \
      org.opencontainers.image.description="Toren: a self-hosted durable agent runtime" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV DEBIAN_FRONTEND=noninteractive
# the runtime needs only Python and tini (PID 1: forwards SIGTERM so work in hand drains
# within TOREN_SHUTDOWN_GRACE, and reaps the children of tools); no compiler, no pip
RUN set -eu; \
    packages="tini"; \
    python3 -c 'import sys' 2>/dev/null || packages="$packages python3 ca-certificates"; \
    apt-get update -q && apt-get install -y -q --no-install-recommends $packages; \
    rm -rf /var/lib/apt/lists/*; \
    useradd --system --uid 10001 --create-home --home-dir /home/toren --shell /usr/sbin/nologin \
        toren
COPY --from=build /opt/toren /opt/toren
COPY --chown=root:root ${AGENTS} /agents
ENV PATH=/opt/toren/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    TOREN_HOME=/home/toren/.toren \
    TOREN_DIRS=/agents \
    TOREN_HOST=0.0.0.0 \
    TOREN_PORT=8420 \
    TOREN_PROCESSES=auto
USER 10001
WORKDIR /home/toren
EXPOSE 8420
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python3", "-c", "import os, sys, urllib.request; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('TOREN_PORT', '8420'), timeout=4).status == 200 else 1)"]
ENTRYPOINT ["/usr/bin/tini", "-g", "--", "toren"]
# the API and one worker process per CPU the container may use (TOREN_PROCESSES=auto: its CPU
# quota, else the host's CPUs; one CPU: API and worker in one process, as before). Each worker
# process opens up to TOREN_POOL_SIZE database connections: set TOREN_PROCESSES to a number
# on a host with many CPUs and a Postgres with few connections (docs/deploy/compose.md, "Worker processes")
CMD ["serve", "--workers"]
