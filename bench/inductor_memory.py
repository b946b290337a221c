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
the plan's own pick; a step of several graphs: their forward and backward
peaks and saved bytes combined in the order they run, :func:`step_peak`);
the measured step time
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT / "python", ROOT / "tests", ROOT / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

#: stock torch.compile at these budgets, fxcut's plan at those (the pairs the tables show)
STOCK_BUDGETS = (1.0, 0.5, 0.0)
PLAN_BUDGETS = (1.0, 0.5, 0.0)


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
    from fxcut.tools.decisions import simulate_saved, torch_now
    from fxcut.torchrules.inductor import ask_inductor, donated_indices

    cap = zoo.capture_inductor(name)
    nfo = cap.num_fwd_outputs
    plan = make_plan(cap.fresh(), torch_now(), num_fwd_outputs=nfo,
                     static_lifetime_input_indices=cap.partition_kwargs.get("static_lifetime_input_indices"),
                     budget=budget)
    routed = partition.route(plan, cap.joint_inputs)
    fw, bw = routed.modules
    arrays = routed.decision.decision.arrays
    saved = list(routed.saved)
    fused = simulate_saved(arrays, saved, nfo, model="inductor", torch=plan.torch)
    unfused = simulate_saved(arrays, saved, nfo, torch=plan.torch)
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
PROCESSES: tuple[tuple[str, ...], ...] = (("stock@1", "fxcut@1"), ("stock@0", "fxcut@0"), ("stock@0.5", "fxcut@0.5"))


def _ask(route_plan: Any, prob: Any, saved: list[int]) -> tuple[int, int] | None:
    """Inductor's own forward and backward peaks (its generated code's, on
    fake tensors) of the decision saving ``saved``, as the plan's check asks
    it; None where inductor cannot be asked."""
    from fxcut.torchrules.ask import decision_peaks

    try:
        return decision_peaks(route_plan.joint_module, route_plan.prep, prob.arrays.nodes, saved,
                              prob.num_fwd_outputs, route_plan.rules)
    except Exception as e:  # recorded as unknown; the measurement goes on
        print(f"inductor not asked: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}",
              file=sys.stderr)
        return None


def _model_parts(prob: Any, saved: list[int]) -> dict[str, int]:
    """The memory model's forward peak, backward peak and saved bytes of the
    decision saving ``saved``."""
    from fxcut.solve import memory

    # the problem's own inputs: its storages, costs, marks and (under inductor) the inductor model
    est = memory.simulate(prob.arrays, saved, prob.num_fwd_outputs, prob.model_inputs())
    return {"fw": est.fw_peak_bytes, "bw": est.bw_peak_bytes, "saved": est.saved_bytes}


def _gradient_bytes(route_plan: Any, num_fwd_outputs: int) -> int:
    """The bytes of the gradients a graph's backward returns (held after it
    while the step's earlier graphs run their backward)."""
    import torch
    from fxcut.torchrules.ops import tensor_nbytes

    out = next(iter(route_plan.joint_module.graph.find_nodes(op="output")))
    flat = out.args[0] if isinstance(out.args[0], (list, tuple)) else [out.args[0]]
    vals = [getattr(x, "meta", {}).get("val") for x in flat[num_fwd_outputs:]]
    return sum(tensor_nbytes(v) for v in vals if isinstance(v, torch.Tensor))


def _child_measured(model: str, labels: list[str], steps: int, rounds: int) -> list[dict[str, Any]]:
    """In a fresh process: the harness's measurements of ``labels``, and per
    fxcut backend what its planner modelled (per graph: the plan's and
    torch's seeds' peaks and step costs, and what inductor's check said).
    Inductor's own answer is recorded besides (not part of the planning): for
    the plan's pick where its check did not ask it, and in the b=1 process
    for torch's decisions at every stock budget."""
    import fxcut.planned as planned
    import fxcut.route.decide as route_decide
    from realmodels import measure as harness

    recorded: dict[str, list[dict[str, Any]]] = {}
    original_plan = planned.PeakPlanner.plan
    original_inputs = route_decide.plan_inputs
    #: the route's plan of the call being planned (the route makes the
    #: planner's inputs from it just before it runs the planner)
    route_plans: list[Any] = []

    def plan_inputs(route_plan: Any, planner: Any, chosen: Any, unsafe: Any) -> Any:
        route_plans.append(route_plan)
        return original_inputs(route_plan, planner, chosen, unsafe)

    def plan(self: Any, inputs: Any) -> Any:
        choice = original_plan(self, inputs)
        route_plan = route_plans[-1]
        prob = self.last_problem
        label = harness._CURRENT[-1] if harness._CURRENT else "?"
        seeds = self.torch_seeds(inputs)
        check = choice.check
        torch_points = {f"{b:g}": {"peak": prob.model_point(s)[0], "cost": prob.step_cost(s),
                                   "parts": _model_parts(prob, s)}
                        for b, s in seeds.items() if any(abs(b - x) < 1e-9 for x in STOCK_BUDGETS)}
        t_record = time.perf_counter()
        plan_parts = _ask(route_plan, prob, choice.saved)
        plan_inductor = None if plan_parts is None else max(plan_parts)
        if self.memory_budget == 1.0:
            for b, s in seeds.items():
                if f"{b:g}" in torch_points:
                    parts = _ask(route_plan, prob, s)
                    torch_points[f"{b:g}"]["inductor"] = None if parts is None else max(parts)
                    torch_points[f"{b:g}"]["inductor_parts"] = parts
        at_b = seeds.get(self.memory_budget)
        graph = {"plan_peak": choice.peak_bytes, "plan_cost": prob.step_cost(choice.saved),
                 "same_as_torch": at_b is not None and sorted(choice.saved) == sorted(at_b),
                 "plan_inductor": plan_inductor, "torch": torch_points,
                 "plan_parts": _model_parts(prob, list(choice.saved)), "plan_inductor_parts": plan_parts,
                 "grad_bytes": _gradient_bytes(route_plan, prob.num_fwd_outputs),
                 "nodes": len(prob.arrays), "model": choice.memory_model, "cost_unit": choice.cost,
                 "plan_s": choice.seconds, "record_s": time.perf_counter() - t_record,
                 "check": None if check is None else {"asked": {str(k): v for k, v in check.asked.items()},
                                                      "picked": check.picked, "limit": check.limit,
                                                      "torch_peak": check.torch_peak, "failed": check.failed,
                                                      "picked_torch_budget": check.picked_torch_budget,
                                                      "picked_peak": check.picked_peak,
                                                      "picked_by_model": check.picked_by_model,
                                                      "holds_saved": check.holds_saved,
                                                      "held_limit": check.held_limit,
                                                      "settling": list(check.settling), "settled": check.settled,
                                                      "skipped": check.skipped, "seconds": check.seconds}}
        recorded.setdefault(label, []).append(graph)
        return choice

    planned.PeakPlanner.plan = plan  # type: ignore[method-assign]
    route_decide.plan_inputs = plan_inputs  # type: ignore[assignment]
    backends = [harness.Backend.parse(label) for label in labels]
    measured = harness.measure_in_process(model, backends, warmup=1, steps=steps, rounds=rounds)
    out = []
    for m in measured:
        d = m.as_dict()
        d["modelled"] = recorded.get(m.backend, [])
        out.append(d)
    return out


def measured_model(model: str, steps: int, rounds: int, timeout: float,
                   processes: tuple[tuple[str, ...], ...] = PROCESSES, threads: int = 0) -> list[dict[str, Any]]:
    """Every backend of :data:`PROCESSES`, one fresh process (and inductor
    cache) per group."""
    from realmodels.measure import fresh_cache_env

    rows: list[dict[str, Any]] = []
    for labels in processes:
        with tempfile.TemporaryDirectory(prefix="indmodel-") as cache:
            env = fresh_cache_env(cache)
            if threads:
                # one compute thread per process: step times of the two backends measured in one process
                # are then not at the mercy of OpenMP threads spinning against another process's
                env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
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


def step_peak(parts: list[tuple[int, int, int]], grads: list[int]) -> int:
    """A step's peak from its graphs' figures, in the order they run: per
    graph (forward peak, backward peak, saved bytes), and the gradient bytes
    its backward returns.  The forwards run in order, each while the earlier
    graphs' saved values are held; the backwards in reverse, each while the
    earlier graphs' saved values and the later graphs' gradients are held.
    One graph: the larger of its two peaks.  What eager code between the
    graphs allocates, and the activations handed from graph to graph, are
    not counted."""
    peak = held = 0
    for fw, _, saved in parts:
        peak = max(peak, held + fw)
        held += saved
    done = 0
    for (_, bw, saved), g in zip(reversed(parts), reversed(grads)):
        held -= saved
        peak = max(peak, held + done + bw)
        done += g
    return peak


def _composed(graphs: list[dict[str, Any]], get: Callable[[dict[str, Any]], Any]) -> int | None:
    """:func:`step_peak` of the graphs' (forward peak, backward peak, saved
    bytes), ``get(graph)``, and their recorded gradient bytes; None where a
    graph lacks them."""
    parts, grads = [], []
    for g in graphs:
        got = get(g)
        if got is None or "grad_bytes" not in g:
            return None
        parts.append(got)
        grads.append(int(g["grad_bytes"]))
    return step_peak(parts, grads)


def _compose_into(x: dict[str, Any], graphs: list[dict[str, Any]], model: Callable[[dict[str, Any]], Any],
                  inductor: Callable[[dict[str, Any]], Any]) -> None:
    """Where a step runs several graphs and their figures were recorded,
    replace the summed peaks in ``x`` by :func:`step_peak`'s (``composed``
    says so)."""
    if len(graphs) < 2:
        return

    def modelled(g: dict[str, Any]) -> tuple[int, int, int] | None:
        m = model(g)
        return None if not m else (m["fw"], m["bw"], m["saved"])

    def asked(g: dict[str, Any]) -> tuple[int, int, int] | None:
        m, a = model(g), inductor(g)
        return None if not m or not a else (a[0], a[1], m["saved"])  # the decision's saved bytes: the model's

    mp = _composed(graphs, modelled)
    if mp is None:
        return
    x["model_peak"], x["composed"] = mp, True
    ip = _composed(graphs, asked)
    if ip is not None:
        x["inductor_peak"] = ip
    else:
        x.pop("inductor_peak", None)


def pairs(model_rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The (modelled, measured) pairs of one model's measurements: per
    decision the memory model's peak, inductor's own answer (where asked),
    the measured peak, the modelled step cost and the measured step time."""
    by = {r.get("backend"): r for r in model_rows}
    plans = {b: by.get(f"fxcut@{b:g}") for b in PLAN_BUDGETS}
    # torch's decisions as the planner modelled them (the same in every fxcut process; inductor's
    # answer for them is asked in the b=1 process)
    graphs = next((p["modelled"] for p in (plans[1.0], *plans.values()) if p and p.get("modelled")), None)
    out: dict[str, Any] = {"decisions": {}}
    if not graphs:
        return out
    out["graphs"] = len(graphs)
    for b in STOCK_BUDGETS:
        m = by.get(f"stock@{b:g}")
        key = f"{b:g}"
        if m is None or m.get("status") != "ok" or not all(key in g["torch"] for g in graphs):
            continue
        x = {"model_peak": sum(g["torch"][key]["peak"] for g in graphs), "measured_peak": m["peak_bytes"],
             "model_cost": sum(g["torch"][key]["cost"] for g in graphs), "step_s": m.get("step_s")}
        answers = [g["torch"][key].get("inductor") for g in graphs]
        if all(isinstance(v, int) for v in answers):
            x["inductor_peak"] = sum(answers)
        _compose_into(x, graphs, lambda g: g["torch"][key].get("parts"),
                      lambda g: g["torch"][key].get("inductor_parts"))
        out["decisions"][f"torch@{b:g}"] = x
    for b, m in plans.items():
        if m is None or m.get("status") != "ok" or not m.get("modelled"):
            continue
        x = {"model_peak": sum(g["plan_peak"] for g in m["modelled"]), "measured_peak": m["peak_bytes"],
             "model_cost": sum(g["plan_cost"] for g in m["modelled"]), "step_s": m.get("step_s")}
        answers = [g.get("plan_inductor") for g in m["modelled"]]
        if all(isinstance(v, int) for v in answers):
            x["inductor_peak"] = sum(answers)
        _compose_into(x, m["modelled"], lambda g: g.get("plan_parts"), lambda g: g.get("plan_inductor_parts"))
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


def _fxcut_partition_s(row: dict[str, Any]) -> float | None:
    """fxcut's whole partition_fn time of a measured backend, without the
    benchmark's own recording asks (:func:`_child_measured`)."""
    if row.get("partition_s") is None:
        return None
    return float(row["partition_s"]) - sum(g.get("record_s", 0.0) for g in row.get("modelled", []))


def _step_ratio(a: dict[str, Any], b: dict[str, Any]) -> float:
    """The median over rounds of ``a``'s step time over ``b``'s (both
    measured in one process, their rounds interleaved)."""
    import statistics

    ra, rb = a.get("round_step_s") or [], b.get("round_step_s") or []
    ratios = [x / y for x, y in zip(ra, rb) if x and y]
    return statistics.median(ratios) if ratios else math.nan


def plan_vs_stock_markdown(data: dict[str, Any]) -> list[str]:
    """The plan against stock ``torch.compile`` under inductor, measured: the
    step peaks and step-time ratios at b = 0, 0.5, 1, gradients, planning
    time, and issue 23's targets checked on those figures."""
    budgets = ("0", "0.5", "1")
    lines = ["**The plan against stock `torch.compile`, both under inductor, measured** (one training step, "
             "the profiler's allocation peak in MiB; step: the plan's step time over stock's at the same b, "
             "the median of per-round ratios, rounds interleaved in one process, on a 2-core machine (what ran "
             "beside each row: the note under the tables), so ratios within a few percent of 1 are noise; planning: fxcut's whole partition_fn over torch's, summed over "
             "the step's graphs):", "",
             "| model | " + " | ".join(f"stock b={b} | plan b={b} | change | step" for b in budgets)
             + " | gradient error vs eager (stock) | planning s: plan b=0 / torch b=0 |",
             "|---|" + "---:|---:|---:|---:|" * len(budgets) + "---|---|"]
    summary = {"b0_20": 0, "b1_ok": 0, "mono": 0, "dominated": 0, "stock_points": 0, "grads": 0, "n": 0,
               "same": 0, "same_missed": 0, "mono_as_stock": 0, "cross": 0}
    for name, rows in data["models"].items():
        by = {r.get("backend"): r for r in rows}
        need = [f"{k}@{b}" for b in budgets for k in ("stock", "fxcut")]
        if not all(by.get(k, {}).get("status") == "ok" for k in need):
            missing = ", ".join(f"{k}: {by.get(k, {}).get('status', 'not measured')}" for k in need
                                if by.get(k, {}).get("status") != "ok")
            lines.append(f"| {name} | {missing} |" + " |" * (4 * len(budgets)))
            continue
        summary["n"] += 1
        cells = []
        for b in budgets:
            st, pl = by[f"stock@{b}"], by[f"fxcut@{b}"]
            ratio = _step_ratio(pl, st)
            same = "=" if _same_decision(pl, st) else ""
            cells.append(f"{st['peak_bytes'] / 2**20:.2f} | {pl['peak_bytes'] / 2**20:.2f}{same} | "
                         f"{pl['peak_bytes'] / st['peak_bytes'] - 1:+.1%} | {ratio:.2f}")
        # the targets over every budget measured (--sweep adds budgets)
        every = _measured_budgets(by)
        cross = data.get("cross", {}).get(name, {})
        for x in every:
            st, pl = by[f"stock@{x:g}"], by[f"fxcut@{x:g}"]
            ok = _dominated_same_b(by, x)
            summary["stock_points"] += 1
            summary["dominated"] += ok
            summary["cross"] += not ok and _cross_dominated(cross, x) is not None
            if _same_decision(pl, st):
                summary["same"] += 1
                summary["same_missed"] += not ok
        plan_err = max(by[f"fxcut@{x:g}"].get("grad_max_abs_err") or 0.0 for x in every)
        stock_err = max(by[f"stock@{x:g}"].get("grad_max_abs_err") or 0.0 for x in every)
        summary["grads"] += plan_err <= max(2 * stock_err, 1e-6)
        peaks = [by[f"fxcut@{x:g}"]["peak_bytes"] for x in every]
        stock_peaks = [by[f"stock@{x:g}"]["peak_bytes"] for x in every]
        summary["mono"] += peaks == sorted(peaks)
        # where the plan's peak falls as b grows, does stock's fall there too (the plan is torch's decision)?
        summary["mono_as_stock"] += all(peaks[i] <= peaks[i + 1] or stock_peaks[i] > stock_peaks[i + 1]
                                        for i in range(len(peaks) - 1))
        summary["b0_20"] += by["fxcut@0"]["peak_bytes"] <= 0.8 * by["stock@0"]["peak_bytes"]
        summary["b1_ok"] += by["fxcut@1"]["peak_bytes"] <= by["stock@1"]["peak_bytes"]
        fx_s, torch_s = _fxcut_partition_s(by["fxcut@0"]), by["stock@0"].get("partition_s")
        timing = f"{fx_s:.1f} / {torch_s:.1f}" if fx_s is not None and torch_s is not None else "-"
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {plan_err:.1e} ({stock_err:.1e}) | {timing} |")
    n = summary["n"]
    if n:
        lines += ["", "**=**: the plan is torch's own decision at that b (the same compiled code; its step ratio "
                  "measures only the noise).", "",
                  f"Targets on these {n} models (issue 23), measured under inductor, over every budget measured "
                  "per model (the sweep below where present, else 0, 0.5, 1):",
                  f"- b=0 at least 20% below stock's `activation_memory_budget=0`: {summary['b0_20']} of {n} "
                  f"(target: at least half);",
                  f"- b=1 at or below stock's default: {summary['b1_ok']} of {n};",
                  f"- the plan's peak monotonic in b: {summary['mono']} of {n}; where it falls as b grows, stock's "
                  f"own peak falls at the same budgets on {summary['mono_as_stock'] - summary['mono']} of the "
                  f"{n - summary['mono']} others;",
                  f"- stock points dominated by some plan point (peak <= stock's, step <= 1.05x, the two "
                  f"measured in one process): {summary['dominated'] + summary['cross']} of "
                  f"{summary['stock_points']}; {summary['dominated']} by the plan at the same b, "
                  f"{summary['cross']} by the plan at another b measured against them (`--cross`); "
                  f"{summary['same']} of the points are the plan taking torch's own decision, "
                  f"{summary['same_missed']} of those missed at the same b on step noise alone;",
                  f"- gradients as close to eager as stock's (at most twice stock's largest error, or 1e-6): "
                  f"{summary['grads']} of {n}."]
        crossed = []
        for name, pairs_of in sorted(data.get("cross", {}).items()):
            for key, rows in sorted(pairs_of.items()):
                cb = {r.get("backend"): r for r in rows if r.get("status") == "ok"}
                st_key, pl_key = key.split("|")
                st, pl = cb.get(st_key), cb.get(pl_key)
                if st and pl:
                    crossed.append(f"{name} stock b={st_key.split('@')[1]} {st['peak_bytes'] / 2**20:.2f} MiB "
                                   f"against the plan at b={pl_key.split('@')[1]} {pl['peak_bytes'] / 2**20:.2f} MiB, "
                                   f"step {_step_ratio(pl, st):.2f}x")
        if crossed:
            lines += ["", "Measured across budgets (`--cross`, one process each): " + "; ".join(crossed) + "."]
    return lines


def _measured_budgets(by: dict[str, dict[str, Any]]) -> list[float]:
    """The budgets at which both stock and the plan were measured (status ok)."""
    ok = {k for k, r in by.items() if r.get("status") == "ok"}
    return sorted({float(k.split("@")[1]) for k in ok if k.startswith("fxcut@") and f"stock@{k.split('@')[1]}" in ok})


def _same_decision(plan: dict[str, Any], stock: dict[str, Any]) -> bool:
    """The plan's decision is torch's own at the same budget on every graph
    (``same_as_torch``, recorded by the planner's wrapper)."""
    graphs = plan.get("modelled") or []
    return bool(graphs) and all(g.get("same_as_torch", False) for g in graphs)


def _dominated_same_b(by: dict[str, dict[str, Any]], x: float) -> bool:
    st, pl = by[f"stock@{x:g}"], by[f"fxcut@{x:g}"]
    return bool(pl["peak_bytes"] <= st["peak_bytes"] and _step_ratio(pl, st) <= 1.05)


def _cross_key(x: float, y: float) -> str:
    return f"stock@{x:g}|fxcut@{y:g}"


def _cross_dominated(cross: dict[str, list[dict[str, Any]]], x: float) -> float | None:
    """A plan budget y whose plan, measured in one process against stock at
    ``x`` (``--cross``), dominates it: peak <= stock's, step <= 1.05x."""
    for key, rows in sorted(cross.items()):
        if not key.startswith(f"stock@{x:g}|"):
            continue
        by = {r.get("backend"): r for r in rows if r.get("status") == "ok"}
        y = float(key.split("|fxcut@")[1])
        st, pl = by.get(f"stock@{x:g}"), by.get(f"fxcut@{y:g}")
        if st and pl and pl["peak_bytes"] <= st["peak_bytes"] and _step_ratio(pl, st) <= 1.05:
            return y
    return None


def cross_pairs(by: dict[str, dict[str, Any]]) -> list[tuple[float, float]]:
    """The stock points not dominated by the plan at the same b, each with
    the largest other plan budget whose measured peak is at or below stock's
    (a plan that recomputes less, which ``--cross`` measures against it)."""
    every = _measured_budgets(by)
    out = []
    for x in every:
        if _dominated_same_b(by, x):
            continue
        below = [y for y in every if y != x and by[f"fxcut@{y:g}"]["peak_bytes"] <= by[f"stock@{x:g}"]["peak_bytes"]]
        if below:
            out.append((x, max(below)))
    return out


def sweep_markdown(data: dict[str, Any]) -> list[str]:
    """Every budget measured on a model (``--sweep`` adds budgets): stock's
    and the plan's peak per b, the plan's monotonicity over all of them and
    the stock points it dominates at the same b."""
    lines: list[str] = []
    for name, rows in data["models"].items():
        by = {r.get("backend"): r for r in rows if r.get("status") == "ok"}
        budgets = _measured_budgets(by)
        if len(budgets) <= len(PLAN_BUDGETS):
            continue
        if not lines:
            lines = ["**Every budget measured** (MiB; plan / stock at the same b, the plan's change, its step "
                     "time over stock's in the same process):", "",
                     "| model | " + " | ".join(f"b={b:g}" for b in budgets) + " | plan monotonic in b | "
                     "stock points dominated (same b or --cross) |", "|---|" + "---|" * (len(budgets) + 2)]
        cells, dominated, peaks = [], 0, []
        cross = data.get("cross", {}).get(name, {})
        for b in budgets:
            st, pl = by[f"stock@{b:g}"], by[f"fxcut@{b:g}"]
            ratio = _step_ratio(pl, st)
            peaks.append(pl["peak_bytes"])
            dominated += _dominated_same_b(by, b) or _cross_dominated(cross, b) is not None
            cells.append(f"{pl['peak_bytes'] / 2**20:.2f} / {st['peak_bytes'] / 2**20:.2f} "
                         f"({pl['peak_bytes'] / st['peak_bytes'] - 1:+.1%}, {ratio:.2f})")
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {'yes' if peaks == sorted(peaks) else 'no'} | "
                     f"{dominated} of {len(budgets)} |")
    return lines


def measured_markdown(data: dict[str, Any], command: str) -> str:
    order = ["torch@1", "torch@0.5", "torch@0", "plan@1", "plan@0.5", "plan@0"]
    lines = plan_vs_stock_markdown(data) + [
        "", "**The memory model and inductor's own answer against the measured peak** (MiB; per decision: the "
        "inductor memory model of csrc/memory_fused.c / inductor's generated code for the decision on fake "
        "tensors, nothing compiled, which the plan's check asks / the measured step; **!**: more than 10% off; "
        "a step of several graphs: each graph's forward and backward peaks as they run in turn, each over the "
        "saved bytes of the graphs before it and the gradients of those after it, `step_peak` in "
        "bench/inductor_memory.py):",
        "", "| model | graphs | " + " | ".join(f"{d}" for d in order) + " | model within 10% | inductor's code within 10% |",
        "|---|---:|" + "---:|" * len(order) + "---|---|"]
    within = total = asked_within = asked_total = 0
    corr_rows = []
    for name, rows in data["models"].items():
        p = pairs(rows)
        cells = []
        ok = ok_asked = n_asked = 0
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
            cell = f"{x['model_peak'] / 2**20:.2f}{'' if good else ' **!**'}"
            if "inductor_peak" in x:
                ri = _ratio(x["inductor_peak"], x["measured_peak"])
                good_i = abs(ri - 1) <= 0.10
                asked_total += 1
                n_asked += 1
                asked_within += good_i
                ok_asked += good_i
                cell += f" / {x['inductor_peak'] / 2**20:.2f}{'' if good_i else ' **!**'}"
            else:
                cell += " / -"
            cells.append(cell + f" / {x['measured_peak'] / 2**20:.2f}")
        n = len(p["decisions"])
        lines.append(f"| {name} | {p.get('graphs', '-')} | " + " | ".join(cells)
                     + f" | {ok} of {n} | {ok_asked} of {n_asked} |")
        xs = [x["model_cost"] for x in p["decisions"].values() if x.get("step_s")]
        ys = [x["step_s"] for x in p["decisions"].values() if x.get("step_s")]
        if len(xs) >= 3:
            corr_rows.append((name, _pearson(xs, ys), xs, ys))
    lines.append("")
    lines.append(f"Within 10% of the measured peak: the model {within} of {total} (model, decision) pairs; "
                 f"inductor's code {asked_within} of {asked_total}.  {data.get('load', '')}.  Command: `{command}`")
    lines.append("")
    lines.append("**The time model against measured step times** (same runs): per model, Pearson's r between "
                 "the modelled step cost and the measured step time (median of interleaved rounds) over the "
                 "decisions above.")
    lines.append("")
    lines.append("| model | decisions | r | modelled step (ms) | measured step (ms) |")
    lines.append("|---|---:|---:|---|---|")
    for name, r, xs, ys in corr_rows:
        lines.append(f"| {name} | {len(xs)} | {r:.2f} | " + ", ".join(f"{x / 1e9:.1f}" for x in xs) + " | "
                     + ", ".join(f"{y * 1e3:.0f}" for y in ys) + " |")
    # the fair comparison: within one process (same load), the plan's step over stock's at the same b,
    # against the modelled cost of the plan's decision over torch's
    px: list[float] = []
    py: list[float] = []
    dx: list[float] = []  # the points where the plan's decision is not torch's (the rest: ratio 1 by the model)
    dy: list[float] = []
    for name, rows in data["models"].items():
        by = {r.get("backend"): r for r in rows}
        dec = pairs(rows)["decisions"]
        for b in ("0", "0.5", "1"):
            st, pl = by.get(f"stock@{b}", {}), by.get(f"fxcut@{b}", {})
            t, q = dec.get(f"torch@{b}"), dec.get(f"plan@{b}")
            ratio = _step_ratio(pl, st) if st.get("status") == pl.get("status") == "ok" else math.nan
            if t and q and t["model_cost"] and not math.isnan(ratio):
                px.append(q["model_cost"] / t["model_cost"])
                py.append(ratio)
                if not _same_decision(pl, st):
                    dx.append(px[-1])
                    dy.append(ratio)
    if len(px) >= 3:
        lines.append("")
        lines.append(f"Across models and budgets, the plan's modelled step cost over torch's decision's at the same b "
                     f"against the measured step-time ratio (same process, median of per-round ratios): "
                     f"Pearson's r = {_pearson(px, py):.2f} over {len(px)} (model, b) points; modelled ratios "
                     f"{min(px):.2f}..{max(px):.2f}, measured {min(py):.2f}..{max(py):.2f}; over the "
                     f"{len(dx)} points where the plan's decision is not torch's own (the others are 1 by the "
                     f"model and noise measured): r = {_pearson(dx, dy):.2f}.  The modelled times are "
                     f"the default CPU rates' (`fxcut.solve.cost.CPU`); only ratios compare.")
    return "\n".join(lines) + "\n"


def run_measured(args: argparse.Namespace) -> int:
    from realmodels.models import model_names

    names = args.models or model_names(only_available=True)
    data = _load(args.json)
    data.setdefault("models", {})
    data["torch"] = _torch_version()
    sweep = tuple((f"stock@{b:g}", f"fxcut@{b:g}") for b in args.sweep)
    for name in names:
        if args.no_measure:
            continue
        if args.cross:
            # the stock points the plan at the same b does not dominate, against another plan point
            by = {r.get("backend"): r for r in data["models"].get(name, []) if r.get("status") == "ok"}
            cross = data.setdefault("cross", {}).setdefault(name, {})
            for x, y in cross_pairs(by):
                t0 = time.perf_counter()
                cross[_cross_key(x, y)] = measured_model(name, args.steps, args.rounds, args.timeout,
                                                         ((f"stock@{x:g}", f"fxcut@{y:g}"),), args.threads)
                got = _cross_dominated({_cross_key(x, y): cross[_cross_key(x, y)]}, x)
                print(f"{name}: stock@{x:g} against the plan at {y:g}: "
                      f"{'dominated' if got is not None else 'not dominated'} ({time.perf_counter() - t0:.0f} s)",
                      flush=True)
                _save(args.json, data)
            continue
        if sweep:
            # more budgets for a model measured already: its other rows are kept
            before = _load_line()
            t0 = time.perf_counter()
            labels = {lab for group in sweep for lab in group}
            rows = [r for r in data["models"].get(name, []) if r.get("backend") not in labels]
            rows += measured_model(name, args.steps, args.rounds, args.timeout, sweep, args.threads)
            data["models"][name] = rows
            print(f"{name}: {time.perf_counter() - t0:.0f} s (sweep)", flush=True)
            _save(args.json, data)
            continue
        if name in data["models"] and not args.again:
            continue
        before = _load_line()
        t0 = time.perf_counter()
        rows = measured_model(name, args.steps, args.rounds, args.timeout, PROCESSES, args.threads)
        data["models"][name] = rows
        data["load"] = f"{before} before the last model, {_load_line()} after"
        print(f"{name}: {time.perf_counter() - t0:.0f} s, " + ", ".join(
            f"{r.get('backend')}={r.get('status')}" for r in rows), flush=True)
        for d, x in pairs(rows)["decisions"].items():
            print(f"   {d}: model {x['model_peak']:,} measured {x['measured_peak']:,} "
                  f"({_ratio(x['model_peak'], x['measured_peak']):.3f}); cost {x['model_cost']:,} ps, "
                  f"step {x['step_s']}", flush=True)
        _save(args.json, data)
    command = (f"PYTHONPATH=python:bench nice -n 5 python bench/inductor_memory.py measured --threads {args.threads} "
               f"--rounds {args.rounds}")
    if args.md is not None:
        _replace_section(args.md, "measured-vs-model", measured_markdown(data, command))
    if args.plan_md is not None:
        planning = _load(args.planning_json) if args.planning_json and args.planning_json.exists() else {}
        text = "\n".join(plan_vs_stock_markdown(data) + [""] + sweep_markdown(data)) + (
            f"\n\n{data.get('torch', '')}; {data.get('load', '')}.  Command: `{command} --plan-md docs/plan.md`; "
            "the model's figures beside these: [memory_model.md](memory_model.md).\n\n") + "\n".join(
            planning_markdown(planning)) + "\n"
        from docs_sections import replace_section  # the markers bench_plan.py keeps when it rewrites plan.md

        replace_section(str(args.plan_md), "under-inductor", text)
    return 0


# --------------------------------------------------------------------------- planning time on a large GPT


def _planning_point(cap: Any, budget: float, rounds: int) -> dict[str, Any]:
    """torch's whole partition_fn at ``activation_memory_budget=budget``
    against fxcut's ``planned_partitioner(budget, memory_model="inductor")``
    (its defaults: inductor's check within ``check_time_limit``, the search
    on :func:`fxcut.solve.planner.search_threads` threads), rounds
    interleaved, garbage collector on; per-round ratios."""
    import statistics

    import torch._functorch.config as functorch_config
    from torch._functorch.partitioners import min_cut_rematerialization_partition as torch_partition

    from fxcut.planned import planned_partitioner
    from fxcut.torchrules.snapshot import copy_graph_module

    torch_s: list[float] = []
    fxcut_s: list[float] = []
    choice = None
    for r in range(rounds):
        for who in (("torch", "fxcut") if r % 2 == 0 else ("fxcut", "torch")):
            gm = copy_graph_module(cap.gm)
            if who == "torch":
                with functorch_config.patch(activation_memory_budget=budget):
                    t = time.perf_counter()
                    torch_partition(gm, cap.joint_inputs, num_fwd_outputs=cap.num_fwd_outputs, **cap.partition_kwargs)
                    torch_s.append(time.perf_counter() - t)
            else:
                fn = planned_partitioner(budget, memory_model="inductor")
                t = time.perf_counter()
                fn(gm, cap.joint_inputs, num_fwd_outputs=cap.num_fwd_outputs, **cap.partition_kwargs)
                fxcut_s.append(time.perf_counter() - t)
                choice = fn.planner.last
    assert choice is not None
    check = choice.check
    front = fn.planner.last_frontier
    return {"budget": budget, "torch_s": statistics.median(torch_s), "fxcut_s": statistics.median(fxcut_s),
            "ratio": statistics.median(f / t for f, t in zip(fxcut_s, torch_s)), "rounds": rounds,
            "plan_s": choice.seconds, "peak": choice.peak_bytes, "torch_peak": choice.torch_peak_bytes,
            "lanes": front.lanes if front is not None else 1,
            "check": "" if check is None else (check.skipped or check.failed or f"{len(check.asked)} asked")}


def run_planning(args: argparse.Namespace) -> int:
    import gc

    from torch._subclasses.fake_tensor import FakeTensorMode

    from fxcut.tools.capture import capture
    from fxcut.tools.models import build_model

    gc.enable()
    data = _load(args.json)
    data["torch"] = _torch_version()
    data.setdefault("rows", [])
    from fxcut.solve.planner import THREADS_ENV, search_threads

    for layers in args.layers:
        with FakeTensorMode():
            model, make_inputs, loss_fn = build_model("gpt2", layers=layers, hidden=1024, seq=512)
            inputs = make_inputs()
        cap = capture(model, inputs, loss_fn, compiler="inductor", fake=True)
        for threads in args.threads:
            if threads > 0:
                os.environ[THREADS_ENV] = str(threads)
            else:
                os.environ.pop(THREADS_ENV, None)
            used = search_threads()
            for b in args.budgets:
                row = {"layers": layers, "nodes": cap.num_nodes, "threads": used,
                       **_planning_point(cap, b, args.rounds)}
                data["rows"] = [r for r in data["rows"]
                                if (r["layers"], r["budget"], r.get("threads", 1)) != (layers, b, used)] + [row]
                print(f"{layers} layers ({cap.num_nodes} nodes) b={b:g}, {used} search thread(s): torch "
                      f"{row['torch_s']:.2f} s, fxcut {row['fxcut_s']:.2f} s (ratio {row['ratio']:.2f}); "
                      f"check: {row['check']}", flush=True)
                data["load"] = _load_line()
                _save(args.json, data)
    os.environ.pop(THREADS_ENV, None)
    return 0


def planning_markdown(data: dict[str, Any]) -> list[str]:
    """The planning-time rows (``planning`` subcommand's JSON) as Markdown."""
    rows = sorted(data.get("rows", []), key=lambda r: (r["layers"], -r.get("threads", 1), r["budget"]))
    if not rows:
        return []
    out = ["**Planning time on a large GPT under the inductor model** (hidden 1024, seq 512, fake tensors; "
           "torch's whole partition_fn at `activation_memory_budget=b` against fxcut's whole partition_fn "
           "`planned_partitioner(b, memory_model=\"inductor\")` with its defaults, its search on the "
           "threads shown (`FXCUT_PLAN_THREADS`; the same plan on any number); medians of "
           f"{rows[0]['rounds']} interleaved rounds, garbage collector on; {data.get('torch', '')}, "
           f"{data.get('load', '')}):", "",
           "| layers | joint nodes | search threads | b | torch (s) | fxcut (s) | fxcut / torch | inductor's check | "
           "plan's modelled peak (MiB) | torch's (MiB) |", "|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|"]
    for r in rows:
        out.append(f"| {r['layers']} | {r['nodes']} | {r.get('threads', 1)} | {r['budget']:g} | {r['torch_s']:.2f} | "
                   f"{r['fxcut_s']:.2f} | "
                   f"{r['ratio']:.2f} | {r['check']} | {r['peak'] / 2**20:.1f} | {r['torch_peak'] / 2**20:.1f} |")
    out += ["", "Command: `PYTHONPATH=python:bench python bench/inductor_memory.py planning --layers 24,48 "
            "--budgets 0,0.5,1 --threads 0,1 --json docs/inductor_planning.json`"]
    return out


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
    m.add_argument("--no-measure", action="store_true", help="only write the Markdown from the JSON")
    m.add_argument("--cross", action="store_true",
                   help="measure each stock point the plan at the same b does not dominate against the plan at "
                        "the largest other b whose measured peak is at or below stock's, in one process")
    m.add_argument("--threads", type=int, default=1,
                   help="OMP_NUM_THREADS of each measuring process (0: inherit); 1 keeps step times comparable "
                        "on a shared machine")
    m.add_argument("--sweep", type=lambda v: [float(x) for x in v.split(",")], default=[],
                   help="measure only these budgets (stock and plan, one process per budget), keeping the "
                        "model's other rows in the JSON, e.g. 0.1,0.3,0.7")
    m.add_argument("--plan-md", type=Path, help="also write the plan-vs-stock table into this file's "
                   "'under-inductor' section")
    m.add_argument("--planning-json", type=Path, default=ROOT / "docs" / "inductor_planning.json",
                   help="the planning subcommand's figures, added to the --plan-md section when present")
    t = sub.add_parser("planning", help="planning time against torch's partition_fn on a large GPT")
    t.add_argument("--layers", type=lambda v: [int(x) for x in v.split(",")], default=[24, 48])
    t.add_argument("--budgets", type=lambda v: [float(x) for x in v.split(",")], default=[0.0, 0.5, 1.0])
    t.add_argument("--rounds", type=int, default=3)
    t.add_argument("--threads", type=lambda v: [int(x) for x in v.split(",")], default=[0],
                   help="the plan search's threads (FXCUT_PLAN_THREADS), one row each; 0: its default "
                        "(the CPUs this process may use, at most 8), e.g. 0,1")
    for p in (a, m, t):
        p.add_argument("--json", type=Path)
        p.add_argument("--md", type=Path)
    args = ap.parse_args(argv)
    if args.check == "planning":
        return run_planning(args)
    return run_inductor(args) if args.check == "inductor" else run_measured(args)


if __name__ == "__main__":
    raise SystemExit(main())
