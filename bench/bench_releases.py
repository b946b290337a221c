"""The partition benchmark on every supported torch release, one command.

For each release, runs ``bench/bench_partition.py --set releases`` in that
release's virtual environment (a fresh process; this checkout's ``python/``
first on the path, so the fxcut under test is this checkout's), at 24 and 48
layers with the garbage collector on and interleaved rounds, and writes one
table per release into a generated section of ``docs/bench_partition.md`` and
a summary table into the README's benchmark section:

- whole partition_fn, torch / fxcut, with lazy modules (a ``_LazyGraphModule``
  joint under ``_use_lazy_graph_module(True)``: how inductor's ``compile_fx``
  calls the partitioner) and with a plain ``GraphModule`` (eager);
- the decision (column (a) of ``fxcut bench``), torch / fxcut;
- fxcut / the floor (the least that returns torch's modules: their nodes
  created once and the code torch's result holds generated once), lazy and eager;

every ratio the median of the per-round ratios.  A summary line per release
says whether the whole partition_fn is >= 4x torch's at every size, lazy and
eager, as measured.

    PYTHONPATH=python .venv/bin/python bench/bench_releases.py --docs docs --readme README.md

Time: the defaults (24 and 48 layers, 3 rounds) took 6.3 min for one release
(2.15.0) on the shared 2-core machine at a load average of ~11, of which
~1.5 min are the timed calls and the rest capturing the graphs and copying
them for every call; 24 layers alone for all four releases took 23 min there.
``--reps 2`` or ``--layers 24`` make it shorter.  ``--from-json FILE``
rewrites the docs from a saved run (``--json FILE``) without measuring.

Where each release's Python comes from, first match: ``--venv VERSION=PATH``
(PATH a venv folder or its python), the environment variable
``FXCUT_VENV_<MAJOR>_<MINOR>`` (e.g. ``FXCUT_VENV_2_15``), ``.venv-torch<MAJOR.MINOR>``
at the repository root; when none exists, ``scripts/venv_torch.sh VERSION``
makes it (``--no-create`` fails instead).  ``--releases current`` runs this
interpreter only (a smoke test with ``--quick``).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any

import docs_sections  # bench/, next to this script

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RELEASES = ("2.12.1", "2.13.0", "2.14.1", "2.15.0")
TARGET = 4.0
#: The sizes the target is stated at.
TARGET_LAYERS = (24, 48)
#: The docs' section and the README's section this command writes.
SECTION = "releases"


@dataclass
class Release:
    version: str  # as asked ("current": this interpreter)
    python: str


def _python_of(path: str) -> str:
    return os.path.join(path, "bin", "python") if os.path.isdir(path) else path


def find_python(version: str, given: dict[str, str], create: bool) -> str:
    """The interpreter of ``version``'s venv (see the module docstring)."""
    if version == "current":
        return sys.executable
    mm = ".".join(version.split(".")[:2])
    for key in (version, mm):
        if key in given:
            return _python_of(given[key])
    env = os.environ.get("FXCUT_VENV_" + mm.replace(".", "_"))
    if env:
        return _python_of(env)
    python = os.path.join(ROOT, f".venv-torch{mm}", "bin", "python")
    if os.path.exists(python):
        return python
    if not create:
        raise SystemExit(f"bench_releases: no venv for torch {version}: pass --venv {version}=PATH, set "
                         f"FXCUT_VENV_{mm.replace('.', '_')}, or drop --no-create to make {python}")
    print(f"bench_releases: making .venv-torch{mm} (scripts/venv_torch.sh {version})", file=sys.stderr, flush=True)
    subprocess.run(["bash", os.path.join(ROOT, "scripts", "venv_torch.sh"), version], cwd=ROOT, check=True)
    return python


def run_release(release: Release, args: argparse.Namespace, scratch: str) -> dict[str, Any]:
    """One release's benchmark in its own process; returns its JSON result."""
    out = os.path.join(scratch, f"{release.version}.json")
    cmd = [release.python, os.path.join(ROOT, "bench", "bench_partition.py"), "--set", "releases",
           "--json", out]
    if args.quick:
        cmd.append("--quick")
    else:
        cmd += ["--layers", *map(str, args.layers), "--reps", str(args.reps), "--slow-reps", str(args.reps),
                "--phase-layers", "0"]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, "python"), *filter(None, [env.get("PYTHONPATH")])])
    print(f"== torch {release.version}: {release.python}", file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"bench_releases: torch {release.version}'s run failed ({proc.returncode}):\n"
                         f"{proc.stdout[-3000:]}")
    with open(out) as f:
        data: dict[str, Any] = json.load(f)
    torch_version = data["environment"]["torch"]
    if release.version != "current" and not torch_version.startswith(release.version):
        raise SystemExit(f"bench_releases: {release.python} has torch {torch_version}, not {release.version}")
    return data


# --------------------------------------------------------------------------- the tables


def _ratio(size: dict[str, Any], num: str, den: str) -> float:
    return float(size["ratios"][f"{num}/{den}"])


#: (column, numerator, denominator, digits)
COLUMNS = [
    ("whole partition_fn, lazy: torch / fxcut", "partition_torch_lazy", "partition_fxcut_lazy", 2),
    ("whole partition_fn, eager: torch / fxcut", "partition_torch", "partition_fxcut", 2),
    ("decision (a): torch / fxcut", "decision_torch", "decision_fxcut", 1),
    ("fxcut / floor, lazy", "partition_fxcut_lazy", "floor_lazy", 2),
    ("fxcut / floor, eager", "partition_fxcut", "floor_extract", 2),
]


def _ms(size: dict[str, Any], key: str) -> str:
    return f"{size['seconds'][key] * 1e3:.0f}"


def release_table(data: dict[str, Any]) -> str:
    lines = ["| layers | joint nodes | " + " | ".join(c[0] for c in COLUMNS)
             + " | ms lazy: fxcut / torch / floor | ms eager: fxcut / torch / floor |",
             "|---:|---:|" + "---:|" * (len(COLUMNS) + 2)]
    for s in data["sizes"]:
        cells = [f"{_ratio(s, num, den):.{d}f}" for _, num, den, d in COLUMNS]
        lazy = " / ".join(_ms(s, k) for k in ("partition_fxcut_lazy", "partition_torch_lazy", "floor_lazy"))
        eager = " / ".join(_ms(s, k) for k in ("partition_fxcut", "partition_torch", "floor_extract"))
        lines.append(f"| {s['layers']} | {s['nodes']} | " + " | ".join(cells) + f" | {lazy} | {eager} |")
    return "\n".join(lines)


def whole_ratios(data: dict[str, Any]) -> list[tuple[int, str, float]]:
    """(layers, 'lazy' / 'eager', torch / fxcut) of the whole partition_fn."""
    out = []
    for s in data["sizes"]:
        out.append((s["layers"], "lazy", _ratio(s, "partition_torch_lazy", "partition_fxcut_lazy")))
        out.append((s["layers"], "eager", _ratio(s, "partition_torch", "partition_fxcut")))
    return out


def _unmeasured(data: dict[str, Any]) -> str:
    """'' or ' (48 layers not measured)' for the target's sizes the run left out."""
    left = [str(n) for n in TARGET_LAYERS if n not in {s["layers"] for s in data["sizes"]}]
    return f" ({' and '.join(left)} layers not measured)" if left else ""


def summary_line(data: dict[str, Any]) -> str:
    ratios = whole_ratios(data)
    missed = [f"{n} layers {mode} {x:.2f}x" for n, mode, x in ratios if x < TARGET]
    sizes = " and ".join(str(s["layers"]) for s in data["sizes"])
    version = data["environment"]["torch"]
    if not missed:
        low = min(x for _, _, x in ratios)
        return (f"**torch {version}: the >= {TARGET:g}x target is met** at {sizes} layers, lazy and eager "
                f"(lowest {low:.2f}x){_unmeasured(data)}.")
    return f"**torch {version}: the >= {TARGET:g}x target is missed**: {', '.join(missed)}{_unmeasured(data)}."


def docs_section(results: list[dict[str, Any]], command: str, seconds: float, note: str | None) -> str:
    env = results[0]["environment"]
    m = results[0]["model"]
    rounds = results[0]["reps"]
    parts = [
        "## Every supported torch release",
        "",
        f"Command: `{command}` ({seconds / 60:.1f} min for the whole run, every release included).",
        "",
        f"GPT-2 style joint graphs (fxcut.tools.models.gpt2, fake tensors: hidden {m['hidden']}, heads "
        f"{m['heads']}, seq {m['seq']}, batch {m['batch']}, vocab {m['vocab']}), each release in its own venv "
        f"and process; {rounds} interleaved rounds (the order reversed every other round), garbage collector "
        f"ON during the timed calls; every ratio is the median of the per-round ratios (both sides timed in "
        f"the same round). {env['cpu']} ({env['cpus']} CPUs), python {env['python']}, fxcut {env['fxcut']}, "
        f"{env['date']}.",
        "",
        "- lazy: a `_LazyGraphModule` joint under `_use_lazy_graph_module(True)`, as inductor's `compile_fx` "
        "calls the partitioner; eager: a plain `GraphModule` (a direct call).",
        "- decision (a): fxcut's `decide()` (lowering + C core) vs torch's tag passes, `classify_nodes`, "
        "`dist_from_bw` and `solve_min_cut`, on the graph after DCE + CSE.",
        "- floor: the output graphs' nodes created once (`node_copy`) and the code torch's result holds "
        "generated once (lazy: the backward's only).",
        "- ms: medians of the rounds.",
    ]
    if note:
        parts += ["", f"**{note}**"]
    for data in results:
        parts += ["", f"### torch {data['environment']['torch']}", "", release_table(data), "",
                  summary_line(data)]
    return "\n".join(parts)


def readme_section(results: list[dict[str, Any]], note: str | None) -> str:
    layers = [s["layers"] for s in results[0]["sizes"]]
    head = "| torch | " + " | ".join(f"{n} layers, lazy / eager" for n in layers) + f" | >= {TARGET:g}x |"
    lines = [head, "|---|" + "---:|" * len(layers) + "---|"]
    for data in results:
        by = {(n, mode): x for n, mode, x in whole_ratios(data)}
        cells = [f"{by[(n, 'lazy')]:.2f}x / {by[(n, 'eager')]:.2f}x" for n in layers]
        met = all(x >= TARGET for x in by.values())
        lines.append(f"| {data['environment']['torch']} | " + " | ".join(cells)
                     + f" | {'met' if met else 'missed'} at {' and '.join(map(str, layers))} layers"
                     f"{_unmeasured(data)} |")
    text = ("**The whole `partition_fn` on every supported release**, torch / fxcut (garbage collector on, "
            "medians of interleaved per-round ratios; lazy: as `torch.compile` runs the partitioner), "
            "made by `bench/bench_releases.py`"
            + (f" ({note})" if note else "") + "; the command, the decision and the floor per release: "
            "[docs/bench_partition.md](docs/bench_partition.md#every-supported-torch-release).\n\n")
    return text + "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--releases", nargs="+", default=list(RELEASES),
                    help="torch versions to run (default: all supported); 'current': this interpreter")
    ap.add_argument("--venv", action="append", default=[], metavar="VERSION=PATH",
                    help="the venv (folder or python) of a release, e.g. 2.15.0=/path/.venv-torch2.15")
    ap.add_argument("--no-create", action="store_true", help="fail where a release has no venv")
    ap.add_argument("--layers", type=int, nargs="+", default=[24, 48])
    ap.add_argument("--reps", type=int, default=3,
                    help="interleaved rounds per size (each runs every contender once, after an untimed warm-up)")
    ap.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test (bench_partition --quick)")
    ap.add_argument("--note", help="a line printed with the tables (e.g. the machine was loaded)")
    ap.add_argument("--docs", metavar="DIR", help="write the tables into DIR/bench_partition.md")
    ap.add_argument("--readme", metavar="FILE", help="write the summary table into FILE's section")
    ap.add_argument("--json", metavar="FILE", help="write every release's result into FILE")
    ap.add_argument("--from-json", metavar="FILE",
                    help="measure nothing: write --docs / --readme from a --json FILE (its command and note)")
    a = ap.parse_args(argv)
    given: dict[str, str] = {}
    for item in a.venv:
        version, sep, path = item.partition("=")
        if not sep or not path:
            ap.error(f"--venv {item!r}: expected VERSION=PATH")
        given[version] = path
    command = "PYTHONPATH=python python bench/bench_releases.py " + shlex.join(
        sys.argv[1:] if argv is None else argv)
    if a.from_json:
        with open(a.from_json) as f:
            saved = json.load(f)
        command, seconds, results = saved["command"], saved["seconds"], saved["results"]
        a.note = a.note or saved.get("note")
    else:
        releases = [Release(v, find_python(v, given, not a.no_create)) for v in a.releases]
        start = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="fxcut-releases-") as scratch:
            results = [run_release(r, a, scratch) for r in releases]
        seconds = time.perf_counter() - start
    for data in results:
        print(f"torch {data['environment']['torch']}")
        print(release_table(data))
        print(summary_line(data))
    print(f"whole run: {seconds / 60:.1f} min")
    if a.json and not a.from_json:
        with open(a.json, "w") as f:
            json.dump({"command": command, "seconds": seconds, "note": a.note, "results": results}, f, indent=1)
    if a.docs:
        os.makedirs(a.docs, exist_ok=True)
        docs_sections.replace_section(os.path.join(a.docs, "bench_partition.md"), SECTION,
                                      docs_section(results, command, seconds, a.note))
    if a.readme:
        docs_sections.replace_section(a.readme, SECTION, readme_section(results, a.note))
    return 0


if __name__ == "__main__":
    sys.exit(main())
