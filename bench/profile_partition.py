"""Where a partition_fn call spends its time, down to torch.fx primitives.

For the GPT-2 style joint graph of the benchmark (fake tensors) at each
``--layers``, runs three partitioners on fresh copies of the joint graph,
with the garbage collector ON (as a compile runs):

- ``fxcut``: fxcut's partition_fn as it is (its own graph building);
- ``fxcut-torch-build``: fxcut's decision, then torch's passes build the
  modules (fxcut before fxcut.torchrules.extract);
- ``torch``: torch's ``min_cut_rematerialization_partition``;

each under the two conditions a user meets: a plain ``GraphModule`` joint
graph (eager code generation, as a direct call) and a compile's conditions
(``_use_lazy_graph_module(True)`` and a ``_LazyGraphModule`` joint graph,
which is how inductor's ``compile_fx`` calls the partitioner).

Reports, per case: the wall time without the profiler (median of
``--reps``), the time spent in garbage collection (gc callbacks), and under
cProfile the inclusive time and call count of each primitive (node
creation, node_copy, map_arg, name table, codegen, ``compile()`` of the
generated source, DCE, lint, GraphModule construction) and of each phase.
Inclusive times overlap (node_copy includes create_node).

    python bench/profile_partition.py --layers 24 48 --reps 3 [--markdown]
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import statistics
import sys
import time
from typing import Any, Callable

# (label, file suffix, function name); inclusive time of the function.
PRIMITIVES: list[tuple[str, str, str]] = [
    ("fx: Graph.create_node", "torch/fx/graph.py", "create_node"),
    ("fx: Graph.node_copy", "torch/fx/graph.py", "node_copy"),
    ("fx: map_arg / map_aggregate", "torch/fx/node.py", "map_aggregate"),
    ("fx: name table (_Namespace.create_name)", "torch/fx/graph.py", "create_name"),
    ("fx: Graph.python_code (codegen)", "torch/fx/graph.py", "python_code"),
    ("fx: compile() of the generated code", "~", "<built-in method builtins.compile>"),
    ("fx: GraphModule.recompile", "torch/fx/graph_module.py", "recompile"),
    ("fx: GraphModule.__init__", "torch/fx/graph_module.py", "__init__"),
    ("fx: Graph.eliminate_dead_code", "torch/fx/graph.py", "eliminate_dead_code"),
    ("fx: Graph.lint", "torch/fx/graph.py", "lint"),
    ("fx: Graph.erase_node", "torch/fx/graph.py", "erase_node"),
    ("fx: Node.replace_all_uses_with", "torch/fx/node.py", "replace_all_uses_with"),
]
PHASES: list[tuple[str, str, str]] = [
    ("fxcut: prepare.plan (DCE + CSE plan)", "fxcut/torchrules/prepare.py", "plan"),
    ("fxcut: lowering", "fxcut/torchrules/lower.py", "lower_for_partition"),
    ("fxcut: decision (lowered -> C core)", "fxcut/route/decide.py", "decide_plan"),
    ("fxcut: prepare.apply (DCE + CSE in place, joint recompile)", "fxcut/torchrules/prepare.py", "apply"),
    ("fxcut: build.build_modules", "fxcut/torchrules/build.py", "build_modules"),
    ("fxcut: extract.build_modules", "fxcut/torchrules/extract.py", "build_modules"),
    ("fxcut: extract selection (what survives)", "fxcut/torchrules/extract.py", "_select"),
    ("torch: fx_graph_cse", "torch/_functorch/compile_utils.py", "fx_graph_cse"),
    ("torch: classify_nodes", "torch/_functorch/partitioners.py", "classify_nodes"),
    ("torch: choose_saved_values_set", "torch/_functorch/partitioners.py", "choose_saved_values_set"),
    ("torch: _extract_fwd_bwd_modules", "torch/_functorch/partitioners.py", "_extract_fwd_bwd_modules"),
    ("torch: reordering_to_mimic_autograd_engine", "torch/_functorch/partitioners.py",
     "reordering_to_mimic_autograd_engine"),
    ("torch: raise_getitems", "torch/_functorch/compile_utils.py", "raise_getitems"),
]


def _inclusive(stats: pstats.Stats, suffix: str, name: str) -> tuple[float, int]:
    total, calls = 0.0, 0
    for (filename, _line, func), (cc, nc, _tt, ct, callers) in stats.stats.items():  # type: ignore[attr-defined]
        if func != name or not filename.endswith(suffix) and suffix != "~":
            continue
        # Count only calls from outside the function itself (recursion).
        own = sum(v[3] for (f, _l, fn), v in callers.items() if f == filename and fn == name)
        total += ct - (own if own < ct else 0)
        calls += nc
    return total, calls


class _GcClock:
    def __init__(self) -> None:
        self.spent = 0.0
        self.collections = 0
        self._t = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._t = time.perf_counter()
        else:
            self.spent += time.perf_counter() - self._t
            self.collections += 1


def _partitioners() -> dict[str, Callable[..., Any]]:
    from torch._functorch import partitioners as tp

    import fxcut
    import fxcut.torchrules.extract as extract

    def fxcut_torch_build(*args: Any, **kwargs: Any) -> Any:
        real = extract.build_modules
        extract.build_modules = lambda *a, **k: None  # type: ignore[assignment]
        try:
            return fxcut.min_cut_rematerialization_partition(*args, **kwargs)
        finally:
            extract.build_modules = real  # type: ignore[assignment]

    return {"fxcut": fxcut.min_cut_rematerialization_partition,
            "fxcut-torch-build": fxcut_torch_build,
            "torch": tp.min_cut_rematerialization_partition}


def _call(cap: Any, fn: Callable[..., Any], lazy: bool, profile: bool, with_gc: bool = True) -> dict[str, Any]:
    from partition_benchmark import fresh_joint  # bench/, next to this script
    from torch.fx._lazy_graph_module import _use_lazy_graph_module

    gm = fresh_joint(cap, lazy)
    gc.collect()
    was_enabled = gc.isenabled()
    if not with_gc:
        gc.disable()
    clock = _GcClock()
    prof = cProfile.Profile() if profile else None
    with _use_lazy_graph_module(lazy):
        gc.callbacks.append(clock)
        try:
            t = time.perf_counter()
            if prof is not None:
                prof.enable()
            fn(gm, cap.joint_inputs, *cap.partition_args, num_fwd_outputs=cap.num_fwd_outputs,
               **cap.partition_kwargs)
            if prof is not None:
                prof.disable()
            wall = time.perf_counter() - t
        finally:
            gc.callbacks.remove(clock)
            if was_enabled:
                gc.enable()
    out: dict[str, Any] = {"wall": wall, "gc": clock.spent, "collections": clock.collections}
    if prof is not None:
        stats = pstats.Stats(prof)
        out["rows"] = {label: _inclusive(stats, suffix, name) for label, suffix, name in PRIMITIVES + PHASES}
    return out


def floor_fn(cap: Any, lazy: bool) -> Callable[..., Any]:
    """The floor as a partition function (its arguments ignored but the
    joint module): :func:`partition_benchmark.floor_builder` on fxcut's
    result for this graph."""
    from partition_benchmark import floor_builder  # bench/, next to this script

    import fxcut

    fw, bw = fxcut.min_cut_rematerialization_partition(
        cap.fresh(), cap.joint_inputs, *cap.partition_args, num_fwd_outputs=cap.num_fwd_outputs,
        **cap.partition_kwargs)
    floor = floor_builder(fw, bw, lazy)
    return lambda joint, *args, **kwargs: floor(joint)


def profile(layers: int, reps: int, with_gc: bool = True, cprofile: bool = True) -> dict[str, Any]:
    from partition_benchmark import ModelConfig, capture  # bench/, next to this script

    cap = capture(layers, ModelConfig())
    parts = _partitioners()
    floors = {lazy: floor_fn(cap, lazy) for lazy in (True, False)}
    cases = [(name, lazy) for lazy in (True, False) for name in [*parts, "floor"]]
    walls: dict[tuple[str, bool], list[float]] = {c: [] for c in cases}
    gcs: dict[tuple[str, bool], list[float]] = {c: [] for c in cases}
    for _ in range(reps):  # interleaved
        for name, lazy in cases:
            r = _call(cap, floors[lazy] if name == "floor" else parts[name], lazy, profile=False,
                      with_gc=with_gc)
            walls[(name, lazy)].append(r["wall"])
            gcs[(name, lazy)].append(r["gc"])
    rows = {c: (_call(cap, floors[c[1]] if c[0] == "floor" else parts[c[0]], c[1], profile=True,
                      with_gc=with_gc)["rows"] if cprofile else {})
            for c in cases}
    ratios = {}
    for lazy in (True, False):
        w = {name: walls[(name, lazy)] for name in [*parts, "floor"]}
        ratios[lazy] = {
            "torch/fxcut": statistics.median(t / f for t, f in zip(w["torch"], w["fxcut"])),
            "torch/fxcut-torch-build": statistics.median(
                t / f for t, f in zip(w["torch"], w["fxcut-torch-build"])),
            "fxcut/floor": statistics.median(f / fl for f, fl in zip(w["fxcut"], w["floor"])),
        }
    return {"layers": layers, "nodes": cap.num_nodes, "cases": cases, "walls": walls, "gcs": gcs,
            "rows": rows, "ratios": ratios, "reps": reps, "with_gc": with_gc}


def format_profile(p: dict[str, Any], markdown: bool = False) -> str:
    cases = p["cases"]
    heads = [f"{n} {'lazy' if lazy else 'eager'}" for n, lazy in cases]
    lines = [f"### {p['layers']} layers ({p['nodes']} joint nodes), gc {'on' if p['with_gc'] else 'OFF'}, ms"]
    sep = " | " if markdown else "  "

    def row(label: str, cells: list[str]) -> str:
        if markdown:
            return "| " + label + " | " + " | ".join(cells) + " |"
        return f"{label:<62}" + "".join(f"{c:>24}" for c in cells)

    lines.append(row("", heads))
    if markdown:
        lines.append("|---|" + "---:|" * len(heads))
    lines.append(row("wall, no profiler (median)",
                     [f"{1e3 * statistics.median(p['walls'][c]):.0f}" for c in cases]))
    lines.append(row("  of which garbage collection (median)",
                     [f"{1e3 * statistics.median(p['gcs'][c]):.0f}" for c in cases]))
    labels = [label for label, _, _ in PHASES + PRIMITIVES]
    if all(p["rows"].values()):
        lines.append(row("under cProfile (inclusive ms / calls):", [""] * len(cases)))
    for label in labels if all(p["rows"].values()) else []:
        cells = []
        for c in cases:
            ms, calls = p["rows"][c][label]
            cells.append(f"{1e3 * ms:.0f} / {calls}" if calls else "-")
        if any(x != "-" for x in cells):
            lines.append(row(label, cells))
    del sep
    for lazy in (True, False):
        r = p["ratios"][lazy]
        lines.append(f"{'lazy (as a compile runs it)' if lazy else 'eager (plain GraphModule)'}: medians of "
                     f"{p['reps']} per-round ratios: torch/fxcut {r['torch/fxcut']:.2f}x, "
                     f"torch/fxcut-with-torch's-building {r['torch/fxcut-torch-build']:.2f}x, "
                     f"fxcut/floor {r['fxcut/floor']:.2f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, nargs="+", default=[24, 48])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--no-gc", action="store_true", help="garbage collector off during the timed calls (timeit's way)")
    ap.add_argument("--no-cprofile", action="store_true", help="wall times and ratios only")
    a = ap.parse_args(argv)
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 20000))
    for layers in a.layers:
        result = profile(layers, a.reps, with_gc=not a.no_gc, cprofile=not a.no_cprofile)
        print(format_profile(result, a.markdown), flush=True)
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
