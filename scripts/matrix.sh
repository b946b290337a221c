#!/usr/bin/env bash
# The torch matrix: for each supported torch besides the default venv's
# (2.13.0), make its venv (scripts/venv_torch.sh) and run the fidelity suite
# there (pytest -m fidelity: fxcut's decisions and graphs equal that torch's).
#
#   bash scripts/matrix.sh                  # 2.12.1 2.14.1 2.15.0
#   bash scripts/matrix.sh 2.14.1 [...]     # only those
#   bash scripts/matrix.sh -- -k zoo        # pytest arguments after --
#
# FXCUT_MATRIX_KEEP_VENVS=0 removes each venv once its run is done (about
# 5.5 GB each); by default they stay, and a second run reuses them.
# Prints one timing line per torch and fails if any run fails (after all ran).
set -euo pipefail
cd "$(dirname "$0")/.."
versions=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do versions+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
[ ${#versions[@]} -gt 0 ] || versions=(2.12.1 2.14.1 2.15.0)
summary=()
status=0
for v in "${versions[@]}"; do
  mm=${v%.*}
  start=$(date +%s)
  # pip's per-package "location is ignored" notes for the machine's extra
  # indexes are noise here; errors still show.
  bash scripts/venv_torch.sh "$v" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
  made=$(date +%s)
  set +e
  # DeepSpeed 0.19.8 pins torch 2.13: its tests run in the default venv only.
  PYTHONPATH="$PWD/python" ".venv-torch$mm/bin/python" -m pytest -q -m fidelity -p no:cacheprovider \
    --ignore=tests/test_deepspeed.py "$@"
  rc=$?
  set -e
  line="torch $v: venv $((made - start)) s, fidelity tests $(($(date +%s) - made)) s, pytest rc=$rc"
  echo "matrix: $line"
  summary+=("$line")
  [ "$rc" -eq 0 ] || status=1
  if [ "${FXCUT_MATRIX_KEEP_VENVS:-1}" = 0 ]; then rm -rf ".venv-torch$mm"; fi
done
printf 'matrix: %s\n' "${summary[@]}"
exit "$status"
