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

The pick on those peaks (:func:`checked_pick`): the candidates are the
search's frontier and torch's own decisions at the seed budgets (its
knapsack at 0, 0.1, ..., 1).  At b=0 the plan is the lowest peak asked; at
b > 0 the cheapest candidate (by modelled recompute cost) that saves no more
bytes than torch's decision at b and whose inductor peak is at most L(b),
the lowest peak of torch's decisions asked at budgets >= b that save no
more.  At b > 0 torch's decision at b is asked (second, after its default),
so the plan at b is never above torch's at b as inductor runs it, never
saves more, and is never costlier by the model: the plan dominates torch at
the same budget.  The saved bytes matter where a step runs several graphs:
what one graph saves is held while the others run, which no graph's own peak
shows (measured on wav2vec2, four graphs: a pick on the graphs' own peaks
alone was 11% above stock at b=0.5).  b=1 is never above torch's default.
At b=0 the model's lowest point and torch's decisions in the order of their
modelled peaks are asked (torch's mid-budget decisions are often lower than
its budget-0 one under inductor, which fuses the recomputation).  Each
candidate asked costs an inductor lowering and code generation of both
modules, about as long as inductor's own compile of the step without its C++
build: ``max_asks`` and a time budget bound them.  The budget is spent
deterministically: before asking, the check predicts one ask's seconds from
the graph's size (:data:`ASK_SECONDS_PER_NODE`, measured) and asks only as
many candidates as fit (:func:`asks_within`), so a call asks the same
candidates on every machine; a wall-clock stop at :data:`OVERRUN` times the
budget is only a safety net.  Where no candidate besides torch's fits (a
24-layer GPT at the default 20 s), the check is skipped: the plan at b > 0
is then torch's own decision at b, at b=0 the model's lowest
(``CheckReport.skipped`` says why).
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
    #: inductor's peak of torch's default decision (0: not asked -- at b=0 only where it is not among the lowest)
    torch_peak: int = 0
    lowest_peak: int = 0
    picked: int = -1
    failed: str = ""
    #: why inductor was not asked at all ("" when it was): the time budget fits no candidate
    skipped: str = ""
    #: the candidates the time budget allowed (torch's included) and the seconds the asks took
    budget_asks: int = 0
    seconds: float = 0.0
    #: inductor's peak of each of torch's decisions asked, by the largest seed budget choosing it
    torch_asked: dict[float, int] = field(default_factory=dict)
    #: at b > 0: the bytes torch's decision at b saves, which the pick does not exceed (None: not compared)
    saved_limit: int | None = None
    #: the pick is torch's own decision at this budget (None: a decision of the search's only)
    picked_torch_budget: float | None = None


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


@dataclass(frozen=True)
class TorchDecision:
    """One of torch's own decisions among the check's candidates: the
    largest seed budget ``budget`` at which torch's knapsack chooses it (the
    same saved set at several budgets is one candidate), its modelled
    ``peak`` and recompute ``cost``."""

    budget: float
    peak: int
    cost: int


def _asking_order(front: Frontier, torch: Sequence[TorchDecision], budget: float,
                  lowest_candidates: int) -> list[int]:
    """The candidates in the order the check asks them (index ``n + k`` is
    ``torch[k]``; ``torch[0]`` is torch's default decision).  At b=0, where
    the pick is the lowest asked: the model's lowest point, then torch's
    decisions by modelled peak.  At b > 0: torch's default first, then at
    b < 1 torch's decisions at budgets >= b (the one at b first), then the
    model's lowest.  More frontier points come after (:func:`checked_pick`)."""
    n = len(front.peak_bytes)
    lowest = list(range(min(lowest_candidates, n)))
    others = list(range(n + 1, n + len(torch)))
    if budget == 0.0:
        # the pick is the lowest asked: torch's default is only one more of its decisions here
        return lowest + sorted(range(n, n + len(torch)), key=lambda j: (torch[j - n].peak, j))
    if budget < 1.0:
        rest = sorted((j for j in others if torch[j - n].budget >= budget), key=lambda j: (torch[j - n].budget, j))
        rest += lowest
    else:
        rest = lowest
    return [n] + rest


def checked_pick(front: Frontier, torch: Sequence[TorchDecision], budget: float, peak_of: Callable[[int], int], *,
                 lowest_candidates: int = 1, max_asks: int = 4, keep_asking: Callable[[], bool] = lambda: True,
                 same: Callable[[int], int] = lambda j: j,
                 saved_bytes: Sequence[int] | None = None) -> tuple[int, CheckReport]:
    """The candidate to use: an index into ``front``'s points, or ``n + k``
    (``n = len(front.peak_bytes)``) for torch's decision ``torch[k]``
    (``torch[0]``: its default, budget 1).  ``peak_of(j)``: inductor's peak
    of candidate ``j``; ``same(j)``: the first candidate with ``j``'s saved
    set (asked once); ``saved_bytes[j]``: the bytes candidate ``j`` saves
    (None: not compared).

    At most ``max_asks + 1`` candidates are asked, in :func:`_asking_order`,
    then at b=0 the frontier's next-lowest points, at b > 0 its cheapest
    (modelled cost) whose modelled peak is within ``MODEL_SLACK`` times the
    limit.  The pick: at b=0 the lowest peak asked (of equal peaks, the one saving
    fewest bytes, then the cheapest); at b > 0 the cheapest candidate
    that saves no more bytes than torch's decision at b and whose peak is
    at most the limit L(b), the lowest inductor peak of torch's decisions
    asked at budgets >= b that save no more than that.  So the plan at b is
    never above torch's decision at b as inductor runs it, never saves more
    (what a step of several graphs holds while the others run), nor is
    costlier where torch's cost falls with its budget, as its knapsack
    makes it."""
    n = len(front.peak_bytes)
    if not torch or torch[0].budget != 1.0:
        raise ValueError("checked_pick: torch[0] must be torch's default decision (budget 1)")
    report = CheckReport()
    costs = [int(c) for c in front.recompute_flops] + [t.cost for t in torch]
    by_key: dict[int, int] = {}

    def ask(j: int) -> bool:
        key = same(j)
        if key not in by_key:
            # the first ask always runs (at b > 0 it is torch's default, the limit's last resort)
            if len(by_key) > max_asks or (by_key and not keep_asking()):
                return False
            by_key[key] = peak_of(j)
        report.asked[j] = by_key[key]
        return True

    at_b = min((k for k in range(len(torch)) if torch[k].budget >= budget), key=lambda k: (torch[k].budget, k))
    held = None if budget == 0.0 or saved_bytes is None else saved_bytes[n + at_b]

    def saves_within(j: int) -> bool:
        return held is None or saved_bytes is None or saved_bytes[j] <= held

    def limit() -> int | None:
        if budget == 0.0:
            return None
        above = [(p, saves_within(j)) for j, p in report.asked.items() if j >= n and torch[j - n].budget >= budget]
        return min((p for p, ok in above if ok), default=min(p for p, _ in above))

    for j in _asking_order(front, torch, budget, lowest_candidates):
        if not ask(j):
            break
    cap = limit()
    near = cap if cap is not None else 0
    # then at b=0 the frontier's next-lowest points, at b > 0 its cheapest within reach of the limit
    rank = (lambda k: (front.peak_bytes[k], k)) if budget == 0.0 else (lambda k: (costs[k], k))
    for j in sorted(range(n), key=rank):
        if len(by_key) > max_asks:
            break
        if j not in report.asked and (budget == 0.0 or front.peak_bytes[j] <= MODEL_SLACK * near) and not ask(j):
            break
    report.torch_peak = report.asked.get(n, 0)
    report.lowest_peak = min(report.asked.values())
    cap = limit()
    if cap is None:
        report.limit = report.lowest_peak
        # among equal peaks the one saving least (held while a step's other graphs run), then the cheapest
        report.picked = min(report.asked, key=lambda j: (report.asked[j], 0 if saved_bytes is None else saved_bytes[j],
                                                         costs[j], j))
    else:
        report.limit = cap
        report.saved_limit = held
        within = [j for j, p in report.asked.items() if p <= cap and saves_within(j)]
        if not within:  # torch's decision at b not asked (the wall-clock stop): the peak limit alone
            within = [j for j, p in report.asked.items() if p <= cap]
        report.picked = min(within, key=lambda j: (costs[j], report.asked[j], j))
    report.torch_asked = {torch[j - n].budget: p for j, p in report.asked.items() if j >= n}
    key = same(report.picked)
    report.picked_torch_budget = next((t.budget for k, t in enumerate(torch) if same(n + k) == key), None)
    return report.picked, report


__all__ = ["ASK_SECONDS_PER_NODE", "CheckReport", "TorchDecision", "asks_within", "checked_pick", "decision_peak",
           "inductor_peak", "prepared_copy"]
