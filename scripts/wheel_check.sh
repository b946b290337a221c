#!/usr/bin/env bash
# fxcut installed as a user installs it: into an environment that already has
# its torch, from the built wheel and sdist, never from this checkout.
#   bash scripts/wheel_check.sh [TORCH_VERSION]      (default 2.13.0, the CPU file on disk)
#
# 1. `python -m build`: the sdist, then the wheel built from that sdist (so the
#    sdist holds everything the build needs), into a temporary folder; the
#    wheel must hold py.typed, _C.pyi and the extension, its torch requirement
#    no upper bound.
# 2. A fresh venv with torch==TORCH_VERSION only (the user's environment).
# 3. `pip install WHEEL`, then `pip install 'WHEEL[exact]'`: pip must not
#    install, upgrade or replace torch (its version, local tag included, and
#    pip's install report are checked); `[bench,test]` must resolve from the
#    wheel without touching torch either (pip --dry-run).
# 4. From a temporary folder outside the checkout: imports and the package's
#    files, a small model trained through fxcut.aot_backend(), the README's
#    main job (`python -m fxcut`: fxcut and torch identical), the `fxcut`
#    command with the exact solver (the [exact] extra), `fxcut bench` failing
#    in one line.  On a torch fxcut is not tested on (2.11.0, say) the model
#    must be partitioned by torch's partitioner instead, and the CLI runs
#    are skipped.
# 5. `pip install SDIST` (fxcut uninstalled first): the C extension builds
#    from the sdist through pip, and imports.
# Exits non-zero at the first problem; prints the time taken.
# PYTHON picks the interpreter (python3 by default); FXCUT_WHEEL_CHECK_KEEP=1
# keeps the temporary folder.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/pip_torch_args.sh
ROOT=$PWD
VERSION=${1:-2.13.0}
if [ $# -gt 1 ] || ! [[ "$VERSION" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
  echo "usage: $0 [TORCH_VERSION]   (e.g. 2.14.1; default 2.13.0)" >&2
  exit 2
fi
PY=${PYTHON:-python3}
start=$(date +%s)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/fxcut-wheel.XXXXXX")
if [ "${FXCUT_WHEEL_CHECK_KEEP:-0}" != 1 ]; then trap 'rm -rf "$WORK"' EXIT; fi
# Nothing of the checkout on the path: fxcut must come from the venv.
unset PYTHONPATH
step() { echo "wheel_check: [$(($(date +%s) - start)) s] $*"; }
fail() { echo "wheel_check: FAILED: $*" >&2; exit 1; }

# pip's per-package "location is ignored" notes for the machine's extra
# indexes are noise here; errors still show.
quiet_pip() { "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2); }

step "building the sdist and the wheel from it (python -m build)"
"$PY" -m venv "$WORK/tool"
quiet_pip "$WORK/tool/bin/python" -m pip install -q build
quiet_pip "$WORK/tool/bin/python" -m build --outdir "$WORK/dist" "$ROOT" >"$WORK/build.log" 2>&1 \
  || { tail -40 "$WORK/build.log" >&2; fail "python -m build"; }
shopt -s nullglob
wheels=("$WORK"/dist/fxcut-*.whl)
sdists=("$WORK"/dist/fxcut-*.tar.gz)
shopt -u nullglob
[ ${#wheels[@]} -eq 1 ] && [ ${#sdists[@]} -eq 1 ] || fail "expected one wheel and one sdist in $WORK/dist"
WHEEL=${wheels[0]}
SDIST=${sdists[0]}
step "built $(basename "$WHEEL") ($(du -k "$WHEEL" | cut -f1) KiB), $(basename "$SDIST") ($(du -k "$SDIST" | cut -f1) KiB)"

# What the wheel and the sdist must hold.
"$WORK/tool/bin/python" - "$WHEEL" "$SDIST" "$ROOT" <<'EOF' || fail "the wheel or the sdist is incomplete"
import os, re, sys, tarfile, zipfile
wheel, sdist, root = sys.argv[1:]
problems = []
names = set(zipfile.ZipFile(wheel).namelist())
for need in ("fxcut/py.typed", "fxcut/_C.pyi", "fxcut/__main__.py"):
    if need not in names:
        problems.append(f"wheel: no {need}")
if not any(re.fullmatch(r"fxcut/_C\..*\.so", n) for n in names):
    problems.append("wheel: no compiled fxcut/_C extension")
# every module of the package (the files in the checkout, untracked included)
src = os.path.join(root, "python")
for folder, dirs, files in os.walk(os.path.join(src, "fxcut")):
    dirs[:] = [d for d in dirs if d != "__pycache__"]
    for f in files:
        if f.endswith((".py", ".pyi")) or f == "py.typed":
            rel = os.path.relpath(os.path.join(folder, f), src).replace(os.sep, "/")
            if rel not in names:
                problems.append(f"wheel: no {rel}")
meta = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
reqs = re.findall(r"^Requires-Dist: (.*)$", meta, re.M)
torch_reqs = [r for r in reqs if re.match(r"torch\b", r) and "extra ==" not in r]
if len(torch_reqs) != 1 or "<" in torch_reqs[0] or "==" in torch_reqs[0] or "~=" in torch_reqs[0]:
    problems.append(f"wheel: torch requirement {torch_reqs}: an upper bound or a pin would make pip replace the user's torch")
extras = set(re.findall(r"^Provides-Extra: (.*)$", meta, re.M))
for extra in ("exact", "bench", "test"):
    if extra not in extras:
        problems.append(f"wheel: no extra [{extra}]")
members = set(tarfile.open(sdist).getnames())
top = os.path.basename(sdist)[: -len(".tar.gz")]
for f in sorted(os.listdir(os.path.join(root, "csrc"))):
    if f.endswith((".c", ".h")) and f"{top}/csrc/{f}" not in members:
        problems.append(f"sdist: no csrc/{f}")
for need in ("setup.py", "pyproject.toml", "README.md", "python/fxcut/_C.pyi", "python/fxcut/py.typed"):
    if f"{top}/{need}" not in members:
        problems.append(f"sdist: no {need}")
for p in problems:
    print("wheel_check:", p, file=sys.stderr)
print(f"wheel_check: wheel {len(names)} files, torch requirement {torch_reqs[0] if torch_reqs else None!r}, "
      f"extras {sorted(extras)}; sdist {len(members)} files")
sys.exit(1 if problems else 0)
EOF

# pip's config may cap torch below VERSION: pip_torch_args (scripts/pip_torch_args.sh)
# drops the cap, as scripts/venv_torch.sh does.
step "a fresh venv with torch==$VERSION (the user's environment)"
"$PY" -m venv "$WORK/venv"
VPY="$WORK/venv/bin/python"
pip_torch_args "$VPY" "$VERSION" wheel_check
vpip() { quiet_pip "$VPY" -m pip "$@"; }
vpip install -q "${pip_args[@]}" "torch==$VERSION"
# (stderr dropped: before numpy is in, torch warns that it is missing)
torch_version() { "$VPY" -c 'import torch; print(torch.__version__)' 2>/dev/null; }
TORCH=$(torch_version)
[ "${TORCH%%+*}" = "$VERSION" ] || fail "the venv has torch $TORCH, not $VERSION"
step "the venv has torch $TORCH"

# pip install ... with an install report; fails if pip touched torch.
install_keeping_torch() {
  local what=$1; shift
  local report="$WORK/report-$what.json"
  vpip install -q "${pip_args[@]}" --report "$report" "$@" || fail "pip install $* ($what)"
  "$VPY" - "$report" "$what" <<'EOF' || fail "pip install ($what) installed torch"
import json, sys
items = json.load(open(sys.argv[1]))["install"]
names = sorted(f'{i["metadata"]["name"]}=={i["metadata"]["version"]}' for i in items)
print(f"wheel_check: {sys.argv[2]}: pip {'would install' if 'dry' in sys.argv[2] else 'installed'}",
      ", ".join(names) or "nothing")
sys.exit(1 if any(i["metadata"]["name"].lower() == "torch" for i in items) else 0)
EOF
  local now
  now=$(torch_version)
  [ "$now" = "$TORCH" ] || fail "pip install ($what) replaced torch $TORCH by $now"
}

step "pip install the wheel"
install_keeping_torch wheel "$WHEEL"
step "pip install the wheel's [exact] extra"
install_keeping_torch exact "${WHEEL}[exact]"
step "resolving the wheel's [bench,test] extras (pip --dry-run)"
install_keeping_torch bench-test-dry-run --dry-run "${WHEEL}[bench,test]"
vpip check >/dev/null || { vpip check; fail "pip check"; }

# Everything below runs from a folder outside the checkout.
mkdir -p "$WORK/run"
cd "$WORK/run"

check_imports() {
  "$VPY" - "$ROOT" "$TORCH" <<'EOF' || fail "imports from the installed package"
import os, sys, warnings
import torch
import fxcut
root, want_torch = sys.argv[1:]
here = os.path.dirname(os.path.abspath(fxcut.__file__))
assert not here.startswith(os.path.realpath(root) + os.sep), f"fxcut imported from the checkout: {here}"
assert os.sep + "site-packages" + os.sep in here + os.sep, here
assert torch.__version__ == want_torch, (torch.__version__, want_torch)
for f in ("py.typed", "_C.pyi"):
    assert os.path.isfile(os.path.join(here, f)), f"no {f} beside {here}"
import fxcut._C
assert os.path.dirname(os.path.abspath(fxcut._C.__file__)) == here, fxcut._C.__file__
from importlib.metadata import version
assert version("fxcut") == fxcut.__version__, (version("fxcut"), fxcut.__version__)
# the integrations import on first use, and a small model trains with fxcut's partition
assert callable(fxcut.inductor_backend) and callable(fxcut.aot_backend)
import fxcut.integrations.deepspeed
# inductor's cache key reads the installed package's own files (relative to __file__)
from fxcut.integrations.torch_compile import code_hash, decision_files
assert len(decision_files()) > 20 and len(code_hash()) == 64, decision_files()
m = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU(), torch.nn.Linear(8, 1))
x = torch.randn(4, 8)
ref = torch.autograd.grad(m(x).sum(), list(m.parameters()))
got = torch.autograd.grad(torch.compile(m, backend=fxcut.aot_backend())(x).sum(), list(m.parameters()))
assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(ref, got)), "gradients differ from eager"
counts = fxcut.partition_counts()
from fxcut.torchrules import versions
if versions.current() is not None:  # a torch fxcut is tested on: fxcut decides
    assert counts.get("fxcut", 0) >= 1, f"fxcut did not partition on torch {torch.__version__}: {counts}"
else:  # any other torch: torch's own partitioner decides (the README's promise)
    assert counts.get("torch_untested", 0) >= 1 and not counts.get("fxcut"), counts
print(f"wheel_check: fxcut {fxcut.__version__} from {here}, torch {torch.__version__}, partitions {counts}")
EOF
}

step "imports from the installed wheel"
check_imports

TESTED=$("$VPY" -c 'from fxcut.torchrules import versions; print(int(versions.current() is not None))' 2>/dev/null)
untested=0
if [ "$TESTED" != 1 ]; then
  # fxcut does not decide there, so the side-by-side comparison has nothing to show
  step "torch $TORCH is not a release fxcut is tested on: torch's partitioner decided (above); the main job is skipped"
  untested=1
fi

if [ "$untested" = 0 ]; then
step "the main job from the wheel: python -m fxcut"
"$VPY" -m fxcut >"$WORK/main.log" 2>&1 || { cat "$WORK/main.log" >&2; fail "python -m fxcut exited non-zero"; }
grep -q "fxcut vs torch: saved values and graphs identical" "$WORK/main.log" \
  || { cat "$WORK/main.log" >&2; fail "the main job did not report fxcut and torch identical"; }
grep -E "^(model|fxcut vs torch):" "$WORK/main.log" | sed 's/^/  /'

step "the fxcut command with the exact plan solver (the [exact] extra)"
"$WORK/venv/bin/fxcut" partition --model gpt2 --plan-budget 0 --plan-solver exact --plan-time-limit 5 \
  >"$WORK/exact.log" 2>&1 || { cat "$WORK/exact.log" >&2; fail "fxcut partition --plan-solver exact"; }
grep -q "proven lower bound" "$WORK/exact.log" || { cat "$WORK/exact.log" >&2; fail "the exact solver gave no bound"; }
grep "proven lower bound" "$WORK/exact.log" | sed 's/^/  /'
fi

step "fxcut bench from a wheel: one line saying it needs the source checkout, exit status 2"
set +e
"$WORK/venv/bin/fxcut" bench >"$WORK/bench.log" 2>&1
rc=$?
set -e
{ [ "$rc" -eq 2 ] && grep -q "installed from a wheel" "$WORK/bench.log" && ! grep -q Traceback "$WORK/bench.log"; } \
  || { cat "$WORK/bench.log" >&2; fail "fxcut bench from the wheel: rc=$rc"; }

step "pip install the sdist (the C extension built by pip from it)"
vpip uninstall -q -y fxcut
install_keeping_torch sdist "$SDIST"
check_imports

if [ "$untested" = 0 ]; then ran="main job from the wheel"; else ran="torch's partitioner decided (untested torch)"; fi
step "passed: torch $TORCH untouched by pip; wheel, [exact], [bench,test] and sdist; $ran ($(($(date +%s) - start)) s in all)"
