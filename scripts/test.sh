#!/usr/bin/env bash
# Sets everything up on a fresh machine and runs the whole test suite.
#   bash scripts/test.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
# The C core must build warning-free under -Wall -Wextra (setup.sh builds with -Werror).
set +e
.venv/bin/python -m pytest -q "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests: failing" >&2
  exit 1
fi
exit "$rc"
