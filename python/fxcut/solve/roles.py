"""What a plan may do with each node of a joint graph: save it, recompute
it, choose, or leave it to the backward (``_C.PLAN_ROLE_*``).

One rule, read by the peak-aware planner (:mod:`fxcut.planned`) to bound
its search and by the route's decision step (:func:`fxcut.route.decide.check_saved`)
to accept an objective's choice: a leaf module, so neither imports the other.
What recomputation would get wrong (random draws, reads of mutated state)
is :mod:`fxcut.solve.hazards`' rule.
"""

from __future__ import annotations

from typing import Any

import fxcut._C as _C
from .core import Decision
from .hazards import MUTATED_STATE, Unsafe

_NEVER_RECOMPUTE = (_C.F_RANDOM | _C.F_COLLECTIVE | _C.F_IMPURE | _C.F_WITH_EFFECTS | _C.F_MUTABLE_HOP
                    | _C.F_FREE_OBJECT | _C.F_BW_HOOK | _C.F_SYM | _C.F_NON_TENSOR)
_SAVE_BANS = (_C.BAN_PRIMAL, _C.BAN_FWD_SEED, _C.BAN_MUST_SAVE, _C.BAN_RANDOM)
_RECOMPUTE_TAGS = (_C.TAG_MUST_RECOMPUTE, _C.TAG_PREFER_RECOMPUTE)


def _never_recompute(flag: int, seeded: int) -> int:
    """The flags that keep a node from being recomputed.  Two flags mean
    something else on some nodes, and torch recomputes those: a multi-output
    op (a sequence value: layer norm, SDPA, unbind) is flagged non-tensor;
    an op tagged ``nondeterministic_seeded`` (``seeded``) is impure to
    dead-code elimination (kept even when unused), which alone does not
    keep it from being recomputed -- whether it draws random numbers is the
    hazards' rule (:func:`fxcut.solve.hazards.unsafe_nodes`: SDPA without
    dropout does not)."""
    out = _NEVER_RECOMPUTE
    if flag & _C.F_VAL_IS_SEQ:
        out &= ~_C.F_NON_TENSOR
    if flag & _C.F_IMPURE and not flag & _C.F_RANDOM and seeded:
        out &= ~_C.F_IMPURE
    return out


def plan_roles(decision: Decision[Any], unsafe: Unsafe, seeded: bytes, marks: bytes | None = None) -> bytes:
    """What the plan may do with each node (``_C.PLAN_ROLE_*``), from the
    default decision's classification and its tags after torch's passes.
    A node the backward alone can compute (it depends on a tangent or a
    backward seed) is BACKWARD; every other non-input node may run in the
    forward (torch's required-forward and unclaimed nodes alike).
    ``marks``: the memory model's extraction marks; a node torch's
    extraction keeps in the forward (``X_MUST_FW``) is never recomputed;
    nor is a node that draws random numbers or reads state the step
    mutates (``unsafe``: :func:`fxcut.solve.hazards.unsafe_nodes`).
    ``seeded``: 1 per call of an op tagged ``nondeterministic_seeded``."""
    arrays = decision.arrays
    kind, flags = arrays.kind, arrays.flags
    cls, tag, ban = decision.node_class, decision.tag, decision.ban_reason
    roles = bytearray(len(arrays))
    in_ptr, in_idx = arrays.in_ptr, arrays.in_idx
    backward_only = _C.F_TANGENT | _C.F_BWD_SEED
    needs_backward = bytearray(len(arrays))  # depends on a tangent or a backward seed
    must_fw = _C.X_MUST_FW
    arg_ptr, arg_idx = arrays.arg_ptr, arrays.arg_idx
    # Random draws and reads of mutated state: never recomputed (the hazards' one rule).
    bad = unsafe.bits
    for i in range(len(arrays)):
        k = kind[i]
        needs_backward[i] = bool(
            (k == _C.KIND_PLACEHOLDER and flags[i] & backward_only) or k == _C.KIND_OUTPUT
            or cls[i] & _C.C_TANGENTS_CLOSURE or any(needs_backward[u] for u in in_idx[in_ptr[i]:in_ptr[i + 1]]))
        if k in (_C.KIND_PLACEHOLDER, _C.KIND_GET_ATTR):
            roles[i] = _C.PLAN_ROLE_INPUT
        elif needs_backward[i]:
            roles[i] = _C.PLAN_ROLE_BACKWARD
        elif bad[i] & MUTATED_STATE and not flags[i] & _C.F_MUST_BE_IN_BW:
            # Even when tagged to be recomputed (a checkpointed batch norm):
            # run in the backward it would read the state after the update.
            roles[i] = _C.PLAN_ROLE_SAVE
        elif cls[i] & _C.C_MUST_RECOMPUTE or tag[i] in _RECOMPUTE_TAGS or flags[i] & _C.F_MUST_BE_IN_BW:
            roles[i] = _C.PLAN_ROLE_RECOMPUTE
        elif (k != _C.KIND_CALL_FUNCTION or cls[i] & _C.C_INPUT or tag[i] == _C.TAG_MUST_SAVE
              or flags[i] & _never_recompute(flags[i], seeded[i]) or ban[i] in _SAVE_BANS
              or (marks is not None and marks[i] & must_fw) or bad[i]):
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
