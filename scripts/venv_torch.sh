#!/usr/bin/env bash
# Makes .venv-torch<MAJOR.MINOR> at the repository root with torch==VERSION, the
# test extra and fxcut installed in place (editable), for the torch matrix.
#   bash scripts/venv_torch.sh 2.14.1        -> .venv-torch2.14
# Re-running it on an existing venv only reinstalls what is missing.
# PYTHON picks the interpreter (python3 by default).
#
# Pip settings: a machine-wide pip config may cap torch below the release asked
# for (a `constraint` file).  When the cap excludes VERSION, pip runs with
# PIP_CONFIG_FILE=/dev/null (no config file at all) and the index settings the
# config held are passed back explicitly, so only the cap is dropped.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/pip_torch_args.sh
if [ $# -ne 1 ] || ! [[ "$1" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
  echo "usage: $0 TORCH_VERSION   (e.g. 2.14.1)" >&2
  exit 2
fi
VERSION=$1
MM=${VERSION%.*}
VENV=.venv-torch$MM
PY=${PYTHON:-python3}
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
VPY="$VENV/bin/python"

# pip_args: the settings that let pip install torch==VERSION (scripts/pip_torch_args.sh)
pip_torch_args "$VPY" "$VERSION" venv_torch
"$VPY" -m pip install -q "${pip_args[@]}" --upgrade "pip>=23" wheel
# setuptools resolved with torch: some releases cap it (2.12.1: setuptools<82).
"$VPY" -m pip install -q "${pip_args[@]}" "torch==$VERSION" "setuptools>=77"
"$VPY" -m pip install -q "${pip_args[@]}" pytest "hypothesis>=6" "networkx>=3" "scipy>=1.10" numpy matplotlib
# fxcut in place; --no-deps keeps pip from re-resolving torch against the cap.
# With its dependencies resolved (pyproject's torch>=2.9 accepts the venv's torch).
FXCUT_WERROR=${FXCUT_WERROR:-1} "$VPY" -m pip install -q "${pip_args[@]}" --no-build-isolation -e .
got=$("$VPY" -c 'import torch; print(torch.__version__.split("+")[0])')
if [ "$got" != "$VERSION" ]; then
  echo "venv_torch: $VENV has torch $got, not $VERSION" >&2
  exit 1
fi
echo "venv_torch: $VENV ready (torch $got)"
