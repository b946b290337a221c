"""What torch's min-cut recomputes under ZeRO-3 beyond what ZeRO-3 requires.

    PYTHONPATH=python:tests python bench/zero3_recompute.py [--table docs/zero3_table.md] [case ...]

For every zoo model: DeepCompile's walk (fxcut.recompute_param_aliases) tags
the alias/cast closure of the parameters MUST_RECOMPUTE -- the nodes ZeRO-3
requires to be recomputed, so that no gathered parameter stays alive through
a saved view or cast.  Then torch's min-cut decision on the walked graph
(fxcut's exact reproduction) and the memory model (fxcut.solve.memory) over it:
which nodes the backward recomputes, and how many of them lie outside the
closure, with their FLOPs (torch's flop counter, the knapsack's estimator).

For comparison, torch's decision on the same graph without the walk (what
the min-cut recomputes on its own), and the "closure only" decision: save every tangent-free value
the backward reads, except the closure's nodes, which are recomputed from the
parameters (the least recompute ZeRO-3 allows).  Its saved bytes and peak
say what the extra recompute buys.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT / "python", ROOT / "tests"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))


def _tangent_dependent(arrays: Any) -> list[bool]:
    from fxcut import _C

    dep: list[bool] = []
    for i in range(len(arrays)):
        d = arrays.kind[i] == _C.KIND_PLACEHOLDER and bool(arrays.flags[i] & (_C.F_TANGENT | _C.F_BWD_SEED))
        d = d or any(dep[arrays.in_idx[e]] for e in range(arrays.in_ptr[i], arrays.in_ptr[i + 1]))
        dep.append(d)
    return dep


def closure_only(arrays: Any, closure: set[int]) -> list[int]:
    """Save every tangent-free value a tangent-dependent node (or a
    recomputed closure node) reads, the closure's nodes excepted."""
    from fxcut import _C

    dep = _tangent_dependent(arrays)
    saved: set[int] = set()
    stack = [i for i in range(len(arrays)) if dep[i] and arrays.kind[i] != _C.KIND_OUTPUT]
    seen: set[int] = set()
    while stack:
        i = stack.pop()
        for e in range(arrays.in_ptr[i], arrays.in_ptr[i + 1]):
            j = arrays.in_idx[e]
            if dep[j]:
                continue
            if j in closure:
                if j not in seen:
                    seen.add(j)
                    stack.append(j)
            else:
                saved.add(j)
    return sorted(saved)


def _op_name(target: Any) -> str:
    name = getattr(target, "__name__", str(target))
    return str(name).split(".")[0]


def _decide(gm: Any, nfo: int, statics: Any) -> Any:
    """torch's decision for ``gm`` as the partitioner makes it (read only)."""
    from fxcut.route.decide import decide_plan
    from fxcut.route.lower import lower_plan
    from fxcut.route.plan import make_plan
    from fxcut.tools.decisions import torch_now

    plan = make_plan(gm, torch_now(), num_fwd_outputs=nfo, static_lifetime_input_indices=statics)
    return decide_plan(plan, lower_plan(plan))


def row(name: str) -> dict[str, Any]:
    import zoo
    from fxcut import _C, recompute_param_aliases
    from fxcut.solve import memory
    from fxcut.tools.decisions import model_inputs

    cap = zoo.capture(name)
    gm = cap.fresh()
    nfo = cap.num_fwd_outputs
    tagged = recompute_param_aliases(gm.graph, cap.param_indices)
    statics = cap.partition_kwargs.get("static_lifetime_input_indices")
    chosen = _decide(gm, nfo, statics)
    arrays = chosen.decision.arrays
    closure = {arrays.index[n] for n in tagged if n in arrays.index}
    inputs = model_inputs(arrays)  # the unfused model: storages, flops, extraction marks
    storage, flops = inputs.storage, inputs.flops
    est = memory.simulate(arrays, list(chosen.saved), nfo, inputs)
    recomputed = set(est.recomputed)
    beyond = recomputed - closure
    # of those, what the user's checkpointing asks for (recompute tags the walk did not set)
    user_tagged = {i for i in beyond if arrays.tag[i] in (_C.TAG_MUST_RECOMPUTE, _C.TAG_PREFER_RECOMPUTE)}
    free_choice = beyond - user_tagged
    minimal = memory.simulate(arrays, closure_only(arrays, closure), nfo, inputs)
    total_flops = sum(flops)
    # the same decision without the walk: what the min-cut recomputes on its own
    plain_gm = cap.fresh()
    plain = _decide(plain_gm, nfo, statics)
    plain_arrays = plain.decision.arrays
    plain_est = memory.simulate(plain_arrays, list(plain.saved), nfo, model_inputs(plain_arrays))
    same_as_plain = (sorted(arrays.nodes[i].name for i in est.recomputed)
                     == sorted(plain_arrays.nodes[i].name for i in plain_est.recomputed))
    return {
        "plain_recomputed": len(plain_est.recomputed), "plain_saved": plain_est.saved_bytes,
        "plain_peak": plain_est.peak_bytes, "same_as_plain": same_as_plain,
        "name": name, "nodes": len(arrays), "closure": len(closure),
        "closure_recomputed": len(recomputed & closure), "recomputed": len(recomputed), "beyond": len(beyond),
        "beyond_flops": sum(flops[i] for i in beyond), "recompute_flops": est.recompute_flops,
        "user_tagged": len(user_tagged), "free_flops": sum(flops[i] for i in free_choice),
        "beyond_bytes": sum(max(0, arrays.nbytes[i]) for i in beyond
                            if storage[i] == i and not arrays.flags[i] & _C.F_NON_TENSOR),
        "total_flops": total_flops, "saved": est.saved_bytes, "peak": est.peak_bytes,
        "min_saved": minimal.saved_bytes, "min_peak": minimal.peak_bytes,
        "min_recompute_flops": minimal.recompute_flops,
        "beyond_ops": sorted({_op_name(arrays.nodes[i].target) for i in free_choice}),
    }


def markdown(rows: list[dict[str, Any]], command: str) -> str:
    lines = [
        "| model | closure nodes | recomputed: in closure / beyond (of which checkpoint-tagged) "
        "| FLOPs beyond closure (untagged only) | share of graph FLOPs "
        "| bytes written beyond | saved B: torch / closure-only | peak B: torch / closure-only "
        "| without ZeRO-3: recomputed, saved B, peak B | untagged ops recomputed beyond |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in rows:
        share = r["beyond_flops"] / r["total_flops"] if r["total_flops"] else 0.0
        ops = ", ".join(r["beyond_ops"][:8]) + (" ..." if len(r["beyond_ops"]) > 8 else "")
        lines.append(
            f"| {r['name']} | {r['closure']} | {r['closure_recomputed']} / {r['beyond']} ({r['user_tagged']}) "
            f"| {r['beyond_flops']:,} ({r['free_flops']:,}) "
            f"| {share:.2%} | {r['beyond_bytes']:,} | {r['saved']:,} / {r['min_saved']:,} | {r['peak']:,} / {r['min_peak']:,} "
            f"| {r['plain_recomputed']}, {r['plain_saved']:,}, {r['plain_peak']:,}"
            f"{' (same recompute set)' if r['same_as_plain'] else ''} | {ops} |")
    return "\n".join(lines) + f"\n\nCommand: `{command}`\n"


def main(argv: list[str] | None = None) -> int:
    import zoo
    from zoo_cli import command_line, publish, zoo_rows

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("cases", nargs="*")
    ap.add_argument("--table", type=Path)
    args = ap.parse_args(argv)
    rows = zoo_rows(args.cases or list(zoo.CASES), row, lambda r: (
        f"closure {r['closure']:4d} recomputed {r['recomputed']:4d} beyond {r['beyond']:4d} "
        f"flops beyond {r['beyond_flops']:,} saved {r['saved']:,} vs {r['min_saved']:,} "
        f"peak {r['peak']:,} vs {r['min_peak']:,}"))
    command = command_line("bench/zero3_recompute.py", args.table, [], args.cases)
    publish(markdown(rows, command), args.table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
