"""The plan's pick checked by inductor itself: ``PeakPlanner(check="inductor")``.

The inductor memory model is an approximation, and a search over thousands
of decisions finds the ones it underestimates most (the optimizer's curse):
measured on real models, a plan's modelled peak can be 20% below what
inductor then runs.  So the planner's last step asks inductor: for a few
candidate saved sets it builds the forward and backward modules (torch's
extraction), hands them to inductor's lowering, scheduler and wrapper code
generation on fake tensors (:func:`fxcut.torchrules.inductor.ask_inductor`,
nothing compiled) and reads the peak the generated code allocates -- what
a compiled step measures, to the bytes of the loss on the zoo.

The pick on those peaks (:func:`checked_pick`): inductor is asked about a
few candidates chosen without regard to the budget -- torch's default
decision, the frontier point of lowest modelled peak, the cheapest points
whose modelled peak is near torch's -- and with T1 inductor's peak of
torch's decision and T0 the lowest peak asked, the plan is the cheapest
candidate (by modelled recompute cost) whose inductor peak is at most
``T0 + b * (T1 - T0)``.  torch's default decision is always within the limit
at b=1, so b=1 is never above it; since the candidates are the same for
every b, the peak is monotonic in b.  Each candidate asked costs an inductor
lowering and code generation of both modules, about as long as inductor's
own compile of the step without its C++ build: ``max_asks`` and a time
budget bound them.  The budget is spent deterministically: before asking,
the check predicts one ask's seconds from the graph's size
(:data:`ASK_SECONDS_PER_NODE`, measured) and asks only as many candidates
as fit (:func:`asks_within`), so two calls for two budgets on one graph ask
the same candidates on every machine; a wall-clock stop at
:data:`OVERRUN` times the budget is only a safety net.  Where no candidate
besides torch's fits (a 24-layer GPT at the default 20 s), the check is
skipped: the plan at b=1 is then torch's default decision itself, at b<1
the model's pick (``CheckReport.skipped`` says why).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch.fx as fx

from .solve.planner import Frontier
from .torchrules.versions import Rules

log = logging.getLogger("fxcut")


@dataclass
class CheckReport:
    """What the check asked: inductor's peak per candidate (by its index in
    the candidate list) and the limit it picked under."""

    asked: dict[int, int] = field(default_factory=dict)
    limit: int = 0
    torch_peak: int = 0
    lowest_peak: int = 0
    picked: int = -1
    failed: str = ""
    #: why inductor was not asked at all ("" when it was): the time budget fits no candidate
    skipped: str = ""
    #: the candidates the time budget allowed (torch's included) and the seconds the asks took
    budget_asks: int = 0
    seconds: float = 0.0


def prepared_copy(joint_module: fx.GraphModule, prep: Any, lowered: Sequence[fx.Node]
                  ) -> tuple[fx.GraphModule, dict[str, fx.Node]]:
    """A copy of the joint module with the route's planned dead-code
    elimination and CSE applied (the graph the decision's node indices
    describe), and its nodes by name; ``prep`` None: a plain copy."""
    from .torchrules import prepare
    from .torchrules.snapshot import copy_graph_module

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


def inductor_peak(joint_module: fx.GraphModule, saved_nodes: Sequence[fx.Node], num_fwd_outputs: int,
                  rules: Rules) -> int:
    """The peak inductor's generated code allocates for the step whose
    forward saves ``saved_nodes`` (nodes of ``joint_module``; the larger of
    the forward's and the backward's); the modules built by torch's passes
    as the release of ``rules`` runs them."""
    from torch.utils._ordered_set import OrderedSet

    from .route import build
    from .torchrules import extract
    from .torchrules.inductor import ask_inductor, donated_indices

    fw, bw = build.torch_build_modules(joint_module, extract.split_saved(list(saved_nodes)), num_fwd_outputs,
                                       OrderedSet(), False, False, rules)
    f = ask_inductor(fw, is_backward=False)
    b = ask_inductor(bw, is_backward=True, donated=donated_indices(fw, bw))
    return max(f.wrapper_peak, b.wrapper_peak)


def decision_peak(plan: Any, nodes: Sequence[fx.Node], saved: Sequence[int], num_fwd_outputs: int) -> int:
    """Inductor's peak of the decision saving ``saved`` (indices into
    ``nodes``, the plan's lowered nodes) of the planned call ``plan``
    (:class:`fxcut.route.plan.Plan`): the graph after the plan's DCE/CSE,
    split and built as the route builds it, then :func:`inductor_peak`."""
    copy, by_name = prepared_copy(plan.joint_module, plan.prep, nodes)
    return inductor_peak(copy, [by_name[nodes[i].name] for i in saved], num_fwd_outputs, plan.rules)


#: Seconds one candidate's ask takes per joint-graph node (building both
#: modules, inductor's lowering, scheduling and wrapper code of each):
#: measured 8.3 ms on HF Llama (470 nodes, 3.9 s per ask) and 6.9 ms on a
#: 24-layer GPT (5,202 nodes, 36 s) on the 2-core machine the benchmarks run on.
ASK_SECONDS_PER_NODE = 0.008
#: The asks stop (safety net) once they have run this many times the budget.
OVERRUN = 2.0


def asks_within(time_limit: float, nodes: int) -> int:
    """How many candidates (torch's default decision included) the check
    asks within ``time_limit`` seconds on a joint graph of ``nodes`` nodes."""
    per_ask = max(1, nodes) * ASK_SECONDS_PER_NODE
    return int(time_limit // per_ask)


#: Candidates whose modelled peak exceeds the limit by more than this factor
#: are not asked (the model's error on the benchmark stays well inside it).
MODEL_SLACK = 1.3


def checked_pick(front: Frontier, torch_cost: int, budget: float, peak_of: Callable[[int], int], *,
                 lowest_candidates: int = 1, max_asks: int = 4,
                 keep_asking: Callable[[], bool] = lambda: True) -> tuple[int, CheckReport]:
    """The candidate to use: an index into ``front``'s points, or
    ``len(front.peak_bytes)`` for torch's default decision (modelled cost
    ``torch_cost``).  ``peak_of(j)``: inductor's peak of candidate ``j``.

    The candidates asked do not depend on the budget, so separate calls
    pick monotonically: torch's default decision, the ``lowest_candidates``
    points of lowest modelled peak, then the cheapest points whose modelled
    peak is within ``MODEL_SLACK`` times inductor's peak of torch's decision,
    ``max_asks`` in all besides torch's.  With T1 inductor's peak of torch's
    decision and T0 the lowest peak asked, the plan is the cheapest
    candidate asked whose peak is at most ``T0 + budget * (T1 - T0)``."""
    n = len(front.peak_bytes)
    report = CheckReport()
    report.torch_peak = report.asked[n] = peak_of(n)
    costs = [int(c) for c in front.recompute_flops] + [torch_cost]
    wanted = list(range(min(lowest_candidates, n)))
    for j in sorted(range(n), key=lambda k: (costs[k], k)):
        if len(wanted) >= max_asks:
            break
        if j not in wanted and front.peak_bytes[j] <= MODEL_SLACK * report.torch_peak:
            wanted.append(j)
    for j in wanted[:max_asks]:
        if not keep_asking():
            break
        report.asked[j] = peak_of(j)
    report.lowest_peak = min(report.asked.values())
    limit = report.lowest_peak + budget * (report.torch_peak - report.lowest_peak)
    report.limit = int(limit)
    within = [j for j, p in report.asked.items() if p <= limit]
    report.picked = min(within, key=lambda j: (costs[j], report.asked[j], j))
    return report.picked, report


__all__ = ["ASK_SECONDS_PER_NODE", "CheckReport", "asks_within", "checked_pick", "decision_peak", "inductor_peak",
           "prepared_copy"]
