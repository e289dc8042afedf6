#!/usr/bin/env bash
# Build wheels of the kernel (toren) and of every plugin under plugins/ into one folder:
#
#     scripts/build-wheels.sh [OUT]          # OUT defaults to dist/
#
# Then, on any machine with Python 3.11+ (the wheels are pure Python; pip fetches their
# third-party dependencies from the index as usual, and takes toren's own from OUT):
#
#     python3 -m venv .venv
#     .venv/bin/pip install --find-links OUT toren toren-postgres [toren-anthropic ...]
#
# PyPI's `toren` is an unrelated project: always pass --find-links, and prefer
# `--no-index --find-links OUT` for the toren distributions where the third-party
# dependencies are already installed. Uses `pip wheel --no-deps`, so nothing beyond pip is
# needed (pip fetches the build backend, hatchling, into an isolated build environment).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-dist}
mkdir -p "$out"
out=$(cd "$out" && pwd)
python=${PYTHON:-python3}
[ -x .venv/bin/python ] && python=${PYTHON:-.venv/bin/python}
projects=(. plugins/*/)
"$python" -m pip wheel --quiet --no-deps --wheel-dir "$out" "${projects[@]}"
ls -1 "$out"/*.whl
