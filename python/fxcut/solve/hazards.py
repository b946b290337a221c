"""Values the backward must not recompute: random draws and reads of mutated state.

Recomputing a forward value in the backward is only right when running its
node again gives the value the forward computed.  Two kinds of node break
that (:class:`Unsafe`):

- ``RANDOM``: the node draws from the random generator (every op torch tags
  ``nondeterministic_seeded``, read by :mod:`fxcut.torchrules.hazards`);
  run again, it draws different numbers, so the gradients are not eager's
  (pytorch #190758).  torch replays the RNG state only for
  ``MUST_RECOMPUTE``/``PREFER_RECOMPUTE``-tagged nodes (activation
  checkpointing), which are therefore not hazards.
- ``MUTATED_STATE``: the node reads an input the step mutates (batch norm's
  running statistics, a buffer updated in place), or a view of one.  Run in
  the backward, it reads the input after the update: autograd's version
  check fails (the update is copied back after the forward), or the
  backward silently reads the updated value (an in-graph ``copy_``).

Which nodes draw random numbers and which inputs the step mutates is
torch's knowledge (:mod:`fxcut.torchrules.hazards` reads it into two masks);
what follows from them is this module's one rule, read by the peak-aware
plan's roles (:mod:`fxcut.solve.roles`: never recompute such a node) and by
the route's decision step (:mod:`fxcut.route.safety`: warn when torch's
decision recomputes one, or keep it saved under ``safe_budget=True``,
:func:`keep_saved`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import fxcut._C as _C
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


@dataclass(frozen=True)
class Unsafe:
    """Per node, why recomputing it in the backward would be wrong
    (``bits``: ``RANDOM`` and ``MUTATED_STATE``; 0: safe), and which nodes
    are the mutated state itself (``state``: a mutated input or a view of
    one, 1).  Made by :func:`unsafe_nodes`."""

    bits: bytes
    state: bytes

    def __bool__(self) -> bool:
        return any(self.bits)


def mutated_state(arrays: GraphArrays, mutated_inputs: bytes) -> bytearray:
    """1 for each mutated input (``mutated_inputs``: one byte per node) and
    each view of one (torch's view ops, transitively): values that share the
    mutated storage, so saving one is no better than saving the input."""
    state = bytearray(mutated_inputs)
    if any(state):
        flags, arg_ptr, arg_idx = arrays.flags, arrays.arg_ptr, arrays.arg_idx
        for i in range(len(arrays)):
            if flags[i] & _C.F_VIEW and arg_ptr[i] < arg_ptr[i + 1] and state[arg_idx[arg_ptr[i]]]:
                state[i] = 1
    return state


def unsafe_nodes(arrays: GraphArrays, draws_random: bytes, mutated_inputs: bytes) -> Unsafe:
    """Per node, why recomputing it in the backward would be wrong:
    ``RANDOM`` where it draws random numbers (``draws_random``, one byte per
    node); ``MUTATED_STATE`` where it reads the state the step mutates
    (``mutated_inputs``: the mutated placeholders) without being a view of
    it."""
    out = bytearray(1 if r else 0 for r in draws_random) if any(draws_random) else bytearray(len(arrays))
    state = mutated_state(arrays, mutated_inputs)
    if any(state):
        kind, in_ptr, in_idx, flags = arrays.kind, arrays.in_ptr, arrays.in_idx, arrays.flags
        for i in range(len(arrays)):
            if (kind[i] == _C.KIND_CALL_FUNCTION and not state[i] and not flags[i] & _C.F_VIEW
                    and any(state[u] for u in in_idx[in_ptr[i]:in_ptr[i + 1]])):
                out[i] |= MUTATED_STATE
    return Unsafe(bytes(out), bytes(state))


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


def recomputed_hazards(decision: Decision[Any], saved: Sequence[int], num_fwd_outputs: int,
                       unsafe: Unsafe) -> list[Hazard]:
    """The unsafe nodes (:func:`unsafe_nodes`) the backward recomputes when
    the forward saves ``saved``: a forward value the backward needs and
    computes again, except a random node torch's RNG functionalization
    replays (tagged to be recomputed, and computed by the forward too)."""
    arrays = decision.arrays
    if not unsafe:
        return []
    bits = unsafe.bits
    where = placement(arrays, saved, num_fwd_outputs)
    chosen = set(saved)
    dep: bytearray | None = None
    tag = decision.tag
    found: list[tuple[int, int]] = []
    for i in sorted(where.backward):
        why = bits[i]
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
    return [_hazard(arrays, i, why, unsafe.state) for i, why in found]


def _hazard(arrays: GraphArrays, i: int, why: int, state: bytes) -> Hazard:
    if why & RANDOM:
        return Hazard(i, RANDOM, arrays.target(i), arrays.name(i), None)
    reads = next((arrays.name(u) for u in arrays.in_idx[arrays.in_ptr[i]:arrays.in_ptr[i + 1]] if state[u]), None)
    return Hazard(i, MUTATED_STATE, arrays.target(i), arrays.name(i), reads)


def keep_saved(decision: Decision[Any], saved: Sequence[int], num_fwd_outputs: int, unsafe: Unsafe) -> list[int]:
    """``saved`` plus what the forward must also save so that the backward
    recomputes no unsafe node: each such node itself, or, for a node with
    several outputs (a sequence value: ``native_dropout``, batch norm), its
    outputs the backward reads.  The forward then computes each of them
    once, as eager mode does.  ``saved``'s own order is kept; the additions
    follow, in graph order.  Raises NotImplementedError for a node it
    cannot keep saved (none is known)."""
    arrays = decision.arrays
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


__all__ = ["Hazard", "MUTATED_STATE", "RANDOM", "Unsafe", "backward_only", "keep_saved", "mutated_state",
           "recomputed_hazards", "unsafe_nodes"]
