"""Asking inductor what a decision's modules allocate: the plan's opt-in check.

For one saved set of a planned call: a copy of the joint graph with the
route's planned DCE/CSE applied (the graph the decision's node indices
describe), its forward and backward modules built by torch's passes, each
handed to inductor's lowering, scheduler and wrapper code generation on
fake tensors (:func:`fxcut.torchrules.inductor.ask_inductor`, nothing
compiled), and the peak the generated code allocates read back.  The
joint graph itself is never touched.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import FakeTensorMode, unset_fake_temporarily
from torch.utils._ordered_set import OrderedSet

from . import prepare
from .build import torch_build_modules
from .extract import split_saved
from .inductor import ask_inductor, donated_indices
from .snapshot import copy_graph_module
from .versions import Rules


def prepared_copy(joint_module: fx.GraphModule, prep: prepare.Preparation | None, lowered: Sequence[fx.Node]
                  ) -> tuple[fx.GraphModule, dict[str, fx.Node]]:
    """A copy of the joint module with the planned dead-code elimination
    and CSE ``prep`` applied (the graph the decision's node indices
    describe), and its nodes by name; ``prep`` None: a plain copy."""
    copy = copy_graph_module(joint_module)
    old = list(joint_module.graph.nodes)
    new = list(copy.graph.nodes)
    to_new = dict(zip(old, new))
    if prep is not None:
        moved = prepare.Preparation(
            dead={to_new[n] for n in prep.dead},
            replace={to_new[a]: to_new[b] for a, b in prep.replace.items()},
            region_ids=None if prep.region_ids is None else {to_new[n]: r for n, r in prep.region_ids.items()})
        prepare.apply(copy, moved, [to_new[n] for n in lowered])
    return copy, {n.name: n for n in copy.graph.nodes}


def inductor_peaks(joint_module: fx.GraphModule, saved_nodes: Sequence[fx.Node], num_fwd_outputs: int,
                   rules: Rules) -> tuple[int, int]:
    """The peaks inductor's generated code allocates in the forward and in
    the backward of the step whose forward saves ``saved_nodes`` (nodes of
    ``joint_module``); the modules built by torch's passes as the release of
    ``rules`` runs them.  A graph traced with dynamic shapes is asked at
    the sizes it was traced with, on modules of its own
    (:func:`at_traced_sizes`): the compile's ShapeEnv is never read."""
    fw, bw = torch_build_modules(joint_module, split_saved(list(saved_nodes)), num_fwd_outputs, OrderedSet(),
                                 False, False, rules)
    with contextlib.ExitStack() as own:
        if symbolic_inputs(joint_module):
            # the compile's fake mode is active around the partitioner, and inductor's passes look for the
            # one of the tracing context before their inputs': neither may see the compile's
            own.enter_context(unset_fake_temporarily())
            own.enter_context(torch._guards.tracing(torch._guards.TracingContext(at_traced_sizes(fw, bw))))
        f = ask_inductor(fw, is_backward=False)
        b = ask_inductor(bw, is_backward=True, donated=donated_indices(fw, bw))
    return f.wrapper_peak, b.wrapper_peak


def decision_peaks(joint_module: fx.GraphModule, prep: prepare.Preparation | None, lowered: Sequence[fx.Node],
                   saved: Sequence[int], num_fwd_outputs: int, rules: Rules) -> tuple[int, int]:
    """Inductor's forward and backward peaks of the decision saving
    ``saved`` (indices into ``lowered``, the planned call's lowered nodes):
    the graph after the plan's DCE/CSE ``prep``, split and built as the
    route builds it, then :func:`inductor_peaks`."""
    copy, by_name = prepared_copy(joint_module, prep, lowered)
    return inductor_peaks(copy, [by_name[lowered[i].name] for i in saved], num_fwd_outputs, rules)


def _sizes(val: object) -> list[Any]:
    """What of a placeholder's value may be symbolic: the value itself (a
    number), or a tensor's sizes, strides and storage offset."""
    if isinstance(val, torch.SymInt | torch.SymFloat | torch.SymBool):
        return [val]
    if isinstance(val, torch.Tensor):
        return [*val.shape, *val.stride(), val.storage_offset()]
    return []


def symbolic_inputs(joint_module: fx.GraphModule) -> bool:
    """Whether an input of the graph is symbolic (traced with dynamic shapes)."""
    return any(not isinstance(d, int) for node in joint_module.graph.find_nodes(op="placeholder")
               for d in _sizes(node.meta.get("val")))


def untraced_sizes(joint_module: fx.GraphModule) -> str:
    """Why inductor cannot be asked about the graph ("": it can): an input's
    size has no value it was traced with (an unbacked symbol), so there is
    no size to ask at."""
    for node in joint_module.graph.find_nodes(op="placeholder"):
        for d in _sizes(node.meta.get("val")):
            if isinstance(d, torch.SymInt) and _hint(d) is None:
                return f"input {node.name!r} has a size with no traced value ({d}): nothing to ask inductor at"
    return ""


def _hint(d: int | torch.SymInt) -> int | None:
    """The value a size had when the graph was traced (no guard added)."""
    if isinstance(d, int):
        return d
    hint = d.node.hint
    return None if hint is None else int(hint)


def _traced(d: int | torch.SymInt) -> int:
    hint = _hint(d)
    if hint is None:
        raise ValueError(f"the size {d} has no traced value")
    return hint


def at_traced_sizes(fw: fx.GraphModule, bw: fx.GraphModule) -> FakeTensorMode:
    """Make ``fw`` and ``bw`` (modules built from a graph traced with
    dynamic shapes) static, in place: every value's ``meta["val"]``
    propagated again on a FakeTensorMode of their own, without a ShapeEnv,
    from inputs at the sizes the graph was traced with (a symbolic integer
    input becomes its traced value).  Inputs that shared a storage share
    one again; the backward's saved inputs are the forward's outputs.  Its
    inductor lowering then guards nothing of the user's compile: under
    ``dynamic=True`` one compile serves every size, and ``mark_dynamic``
    holds (a lowering on the compile's own ShapeEnv would specialize both).
    Returns that mode: the ask runs in a tracing context of its own too."""
    mode = FakeTensorMode()
    storages: dict[object, torch.Tensor] = {}
    for module in (fw, bw):
        _traced_arguments(module)
    fw_inputs = list(fw.graph.find_nodes(op="placeholder"))
    _propagate(fw, fw_inputs, [_static(n.meta.get("val"), mode, storages) for n in fw_inputs], mode)
    made = {n.name: n.meta.get("val") for n in fw.graph.nodes}
    bw_inputs = list(bw.graph.find_nodes(op="placeholder"))
    _propagate(bw, bw_inputs, [made[n.name] if n.name in made and not n.name.startswith("tangents")
                               else _static(n.meta.get("val"), mode, storages) for n in bw_inputs], mode)
    return mode


def _propagate(module: fx.GraphModule, inputs: list[fx.Node], args: list[object], mode: FakeTensorMode) -> None:
    """Every node's ``meta["val"]`` (and ``tensor_meta``) from ``args`` run
    through ``module`` on ``mode``, numbers included (torch 2.12's
    FakeTensorProp leaves a symbolic integer's value as it was)."""
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp
    from torch.fx.passes.shape_prop import _extract_tensor_metadata

    class Propagation(FakeTensorProp):
        def run_node(self, n: fx.Node) -> Any:
            result = super().run_node(n)
            if isinstance(result, int | float | bool):
                n.meta["val"] = result
            return result

    Propagation(module, mode).propagate_dont_convert_inputs(*args)
    for n, a in zip(inputs, args):
        n.meta["val"] = a
    for n in module.graph.nodes:
        n.meta.pop("example_value", None)
        val = n.meta.get("val")
        if "tensor_meta" in n.meta:
            n.meta["tensor_meta"] = _extract_tensor_metadata(val) if isinstance(val, torch.Tensor) else None


def _traced_arguments(module: fx.GraphModule) -> None:
    """Symbolic numbers written into the nodes' arguments (a view's
    ``[s27*s77, 64]``) replaced by their traced values, in place."""
    def traced(a: object) -> object:
        if isinstance(a, torch.SymInt):
            return _traced(a)
        if isinstance(a, torch.SymFloat | torch.SymBool):
            if a.node.hint is None:
                raise ValueError(f"the value {a} has no traced value")
            return a.node.hint
        return a

    for n in module.graph.nodes:
        n.args = fx.node.map_aggregate(n.args, traced)  # type: ignore[arg-type]
        n.kwargs = fx.node.map_aggregate(n.kwargs, traced)  # type: ignore[arg-type]


def _static(val: object, mode: FakeTensorMode, storages: dict[object, torch.Tensor]) -> object:
    """``val`` at its traced sizes: a symbolic integer as its value, a fake
    tensor as one of ``mode`` viewing a storage of its traced size (one per
    storage of the originals, kept in ``storages``), anything else as is."""
    from torch.multiprocessing.reductions import StorageWeakRef

    if isinstance(val, torch.SymInt):
        return _traced(val)
    if not isinstance(val, torch.Tensor):
        return val
    storage = val.untyped_storage()
    key = StorageWeakRef(storage)  # type: ignore[no-untyped-call]
    if key not in storages:
        with mode:
            storages[key] = torch.empty(_traced(storage.nbytes()), dtype=torch.uint8, device=val.device)
    base = storages[key]
    with mode:
        typed = base.view(val.dtype) if val.dtype != torch.uint8 else base
        return typed.as_strided([_traced(d) for d in val.shape], [_traced(s) for s in val.stride()],
                                _traced(val.storage_offset()))


def holds_saved_tensors(joint_module: fx.GraphModule) -> bool:
    """Whether the step runs other work while this graph's saved tensors
    are alive: its forward returns a differentiable output that is not a
    scalar (a tangent input of more than one element), so what it returns
    goes on to further differentiable work -- the next graph of a model
    split by a graph break, or eager code -- and its backward runs only
    after that work's.  A graph ending in its loss (one scalar tangent)
    runs its backward next: its saved tensors count in its own peak alone."""
    from torch._functorch._aot_autograd.utils import _is_tangent  # the extraction's own test (gated in versions)

    for node in joint_module.graph.find_nodes(op="placeholder"):
        val = node.meta.get("val")
        if _is_tangent(node) and isinstance(val, torch.Tensor):
            numel = val.numel()
            if not (isinstance(numel, int) and numel <= 1):
                return True
    return False


__all__ = ["at_traced_sizes", "decision_peaks", "holds_saved_tensors", "inductor_peaks",
           "prepared_copy", "symbolic_inputs", "untraced_sizes"]
