#!/usr/bin/env bash
# Creates .venv (if missing) and installs fxcut into it with torch==2.13.0.
# Usage: bash scripts/setup.sh [extra ...]   e.g. bash scripts/setup.sh test
# FXCUT_WERROR=1 (the default here) makes any C compiler warning fatal.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade "pip>=23" "setuptools>=77" wheel
# Always pin torch: an unpinned requirement would pull a multi-GB CUDA build.
.venv/bin/python -m pip install -q "torch==2.13.0"
# numpy comes with fxcut (pyproject's dependencies): without it torch warns
# "Failed to initialize NumPy" on every import, the main job included.
extras=""
if [ $# -gt 0 ]; then extras="[$(IFS=,; echo "$*")]"; fi
rm -rf build python/fxcut/_C*.so
FXCUT_WERROR=${FXCUT_WERROR:-1} .venv/bin/python -m pip install -q --no-build-isolation -e ".${extras}"
