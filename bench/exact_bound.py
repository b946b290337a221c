"""The exact solver's bound under the inductor model, against measured training steps.

    PYTHONPATH=python:bench nice -n 5 python bench/exact_bound.py [model ...] --time-limit 60 \\
        --measured docs/inductor_memory_measured.json --json docs/exact_inductor.json --section docs/plan.md

Per model of the real-model benchmark (``bench/realmodels``), in a fresh process with a fresh
inductor cache: ``torch.compile(model, backend=fxcut.inductor_backend(memory_budget=0))`` with the
plan's solver set to ``"exact"`` (the search, then the MILP over the inductor model's relaxation,
:mod:`fxcut.solve.inductor_bound`, for ``--time-limit`` seconds per graph; its plan where the
inductor model says it is lower).  Recorded per graph: the search's modelled peak, the plan's, the
proven lower bound (no decision the plan's roles allow has a lower modelled peak) and the inductor
model's peak of torch's own decisions at its seed budgets.  One training step of the plan is
measured by the harness (:func:`realmodels.measure.measure_in_process`: the profiler's peak,
gradients against eager).

The step's bound is the largest graph bound (a step holds at least one graph's live bytes while
that graph runs).  It is set against every measured peak of the model: the plan just measured and
every row ``--measured`` holds for it (stock ``torch.compile`` at each ``activation_memory_budget``,
fxcut's earlier plans, the cross pairs: each a decision whose step was measured).  The model's gap
is the plan's modelled peak over the bound; the measured gap, its measured peak over the bound.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for _p in (ROOT / "python", ROOT / "bench"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

#: the models of the measured table (docs/inductor_memory_measured.json)
MODELS = ("gpt2", "llama", "bert", "t5", "bart", "whisper", "vit", "swin", "wav2vec2", "mixtral", "qwen2_moe",
          "resnet", "mobilenet_v2", "convnext")


def _graph_record(choice: Any) -> dict[str, Any]:
    return {"nodes": choice.nodes, "search_peak": choice.search_point[0] if choice.search_point else None,
            "plan_peak": choice.peak_bytes, "bound": choice.lower_bound_bytes, "gap": choice.gap,
            "proven": choice.proven_optimal, "from_exact": choice.from_exact, "exact_s": choice.exact_seconds,
            "plan_s": choice.seconds,
            "torch": {f"{b:g}": peak for b, (peak, _) in sorted(choice.torch_points.items())}}


def child(model: str, seconds: float) -> dict[str, Any]:
    """In this (fresh) process: the plan at b=0 with the exact solver, its graphs' records and its
    measured step."""
    import fxcut.planned as planned
    from fxcut.integrations import torch_compile as tc
    from realmodels import measure as harness

    graphs: list[dict[str, Any]] = []
    default = tc._fxcut_partition

    def exact_partition(verify: Any, memory_budget: float | None = None, safe_budget: bool | None = None,
                        memory_model: str = "unfused", check_time_limit: float | None = None) -> Any:
        if memory_budget is None:
            return default(verify, memory_budget, safe_budget, memory_model, check_time_limit)
        return planned.planned_partitioner(memory_budget, memory_model=memory_model, solver="exact",
                                           exact_time_limit=seconds)

    original_plan = planned.PeakPlanner.plan

    def plan(self: Any, inputs: Any) -> Any:
        choice = original_plan(self, inputs)
        graphs.append(_graph_record(choice))
        return choice

    tc._fxcut_partition = exact_partition
    planned.PeakPlanner.plan = plan  # type: ignore[method-assign]
    m = harness.measure_in_process(model, [harness.Backend("fxcut", "inductor", 0.0)], warmup=1, steps=1, rounds=1)
    return {"model": model, "measured": m[0].as_dict(), "graphs": graphs}


def run_child(model: str, seconds: float, timeout: float) -> dict[str, Any]:
    from realmodels.measure import fresh_cache_env

    with tempfile.TemporaryDirectory(prefix="exactbound-") as cache:
        try:
            out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", model,
                                  "--time-limit", str(seconds)], env=fresh_cache_env(cache), capture_output=True,
                                 text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            return {"model": model, "status": "timeout"}
    lines = out.stdout.strip().splitlines()
    if out.returncode != 0 or not lines:
        return {"model": model, "status": "crashed", "error": "\n".join(out.stderr.strip().splitlines()[-6:])}
    row: dict[str, Any] = json.loads(lines[-1])
    return row


def measured_peaks(measured: dict[str, Any], model: str) -> dict[str, int]:
    """Every measured step peak ``--measured`` holds for ``model``, by backend label."""
    out: dict[str, int] = {}
    for r in measured.get("models", {}).get(model, []):
        if r.get("status") == "ok" and isinstance(r.get("peak_bytes"), int):
            out[r["backend"]] = r["peak_bytes"]
    for pair, rows in measured.get("cross", {}).get(model, {}).items():
        for r in rows:
            if r.get("status") == "ok" and isinstance(r.get("peak_bytes"), int):
                out.setdefault(f"{r['backend']} ({pair})", r["peak_bytes"])
    return out


def summarise(row: dict[str, Any], earlier: dict[str, int]) -> dict[str, Any]:
    """The step's bound against the measured peaks (module docstring)."""
    graphs = row.get("graphs") or []
    m = row.get("measured") or {}
    out: dict[str, Any] = {"model": row["model"], "status": m.get("status", row.get("status"))}
    if not graphs or any(g["bound"] is None for g in graphs) or out["status"] != "ok":
        out["error"] = m.get("error") or row.get("error") or "no bound"
        return out
    bound = max(g["bound"] for g in graphs)
    # set against the step's bound (its largest graph bound): the largest graph peak of the plan
    plan_model = max(g["plan_peak"] for g in graphs)
    peaks = dict(earlier, **{"fxcut-exact@0 (this run)": m["peak_bytes"]})
    lowest = min(peaks, key=lambda k: peaks[k])
    torch_model = {b: sum(g["torch"].get(b, 0) for g in graphs) for b in graphs[0]["torch"]}
    out.update(graphs=len(graphs), nodes=sum(g["nodes"] for g in graphs), bound=bound,
               search_peak=max(g["search_peak"] or 0 for g in graphs), plan_model=plan_model,
               plan_measured=m["peak_bytes"], model_gap=plan_model / bound - 1,
               measured_gap=m["peak_bytes"] / bound - 1, proven=all(g["proven"] for g in graphs),
               from_exact=any(g["from_exact"] for g in graphs), exact_s=sum(g["exact_s"] for g in graphs),
               decisions_measured=len(peaks), lowest_measured=peaks[lowest], lowest_measured_by=lowest,
               bound_below_every_measured=all(bound <= p for p in peaks.values()),
               bound_below_torch_model=all(bound <= p for p in torch_model.values()),
               grad_max_rel_err=m.get("grad_max_rel_err"), grads_compared=m.get("grads_compared"))
    return out


def _mib(x: int) -> str:
    return f"{x / 2**20:.2f}"


def markdown(rows: list[dict[str, Any]], command: str, torch_version: str, measured_from: str) -> str:
    lines = [
        "## The exact solver's bound under inductor, against measured steps",
        "",
        f"Made by `{command}` (torch {torch_version}, CPU). `fxcut.inductor_backend(memory_budget=0)` with "
        "the plan's solver `\"exact\"`: the search, then the MILP over the inductor model's relaxation "
        "(docs/exact.md), its plan where the model says it is lower. *bound*: proven, no decision the plan's "
        "roles allow has a lower modelled peak (the largest graph bound of the step). *model gap* / *measured "
        "gap*: the plan's modelled (its largest graph's) / measured peak over the bound. *decisions*: the measured steps the bound "
        f"is set against (this plan's and every row of `{measured_from}` for the model: stock at each budget, "
        "earlier plans); *lowest measured*: the lowest of them. MiB.",
        "",
        "| model | graphs | nodes | search (model) | plan (model) | plan (measured) | bound | model gap | "
        "measured gap | proven | decisions | lowest measured | bound <= every measured | exact s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "bound" not in r:
            lines.append(f"| {r['model']} | {r.get('status')}: {str(r.get('error', ''))[:80]} |"
                         + " |" * 12)
            continue
        lines.append(
            f"| {r['model']} | {r['graphs']} | {r['nodes']} | {_mib(r['search_peak'])} | {_mib(r['plan_model'])} | "
            f"{_mib(r['plan_measured'])} | {_mib(r['bound'])} | {100 * r['model_gap']:.1f}% | "
            f"{100 * r['measured_gap']:.1f}% | {'yes' if r['proven'] else 'no'} | {r['decisions_measured']} | "
            f"{_mib(r['lowest_measured'])} ({r['lowest_measured_by']}) | "
            f"{'yes' if r['bound_below_every_measured'] else '**no**'} | {r['exact_s']:.0f} |")
    ok = [r for r in rows if "bound" in r]
    if ok:
        lines += ["", f"Bound at or below every measured peak on {sum(r['bound_below_every_measured'] for r in ok)} "
                  f"of {len(ok)} models; model gap <= 5% on {sum(r['model_gap'] <= 0.05 for r in ok)}, measured gap "
                  f"<= 5% on {sum(r['measured_gap'] <= 0.05 for r in ok)}."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="*", default=list(MODELS))
    p.add_argument("--time-limit", type=float, default=60.0, help="exact solver seconds per graph")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per model's process")
    p.add_argument("--measured", type=Path, default=ROOT / "docs" / "inductor_memory_measured.json")
    p.add_argument("--json", type=Path)
    p.add_argument("--section", metavar="FILE", help="write the table as the 'exact_inductor' section of FILE")
    p.add_argument("--render", action="store_true", help="only write the table of what --json holds")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.time_limit)))
        return 0
    import torch

    from docs_sections import replace_section

    measured = json.loads(args.measured.read_text()) if args.measured.exists() else {}
    data: dict[str, Any] = json.loads(args.json.read_text()) if args.json and args.json.exists() else {}
    data.setdefault("rows", {})
    for model in [] if args.render else args.models:
        row = run_child(model, args.time_limit, args.timeout)
        data["rows"][model] = {"raw": row, "summary": summarise(row, measured_peaks(measured, model))}
        print(json.dumps(data["rows"][model]["summary"]), flush=True)
        if args.json:
            args.json.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    for model, entry in data["rows"].items():  # (a render recomputes them from what was measured)
        entry["summary"] = summarise(entry["raw"], measured_peaks(measured, model))
    rows = [data["rows"][m]["summary"] for m in data["rows"]]
    command = data.setdefault("command", ("PYTHONPATH=python:bench python bench/exact_bound.py "
                                          + " ".join(a for a in sys.argv[1:] if a != "--render")).strip())
    if args.json:
        args.json.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    text = markdown(rows, command, torch.__version__, os.path.relpath(args.measured, ROOT))
    if args.section:
        replace_section(args.section, "exact_inductor", text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
