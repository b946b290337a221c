"""The peak-aware memory plan's search, over the graph array (:mod:`fxcut.planned` wraps it).

torch's ``activation_memory_budget`` limits the summed bytes of the saved
values; what runs out is the *peak* of live activations over the forward and
the backward.  The planner simulates that peak for a decision (the C core,
:func:`fxcut._C.plan_simulate`) and searches the decisions (which forward
values to save, the others recomputed by the backward) for the Pareto
frontier of (peak, recompute FLOPs) (:func:`fxcut._C.plan_frontier`),
starting from torch's own decisions at budgets 0, 0.1, ..., 1, so that every
torch decision is on the frontier or dominated by a point of it.

``memory_budget`` b is on the peak: with P1 the simulated peak of torch's
default partition and P0 the lowest peak on the frontier, the plan is the
frontier point of least recompute cost whose peak is at most
``P0 + b * (P1 - P0)``.  The peak is therefore monotonic in b, b=1 gives a
peak no higher than torch's with no more recompute, b=0 the lowest peak found.

Never recomputed by a plan: inputs, MUST_SAVE-tagged values, random ops
(every op tagged ``nondeterministic_seeded``, unless tagged to be recomputed:
torch replays those), readers of state the step mutates (even when tagged),
collectives, impure / mutating / effectful ops, backward hooks, symbolic
values (:mod:`fxcut.solve.roles`, :mod:`fxcut.solve.hazards`).  Always
recomputed: MUST_RECOMPUTE / PREFER_RECOMPUTE tags (SAC, the ZeRO-3 walk),
values that must be in the backward.
"""

from __future__ import annotations

import math
import os
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import fxcut._C as _C
from . import core, memory
from .arrays import GraphArrays

DEFAULT_SEED_BUDGETS: tuple[float, ...] = tuple(k / 10 for k in range(11))
#: The search's work budget: units of (nodes + edges) per simulated decision.
#: The search stops there, at the same point on every machine, so separate
#: calls on one graph search the same frontier (monotonic in the budget).
DEFAULT_MAX_WORK = 40_000_000
#: The wall-clock safety net of the search (seconds), far above what the
#: work budget takes: a limit, not the usual stop.
DEFAULT_TIME_LIMIT = 60.0
#: The environment variable naming how many decisions the search simulates
#: at once, each on a thread of its own (1 to ``_C.PLAN_MAX_THREADS``).
THREADS_ENV = "FXCUT_PLAN_THREADS"
#: Without it: the CPUs this process may run on, at most this many.
DEFAULT_MAX_THREADS = 8


def search_threads() -> int:
    """The threads the plan's search runs on: ``$FXCUT_PLAN_THREADS``, else
    the CPUs this process may use (at most :data:`DEFAULT_MAX_THREADS`).
    The frontier is the same whatever the number (the C search takes the
    results in its own order, ``csrc/plan.c``, "lanes"); only its wall time
    changes.  A bad value is a ValueError naming the variable."""
    text = os.environ.get(THREADS_ENV)
    if text is not None and text.strip() != "":
        try:
            wanted = int(text)
        except ValueError:
            wanted = 0
        if not 1 <= wanted <= _C.PLAN_MAX_THREADS:
            raise ValueError(f"{THREADS_ENV}={text!r}: expected a whole number of threads in "
                             f"[1, {_C.PLAN_MAX_THREADS}]")
        return wanted
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on every platform
        cpus = os.cpu_count() or 1
    return max(1, min(DEFAULT_MAX_THREADS, cpus))


# --------------------------------------------------------------------------- simulation and frontier


class Simulation(NamedTuple):
    peak_bytes: int
    fw_peak_bytes: int
    bw_peak_bytes: int
    saved_bytes: int
    recompute_flops: int
    peak_step: int
    n_fw_steps: int
    n_recomputed: int
    saved: bytes
    schedule: memoryview
    live_bytes: memoryview


class Frontier(NamedTuple):
    peak_bytes: list[int]
    recompute_flops: list[int]
    masks: list[bytes]
    n_free: int
    n_evals: int
    exact: bool
    timed_out: bool
    work: int
    out_of_work: bool
    #: the decisions the search simulated at once (threads: :func:`search_threads`)
    lanes: int = 1


@dataclass
class PlanProblem:
    """One graph's plan inputs: the arrays, roles, storages and costs.

    ``flops``: per node, the cost of recomputing it as an op or kernel of its
    own -- torch's FLOPs, or modelled picoseconds (:mod:`fxcut.solve.cost`);
    the search minimises its sum over recomputed nodes (named
    ``recompute_flops`` throughout, whatever the unit).  ``inductor``: None
    for the unfused memory model, else the inductor model's inputs
    (:class:`fxcut.solve.memory.InductorModel`; its ``fused_cost`` prices a
    recomputed node inlined into a reader)."""

    arrays: GraphArrays
    num_fwd_outputs: int
    roles: bytes
    storage: array[int]
    flops: array[int]
    marks: bytes | None = None
    inductor: memory.InductorModel | None = None
    hold_saved: bool = False
    workspace: array[int] | None = None

    def _model(self) -> dict[str, Any]:
        return self.model_inputs().model_options()

    def model_inputs(self) -> memory.ModelInputs:
        """The memory model's inputs of this problem."""
        marks = self.marks if self.marks is not None else bytes(len(self.arrays))
        return memory.ModelInputs(self.storage, self.flops, marks, self.inductor, self.hold_saved,
                                 self.workspace)

    def simulate(self, saved: bytes | Sequence[int], roles: bytes | None = None) -> Simulation:
        mask = saved if isinstance(saved, bytes) else saved_mask(len(self.arrays), saved)
        out = core.plan_simulate(self.arrays, num_fwd_outputs=self.num_fwd_outputs, role=roles or self.roles,
                                 saved=mask, storage_of=self.storage, flops=self.flops, marks=self.marks,
                                 **self._model())
        return Simulation(*out)

    def model_point(self, saved: Sequence[int]) -> tuple[int, int]:
        """(peak, recompute cost) of the decision saving exactly ``saved``:
        the memory model alone, no plan role applied."""
        est = memory.simulate(self.arrays, saved, self.num_fwd_outputs, self.model_inputs())
        return est.peak_bytes, est.recompute_flops

    def step_cost(self, saved: Sequence[int]) -> int:
        """The modelled cost of the whole step (forward and backward) of the
        decision saving exactly ``saved``, in ``flops``' unit: every op or
        kernel the memory model runs costs ``flops[node]``, a recomputed node
        inlined into a reader (inductor model) its ``fused_cost``."""
        r = core.memory_simulate(self.arrays, saved, num_fwd_outputs=self.num_fwd_outputs, storage_of=self.storage,
                                 flops=self.flops, marks=self.marks, timeline=True, **self._model())
        schedule = list(r.schedule) if r.schedule is not None else []
        kernels = set(schedule)
        total = sum(int(self.flops[v]) for v in schedule)
        inlined = self.inductor.fused_cost if self.inductor is not None else None
        if inlined is not None:
            total += sum(int(inlined[i]) for i, m in enumerate(r.recomputed) if m and i not in kernels)
        return total

    def frontier(self, seeds: Sequence[bytes], *, roles: bytes | None = None, exact_max_free: int = 16,
                 max_work: int = DEFAULT_MAX_WORK, time_limit: float = 60.0, max_points: int = 1024) -> Frontier:
        n = len(self.arrays)
        peaks, costs, masks, n_free, n_evals, exact, timed_out, work, out_of_work, lanes = core.plan_frontier(
            self.arrays, num_fwd_outputs=self.num_fwd_outputs, role=roles or self.roles,
            storage_of=self.storage, flops=self.flops, seeds=b"".join(seeds), exact_max_free=exact_max_free,
            max_work=max_work, time_limit=time_limit, max_points=max_points, marks=self.marks,
            threads=search_threads(), **self._model())
        return Frontier(list(peaks), list(costs), [masks[k * n:(k + 1) * n] for k in range(len(peaks))],
                        n_free, n_evals, exact, timed_out, work, out_of_work, lanes)


def saved_mask(n: int, saved: Sequence[int]) -> bytes:
    m = bytearray(n)
    for i in saved:
        m[i] = 1
    return bytes(m)


def limit_of(frontier: Frontier, budget: float, torch_peak: int) -> int:
    """The peak limit of ``budget``: ``P0 + budget * (torch_peak - P0)``, in whole bytes."""
    p0 = frontier.peak_bytes[0]
    return int(math.floor(p0 + budget * max(0, torch_peak - p0) + 1e-9))


def pick(frontier: Frontier, budget: float, torch_peak: int) -> int:
    """The frontier point for ``budget``: the least recompute cost with peak
    at most ``P0 + budget * (torch_peak - P0)``."""
    p0 = frontier.peak_bytes[0]
    limit = p0 + budget * max(0, torch_peak - p0)
    k = 0
    for j, p in enumerate(frontier.peak_bytes):
        if p <= limit + 1e-9:
            k = j
    return k


def region_groups(prob: PlanProblem, default: float, region_budget: Sequence[float | None]
                  ) -> list[tuple[float, list[int]]]:
    """The FREE nodes grouped by their region budget (``region_budget[i]``;
    ``default`` where None), groups in the graph order of their first node."""
    by_budget: dict[float, list[int]] = {}
    for i in range(len(prob.arrays)):
        if prob.roles[i] != _C.PLAN_ROLE_FREE:
            continue
        b = region_budget[i]
        by_budget.setdefault(default if b is None else float(b), []).append(i)
    if not by_budget:
        return [(default, [])]
    return list(by_budget.items())


def roles_for(roles: bytes, members: list[int], current: bytes) -> bytes:
    """``roles`` with only ``members`` FREE: every other FREE node held at
    ``current`` (saved where it saves, recomputed where it does not)."""
    out = bytearray(roles)
    keep = set(members)
    for i, r in enumerate(roles):
        if r == _C.PLAN_ROLE_FREE and i not in keep:
            out[i] = _C.PLAN_ROLE_SAVE if current[i] else _C.PLAN_ROLE_RECOMPUTE
    return bytes(out)


__all__ = ["DEFAULT_MAX_THREADS", "DEFAULT_MAX_WORK", "DEFAULT_SEED_BUDGETS", "DEFAULT_TIME_LIMIT", "Frontier",
           "PlanProblem", "Simulation", "THREADS_ENV", "limit_of", "pick", "region_groups", "roles_for",
           "saved_mask", "search_threads"]
