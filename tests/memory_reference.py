"""An independent liveness simulator over the *built* forward and backward
modules, for tests/test_memory_model.py and bench/measure_memory.py.

It walks each fx GraphModule's nodes in order as fx's generated code runs
them: a value is created by its node and dropped after its last user (never
for the module's outputs); a storage (``meta["val"]``'s untyped storage,
compared by identity) costs its ``nbytes()`` while any live value holds it;
storages of the joint graph's placeholders (primals, parameters, tangents)
cost nothing.  The backward starts with its non-tangent placeholders (the
saved values) live.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx
from torch.multiprocessing.reductions import StorageWeakRef


def _nbytes(s: Any) -> int:
    b = s.nbytes()
    if isinstance(b, torch.SymInt):  # dynamic shapes: the size hint, as the partitioner sizes it
        from torch.fx.experimental.symbolic_shapes import optimization_hint

        return int(optimization_hint(b, fallback=4096))
    return int(b)


def _refs(val: Any) -> list[tuple[StorageWeakRef, int]]:
    if isinstance(val, torch.Tensor):
        s = val.untyped_storage()
        return [(StorageWeakRef(s), _nbytes(s))]
    if isinstance(val, (list, tuple)):
        return [r for x in val for r in _refs(x) if isinstance(x, torch.Tensor)]
    return []


def input_storages(joint: fx.GraphModule) -> set[StorageWeakRef]:
    return {r for n in joint.graph.nodes if n.op == "placeholder" for r, _ in _refs(n.meta.get("val"))}


def module_peak(gm: fx.GraphModule, free: set[StorageWeakRef], *, held_inputs: bool) -> tuple[int, int]:
    """(peak bytes, bytes live at the end) of one module; ``held_inputs``:
    its placeholders (other than graph inputs' storages) start live."""
    nodes = list(gm.graph.nodes)
    pos = {n: k for k, n in enumerate(nodes)}
    end = len(nodes)
    last: dict[fx.Node, int] = {}
    for n in nodes:
        if n.op == "output":
            continue
        users = [pos[u] if u.op != "output" else end for u in n.users]
        last[n] = max(users) if users else pos[n]
    holders: dict[StorageWeakRef, int] = {}
    size: dict[StorageWeakRef, int] = {}
    live_vals: dict[fx.Node, list[StorageWeakRef]] = {}
    live = 0

    def take(n: fx.Node) -> None:
        nonlocal live
        refs = [(r, b) for r, b in _refs(n.meta.get("val")) if r not in free]
        keys = []
        for r, b in refs:
            if r in keys:
                continue
            keys.append(r)
            if holders.get(r, 0) == 0:
                live += b
                size[r] = b
            holders[r] = holders.get(r, 0) + 1
        live_vals[n] = keys

    def drop(n: fx.Node) -> None:
        nonlocal live
        for r in live_vals.pop(n, []):
            holders[r] -= 1
            if holders[r] == 0:
                live -= size[r]

    peak = 0
    for n in nodes:
        if n.op == "placeholder":
            if held_inputs:
                take(n)
            continue
        if n.op == "output":
            continue
        take(n)
        peak = max(peak, live)
        for x in [n, *n.all_input_nodes]:
            if x in live_vals and last.get(x) == pos[n]:
                drop(x)
    # placeholders never read (cannot happen in a built backward) stay live
    return peak, live


def reference_peaks(joint: fx.GraphModule, fw: fx.GraphModule, bw: fx.GraphModule) -> tuple[int, int]:
    free = input_storages(joint)
    fw_peak, _ = module_peak(fw, free, held_inputs=False)
    bw_peak, _ = module_peak(bw, free, held_inputs=True)
    return fw_peak, bw_peak


def reference_saved_bytes(joint: fx.GraphModule, bw: fx.GraphModule) -> int:
    """Bytes of the backward's saved inputs: its placeholders' storages, once,
    less the graph inputs'."""
    free = input_storages(joint)
    seen: dict[StorageWeakRef, int] = {}
    for n in bw.graph.nodes:
        if n.op == "placeholder":
            for r, b in _refs(n.meta.get("val")):
                if r not in free:
                    seen[r] = b
    return sum(seen.values())
