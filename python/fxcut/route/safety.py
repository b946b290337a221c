"""Where torch's decision recomputes what must not be recomputed: warn, or keep it saved.

torch's partitioner may recompute, in the backward, a value whose node
draws random numbers (its budget path: pytorch #190758) or reads state the
step mutates (batch norm's running statistics under
``activation_memory_budget < 1``): the backward then sees other numbers
than the forward, or fails autograd's version check
(:mod:`fxcut.solve.hazards` says which nodes those are).

The route's decision step hands its saved values to :func:`safe_saved`:

- torch's exact decision (no objective, ``safe_budget`` off) is kept as it
  is -- fxcut's default path is torch's decision -- with one
  :class:`UnsafeRecomputeWarning` per op and reason, naming the op, the
  upstream issue and the fix;
- under ``safe_budget=True`` (or ``FXCUT_SAFE_BUDGET=1``) such values are
  kept saved instead (:func:`fxcut.solve.hazards.keep_saved`): saving gives
  the backward exactly the forward's values at the cost of their bytes,
  where replaying the RNG state would need torch's RNG functionalization
  (a CPU state copy per op, graph-safe on CUDA only) and could not help a
  reader of mutated state at all;
- a plan with an objective gets the same guarantee (its own roles already
  avoid such nodes; this holds for any objective).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from .._warn import warn_user
from ..solve.budget import BudgetDecision
from ..solve.hazards import RANDOM, Hazard, Unsafe, keep_saved, recomputed_hazards
from .plan import SAFE_BUDGET_ENV, Plan

log = logging.getLogger("fxcut")

#: The upstream report of torch recomputing random ops, and its proposed fixes.
RANDOM_UPSTREAM = "pytorch/pytorch#190758; fixes proposed in #190759 and #191684"


class UnsafeRecomputeWarning(UserWarning):
    """torch's decision recomputes a value whose node draws random numbers
    or reads mutated state: its gradients or its step are wrong
    (``safe_budget=True`` keeps such values saved)."""


_lock = threading.Lock()
_warned: set[str] = set()


def safe_saved(plan: Plan, chosen: BudgetDecision[Any], saved: list[int], unsafe: Unsafe) -> list[int]:
    """The saved node indices to build from, given the decision step's
    ``saved`` for ``plan`` and the graph's ``unsafe`` nodes (module docstring)."""
    if chosen.stage == "no_backward":
        return saved
    decision = chosen.decision
    if not unsafe:
        return saved
    if plan.objective is None and not plan.safe_budget:
        for hazard in recomputed_hazards(decision, saved, plan.num_fwd_outputs, unsafe):
            _warn(hazard, plan.budget)
        return saved
    kept = keep_saved(decision, saved, plan.num_fwd_outputs, unsafe)
    if len(kept) != len(saved):
        added = ", ".join(decision.arrays.name(i) for i in kept[len(saved):])
        if plan.objective is None:
            log.info("safe_budget: kept saved what torch's decision recomputes unsafely: %s", added)
        else:  # the objective's roles should have kept them: its own figures (peak, recompute) are off
            log.warning("%r chose to recompute values that must not be; kept saved: %s", plan.objective, added)
    return kept


def warning_text(hazard: Hazard, budget: float) -> str:
    """The warning for one hazard of torch's decision under ``budget``."""
    where = f" under activation_memory_budget={budget:g}" if budget < 1 else ""
    fix = (f"fxcut keeps torch's decision; pass safe_budget=True (or set {SAFE_BUDGET_ENV}=1) to keep "
           "such values saved")
    if hazard.kind == RANDOM:
        return (f"fxcut: torch's partition{where} recomputes {hazard.op} (node {hazard.name!r}) in the "
                "backward, where it draws other random numbers than the forward did: the gradients are not "
                f"eager mode's ({RANDOM_UPSTREAM}). {fix}.")
    return (f"fxcut: torch's partition{where} recomputes {hazard.op} (node {hazard.name!r}) in the "
            f"backward, where it reads input {hazard.reads!r} after the step has updated it (e.g. batch "
            "norm's running statistics): the backward fails autograd's version check (\"modified by an "
            "inplace operation\") or reads the updated value (no upstream issue known to fxcut). "
            f"{fix}.")


def _warn(hazard: Hazard, budget: float) -> None:
    key = f"{hazard.kind}:{hazard.op}"
    with _lock:
        if key in _warned:
            return
        _warned.add(key)
    warn_user(warning_text(hazard, budget), UnsafeRecomputeWarning)


def reset_warnings() -> None:
    """Warn again for reasons already warned about (tests)."""
    with _lock:
        _warned.clear()


__all__ = ["RANDOM_UPSTREAM", "UnsafeRecomputeWarning", "reset_warnings", "safe_saved", "warning_text"]
