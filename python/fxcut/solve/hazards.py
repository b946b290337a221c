"""Values the backward must not recompute: random draws and reads of mutated state.

Recomputing a forward value in the backward is only right when running its
node again gives the value the forward computed.  Two kinds of node break
that (:func:`unsafe_nodes`):

- ``RANDOM``: the node draws from the random generator
  (:func:`fxcut.torchrules.ops.draws_random_numbers`: every op torch tags
  ``nondeterministic_seeded``); run again, it draws different numbers, so
  the gradients are not eager's (pytorch #190758).  torch replays the RNG
  state only for ``MUST_RECOMPUTE``/``PREFER_RECOMPUTE``-tagged nodes
  (activation checkpointing), which are therefore not hazards.
- ``MUTATED_STATE``: the node reads an input the step mutates
  (:func:`mutated_inputs`: batch norm's running statistics, a buffer
  updated in place).  Run in the backward, it reads the input after the
  update: autograd's version check fails (the update is copied back after
  the forward), or the backward silently reads the updated value (an
  in-graph ``copy_``).

One rule, read by the peak-aware plan's roles (:mod:`fxcut.solve.roles`:
never recompute such a node) and by the route's decision step
(:mod:`fxcut.route.safety`: warn when torch's decision recomputes one, or
keep it saved under ``safe_budget=True``, :func:`keep_saved`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch

import fxcut._C as _C
from ..torchrules.ops import default_facts, draws_random_numbers
from .account import placement
from .arrays import GraphArrays
from .core import Decision

#: :func:`unsafe_nodes` bits
RANDOM = 1
MUTATED_STATE = 2

_RECOMPUTE_TAGS = (_C.TAG_MUST_RECOMPUTE, _C.TAG_PREFER_RECOMPUTE)


class Hazard(NamedTuple):
    """One node a decision recomputes although it must not be."""

    node_index: int
    #: RANDOM or MUTATED_STATE
    kind: int
    #: the node's target, as fx prints it (``aten.randn.default``)
    op: str
    #: the node's name
    name: str
    #: MUTATED_STATE: the mutated input it reads; else None
    reads: str | None


def mutated_inputs(arrays: GraphArrays) -> bytearray:
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
        return out
    for i in _functional_state(arrays):
        out[i] = 1
    return out


def mutated_state(arrays: GraphArrays) -> bytearray:
    """1 for each mutated input (:func:`mutated_inputs`) and each view of
    one (torch's view ops, transitively): values that share the mutated
    storage, so saving one is no better than saving the input."""
    state = mutated_inputs(arrays)
    if any(state):
        flags, arg_ptr, arg_idx = arrays.flags, arrays.arg_ptr, arrays.arg_idx
        for i in range(len(arrays)):
            if flags[i] & _C.F_VIEW and arg_ptr[i] < arg_ptr[i + 1] and state[arg_idx[arg_ptr[i]]]:
                state[i] = 1
    return state


def _output_descriptors(arrays: GraphArrays) -> list[object] | None:
    last = next((i for i in range(len(arrays) - 1, -1, -1) if arrays.kind[i] == _C.KIND_OUTPUT), None)
    if last is None:
        return None
    descs = arrays.nodes[last].meta.get("desc")
    return list(descs) if isinstance(descs, (list, tuple)) else None


def _targets(arrays: GraphArrays) -> list[object]:
    """The graph's distinct node targets (by identity: an op's own hash is
    Python code, too slow for every node of a large graph)."""
    return list({id(node.target): node.target for node in arrays.nodes}.values())


def _functional_state(arrays: GraphArrays) -> set[int]:
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


def backward_only(arrays: GraphArrays) -> bytearray:
    """1 for each node that depends on a tangent or a backward seed: the
    backward's own work, never a recomputation."""
    n = len(arrays)
    kind, flags, in_ptr, in_idx = arrays.kind, arrays.flags, arrays.in_ptr, arrays.in_idx
    seeds = _C.F_TANGENT | _C.F_BWD_SEED
    dep = bytearray(n)
    for i in range(n):
        if kind[i] == _C.KIND_PLACEHOLDER:
            dep[i] = bool(flags[i] & seeds)
        else:
            dep[i] = any(dep[u] for u in in_idx[in_ptr[i]:in_ptr[i + 1]])
    return dep


def unsafe_nodes(arrays: GraphArrays) -> bytes:
    """Per node, why recomputing it in the backward would be wrong: the
    ``RANDOM`` and ``MUTATED_STATE`` bits (0: safe)."""
    n = len(arrays)
    kind, nodes = arrays.kind, arrays.nodes
    out = bytearray(n)
    facts = default_facts()
    call = _C.KIND_CALL_FUNCTION
    # A few hundred distinct targets in a graph of thousands of nodes: ask
    # about each target once, then look only at the nodes of random ones.
    if any(facts.seeded(t) for t in _targets(arrays)):
        for i in range(n):
            if kind[i] == call and facts.seeded(nodes[i].target) and draws_random_numbers(nodes[i], facts):
                out[i] = RANDOM
    state = mutated_state(arrays)
    if any(state):
        in_ptr, in_idx, flags = arrays.in_ptr, arrays.in_idx, arrays.flags
        for i in range(n):
            if (kind[i] == _C.KIND_CALL_FUNCTION and not state[i] and not flags[i] & _C.F_VIEW
                    and any(state[u] for u in in_idx[in_ptr[i]:in_ptr[i + 1]])):
                out[i] |= MUTATED_STATE
    return bytes(out)


def recomputed_hazards(decision: Decision, saved: Sequence[int], num_fwd_outputs: int,
                       unsafe: bytes | None = None) -> list[Hazard]:
    """The unsafe nodes (:func:`unsafe_nodes`) the backward recomputes when
    the forward saves ``saved``: a forward value the backward needs and
    computes again, except a random node torch's RNG functionalization
    replays (tagged to be recomputed, and computed by the forward too)."""
    arrays = decision.arrays
    unsafe = unsafe_nodes(arrays) if unsafe is None else unsafe
    if not any(unsafe):
        return []
    where = placement(arrays, saved, num_fwd_outputs)
    chosen = set(saved)
    dep: bytearray | None = None
    tag = decision.tag
    found: list[tuple[int, int]] = []
    for i in sorted(where.backward):
        why = unsafe[i]
        if not why or i in chosen:
            continue
        if dep is None:
            dep = backward_only(arrays)
        if dep[i]:
            continue
        if why & RANDOM and tag[i] in _RECOMPUTE_TAGS and arrays.tag[i] in _RECOMPUTE_TAGS and i in where.forward:
            why &= ~RANDOM  # replayed: torch threads the forward's RNG state to the backward
            if not why:
                continue
        found.append((i, why))
    state = mutated_state(arrays) if any(why & MUTATED_STATE for _, why in found) else None
    return [_hazard(arrays, i, why, state) for i, why in found]


def _hazard(arrays: GraphArrays, i: int, why: int, state: bytearray | None) -> Hazard:
    node = arrays.nodes[i]
    if why & RANDOM or state is None:
        return Hazard(i, RANDOM, str(node.target), node.name, None)
    reads = next((arrays.nodes[u].name for u in arrays.in_idx[arrays.in_ptr[i]:arrays.in_ptr[i + 1]] if state[u]),
                 None)
    return Hazard(i, MUTATED_STATE, str(node.target), node.name, reads)


def keep_saved(decision: Decision, saved: Sequence[int], num_fwd_outputs: int,
               unsafe: bytes | None = None) -> list[int]:
    """``saved`` plus what the forward must also save so that the backward
    recomputes no unsafe node: each such node itself, or, for a node with
    several outputs (a sequence value: ``native_dropout``, batch norm), its
    outputs the backward reads.  The forward then computes each of them
    once, as eager mode does.  ``saved``'s own order is kept; the additions
    follow, in graph order.  Raises NotImplementedError for a node it
    cannot keep saved (none is known)."""
    arrays = decision.arrays
    unsafe = unsafe_nodes(arrays) if unsafe is None else unsafe
    out = list(dict.fromkeys(saved))
    while True:
        hazards = recomputed_hazards(decision, out, num_fwd_outputs, unsafe)
        if not hazards:
            return out
        where = placement(arrays, out, num_fwd_outputs)
        have = set(out)
        added = []
        for h in hazards:
            if arrays.flags[h.node_index] & _C.F_VAL_IS_SEQ:
                added.extend(_read_outputs(arrays, h.node_index, where.backward))
            else:
                added.append(h.node_index)
        added = sorted(set(added) - have)
        if not added:
            h = hazards[0]
            raise NotImplementedError(f"fxcut cannot keep the value of node {h.name!r} ({h.op}) saved for the "
                                      "backward (its outputs are not separate values)")
        out.extend(added)


def _read_outputs(arrays: GraphArrays, seq: int, backward: set[int]) -> list[int]:
    """The getitems of multi-output node ``seq`` that the backward reads."""
    ptr, idx = arrays.arg_ptr, arrays.arg_idx
    return [j for j in backward if arrays.flags[j] & _C.F_GETITEM and ptr[j] < ptr[j + 1] and idx[ptr[j]] == seq]


__all__ = ["Hazard", "MUTATED_STATE", "RANDOM", "backward_only", "keep_saved", "mutated_inputs", "mutated_state",
           "recomputed_hazards", "unsafe_nodes"]
