"""The inductor memory model (and the time model) checked against inductor and against measurements.

Two checks, each writing a JSON file and a Markdown section (``--md``: the
section between ``<!-- begin: NAME -->`` / ``<!-- end: NAME -->`` markers is
replaced):

``inductor`` -- the model against inductor's own answer, on the zoo's joint
graphs as inductor partitions them (``zoo.capture_inductor``), for torch's
decision at each budget: the forward and backward modules are handed to
inductor's post-grad passes, lowering, scheduler and wrapper code generation
on fake tensors (:func:`fxcut.torchrules.inductor.ask_inductor`, nothing
compiled) and the wrapper's own allocations and frees give the peaks::

    PYTHONPATH=python:tests:bench python bench/inductor_memory.py inductor [case ...] \\
        [--budgets 1,0] [--json docs/inductor_memory_zoo.json] [--md docs/memory_model.md]

``measured`` -- the model against measured training-step peaks and the time
model against measured step times, on the real-model benchmark's models
(``bench/realmodels``): fresh processes with fresh inductor caches (the
harness's :func:`realmodels.measure.measure_in_process`; stock at b=1 and
fxcut at b=1 in one, stock and fxcut at b=0 in another, stock at 0.5 in a
third), stock ``torch.compile`` at ``activation_memory_budget`` 1, 0.5 and 0
and ``fxcut.inductor_backend(memory_budget=b)`` at 1 and 0.  The figures paired:
the measured peak of each backend's step and the inductor model's peak of
the same decision (torch's decision at b as the planner's seeds compute it,
the plan's own pick), summed over the step's graphs; the measured step time
(medians of interleaved rounds) and the time model's step cost of the same
decision::

    PYTHONPATH=python:bench nice -n 5 python bench/inductor_memory.py measured [model ...] \\
        [--json docs/inductor_memory_measured.json] [--md docs/memory_model.md]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT / "python", ROOT / "tests", ROOT / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

#: stock torch.compile at these budgets, fxcut's plan at those (the pairs the tables show)
STOCK_BUDGETS = (1.0, 0.5, 0.0)
PLAN_BUDGETS = (1.0, 0.0)


def _load(path: Path | None) -> dict[str, Any]:
    if path is not None and path.exists():
        data: dict[str, Any] = json.loads(path.read_text())
        return data
    return {}


def _save(path: Path | None, data: dict[str, Any]) -> None:
    if path is not None:
        path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


def _replace_section(md: Path, name: str, body: str) -> None:
    begin, end = f"<!-- begin: {name} -->", f"<!-- end: {name} -->"
    text = md.read_text() if md.exists() else ""
    block = f"{begin}\n{body.rstrip()}\n{end}"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        text = head + block + tail
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    md.write_text(text)


def _load_line() -> str:
    try:
        return "load average %.2f / %.2f / %.2f" % os.getloadavg()
    except OSError:
        return "load average unknown"


# --------------------------------------------------------------------------- model vs inductor's own answer


def zoo_point(name: str, budget: float | None) -> dict[str, Any]:
    """The model's and inductor's peaks of torch's decision at ``budget``
    (None: the default, 1) on the zoo case's inductor joint graph."""
    import zoo
    from fxcut import partition
    from fxcut.route.plan import make_plan
    from fxcut.solve import memory
    from fxcut.torchrules.inductor import ask_inductor, donated_indices

    cap = zoo.capture_inductor(name)
    nfo = cap.num_fwd_outputs
    plan = make_plan(cap.fresh(), num_fwd_outputs=nfo,
                     static_lifetime_input_indices=cap.partition_kwargs.get("static_lifetime_input_indices"),
                     budget=budget)
    routed = partition.route(plan, cap.joint_inputs)
    fw, bw = routed.modules
    arrays = routed.decision.decision.arrays
    saved = list(routed.saved)
    fused = memory.simulate(arrays, saved, nfo, model="inductor")
    unfused = memory.simulate(arrays, saved, nfo)
    t0 = time.perf_counter()
    f = ask_inductor(fw, is_backward=False)
    b = ask_inductor(bw, is_backward=True, donated=donated_indices(fw, bw))
    return {"case": name, "budget": 1.0 if budget is None else budget, "nodes": len(arrays),
            "model_fw": fused.fw_peak_bytes, "model_bw": fused.bw_peak_bytes, "model": fused.peak_bytes,
            "unfused": unfused.peak_bytes, "inductor_fw": f.wrapper_peak, "inductor_bw": b.wrapper_peak,
            "inductor": max(f.wrapper_peak, b.wrapper_peak),
            "scheduler": max(f.scheduler_peak, b.scheduler_peak), "ask_s": time.perf_counter() - t0}


def _ratio(a: float, b: float) -> float:
    return a / b if b else math.nan


def zoo_markdown(rows: list[dict[str, Any]], command: str) -> str:
    lines = [
        "| model | torch's decision at b | nodes | model fw / bw (B) | inductor's wrapper fw / bw (B) | model / "
        "inductor | unfused model / inductor | inductor's scheduler estimate (B) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    within = 0
    for r in rows:
        ratio = _ratio(r["model"], r["inductor"])
        within += abs(ratio - 1) <= 0.10
        flag = "" if abs(ratio - 1) <= 0.10 else " **(outside 10%)**"
        lines.append(f"| {r['case']} | {r['budget']:g} | {r['nodes']} | {r['model_fw']:,} / {r['model_bw']:,} | "
                     f"{r['inductor_fw']:,} / {r['inductor_bw']:,} | {ratio:.3f}{flag} | "
                     f"{_ratio(r['unfused'], r['inductor']):.3f} | {r['scheduler']:,} |")
    lines.append("")
    lines.append(f"Model within 10% of inductor's own answer: {within} of {len(rows)} (torch {_torch_version()}, "
                 f"CPU).  Command: `{command}`")
    return "\n".join(lines) + "\n"


def _torch_version() -> str:
    import torch

    return torch.__version__


def run_inductor(args: argparse.Namespace) -> int:
    import zoo

    names = args.cases or list(zoo.CASES)
    data = _load(args.json)
    rows: list[dict[str, Any]] = data.get("rows", [])
    done = {(r["case"], r["budget"]) for r in rows}
    for name in names:
        for b in args.budgets:
            if (name, b) in done:
                continue
            try:
                row = zoo_point(name, None if b == 1.0 else b)
            except Exception as e:  # a case inductor's reader does not handle: recorded, the others go on
                print(f"{name} b={b:g}: {type(e).__name__}: {str(e).splitlines()[0][:200]}", flush=True)
                continue
            rows.append(row)
            print(f"{name} b={b:g}: model {row['model']:,} inductor {row['inductor']:,} "
                  f"({_ratio(row['model'], row['inductor']):.3f}), unfused {row['unfused']:,}", flush=True)
            _save(args.json, {"rows": rows, "torch": _torch_version()})
    command = "PYTHONPATH=python:tests:bench python bench/inductor_memory.py inductor"
    if args.md is not None:
        _replace_section(args.md, "inductor-vs-model", zoo_markdown(rows, command))
    return 0


# --------------------------------------------------------------------------- model vs measured steps


#: The backends measured together in one fresh process: stock's budget is
#: read when it compiles, so each stock budget needs a process of its own.
PROCESSES: tuple[tuple[str, ...], ...] = (("stock@1", "fxcut@1"), ("stock@0", "fxcut@0"), ("stock@0.5",))


def _child_measured(model: str, labels: list[str], steps: int, rounds: int) -> list[dict[str, Any]]:
    """In a fresh process: the harness's measurements of ``labels``, and per
    fxcut backend what its planner modelled (per graph: the plan's and
    torch's seeds' peaks and step costs, and what inductor's check said)."""
    import fxcut.planned as planned
    from realmodels import measure as harness

    recorded: dict[str, list[dict[str, Any]]] = {}
    original_plan = planned.PeakPlanner.plan

    def plan(self: Any, route_plan: Any, chosen: Any) -> Any:
        choice = original_plan(self, route_plan, chosen)
        prob = self.last_problem
        label = harness._CURRENT[-1] if harness._CURRENT else "?"
        seeds = self.torch_seeds(route_plan, chosen, route_plan.estimates())
        check = choice.check
        graph = {"plan_peak": choice.peak_bytes, "plan_cost": prob.step_cost(choice.saved),
                 "torch": {f"{b:g}": {"peak": prob.model_point(s)[0], "cost": prob.step_cost(s)}
                           for b, s in seeds.items() if any(abs(b - x) < 1e-9 for x in STOCK_BUDGETS)},
                 "nodes": len(prob.arrays), "model": choice.memory_model, "cost_unit": choice.cost,
                 "check": None if check is None else {"asked": {str(k): v for k, v in check.asked.items()},
                                                      "picked": check.picked, "limit": check.limit,
                                                      "torch_peak": check.torch_peak, "failed": check.failed}}
        recorded.setdefault(label, []).append(graph)
        return choice

    planned.PeakPlanner.plan = plan  # type: ignore[method-assign]
    backends = [harness.Backend.parse(label) for label in labels]
    measured = harness.measure_in_process(model, backends, warmup=1, steps=steps, rounds=rounds)
    out = []
    for m in measured:
        d = m.as_dict()
        d["modelled"] = recorded.get(m.backend, [])
        out.append(d)
    return out


def measured_model(model: str, steps: int, rounds: int, timeout: float) -> list[dict[str, Any]]:
    """Every backend of :data:`PROCESSES`, one fresh process (and inductor
    cache) per group."""
    from realmodels.measure import fresh_cache_env

    rows: list[dict[str, Any]] = []
    for labels in PROCESSES:
        with tempfile.TemporaryDirectory(prefix="indmodel-") as cache:
            env = fresh_cache_env(cache)
            env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "python"), str(ROOT / "bench"),
                                                 env.get("PYTHONPATH", "")])
            try:
                out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "child", model, ",".join(labels),
                                      str(steps), str(rounds)], env=env, capture_output=True, text=True,
                                     timeout=timeout, check=False)
            except subprocess.TimeoutExpired:
                rows += [{"model": model, "backend": b, "status": "timeout"} for b in labels]
                continue
        lines = out.stdout.strip().splitlines()
        if out.returncode != 0 or not lines:
            tail = "\n".join(out.stderr.strip().splitlines()[-6:])
            rows += [{"model": model, "backend": b, "status": "crashed", "error": tail} for b in labels]
            continue
        rows += json.loads(lines[-1])
    return rows


def pairs(model_rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The (modelled, measured) pairs of one model's measurements: peaks and
    step times per decision."""
    by = {r.get("backend"): r for r in model_rows}
    plans = {b: by.get(f"fxcut@{b:g}") for b in PLAN_BUDGETS}
    # torch's decisions as the planner modelled them (the same in every fxcut process)
    graphs = next((p["modelled"] for p in plans.values() if p and p.get("modelled")), None)
    out: dict[str, Any] = {"decisions": {}}
    if not graphs:
        return out
    out["graphs"] = len(graphs)
    for b in STOCK_BUDGETS:
        m = by.get(f"stock@{b:g}")
        key = f"{b:g}"
        if m is None or m.get("status") != "ok" or not all(key in g["torch"] for g in graphs):
            continue
        out["decisions"][f"torch@{b:g}"] = {
            "model_peak": sum(g["torch"][key]["peak"] for g in graphs), "measured_peak": m["peak_bytes"],
            "model_cost": sum(g["torch"][key]["cost"] for g in graphs), "step_s": m.get("step_s")}
    for b, m in plans.items():
        if m is None or m.get("status") != "ok" or not m.get("modelled"):
            continue
        x = {"model_peak": sum(g["plan_peak"] for g in m["modelled"]), "measured_peak": m["peak_bytes"],
             "model_cost": sum(g["plan_cost"] for g in m["modelled"]), "step_s": m.get("step_s")}
        checks = [g.get("check") for g in m["modelled"]]
        if checks and all(c and not c.get("failed") and c.get("asked") for c in checks):
            # inductor's own answer (its generated code's peak) for the plan's pick and torch's default
            x["inductor_peak"] = sum(c["asked"][str(c["picked"])] for c in checks)
            d = out["decisions"].get("torch@1")
            if d is not None and "inductor_peak" not in d:
                d["inductor_peak"] = sum(c["torch_peak"] for c in checks)
        out["decisions"][f"plan@{b:g}"] = x
    return out


def _pearson(xs: list[float], ys: list[float]) -> float:
    n = len(xs)
    if n < 3:
        return math.nan
    mx, my = sum(xs) / n, sum(ys) / n
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    sxx = sum((x - mx) ** 2 for x in xs)
    syy = sum((y - my) ** 2 for y in ys)
    return sxy / math.sqrt(sxx * syy) if sxx > 0 and syy > 0 else math.nan


def plan_vs_stock_markdown(data: dict[str, Any]) -> list[str]:
    """The plan against stock ``torch.compile`` under inductor, measured: the
    step peaks at b=0 and b=1, and the step-time ratios (issue 23's targets)."""
    lines = ["**The plan against stock `torch.compile`, both under inductor, measured** (one training step, "
             "the profiler's allocation peak; step times are medians of interleaved rounds on a loaded 2-core "
             "machine, so only large ratios mean anything):", "",
             "| model | stock b=0 (MiB) | plan b=0 (MiB) | b=0 change | stock b=0.5 (MiB) | stock b=1 (MiB) | "
             "plan b=1 (MiB) | b=1 change | step plan/stock b=0 | step plan/stock b=1 | largest abs. gradient error vs eager |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for name, rows in data["models"].items():
        by = {r.get("backend"): r for r in rows}
        need = ("stock@0", "fxcut@0", "stock@1", "fxcut@1")
        if not all(by.get(k, {}).get("status") == "ok" for k in need):
            lines.append(f"| {name} | " + " | ".join(str(by.get(k, {}).get("status", "-")) for k in need)
                         + " | | | | | | |")
            continue
        mib = {k: by[k]["peak_bytes"] / 2**20 for k in need}
        half = by.get("stock@0.5", {})
        half_cell = f"{half['peak_bytes'] / 2**20:.2f}" if half.get("status") == "ok" else "-"
        plan_err = max(by[k].get("grad_max_abs_err") or 0.0 for k in ("fxcut@0", "fxcut@1"))
        stock_err = max(by[k].get("grad_max_abs_err") or 0.0 for k in ("stock@0", "stock@1"))
        lines.append(
            f"| {name} | {mib['stock@0']:.2f} | {mib['fxcut@0']:.2f} | {mib['fxcut@0'] / mib['stock@0'] - 1:+.1%} | "
            f"{half_cell} | {mib['stock@1']:.2f} | {mib['fxcut@1']:.2f} | {mib['fxcut@1'] / mib['stock@1'] - 1:+.2%} | "
            f"{by['fxcut@0']['step_s'] / by['stock@0']['step_s']:.2f} | "
            f"{by['fxcut@1']['step_s'] / by['stock@1']['step_s']:.2f} | {plan_err:.1e} (stock {stock_err:.1e}) |")
    return lines


def measured_markdown(data: dict[str, Any], command: str) -> str:
    order = ["torch@1", "torch@0.5", "torch@0", "plan@1", "plan@0"]
    lines = plan_vs_stock_markdown(data) + [""] + ["| model | graphs | " + " | ".join(f"{d}: model / measured (MiB)" for d in order) + " | within 10% |",
             "|---|---:|" + "---:|" * len(order) + "---|"]
    within = total = 0
    corr_rows = []
    for name, rows in data["models"].items():
        p = pairs(rows)
        cells = []
        ok = 0
        for d in order:
            x = p["decisions"].get(d)
            if x is None:
                cells.append("-")
                continue
            r = _ratio(x["model_peak"], x["measured_peak"])
            total += 1
            good = abs(r - 1) <= 0.10
            within += good
            ok += good
            cells.append(f"{x['model_peak'] / 2**20:.2f} / {x['measured_peak'] / 2**20:.2f} "
                         f"({r:.3f}{'' if good else ' **!**'})")
        n = len(p["decisions"])
        lines.append(f"| {name} | {p.get('graphs', '-')} | " + " | ".join(cells) + f" | {ok} of {n} |")
        xs = [x["model_cost"] for x in p["decisions"].values() if x.get("step_s")]
        ys = [x["step_s"] for x in p["decisions"].values() if x.get("step_s")]
        if len(xs) >= 3:
            corr_rows.append((name, _pearson(xs, ys), xs, ys))
    lines.append("")
    lines.append(f"Model within 10% of the measured peak: {within} of {total} (model, decision) pairs.  "
                 f"{data.get('load', '')}.  Command: `{command}`")
    lines.append("")
    lines.append("**Inductor's own answer against the measurement** (the plan's check: the peak of the code "
                 "inductor generates for the decision, on fake tensors, nothing compiled), in bytes:")
    lines.append("")
    lines.append("| model | decision | inductor's code | measured | difference |")
    lines.append("|---|---|---:|---:|---:|")
    for name, rows in data["models"].items():
        for d, x in pairs(rows)["decisions"].items():
            if "inductor_peak" in x:
                lines.append(f"| {name} | {d} | {x['inductor_peak']:,} | {x['measured_peak']:,} | "
                             f"{x['measured_peak'] - x['inductor_peak']:+,} |")
    lines.append("")
    lines.append("**The time model against measured step times** (same runs): per model, Pearson's r between "
                 "the modelled step cost and the measured step time (median of interleaved rounds) over the "
                 "decisions above.")
    lines.append("")
    lines.append("| model | decisions | r | modelled step (ms) | measured step (ms) |")
    lines.append("|---|---:|---:|---|---|")
    pooled_x: list[float] = []
    pooled_y: list[float] = []
    for name, r, xs, ys in corr_rows:
        lines.append(f"| {name} | {len(xs)} | {r:.2f} | " + ", ".join(f"{x / 1e9:.1f}" for x in xs) + " | "
                     + ", ".join(f"{y * 1e3:.0f}" for y in ys) + " |")
        # each model's decisions relative to its first (torch's default): the model's scale and the
        # machine's speed drop out
        pooled_x += [x / xs[0] for x in xs]
        pooled_y += [y / ys[0] for y in ys]
    if len(pooled_x) >= 3:
        lines.append("")
        lines.append(f"Pooled over the models, each decision's modelled cost and measured time relative to torch's "
                     f"default decision of the same model: Pearson's r = {_pearson(pooled_x, pooled_y):.2f} "
                     f"({len(pooled_x)} points).  The modelled times are the default CPU rates' "
                     f"(`fxcut.solve.cost.CPU`); the machine measured on is slower, so only relative "
                     f"figures compare.")
    return "\n".join(lines) + "\n"


def run_measured(args: argparse.Namespace) -> int:
    from realmodels.models import model_names

    names = args.models or model_names(only_available=True)
    data = _load(args.json)
    data.setdefault("models", {})
    data["torch"] = _torch_version()
    for name in names:
        if name in data["models"] and not args.again:
            continue
        before = _load_line()
        t0 = time.perf_counter()
        rows = measured_model(name, args.steps, args.rounds, args.timeout)
        data["models"][name] = rows
        data["load"] = f"{before} before the last model, {_load_line()} after"
        print(f"{name}: {time.perf_counter() - t0:.0f} s, " + ", ".join(
            f"{r.get('backend')}={r.get('status')}" for r in rows), flush=True)
        for d, x in pairs(rows)["decisions"].items():
            print(f"   {d}: model {x['model_peak']:,} measured {x['measured_peak']:,} "
                  f"({_ratio(x['model_peak'], x['measured_peak']):.3f}); cost {x['model_cost']:,} ps, "
                  f"step {x['step_s']}", flush=True)
        _save(args.json, data)
    command = "PYTHONPATH=python:bench nice -n 5 python bench/inductor_memory.py measured"
    if args.md is not None:
        _replace_section(args.md, "measured-vs-model", measured_markdown(data, command))
    if args.plan_md is not None:
        text = "\n".join(plan_vs_stock_markdown(data)) + (
            f"\n\n{data.get('torch', '')}; {data.get('load', '')}.  Command: `{command} --plan-md docs/plan.md`; "
            "the model's figures beside these: [memory_model.md](memory_model.md).\n")
        from docs_sections import replace_section  # the markers bench_plan.py keeps when it rewrites plan.md

        replace_section(str(args.plan_md), "under-inductor", text)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["child"]:
        print(json.dumps(_child_measured(argv[1], argv[2].split(","), int(argv[3]), int(argv[4]))))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="check", required=True)
    a = sub.add_parser("inductor", help="the model against inductor's own answer (zoo graphs)")
    a.add_argument("cases", nargs="*")
    a.add_argument("--budgets", type=lambda v: [float(x) for x in v.split(",")], default=[1.0, 0.0])
    m = sub.add_parser("measured", help="the model against measured steps (real models)")
    m.add_argument("models", nargs="*")
    m.add_argument("--steps", type=int, default=2)
    m.add_argument("--rounds", type=int, default=3)
    m.add_argument("--timeout", type=float, default=3600.0)
    m.add_argument("--again", action="store_true", help="measure models already in the JSON again")
    m.add_argument("--plan-md", type=Path, help="also write the plan-vs-stock table into this file's "
                   "'under-inductor' section")
    for p in (a, m):
        p.add_argument("--json", type=Path)
        p.add_argument("--md", type=Path)
    args = ap.parse_args(argv)
    return run_inductor(args) if args.check == "inductor" else run_measured(args)


if __name__ == "__main__":
    raise SystemExit(main())
