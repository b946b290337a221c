"""What a plan may do with each node of a joint graph: save it, recompute
it, choose, or leave it to the backward (``_C.PLAN_ROLE_*``).

One rule, read by the peak-aware planner (:mod:`fxcut.planned`) to bound
its search and by the route's build step (:func:`fxcut.route.build.check_saved`)
to accept an objective's choice: a leaf module, so neither imports the other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

import fxcut._C as _C
from .core import Decision

if TYPE_CHECKING:
    from .arrays import GraphArrays

_NEVER_RECOMPUTE = (_C.F_RANDOM | _C.F_COLLECTIVE | _C.F_IMPURE | _C.F_WITH_EFFECTS | _C.F_MUTABLE_HOP
                    | _C.F_FREE_OBJECT | _C.F_BW_HOOK | _C.F_SYM | _C.F_NON_TENSOR)
_SAVE_BANS = (_C.BAN_PRIMAL, _C.BAN_FWD_SEED, _C.BAN_MUST_SAVE, _C.BAN_RANDOM)
_RECOMPUTE_TAGS = (_C.TAG_MUST_RECOMPUTE, _C.TAG_PREFER_RECOMPUTE)


def _never_recompute(flag: int, target: object) -> int:
    """The flags that keep a node from being recomputed.  Two flags mean
    something else on some nodes, and torch recomputes those: a multi-output
    op (a sequence value: layer norm, SDPA, unbind) is flagged non-tensor;
    an op tagged ``nondeterministic_seeded`` that torch's random rule does not
    ban (no F_RANDOM, e.g. SDPA without dropout) is impure only to dead-code
    elimination (kept even when unused), not to the partitioner."""
    out = _NEVER_RECOMPUTE
    if flag & _C.F_VAL_IS_SEQ:
        out &= ~_C.F_NON_TENSOR
    if flag & _C.F_IMPURE and not flag & _C.F_RANDOM and _seeded(target):
        out &= ~_C.F_IMPURE
    return out


def _seeded(target: object) -> bool:
    tags = getattr(target, "tags", ())
    return isinstance(target, torch._ops.OpOverload) and torch.Tag.nondeterministic_seeded in tags


def _mutated_inputs(arrays: GraphArrays, marks: bytes | None) -> bytearray:
    """Inputs the step mutates: the destination of an in-graph ``copy_``,
    and a placeholder a functionalized mutating op (``*_functional``, e.g.
    batch norm's running statistics) reads but no backward op does: its
    update is copied back into it after the forward.  A node reading one
    must not be recomputed: the backward would read the mutated value
    (autograd's version check fails; torch's own partitioner recomputes
    batch norm at activation_memory_budget=0 and fails so)."""
    n = len(arrays)
    kind, flags, in_ptr, in_idx = arrays.kind, arrays.flags, arrays.in_ptr, arrays.in_idx
    out = bytearray(n)
    if marks is not None:
        for i in range(n):
            if marks[i] & _C.X_COPY and arrays.arg_ptr[i] < arrays.arg_ptr[i + 1]:
                out[arrays.arg_idx[arrays.arg_ptr[i]]] = 1
    read_by_backward = bytearray(n)
    dep = bytearray(n)
    suspects: set[int] = set()
    for i in range(n):
        ins = in_idx[in_ptr[i]:in_ptr[i + 1]]
        dep[i] = bool(kind[i] == _C.KIND_PLACEHOLDER and flags[i] & (_C.F_TANGENT | _C.F_BWD_SEED)) or any(
            dep[u] for u in ins)
        if dep[i] and kind[i] != _C.KIND_OUTPUT:
            for u in ins:
                read_by_backward[u] = 1
        elif kind[i] == _C.KIND_CALL_FUNCTION and str(getattr(arrays.nodes[i].target, "_overloadpacket", "")
                                                      ).endswith("_functional"):
            suspects.update(u for u in ins if kind[u] == _C.KIND_PLACEHOLDER)
    for u in suspects:
        if not read_by_backward[u]:
            out[u] = 1
    return out


def plan_roles(decision: Decision, marks: bytes | None = None) -> bytes:
    """What the plan may do with each node (``_C.PLAN_ROLE_*``), from the
    default decision's classification and its tags after torch's passes.
    A node the backward alone can compute (it depends on a tangent or a
    backward seed) is BACKWARD; every other non-input node may run in the
    forward (torch's required-forward and unclaimed nodes alike).
    ``marks``: the memory model's extraction marks; a node torch's
    extraction keeps in the forward (``X_MUST_FW``) is never recomputed."""
    arrays = decision.arrays
    kind, flags = arrays.kind, arrays.flags
    cls, tag, ban = decision.node_class, decision.tag, decision.ban_reason
    roles = bytearray(len(arrays))
    in_ptr, in_idx = arrays.in_ptr, arrays.in_idx
    backward_only = _C.F_TANGENT | _C.F_BWD_SEED
    needs_backward = bytearray(len(arrays))  # depends on a tangent or a backward seed
    must_fw = _C.X_MUST_FW
    arg_ptr, arg_idx = arrays.arg_ptr, arrays.arg_idx
    mutated = _mutated_inputs(arrays, marks)
    for i in range(len(arrays)):
        k = kind[i]
        needs_backward[i] = bool(
            (k == _C.KIND_PLACEHOLDER and flags[i] & backward_only) or k == _C.KIND_OUTPUT
            or cls[i] & _C.C_TANGENTS_CLOSURE or any(needs_backward[u] for u in in_idx[in_ptr[i]:in_ptr[i + 1]]))
        if k in (_C.KIND_PLACEHOLDER, _C.KIND_GET_ATTR):
            roles[i] = _C.PLAN_ROLE_INPUT
        elif needs_backward[i]:
            roles[i] = _C.PLAN_ROLE_BACKWARD
        elif cls[i] & _C.C_MUST_RECOMPUTE or tag[i] in _RECOMPUTE_TAGS or flags[i] & _C.F_MUST_BE_IN_BW:
            roles[i] = _C.PLAN_ROLE_RECOMPUTE
        elif (k != _C.KIND_CALL_FUNCTION or cls[i] & _C.C_INPUT or tag[i] == _C.TAG_MUST_SAVE
              or flags[i] & _never_recompute(flags[i], arrays.nodes[i].target) or ban[i] in _SAVE_BANS
              or (marks is not None and marks[i] & must_fw)
              or any(mutated[u] for u in in_idx[in_ptr[i]:in_ptr[i + 1]])):
            roles[i] = _C.PLAN_ROLE_SAVE
        else:
            roles[i] = _C.PLAN_ROLE_FREE
    # A sequence value (a multi-output op) is never saved itself: its
    # getitems are.  Recomputable, it is recomputed when a recomputed getitem
    # needs it; not, its getitems are saved.
    for i in range(len(arrays)):
        if flags[i] & _C.F_VAL_IS_SEQ and roles[i] == _C.PLAN_ROLE_FREE:
            roles[i] = _C.PLAN_ROLE_RECOMPUTE
        if (flags[i] & _C.F_GETITEM and roles[i] != _C.PLAN_ROLE_BACKWARD and arg_ptr[i] < arg_ptr[i + 1]
                and roles[arg_idx[arg_ptr[i]]] == _C.PLAN_ROLE_SAVE):
            roles[i] = _C.PLAN_ROLE_SAVE
    return bytes(roles)


__all__ = ["plan_roles"]
