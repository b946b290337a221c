"""The peak-aware plan against torch's partitioner, on the zoo's models.

A benchmark, not a test: tables of what one run measured, to stdout and
(with --out) to Markdown, and a memory-over-time plot (--plot).

    PYTHONPATH=python python bench/bench_plan.py [--out docs/plan.md] [--plot docs/plan_timeline.png]
        [--models gpt2 llama ...] [--budgets 0 0.1 0.3 0.5 0.7 1] [--big-layers 24]

For every model and budget b:
- torch: its decision at ``activation_memory_budget=b`` (fxcut's exact-torch
  budget path, equal to torch's by the fidelity suite), its simulated peak
  and recompute FLOPs; "torch s": torch's own ``min_cut_rematerialization_partition``
  timed on a fresh copy (its whole partition_fn).
- fxcut: ``fxcut.planned_partitioner(b)`` on a fresh copy: the plan's simulated
  peak and recompute FLOPs, "plan s" the planner alone, "fxcut s" the whole
  partition_fn (DCE/CSE, the default decision, the plan, the modules).
Peaks are the memory model's (csrc/memory.c, branch ``memory``) simulating
the modules the decision produces; FLOPs are torch's knapsack estimates.
``_z3`` models run DeepCompile's ZeRO-3 walk (fxcut.zero3) before both.
The timing of the 24-layer GPT (hidden 1024, seq 512, fake tensors) is one
run each side, on a shared 2-core machine.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

import torch
from torch._functorch import config
from torch._functorch import partitioners as tp

import fxcut
from fxcut.zero3 import recompute_param_aliases

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from training import capture_model  # noqa: E402  (tests/: the zoo's models, captured)

MODELS: dict[str, dict[str, Any]] = {
    "gpt2": {"name": "gpt2"},
    "gpt2_bf16": {"name": "gpt2", "autocast_dtype": torch.bfloat16},
    "llama": {"name": "llama"},
    "llama_bf16": {"name": "llama", "autocast_dtype": torch.bfloat16},
    "vit": {"name": "vit"},
    "moe": {"name": "moe"},
    "gpt2_z3": {"name": "gpt2", "zero3": True},
    "llama_bf16_z3": {"name": "llama", "autocast_dtype": torch.bfloat16, "zero3": True},
    "vit_z3": {"name": "vit", "zero3": True},
    "moe_z3": {"name": "moe", "zero3": True},
}
BUDGETS = [0.0, 0.1, 0.3, 0.5, 0.7, 1.0]
NOTES = ('## Notes', '', "- Simulated and measured peaks are equal on every fp32 row, torch's and fxcut's, at every b, except fxcut's ViT plan at b=0 (135.4 KiB simulated, 140.0 measured: 3.4%, op workspace the model leaves out); on bf16 models the measurement adds op workspace (casts) the model leaves out. The gap earlier runs showed at 0 < b < 1 on torch's side (vit b=0.3: 142.9 KiB measured, 154.2 simulated) is gone: it was not the memory model's but the planner's, which simulated torch's decisions through its own roles and so saved values torch recomputes (now the model simulates torch's exact saved set: 142.9 simulated). The targets above use simulated peaks on both sides.", '- The search stops at a deterministic work budget (`max_work=`, default 40e6 units of nodes + edges per simulated decision; the 24-layer GPT is the only graph here that reaches it), so separately made calls for two budgets on one graph search the same frontier and their peaks are ordered as the budgets whatever the machine load (tests/test_planner.py checks it on llama with the budget cut to 2e6). The wall-clock limit (`time_limit=`, 60 s) is only a safety net. Exact enumeration runs when at most 16 values are free (`exact_max_candidates=`); no zoo model is that small.', "- ViT's budget-0 gap (16% before this run): the plan's roles kept every multi-output op (layer norm, SDPA, unbind: a sequence value is flagged non-tensor; SDPA is also impure to dead-code elimination) from being recomputed. That was a limit of the search's moves, not a constraint torch respects: torch's own budget-0 decision recomputes all three on ViT. Allowing them took ViT to the figure above; one training step through every plan (b=0 and b=1) still matches eager on all 17 zoo models. What stays saved instead: a node reading an input the step mutates (an in-graph copy_ destination, or the running statistics a `*_functional` op updates). Torch's own partitioner recomputes batch norm at activation_memory_budget=0 on resnet, and that training step fails autograd's version check on the running statistics. Torch's points in the tables are the memory model on torch's exact saved sets, not passed through the plan's roles (a role narrower than torch's decision would misstate them).", "- The memory-over-time plot: [plan_timeline.png](plan_timeline.png) (gpt2, torch at activation_memory_budget=0 against the plan at b=0, the memory model's timeline).", '')


def _capture(spec: dict[str, Any]) -> Any:
    kw = {k: v for k, v in spec.items() if k not in ("name", "zero3")}
    return capture_model(spec["name"], **kw)


def _fresh(cap: Any, zero3: bool) -> torch.fx.GraphModule:
    gm = cap.fresh()
    if zero3:
        recompute_param_aliases(gm.graph, cap.param_indices)
    return gm


def _torch_partition(cap: Any, zero3: bool, budget: float) -> tuple[float, Any]:
    gm = _fresh(cap, zero3)
    t = time.perf_counter()
    with config.patch(activation_memory_budget=budget):
        modules = tp.min_cut_rematerialization_partition(gm, cap.joint_inputs, num_fwd_outputs=cap.num_fwd_outputs,
                                                         **cap.partition_kwargs)
    return time.perf_counter() - t, modules


def _torch_seconds(cap: Any, zero3: bool, budget: float) -> float:
    return _torch_partition(cap, zero3, budget)[0]


def _plan_modules(cap: Any, zero3: bool, budget: float) -> tuple[Any, Any, float, Any]:
    fn = fxcut.planned_partitioner(budget)
    gm = _fresh(cap, zero3)
    t = time.perf_counter()
    modules = fn(gm, cap.joint_inputs, num_fwd_outputs=cap.num_fwd_outputs, **cap.partition_kwargs)
    return fn.planner.last, fn.planner, time.perf_counter() - t, modules


def _plan(cap: Any, zero3: bool, budget: float) -> tuple[Any, Any, float]:
    return _plan_modules(cap, zero3, budget)[:3]


def _measured(modules: Any) -> int | None:
    """The measured peak (bench/measure_memory.py, branch memory): the
    forward then the boxed backward on real CPU tensors, allocator events."""
    from measure_memory import materialize, measured_peak

    fw, bw = modules
    gen = torch.Generator().manual_seed(0)
    try:
        fw_args = [materialize(n.meta.get("val"), gen) for n in fw.graph.nodes if n.op == "placeholder"]
        tangents = [materialize(n.meta.get("val"), gen) for n in bw.graph.nodes
                    if n.op == "placeholder" and n.name.startswith("tangents")]
        with torch.no_grad():
            peak, _ = measured_peak(fw, bw, fw_args, tangents)
    except Exception as e:  # reported as n/a with the reason on stderr
        print(f"measure failed: {type(e).__name__}: {e}", file=sys.stderr)
        return None
    return int(peak)


def _kib(n: int) -> str:
    return f"{n / 1024:.1f}"


def run_model(key: str, budgets: list[float]) -> dict[str, Any]:
    spec = MODELS[key]
    cap = _capture(spec)
    zero3 = bool(spec.get("zero3"))
    rows = []
    front = None
    for b in budgets:
        choice, planner, total, modules = _plan_modules(cap, zero3, b)
        tpeak, tflops = choice.torch_points.get(b, (None, None))
        torch_s, torch_modules = _torch_partition(cap, zero3, b)
        rows.append(dict(budget=b, torch_peak=tpeak, torch_flops=tflops, peak=choice.peak_bytes,
                         flops=choice.recompute_flops, plan_s=choice.seconds, fxcut_s=total,
                         torch_s=torch_s, exact=choice.exact, points=choice.frontier_points,
                         torch_measured=_measured(torch_modules), measured=_measured(modules)))
        front = planner.last_frontier
    # dominance: every torch point (all seed budgets) against the frontier
    dominated = []
    assert front is not None
    for b, (tp_, tf) in sorted(choice.torch_points.items()):
        ok = any(p <= tp_ and c <= 1.05 * tf + 0.5 for p, c in zip(front.peak_bytes, front.recompute_flops))
        dominated.append((b, ok))
    return dict(key=key, rows=rows, dominated=dominated, lowest=choice.lowest_peak_bytes,
                nodes=cap.num_nodes)


def markdown(results: list[dict[str, Any]], big: dict[str, Any] | None, command: str) -> str:
    out = ["# The peak-aware plan: fxcut.planned_partitioner against torch's partitioner", "",
           "**Two programs, two sets of figures.** The tables under each model below are the *unfused* "
           "program's (torch's `aot_eager`, the boxed no-op compilers: the FX modules run op by op) -- the memory model "
           "`memory_model=\"unfused\"` and measurements of those modules. Users of `torch.compile` run "
           "inductor, which fuses ops and reuses buffers; there the plan (`fxcut.inductor_backend(memory_budget=b)`, "
           "`memory_model=\"inductor\"`) is measured against stock `torch.compile` on real architectures in the "
           "next section.", "",
           "## Under inductor, measured (real models)", "",
           "<!-- begin: under-inductor (generated) -->", "<!-- end: under-inductor -->", "",
           "## Under the unfused program (`aot_eager`: boxed no-op compilers)", "",
           f"Measured by `{command}` (one run, a shared 2-core machine, torch {torch.__version__}).", "",
           "Peaks: KiB of live activations, simulated by the memory model (csrc/memory.c) over the forward "
           "and backward modules each decision produces (graph inputs and parameters not counted). FLOPs: "
           "recomputed forward ops, torch's knapsack estimator (pointwise ops count 0). Times in seconds: "
           "torch's whole partition_fn; fxcut's planner alone and its whole partition_fn.", "",
           "Measured peaks (\"meas.\"): the forward, then the boxed backward, of the modules each partition_fn "
           "built, run on real CPU tensors, every allocation read from the torch profiler "
           "(bench/measure_memory.py's measured_peak); they include op-internal workspace "
           "the model leaves out. \"torch peak\" simulates fxcut's exact-torch decision at b (equal to torch's by "
           "the fidelity suite) with the memory model, on exactly the values it saves; \"torch meas.\" measures the modules torch's own partition_fn built.", "",
           "b means different things on the two sides: torch's activation_memory_budget limits the summed "
           "bytes saved (as a fraction of the min-cut's); fxcut's memory_budget places the peak between the "
           "lowest found (b=0) and torch's default partition's (b=1). Same-b columns are therefore not a "
           "like-for-like comparison at 0 < b < 1; the targets below are.", ""]
    targets = {"monotonic": [], "dominated": [], "budget0": []}
    for r in results:
        out += [f"## {r['key']} ({r['nodes']} joint nodes; lowest peak found {_kib(r['lowest'])} KiB)", "",
                "| b | torch peak | torch meas. | torch FLOPs | fxcut peak | fxcut meas. | fxcut FLOPs | "
                "peak fxcut/torch | torch s | plan s | fxcut s |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        for row in r["rows"]:
            ratio = row["peak"] / row["torch_peak"] if row["torch_peak"] else float("nan")
            tm = _kib(row["torch_measured"]) if row["torch_measured"] is not None else "n/a"
            fm = _kib(row["measured"]) if row["measured"] is not None else "n/a"
            out.append(f"| {row['budget']:g} | {_kib(row['torch_peak'])} | {tm} | {row['torch_flops']} | "
                       f"{_kib(row['peak'])} | {fm} | {row['flops']} | {ratio:.2f} | {row['torch_s']:.3f} | "
                       f"{row['plan_s']:.3f} | {row['fxcut_s']:.3f} |")
        peaks = [row["peak"] for row in r["rows"]]
        targets["monotonic"].append((r["key"], peaks == sorted(peaks)))
        targets["dominated"].append((r["key"], all(ok for _, ok in r["dominated"])))
        b0 = next(row for row in r["rows"] if row["budget"] == 0.0)
        above = b0["torch_peak"] > r["lowest"]
        cut = 1 - b0["peak"] / b0["torch_peak"]
        targets["budget0"].append((r["key"], above, cut))
        out.append("")
    out += ["## ZeRO-3: recompute only what the walk requires plus what the plan chooses", "",
            "In the `_z3` rows DeepCompile's walk (fxcut.zero3) tags the parameter aliases and casts "
            "MUST_RECOMPUTE first; the plan recomputes exactly those (role RECOMPUTE) plus the values its "
            "search chooses, and saves every other value the backward needs. At b=1 that is the least "
            "recompute with a peak no higher than torch's min-cut: compare the FLOPs columns at b=1 (torch's "
            "min-cut recomputes more). It is reached with `fxcut.integrations.deepspeed.install(memory_budget=b)` "
            "or `fxcut.aot_backend(zero3_params=..., memory_budget=b)` / `inductor_backend(...)`. How much the "
            "min-cut recomputes beyond the closure on each model: docs/zero3_recompute.md.", ""]
    out += ["## Targets", ""]
    mono = [k for k, ok in targets["monotonic"] if not ok]
    out.append(f"- fxcut's peak monotonic in b: {'met' if not mono else 'MISSED on ' + ', '.join(mono)} "
               f"({len(targets['monotonic']) - len(mono)}/{len(targets['monotonic'])} models).")
    dom = [k for k, ok in targets["dominated"] if not ok]
    out.append(f"- every torch point (budgets 0, 0.1, ..., 1) dominated (a plan with peak <= torch's at <= 1.05x "
               f"its recompute FLOPs): {'met' if not dom else 'MISSED on ' + ', '.join(dom)} "
               f"({len(targets['dominated']) - len(dom)}/{len(targets['dominated'])} models).")
    cuts = [(k, c) for k, above, c in targets["budget0"] if above]
    low = [f"{k} ({c:.0%})" for k, c in cuts if c < 0.2]
    out.append("- >= 20% lower peak than torch at budget 0 where torch's budget-0 peak is above the lowest "
               f"reachable: {'met' if not low else 'MISSED on ' + ', '.join(low)}; reductions: "
               + ", ".join(f"{k} {c:.0%}" for k, c in cuts) + ".")
    if big is not None:
        ok = big["plan_s"] <= big["torch_s"]
        out.append(f"- planning time <= torch's whole partition_fn on the {big['layers']}-layer GPT: "
                   f"{'met' if ok else 'MISSED'}: plan {big['plan_s']:.2f} s (fxcut's whole partition_fn "
                   f"{big['fxcut_s']:.2f} s) vs torch {big['torch_s']:.2f} s at budget {big['budget']:g} "
                   f"({big['nodes']} joint nodes; peak {_kib(big['peak'])} vs torch {_kib(big['torch_peak'])} KiB).")
    out.append("")
    out += list(NOTES)
    return "\n".join(out)


def big_gpt(layers: int, budget: float) -> dict[str, Any]:
    cap = capture_model("gpt2", fake=True, layers=layers, hidden=1024, seq=512)
    torch_s = _torch_seconds(cap, False, budget)
    choice, _, total = _plan(cap, False, budget)
    return dict(layers=layers, budget=budget, torch_s=torch_s, plan_s=choice.seconds, fxcut_s=total,
                nodes=cap.num_nodes, peak=choice.peak_bytes, torch_peak=choice.torch_points[budget][0])


def plot_timeline(key: str, budget: float, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    spec = MODELS[key]
    cap = _capture(spec)
    choice, planner, _ = _plan(cap, bool(spec.get("zero3")), budget)
    prob = planner.last_problem
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for label, saved in ((f"torch, activation_memory_budget={budget:g}", None), (f"fxcut plan, b={budget:g}", choice.saved)):
        sim = prob.simulate(saved if saved is not None else _torch_saved(cap, spec, budget, prob))
        xs = list(range(len(sim.live_bytes)))
        ax.plot(xs, [v / 1024 for v in sim.live_bytes], label=f"{label} (peak {sim.peak_bytes / 1024:.0f} KiB)")
        ax.axvline(sim.n_fw_steps, color="grey", lw=0.5)
    ax.set_xlabel("step (forward, then backward)")
    ax.set_ylabel("live activations (KiB)")
    ax.set_title(f"{key}: simulated activation memory over one training step")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _torch_saved(cap: Any, spec: dict[str, Any], budget: float, prob: Any) -> list[int]:
    from fxcut.route.decide import decide_plan
    from fxcut.route.lower import lower_plan
    from fxcut.route.plan import make_plan
    from fxcut.tools.decisions import decide_with_budget, torch_now

    class Keep:
        def choose_saved(self, plan: Any, decision: Any) -> list[int]:
            return list(decision.saved)

    gm = _fresh(cap, bool(spec.get("zero3")))
    plan = make_plan(gm, torch_now(), num_fwd_outputs=cap.num_fwd_outputs, objective=Keep(), **cap.partition_kwargs)
    chosen = decide_plan(plan, lower_plan(plan))
    d = decide_with_budget(gm.graph, budget, num_fwd_outputs=cap.num_fwd_outputs, arrays=chosen.decision.arrays,
                           static_lifetime_input_indices=cap.partition_kwargs.get("static_lifetime_input_indices"),
                           torch=plan.torch)
    return list(d.saved)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs="*", default=list(MODELS))
    ap.add_argument("--budgets", nargs="*", type=float, default=BUDGETS)
    ap.add_argument("--big-layers", type=int, default=24, help="0: skip the large GPT timing")
    ap.add_argument("--out")
    ap.add_argument("--plot")
    ap.add_argument("--plot-model", default="gpt2")
    args = ap.parse_args()
    command = "PYTHONPATH=python python bench/bench_plan.py " + " ".join(sys.argv[1:])
    results = []
    for key in args.models:
        t = time.perf_counter()
        results.append(run_model(key, args.budgets))
        print(f"{key}: {time.perf_counter() - t:.1f} s", file=sys.stderr)
    big = big_gpt(args.big_layers, 0.5) if args.big_layers else None
    text = markdown(results, big, command)
    print(text)
    if args.out:
        # sections other benchmarks write survive this rewrite
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from docs_sections import read_section, replace_section

        # so do the exact solver's section (bench/bench_exact.py) and the measured-under-inductor one
        # (bench/inductor_memory.py --plan-md)
        kept = {name: read_section(args.out, name) if os.path.exists(args.out) else None
                for name in ("under-inductor", "exact")}
        with open(args.out, "w") as f:
            f.write(text)
        for name, section in kept.items():
            if section is not None:
                replace_section(args.out, name, section)
    if args.plot:
        plot_timeline(args.plot_model, 0.0, args.plot)


if __name__ == "__main__":
    main()
