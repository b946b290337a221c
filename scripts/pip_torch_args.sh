# Sourced by scripts/venv_torch.sh and scripts/wheel_check.sh (not run alone).
# pip_torch_args VPY VERSION LABEL: sets the array pip_args to what pip needs to
# install torch==VERSION into the venv of VPY.  A machine-wide pip config may
# cap torch below VERSION (a `constraint` file): then PIP_CONFIG_FILE=/dev/null
# is exported (no config file at all) and the config's index settings
# (find-links, extra indexes) that exist here are passed back explicitly, so
# only the cap is dropped.  LABEL prefixes the one line said when that happens.
pip_torch_args() {
  local vpy=$1 version=$2 label=$3 key val v
  pip_args=()
  # Does the configured pip accept torch==VERSION?  (--dry-run resolves only.)
  if "$vpy" -m pip install -q --dry-run --no-deps "torch==$version" >/dev/null 2>&1; then
    return 0
  fi
  echo "$label: pip's config refuses torch==$version (a constraint cap?); installing without the config file" >&2
  export PIP_CONFIG_FILE=/dev/null
  for key in find-links extra-index-url index-url; do
    val=$(env -u PIP_CONFIG_FILE "$vpy" -m pip config get "global.$key" 2>/dev/null || true)
    for v in $val; do
      case "$v" in
        file://*) [ -d "${v#file://}" ] || continue ;;
        /*) [ -e "$v" ] || continue ;;
      esac
      pip_args+=("--$key" "$v")
    done
  done
}
