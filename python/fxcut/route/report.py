"""What fxcut decided, reported where users look: the plans, the log, torch's structured trace.

After every partition call (:func:`fxcut.partition.partition`, once the
guard has settled who partitioned the graph) :func:`partitioned` numbers
the graph and reports it:

- **the plans** -- each graph fxcut's peak plan partitioned (the
  backends' ``memory_budget``, :func:`fxcut.planned_partitioner`,
  DeepSpeed's ``install(memory_budget=b)``) as a :class:`PlanReport`, the
  last :data:`MAX_PLANS` of the process in :func:`last_plans`
  (thread-safe): the graph, the budget, the plan's modelled peak against
  torch's own decision at the same b and at its default budget (on the
  same memory model), the recompute cost, the check's or the exact
  solver's word, and the whole record (:class:`~fxcut.solve.peakplan.PlanChoice`);
- **the log** -- one INFO line per planned graph, in human units
  (:meth:`PlanReport.summary`); the default path keeps its own decision
  line (:mod:`fxcut.route.build`);
- **torch's structured trace** (``TORCH_TRACE``, what tlparse renders) --
  one ``fxcut_partition`` JSON artifact per graph, on every path: the
  default path, ``safe_budget``, the plan, a user's objective, and the
  graphs handed to torch's partitioner (with the reason), through the
  call's adapter (:meth:`fxcut.torchrules.adapter.TorchAdapter.trace_partition`).

A report never changes or fails a partition: what fails in it is logged.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import threading
from collections import deque
from dataclasses import dataclass
from typing import Any

from .._numbers import human_bytes, human_cost
from .._version import __version__
from ..solve.peakplan import PlanChoice
from ..torchrules.adapter import TorchAdapter
from .decide import Decided
from .plan import Plan

log = logging.getLogger("fxcut")

#: How many plans :func:`last_plans` keeps (the oldest dropped first).
MAX_PLANS = 256

#: The paths a graph takes (the trace's ``path``), and what :func:`fxcut.partition_counts` counts each as.
PATHS = {"default": "fxcut", "safe_budget": "fxcut_safe_budget", "plan": "fxcut_plan",
         "objective": "fxcut_objective", "torch": ""}


def path_of(objective: object, safe_budget: bool) -> str:
    """The path of a call: ``"plan"`` (fxcut's peak plan), ``"objective"``
    (a user's), ``"safe_budget"`` or ``"default"`` (torch's decision)."""
    from ..solve.peakplan import PeakPlanner

    if objective is None:
        return "safe_budget" if safe_budget else "default"
    return "plan" if isinstance(objective, PeakPlanner) else "objective"


@dataclass(frozen=True)
class PlanReport:
    """One graph fxcut's peak plan partitioned, as :func:`fxcut.last_plans`
    gives it.  Peaks and saved bytes are in bytes on the plan's memory
    model (``memory_model``); the recompute costs in the plan's unit
    (``cost``: ``"flops"``, torch's FLOPs, or ``"time"``, modelled
    picoseconds).  ``torch_peak_bytes`` / ``torch_recompute``: torch's own
    decision at ``activation_memory_budget`` = this plan's ``budget`` (which
    bounds torch's saved bytes, not the peak: another b); the
    ``torch_default_*`` figures: torch's default decision (budget 1), what
    a compile without the plan runs.  ``saved_bytes``: what the saved
    values hold on the model (the storages of activations; inputs aside);
    ``kept_saved``: the values torch's decisions would recompute unsafely
    (random ops, readers of mutated state), which the plan keeps saved.  ``choice``: the plan's whole record
    (``check``: inductor's peaks where it was asked; ``lower_bound_bytes``,
    ``gap``, ``proven_optimal``: the exact solver's certificate)."""

    graph: int
    compile_id: str | None
    nodes: int
    budget: float
    memory_model: str
    cost: str
    peak_bytes: int
    torch_peak_bytes: int
    torch_default_peak_bytes: int
    recompute: int
    torch_recompute: int
    torch_default_recompute: int
    saved: int
    saved_bytes: int
    seconds: float
    kept_saved: tuple[str, ...]
    choice: PlanChoice

    def __str__(self) -> str:
        return self.summary()

    def summary(self) -> str:
        """The plan in one line, in human units (the INFO line)."""
        b, unit = f"{self.budget:g}", self.cost
        where = f"compile {self.compile_id}, " if self.compile_id else ""
        parts = [f"plan: graph {self.graph} ({where}{self.nodes} nodes), b={b} on the {self.memory_model} model: "
                 f"peak {human_bytes(self.peak_bytes)} against torch's {human_bytes(self.torch_peak_bytes)} at "
                 f"b={b} and {human_bytes(self.torch_default_peak_bytes)} at its default",
                 f"recompute {human_cost(self.recompute, unit)} (torch {human_cost(self.torch_recompute, unit)} at "
                 f"b={b}, {human_cost(self.torch_default_recompute, unit)} at its default)",
                 f"{self.saved} values saved ({human_bytes(self.saved_bytes)} of activations)"]
        parts += _check_words(self.choice) + _exact_words(self.choice)
        if self.kept_saved:
            parts.append(f"kept saved what torch's decisions recompute unsafely: {', '.join(self.kept_saved)}")
        if self.choice.timed_out:
            parts.append("the search's time limit cut it short")
        parts.append(f"planned in {_seconds(self.seconds)}")
        return "; ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        """The report as JSON-able data (the trace artifact's ``plan``)."""
        c = self.choice
        return {
            "graph": self.graph, "compile_id": self.compile_id, "nodes": self.nodes, "budget": self.budget,
            "budget_bounds": "the modelled peak", "memory_model": self.memory_model,
            "cost_unit": "ps" if self.cost == "time" else "flops", "peak_bytes": self.peak_bytes,
            "recompute": self.recompute, "saved": self.saved, "saved_activation_bytes": self.saved_bytes,
            "torch_at_budget": {"peak_bytes": self.torch_peak_bytes, "recompute": self.torch_recompute},
            "torch_default": {"peak_bytes": self.torch_default_peak_bytes, "recompute": self.torch_default_recompute},
            "kept_saved": list(self.kept_saved), "solver": c.solver, "timed_out": c.timed_out,
            "seconds": round(self.seconds, 6), "check": _check_dict(c), "exact": _exact_dict(c),
        }


def _seconds(s: float) -> str:
    return f"{s * 1e3:.0f} ms" if s < 1 else f"{s:.1f} s"


def _check_words(c: PlanChoice) -> list[str]:
    r = c.check
    if r is None:
        return []
    if r.skipped or r.failed:
        return [f"inductor not asked ({r.skipped or r.failed.splitlines()[0]}): the model's figures"]
    pick = f"{human_bytes(r.picked_peak)} by {'the model' if r.picked_by_model else 'inductor'}"
    torch = f", torch's default {human_bytes(r.torch_peak)}" if r.torch_peak else ""
    return [f"inductor asked about {len(r.asked)} candidate(s) in {_seconds(r.seconds)}: the pick {pick}{torch}"]


def _exact_words(c: PlanChoice) -> list[str]:
    if c.solver == "search":
        return []
    if c.lower_bound_bytes is None:
        return ["exact solver: no bound for this graph"]
    gap = "" if c.gap is None else f", gap {c.gap:.1%}"
    what = "lowest peak" if c.budget == 0 else "least recompute"
    proven = f"{what} proven" if c.proven_optimal else f"{what} not proven"
    return [f"exact solver: peak >= {human_bytes(c.lower_bound_bytes)}{gap}, {proven} "
            f"({'its plan' if c.from_exact else 'the search plan'}, {_seconds(c.exact_seconds)})"]


def _finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else x


def _check_dict(c: PlanChoice) -> dict[str, Any] | None:
    r = c.check
    if r is None:
        return None
    return {"asked": len(r.asked), "picked_peak_bytes": r.picked_peak, "picked_by_model": r.picked_by_model,
            "picked_torch_budget": r.picked_torch_budget, "torch_default_peak_bytes": r.torch_peak or None,
            "torch_asked": {f"{b:g}": p for b, p in r.torch_asked.items()}, "limit_bytes": r.limit,
            "skipped": r.skipped, "failed": r.failed, "settled": r.settled, "seconds": round(r.seconds, 6)}


def _exact_dict(c: PlanChoice) -> dict[str, Any] | None:
    if c.solver == "search":
        return None
    return {"lower_bound_bytes": c.lower_bound_bytes, "gap": _finite(c.gap),
            "recompute_lower_bound": c.recompute_lower_bound, "recompute_gap": _finite(c.recompute_gap),
            "proven_optimal": c.proven_optimal, "from_exact": c.from_exact, "seconds": round(c.exact_seconds, 6)}


_lock = threading.Lock()
_plans: deque[PlanReport] = deque(maxlen=MAX_PLANS)
_graphs = itertools.count(1)


def last_plans() -> list[PlanReport]:
    """The graphs fxcut's peak plan partitioned in this process, oldest
    first (the last :data:`MAX_PLANS`): one :class:`PlanReport` each.  A
    graph inductor found in its cache is not partitioned again, so not
    reported again."""
    with _lock:
        return list(_plans)


def reset_plans() -> None:
    """Forget the plans reported so far (tests)."""
    with _lock:
        _plans.clear()


def plan_report(graph: int, compile_id: str | None, plan: Plan, decided: Decided) -> PlanReport:
    """The report of a plan's graph, from its route's decision and record."""
    c = decided.choice
    assert c is not None
    arrays = decided.decision.arrays
    at_b = c.torch_at_budget if c.torch_at_budget is not None else c.torch_default
    return PlanReport(graph, compile_id, len(arrays), c.budget, c.memory_model, c.cost, c.peak_bytes, at_b[0],
                      c.torch_default[0], c.recompute_flops, at_b[1], c.torch_default[1], len(decided.saved),
                      c.saved_bytes, c.seconds, tuple(arrays.name(i) for i in c.kept_saved), c)


def _payload(graph: int, compile_id: str | None, path: str, plan: Plan | None, decided: Decided | None,
             report: PlanReport | None, reason: str, outcome: str) -> dict[str, Any]:
    """The ``fxcut_partition`` artifact's data for one graph."""
    out: dict[str, Any] = {"fxcut": __version__, "graph": graph, "compile_id": compile_id, "path": path}
    if plan is None or decided is None:
        return {**out, "counted_as": outcome, "reason": reason}
    chosen, saved = decided.decision, decided.saved
    arrays = chosen.arrays
    torch_saved = set(chosen.saved)
    out.update(torch=plan.torch.rules.release, nodes=len(arrays), stage=chosen.stage,
               budget=report.budget if report is not None else plan.budget,
               budget_bounds="the modelled peak" if report is not None else "saved bytes (activation_memory_budget)",
               saved=len(saved), saved_bytes=sum(int(arrays.nbytes[i]) for i in saved),
               saved_values=[arrays.name(i) for i in saved],
               saved_beyond_torch=[arrays.name(i) for i in saved if i not in torch_saved])
    if report is not None:
        out["plan"] = report.as_dict()
    return out


def partitioned(torch: TorchAdapter | None, path: str, plan: Plan | None, decided: Decided | None, *,
                reason: str = "", outcome: str = "") -> PlanReport | None:
    """Report one partition call (module docstring): ``path`` as
    :func:`path_of` gives it, or ``"torch"`` where torch's partitioner made
    the modules (``outcome``: as counted; ``reason``: why); ``plan`` and
    ``decided``: fxcut's route where it made them.  The plan's report
    where the graph was planned.  Never raises."""
    with _lock:
        graph = next(_graphs)
    report: PlanReport | None = None
    try:
        compile_id = _compile_id(torch)
        if plan is not None and decided is not None and decided.choice is not None:
            report = plan_report(graph, compile_id, plan, decided)
            with _lock:
                _plans.append(report)
            log.info("%s", report.summary())
        if torch is not None:
            torch.trace_partition(lambda: json.dumps(
                _payload(graph, compile_id, path, plan, decided, report, reason, outcome)))
    except Exception as e:  # noqa: BLE001  # a report never fails a partition
        log.warning("fxcut: could not report graph %d (%s: %s); its partition stands", graph, type(e).__name__, e)
    return report


def _compile_id(torch: TorchAdapter | None) -> str | None:
    if torch is None:
        return None
    return torch.compile_id()


__all__ = ["MAX_PLANS", "PATHS", "PlanReport", "last_plans", "partitioned", "path_of", "plan_report",
           "reset_plans"]
