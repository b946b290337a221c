"""Measured activation memory of a forward and backward module pair, on CPU,
and the memory model (fxcut.solve.memory) checked against it on the zoo.

    PYTHONPATH=python:tests python bench/measure_memory.py [--out docs/memory_model.md] [case ...]

:func:`measured_peak` runs the forward module, then the backward module
*boxed* (its argument list is cleared once unpacked, so a saved value dies
after its last use, as AOT Autograd's compiled backward runs) on real CPU
tensors, and reads every allocation and free the CPU allocator makes from the
torch profiler (``profile_memory=True, record_shapes=True, with_stack=True``):
``experimental_event_tree()``'s Allocation events carry the signed size of
each allocation and free in allocation order, so their running sum is the
exact number of bytes the run holds beyond what existed before it.  The
inputs (primals, parameters, tangents) are allocated before the profiler
starts and referenced by the caller throughout, so they are not counted --
as the model does not count them.  Nothing is sampled: CPU allocation is
deterministic, so the figure is exact and repeatable.

What the model leaves out and a measurement sees: memory an op allocates and
frees inside itself (workspaces, temporaries of decomposed kernels), and
outputs an op allocates but the graph drops (unused outputs of multi-output
ops are counted by the model; their storage is freed with the tuple).
"""

from __future__ import annotations

import argparse
import copy
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.fx as fx

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT / "python", ROOT / "tests"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))


def _boxed(bw_module: fx.GraphModule) -> fx.GraphModule:
    """A copy of ``bw_module`` called with one list it clears after unpacking."""
    graph = fx.Graph()
    out = graph.graph_copy(bw_module.graph, {})
    graph.output(out)
    graph.set_codegen(fx.graph._BoxedCodeGen())  # type: ignore[attr-defined]
    return fx.GraphModule(bw_module, graph)


_PHASES = ("fxcut.forward", "fxcut.backward")


def _allocations(prof: Any) -> list[tuple[int, int, str, str]]:
    """(time ns, signed bytes, transient op, phase) of every CPU allocation and
    free, in order.  Transient: a block allocated and freed inside one
    top-level op (its outermost aten op in the profiler's event tree) --
    workspace the op used internally, which no graph value ever holds.
    Transient op: the top-level op's name for a transient block, else "".
    Phase: inside the forward's or the backward's record_function range."""
    from torch._C._profiler import _EventType

    found: list[tuple[int, int, int, int]] = []  # time, size, ptr, top op id
    ranges: dict[str, tuple[int, int]] = {}
    op_names: dict[int, str] = {}
    stack = [(root, -1) for root in prof.profiler.kineto_results.experimental_event_tree()]
    while stack:
        n, top = stack.pop()
        if n.tag == _EventType.TorchOp:
            name = n.name
            if name in _PHASES:
                ranges[name.split(".")[1]] = (n.start_time_ns, n.end_time_ns)
            elif top < 0:
                top = id(n)
                op_names[top] = name
        if n.tag == _EventType.Allocation and n.extra_fields.device.type == "cpu":
            found.append((n.start_time_ns, int(n.extra_fields.alloc_size), int(n.extra_fields.ptr), top))
        stack.extend((c, top) for c in n.children)

    def phase(t: int) -> str:
        for name, (a, b) in ranges.items():
            if a <= t <= b:
                return name
        return "between"

    found.sort(key=lambda e: e[0])
    transient: set[int] = set()
    open_at: dict[int, tuple[int, int]] = {}  # ptr -> (index of its allocation, top op)
    for k, (_, size, ptr, top) in enumerate(found):
        if size > 0:
            open_at[ptr] = (k, top)
        elif ptr in open_at:
            j, top_alloc = open_at.pop(ptr)
            if top_alloc >= 0 and top_alloc == top:
                transient.update((j, k))
    return [(t, size, op_names.get(top, "") if k in transient else "", phase(t))
            for k, (t, size, _, top) in enumerate(found)]


def _run_pair(fw_module: fx.GraphModule, bw: fx.GraphModule, fw_args: Sequence[Any],
              tangents: Sequence[Any], n_saved: int) -> None:
    from torch.profiler import record_function

    with record_function(_PHASES[0]):
        outs = fw_module(*fw_args)
    saved = list(outs[len(outs) - n_saved:])
    del outs  # the forward outputs die here; the saved values live on in `args`
    values = [x for x in saved if isinstance(x, torch.Tensor)]
    syms = [x for x in saved if not isinstance(x, torch.Tensor)]
    del saved
    args = syms + values + list(tangents)
    del values, syms
    with record_function(_PHASES[1]):
        grads = bw(args)
    del grads


def _measure(fw_module: fx.GraphModule, bw_module: fx.GraphModule, fw_args: Sequence[Any],
             tangents: Sequence[Any]) -> list[tuple[int, int, str, str]]:
    from torch.profiler import ProfilerActivity, profile

    bw = _boxed(bw_module)
    n_bw_inputs = sum(1 for n in bw_module.graph.nodes if n.op == "placeholder")
    n_saved = n_bw_inputs - len(tangents)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True,
                 with_stack=True) as prof:
        _run_pair(fw_module, bw, fw_args, tangents, n_saved)
    return _allocations(prof)


def _replay(events: list[tuple[int, int, str, str]], without_workspace: bool
            ) -> tuple[int, list[tuple[float, int, str]]]:
    live = peak = 0
    timeline: list[tuple[float, int, str]] = []
    t0 = events[0][0] if events else 0
    for t, delta, transient_op, phase in events:
        if without_workspace and transient_op:
            continue
        live += delta
        peak = max(peak, live)
        timeline.append(((t - t0) / 1e6, live, phase))
    return peak, timeline


def measured_peak(fw_module: fx.GraphModule, bw_module: fx.GraphModule, fw_args: Sequence[Any],
                  tangents: Sequence[Any], *, without_workspace: bool = False
                  ) -> tuple[int, list[tuple[float, int, str]]]:
    """Run ``fw_module(*fw_args)`` then the boxed ``bw_module`` on the saved
    values and ``tangents`` (the caller keeps references to both argument
    lists: inputs are not counted) and return the peak bytes allocated
    beyond the start, and the timeline: (milliseconds from the start, live
    bytes after the event, "forward" / "backward" / "between") per
    allocation or free.  ``without_workspace``: leave out blocks allocated
    and freed inside one top-level op (what the memory model does not
    model)."""
    return _replay(_measure(fw_module, bw_module, fw_args, tangents), without_workspace)


def workspace_by_op(events: list[tuple[int, int, str, str]]) -> dict[str, int]:
    """The largest transient block each op allocated."""
    out: dict[str, int] = {}
    for _, size, op, _ in events:
        if op and size > 0:
            out[op] = max(out.get(op, 0), size)
    return out


# --------------------------------------------------------------------------- the zoo


def _hint(x: Any) -> int:
    if isinstance(x, torch.SymInt):
        from torch.fx.experimental.symbolic_shapes import optimization_hint

        return int(optimization_hint(x, fallback=4))
    return int(x)


def materialize(val: Any, gen: torch.Generator) -> Any:
    """A real CPU value shaped as a placeholder's ``meta["val"]``: floats
    small random normals, integers and bools zero (valid indices)."""
    if isinstance(val, torch.SymInt):
        return _hint(val)
    if not isinstance(val, torch.Tensor):
        return val
    shape = [_hint(s) for s in val.shape]
    stride = [_hint(s) for s in val.stride()]
    out = torch.empty_strided(shape, stride, dtype=val.dtype, device="cpu")
    if val.dtype.is_floating_point:
        out.copy_(torch.randn(shape, generator=gen, dtype=torch.float32).mul_(0.02).to(val.dtype))
    else:
        out.zero_()
    return out


def zoo_row(name: str, budget: float | None = None, *, repeat: bool = True) -> dict[str, Any]:
    """Simulated and measured peak of one zoo case: torch's decision, or
    (``budget``) torch's decision at that activation memory budget.
    ``repeat``: measure a second time ("repeat"; -1 when not)."""
    import zoo
    from fxcut import partition
    from fxcut.route.plan import make_plan
    from fxcut.tools.decisions import simulate_saved, torch_now

    cap = zoo.capture(name)
    gm = cap.fresh()
    nfo = cap.num_fwd_outputs
    statics = cap.partition_kwargs.get("static_lifetime_input_indices")
    plan = make_plan(gm, torch_now(), num_fwd_outputs=nfo, static_lifetime_input_indices=statics, budget=budget)
    routed = partition.route(plan, cap.joint_inputs)
    fw, bw = routed.modules
    arrays = routed.decision.decision.arrays
    saved = list(routed.saved)
    est = simulate_saved(arrays, saved, nfo, timeline=True, torch=plan.torch)
    gen = torch.Generator().manual_seed(0)
    fw_args = [materialize(n.meta.get("val"), gen) for n in fw.graph.nodes if n.op == "placeholder"]
    tangents = [materialize(n.meta.get("val"), gen) for n in bw.graph.nodes
                if n.op == "placeholder" and n.name.startswith("tangents")]
    with torch.no_grad():
        events = _measure(fw, bw, fw_args, tangents)
        peak2 = measured_peak(fw, bw, fw_args, tangents)[0] if repeat else -1
    peak, timeline = _replay(events, False)
    lasting, _ = _replay(events, True)
    ws = sorted(workspace_by_op(events).items(), key=lambda kv: -kv[1])[:2]
    fw_measured = max((b for _, b, ph in timeline if ph == "forward"), default=0)
    return {"name": name, "nodes": len(arrays), "simulated": est.peak_bytes, "sim_fw": est.fw_peak_bytes,
            "sim_bw": est.bw_peak_bytes, "measured": peak, "measured_fw": fw_measured, "repeat": peak2,
            "lasting": lasting, "workspace": ", ".join(f"{op} {b:,}" for op, b in ws),
            "saved": est.saved_bytes, "peak_at": f"{est.peak_phase}:{est.peak_node}", "estimate": est,
            "timeline": timeline}


def _markdown(rows: list[dict[str, Any]], command: str) -> str:
    lines = [
        "| model | nodes | simulated peak (B) | measured peak (B) | sim / measured | measured without op "
        "workspace (B) | sim / that | sim fw / bw peak (B) | measured fw peak (B) | saved (B) | model's peak at "
        "| largest op workspace (B) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in rows:
        ratio = r["simulated"] / r["measured"] if r["measured"] else float("nan")
        flag = "" if abs(ratio - 1) <= 0.10 else " **(outside 10%)**"
        r2 = r["simulated"] / r["lasting"] if r["lasting"] else float("nan")
        lines.append(f"| {r['name']} | {r['nodes']} | {r['simulated']:,} | {r['measured']:,} | {ratio:.3f}{flag} "
                     f"| {r['lasting']:,} | {r2:.3f} "
                     f"| {r['sim_fw']:,} / {r['sim_bw']:,} | {r['measured_fw']:,} | {r['saved']:,} "
                     f"| {r['peak_at']} | {r['workspace']} |")
    return "\n".join(lines) + f"\n\nCommand: `{command}`\n"


def _sweep_markdown(rows: dict[str, dict[float, dict[str, Any]]], budgets: Sequence[float], command: str) -> str:
    """One row per model, one column per budget: simulated / measured
    without op workspace / measured (bytes; "=" where the first two agree)."""
    head = " | ".join(f"b={b:g}: sim / meas. w/o workspace / meas." for b in budgets)
    lines = [f"| model | {head} |", "|---|" + "---:|" * len(budgets)]
    exact = total = within = 0
    for name, by_budget in rows.items():
        cells = []
        for b in budgets:
            r = by_budget[b]
            total += 1
            exact += r["simulated"] == r["lasting"]
            within += abs(r["simulated"] / r["measured"] - 1) <= 0.10 if r["measured"] else 0
            mark = "=" if r["simulated"] == r["lasting"] else f"**{r['lasting']:,}**"
            cells.append(f"{r['simulated']:,} / {mark} / {r['measured']:,}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return ("\n".join(lines) + f"\n\nsimulated = measured without op workspace: {exact} of {total}; "
            f"simulated within 10% of measured (with workspace): {within} of {total}.\n\nCommand: `{command}`\n")


def main(argv: list[str] | None = None) -> int:
    import zoo
    from zoo_cli import command_line, publish, zoo_rows

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("cases", nargs="*", help="zoo cases (default: all)")
    ap.add_argument("--table", type=Path, help="write the markdown table here")
    ap.add_argument("--budget", type=float, help="torch's decision at this activation memory budget")
    ap.add_argument("--budgets", type=lambda v: [float(x) for x in v.split(",")],
                    help="comma-separated activation memory budgets, e.g. 0,0.1,0.3,0.5,0.7,1: one table, "
                         "simulated vs measured at each")
    args = ap.parse_args(argv)
    names = args.cases or list(zoo.CASES)
    if args.budgets:
        sweep: dict[str, dict[float, dict[str, Any]]] = {}

        def by_budget(name: str) -> dict[str, Any]:
            sweep[name] = {b: zoo_row(name, b, repeat=False) for b in args.budgets}
            return {"name": name}

        zoo_rows(names, by_budget, lambda r: "  ".join(
            f"b={b:g} {x['simulated']:,}/{x['lasting']:,}/{x['measured']:,}" for b, x in sweep[r["name"]].items()))
        options = ["--budgets", ",".join(f"{b:g}" for b in args.budgets)]
        command = command_line("bench/measure_memory.py", args.table, options, args.cases)
        publish(_sweep_markdown(sweep, args.budgets, command), args.table)
        return 0

    def line(row: dict[str, Any]) -> str:
        ratio = row["simulated"] / row["measured"] if row["measured"] else float("nan")
        return (f"sim {row['simulated']:>10,}  measured {row['measured']:>10,} (again {row['repeat']:,})  "
                f"ratio {ratio:.3f}  no-workspace {row['lasting']:,}  sim fw/bw {row['sim_fw']:,}/{row['sim_bw']:,} "
                f"measured fw {row['measured_fw']:,}")

    rows = zoo_rows(names, lambda name: zoo_row(name, args.budget), line)
    options = ["--budget", str(args.budget)] if args.budget is not None else []
    command = command_line("bench/measure_memory.py", args.table, options, args.cases)
    publish(_markdown(rows, command), args.table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
