"""What the hazards rule reads of torch: which nodes draw random numbers, which inputs the step mutates.

The rule itself -- what may not be recomputed, and what the forward must
then keep saved -- is :mod:`fxcut.solve.hazards`', over two masks this
module reads from the graph's ops, its meta and AOT Autograd's output
descriptors (:func:`unsafe`).
"""

from __future__ import annotations

import torch

import fxcut._C as _C
from ..solve.hazards import Unsafe, backward_only, unsafe_nodes
from .lower import LoweredGraph
from .ops import TargetFacts, draws_random_numbers


def draws_random(arrays: LoweredGraph, facts: TargetFacts) -> bytes:
    """1 for each node that draws from the random generator: every op torch
    tags ``nondeterministic_seeded`` (:func:`fxcut.torchrules.ops.draws_random_numbers`
    says which nodes of such an op do)."""
    n = len(arrays)
    kind, nodes = arrays.kind, arrays.nodes
    out = bytearray(n)
    call = _C.KIND_CALL_FUNCTION
    # A few hundred distinct targets in a graph of thousands of nodes: ask
    # about each target once, then look only at the nodes of random ones.
    if any(facts.seeded(t) for t in _targets(arrays)):
        for i in range(n):
            if kind[i] == call and facts.seeded(nodes[i].target) and draws_random_numbers(nodes[i], facts):
                out[i] = 1
    return bytes(out)


def seeded(arrays: LoweredGraph) -> bytes:
    """1 for each call of an op overload tagged ``nondeterministic_seeded``,
    drawing random numbers or not (SDPA without dropout is one): dead-code
    elimination keeps such a node, which alone does not keep a plan from
    recomputing it."""
    nodes, kind, call = arrays.nodes, arrays.kind, _C.KIND_CALL_FUNCTION
    tag = torch.Tag.nondeterministic_seeded
    by_target: dict[int, bool] = {}
    out = bytearray(len(arrays))
    for i in range(len(arrays)):
        if kind[i] != call:
            continue
        target = nodes[i].target
        hit = by_target.get(id(target))
        if hit is None:
            hit = by_target[id(target)] = isinstance(target, torch._ops.OpOverload) and tag in target.tags
        out[i] = hit
    return bytes(out)


def unsafe(arrays: LoweredGraph, facts: TargetFacts) -> Unsafe:
    """:func:`fxcut.solve.hazards.unsafe_nodes` of ``arrays``: random draws
    and reads of the state the step mutates."""
    return unsafe_nodes(arrays, draws_random(arrays, facts), mutated_inputs(arrays))


def mutated_inputs(arrays: LoweredGraph) -> bytes:
    """1 for each placeholder the step mutates.

    Where AOT Autograd described the graph's outputs (``meta["desc"]`` of
    the output node: an ``InputMutationAOTOutput`` per updated input), those
    inputs exactly, matched to the placeholders by their own descriptors.
    Without descriptors (a graph from another tracer), a placeholder a
    functionalized mutating op (``*_functional``, e.g. batch norm's running
    statistics) reads but no backward op does.  Always: the destination of
    an in-graph ``copy_``."""
    n = len(arrays)
    kind, nodes = arrays.kind, arrays.nodes
    out = bytearray(n)
    copy_ = torch.ops.aten.copy_.default
    if any(t is copy_ for t in _targets(arrays)):
        for i in range(n):
            if (kind[i] == _C.KIND_CALL_FUNCTION and nodes[i].target is copy_
                    and arrays.arg_ptr[i] < arrays.arg_ptr[i + 1]):
                dest = arrays.arg_idx[arrays.arg_ptr[i]]
                if kind[dest] == _C.KIND_PLACEHOLDER:
                    out[dest] = 1
    descs = _output_descriptors(arrays)
    if descs is not None:
        mutated = [d.mutated_input for d in descs if hasattr(d, "mutated_input")]
        if mutated:
            for i in range(n):
                if kind[i] == _C.KIND_PLACEHOLDER and nodes[i].meta.get("desc") in mutated:
                    out[i] = 1
        return bytes(out)
    for i in _functional_state(arrays):
        out[i] = 1
    return bytes(out)


def _output_descriptors(arrays: LoweredGraph) -> list[object] | None:
    last = next((i for i in range(len(arrays) - 1, -1, -1) if arrays.kind[i] == _C.KIND_OUTPUT), None)
    if last is None:
        return None
    descs = arrays.nodes[last].meta.get("desc")
    return list(descs) if isinstance(descs, (list, tuple)) else None


def _targets(arrays: LoweredGraph) -> list[object]:
    """The graph's distinct node targets (by identity: an op's own hash is
    Python code, too slow for every node of a large graph)."""
    return list({id(node.target): node.target for node in arrays.nodes}.values())


def _functional_state(arrays: LoweredGraph) -> set[int]:
    """Placeholders a ``*_functional`` op updates (whose update is copied
    back after the forward) and no backward op reads: the arguments whose
    name its schema returns as ``<name>_out`` (batch norm's
    ``running_mean_out``, rrelu's ``noise_out``), or every placeholder it
    reads where its schema names none."""
    n = len(arrays)
    kind, in_ptr, in_idx = arrays.kind, arrays.in_ptr, arrays.in_idx
    read_by_backward = bytearray(n)
    dep = backward_only(arrays)
    suspects: set[int] = set()
    index = arrays.index
    for i in range(n):
        ins = in_idx[in_ptr[i]:in_ptr[i + 1]]
        if dep[i] and kind[i] != _C.KIND_OUTPUT:
            for u in ins:
                read_by_backward[u] = 1
            continue
        target = arrays.nodes[i].target
        if kind[i] != _C.KIND_CALL_FUNCTION or not str(getattr(target, "_overloadpacket", "")).endswith("_functional"):
            continue
        updated = _updated_arguments(arrays.nodes[i])
        if updated is None:
            suspects.update(u for u in ins if kind[u] == _C.KIND_PLACEHOLDER)
        else:
            suspects.update(j for j in (index.get(a) for a in updated) if j is not None and kind[j] == _C.KIND_PLACEHOLDER)
    return {u for u in suspects if not read_by_backward[u]}


def _updated_arguments(node: torch.fx.Node) -> list[torch.fx.Node] | None:
    """The argument nodes a functionalized op returns updated (its schema's
    ``<name>_out`` returns), or None where the schema names none."""
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return None
    names = {r.name[:-4] for r in schema.returns if r.name and r.name.endswith("_out")}
    if not names:
        return None
    found = []
    for k, arg in enumerate(schema.arguments):
        if arg.name not in names:
            continue
        value = node.args[k] if k < len(node.args) else node.kwargs.get(arg.name)
        if isinstance(value, torch.fx.Node):
            found.append(value)
    return found


__all__ = ["draws_random", "mutated_inputs", "seeded", "unsafe"]
