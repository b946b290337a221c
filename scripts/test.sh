#!/usr/bin/env bash
# Sets everything up on a fresh machine and runs the whole test suite.
#   bash scripts/test.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
# the test extra, and the exact plan solver's (HiGHS): tests/test_exact.py runs it
bash scripts/setup.sh test exact
# DeepSpeed for tests/test_deepspeed.py: its Python code only (DS_BUILD_OPS=0: no
# CUDA ops), built against the venv's torch, which stays pinned on the same line.
DS_BUILD_OPS=0 .venv/bin/python -m pip install -q --no-build-isolation "deepspeed==0.19.8" "torch==2.13.0"
# Debian's chromium for tests/test_html.py's headless-browser test; without it
# that one test is skipped, so say so loudly instead of failing the run.
if ! command -v chromium >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && apt-get update -qq && apt-get install -y -qq chromium; then
    :
  else
    echo "WARNING: could not install chromium with apt-get: tests/test_html.py's headless-browser test will be SKIPPED" >&2
  fi
fi
# The C core must build warning-free under -Wall -Wextra (setup.sh builds with -Werror).
set +e
.venv/bin/python -m pytest -q "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests: failing" >&2
  exit 1
fi
# The type checker, strict on the package (the wheel ships py.typed and
# _C.pyi): [tool.mypy] in pyproject.toml.
if ! .venv/bin/python -m mypy; then
  echo "mypy --strict on python/fxcut failed" >&2
  [ "$rc" -ne 0 ] || rc=1
fi
exit "$rc"
