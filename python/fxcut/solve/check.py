"""The plan's pick checked by inductor itself: ``PeakPlanner(check="inductor")``, over the asks' answers.

The inductor memory model is an approximation, and a search over thousands
of decisions finds the ones it underestimates most (the optimizer's curse):
measured on real models, a plan's modelled peak can be 20% below what
inductor then runs.  So the planner's last step asks inductor: for a few
candidate saved sets it builds the forward and backward modules (torch's
extraction), hands them to inductor's lowering, scheduler and wrapper code
generation on fake tensors (:mod:`fxcut.torchrules.ask`, nothing
compiled) and reads the peak the generated code allocates -- what
a compiled step measures, to the bytes of the loss on the zoo (the buffers
a fallback kernel allocates and frees inside aside: SDPA's per-thread
ones, tens of KiB).

The pick on those peaks (:func:`checked_pick`): the candidates are the
search's frontier and torch's own decisions at the seed budgets (its
knapsack at 0, 0.1, ..., 1).  Which are asked does not depend on the
budget: the model's lowest point, torch's default, torch's other decisions
in the order of their modelled peaks, then the frontier's, as many as the
time budget fits; then, while some budget's pick is one of torch's
decisions not asked, that pick (settling: up to as many asks as twice the
time budget fits, and ``max_checks``), so that
every budget's pick stands at inductor's own peak and the peaks the
compiled steps run are monotonic in b, not only the check's figures.  A
candidate's peak is inductor's where asked; torch's
decisions not asked keep the model's (they are not optimized against it;
the search's points are, so those count only where asked), and count only
where the model prices them above torch's default, so that b=1 is torch's
default or a candidate asked: never above torch's default as inductor
runs it.  Candidates saving more bytes than torch's default are out: what
one graph saves is held while a step's other graphs run, which no graph's
own peak shows (measured on wav2vec2, four graphs).  The limit L(b): at
b=0 the lowest peak; at b > 0 the lowest of torch's decisions at budgets
>= b; and where the graph's saved tensors outlive its own run (it returns
more than a scalar loss: the next graph of a model split by graph breaks,
or eager code, runs before its backward), at b > 0 also the lowest peak +
saved bytes of those decisions (where nothing is within both, the
peak and the sum of the decision with the lowest sum).  The pick: the
cheapest candidate (modelled recompute cost) within L(b).  L(b) grows
with b over the same candidates, so the plan's peak is monotonic in b:
a cheaper candidate within a smaller budget's limit would have been
that budget's pick (with two limits, while no budget falls back to the
lowest sum's).  And at b > 0 the plan
is never above, nor by the model costlier than, the lowest of torch's
decisions at budgets >= b -- the stock point at b, or one below it that
recomputes no more by torch's knapsack.  Each candidate asked costs an
inductor lowering and code generation of both modules (their scalar C++
kernels only: the wrapper's memory is the same), a few seconds on a model
of a few hundred nodes: ``max_asks`` and a time budget bound them.  The
budget is spent deterministically: before asking, the check predicts one
ask's seconds from the graph's size (:data:`ASK_SECONDS_PER_NODE`,
measured) and asks only as many candidates as fit (:func:`asks_within`),
so a call asks the same candidates on every machine; a wall-clock stop at
:data:`OVERRUN` times the budget is only a safety net.  Where no candidate
besides torch's fits (a 24-layer GPT at 20 s; every graph at the default 0 s), the check is
skipped: the same rule then picks among torch's decisions on the model's
peaks at b > 0, and b=0 is the model's lowest (``CheckReport.skipped``
says why).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .planner import Frontier


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
    #: the bytes torch's default decision saves, which the pick does not exceed (None: not compared)
    saved_limit: int | None = None
    #: the picked candidate's peak (inductor's, or the model's where it was not asked) and whether it was not asked
    picked_peak: int = 0
    picked_by_model: bool = False
    #: the pick is torch's own decision at this budget (None: a decision of the search's only)
    picked_torch_budget: float | None = None
    #: the graph's saved tensors outlive its own run (:func:`holds_saved_tensors`), and at b > 0 the
    #: pick's peak plus saved bytes is at most ``held_limit`` too
    holds_saved: bool = False
    held_limit: int = 0
    #: the candidates asked after the ordered asks because they were some budget's pick on the model's
    #: figure, and whether every budget's pick was asked in the end (False: the settling asks ran out, or
    #: inductor was not asked)
    settling: list[int] = field(default_factory=list)
    settled: bool = False


#: Seconds one candidate's ask takes per joint-graph node (building both
#: modules, inductor's lowering, scheduling and wrapper code of each, its
#: C++ kernels scalar only): measured 4.6 ms on HF Llama (505 nodes, 2.3 s
#: per ask) and 5.3 ms on a 24-layer GPT (4,860 nodes, 26 s) on the 2-core
#: machine the benchmarks run on (with the vectorized kernels: 8.3 and 6.9 ms).
ASK_SECONDS_PER_NODE = 0.005
#: The asks stop (a safety net against a hung lowering) once they have run
#: this many times the budget.  It is wide on purpose: where it stops the
#: asks, the candidates -- and so the plan -- depend on the machine's load.
#: At 2x it stopped them on HF Llama with four compiling processes on two
#: cores (the partition took 83 s, 19 s unloaded): fewer candidates were
#: asked, and the plan at b=0 was a decision inductor puts at 16.3 MB
#: where a less loaded call picked one at 13.6 MB.  Ranks of one job that
#: compile side by side must plan alike.
OVERRUN = 10.0


def asks_within(time_limit: float, nodes: int) -> int:
    """How many candidates (torch's default decision included) the check
    asks within ``time_limit`` seconds on a joint graph of ``nodes`` nodes."""
    per_ask = max(1, nodes) * ASK_SECONDS_PER_NODE
    return int(time_limit // per_ask)


@dataclass(frozen=True)
class TorchDecision:
    """One of torch's own decisions among the check's candidates: the
    largest seed budget ``budget`` at which torch's knapsack chooses it (the
    same saved set at several budgets is one candidate), its modelled
    ``peak`` and recompute ``cost``."""

    budget: float
    peak: int
    cost: int


def _asking_order(front: Frontier, torch: Sequence[TorchDecision], lowest_candidates: int) -> list[int]:
    """The candidates in the order the check asks them (index ``n + k`` is
    ``torch[k]``; ``torch[0]`` is torch's default decision): the model's
    lowest point, torch's default, torch's other decisions by modelled peak,
    then the rest of the frontier by modelled peak.  The order does not
    depend on the budget: every call on a graph asks the same candidates,
    which is what keeps the plan's peak monotonic in b (:func:`checked_pick`)."""
    n = len(front.peak_bytes)
    lowest = list(range(min(lowest_candidates, n)))
    others = sorted(range(n + 1, n + len(torch)), key=lambda j: (torch[j - n].peak, j))
    rest = sorted(range(len(lowest), n), key=lambda k: (front.peak_bytes[k], k))
    return lowest + [n] + others + rest


def checked_pick(front: Frontier, torch: Sequence[TorchDecision], budget: float,
                 peak_of: Callable[[int], int] | None, *, lowest_candidates: int = 1, max_asks: int = 4,
                 keep_asking: Callable[[], bool] = lambda: True, same: Callable[[int], int] = lambda j: j,
                 saved_bytes: Sequence[int] | None = None, holds_saved: bool = False,
                 settle_asks: int = 0) -> tuple[int, CheckReport]:
    """The candidate to use: an index into ``front``'s points, or ``n + k``
    (``n = len(front.peak_bytes)``) for torch's decision ``torch[k]``
    (``torch[0]``: its default, budget 1).  ``peak_of(j)``: inductor's peak
    of candidate ``j`` (None: inductor is not asked; the model's peaks of
    torch's decisions alone); ``same(j)``: the first candidate with ``j``'s
    saved set (asked once); ``saved_bytes[j]``: the bytes candidate ``j``
    saves (None: not compared); ``holds_saved``: the graph's saved tensors
    stay alive while other work of the step runs (:func:`holds_saved_tensors`).

    At most ``max_asks + 1`` candidates are asked, in :func:`_asking_order`
    (the same for every budget).  The eligible candidates: those asked,
    torch's default, and torch's decisions not asked that the model prices
    above its default -- each at inductor's peak where asked, else the
    model's (torch's decisions are not optimized against the model; the
    search's points are, so they count only where asked) -- saving no more
    bytes than torch's default (what a step of several graphs holds while
    the others run).  The limit L(b): at b=0 the lowest eligible peak; at
    b > 0 the lowest peak of torch's eligible decisions at budgets >= b.
    The pick: the cheapest eligible candidate (modelled cost) with a peak at
    most L(b); at b=0, of the lowest peaks the one saving fewest bytes, then
    the cheapest.

    L(b) only grows with b and the eligible set is the same at every b, so
    the picked peak never falls as b grows: a cheaper pick at a larger b
    that were also within the smaller b's limit would have been picked
    there.  At b > 0 the pick is never above, nor by the model costlier
    than, the lowest of torch's decisions at budgets >= b; at b=1 it is
    torch's default or a candidate asked, so never above torch's default
    as inductor runs it.

    That order is on the check's figures, and a pick that is one of
    torch's decisions not asked stands at the model's figure: where the
    model misjudges two such picks, the compiled steps' peaks can fall as b
    grows (measured on BART: torch's decisions at 0.5 and 0.7, the model
    8.7% and 6.2% under inductor's code, the step 26.08 MiB at 0.5 and
    25.79 at 0.7).  So after the ordered asks, up to ``settle_asks`` more
    ask the picks themselves: while the pick at some budget -- 0 and each
    of torch's budgets, which between them give every budget's pick -- is
    not asked, the first such pick in the asking order is.  The asks still
    do not depend on ``budget``; once every budget's pick is asked (the
    report's ``settled``), every pick stands at inductor's own peak, so
    the peak inductor's code allocates is monotonic in b.

    ``holds_saved`` (with ``saved_bytes``): the graph's saved tensors stay
    alive while the step's other work runs, so at b > 0 a candidate counts
    twice: its peak (what it adds while it runs) and its peak plus the
    bytes it saves (what it holds while the rest runs, bounded by both
    summed).  The pick is within torch's lowest of each at budgets >= b;
    where no candidate is within both, within the peak and the sum of the
    one of torch's decisions with the lowest sum -- never above torch's
    decisions at budgets >= b by either, and at b=1 never above torch's
    default by either.  b=0 is unchanged (the lowest peak, then the fewest
    saved bytes).  Both limits grow with b, so while no budget falls back
    each pick is within every larger budget's limits and the argument above
    holds: as b grows the cost never rises and the pick is never lower by
    both measures; a budget that falls back may break it.  Measured on
    wav2vec2 (four graphs): torch's default decision for its first graph
    is 2 KB below its decision at 0.3 by its own peak but saves 3.7 MB
    more, held while the encoder's graph runs; on peaks alone the plan took
    it at every b > 0, 9-10% above stock's step at 0.3-0.7."""
    check = _Check(front, torch, peak_of, same, saved_bytes, holds_saved, keep_asking)
    if peak_of is not None:
        order = _asking_order(front, torch, lowest_candidates)
        for j in order:
            if not check.ask(j, max_asks):
                break
        check.settle(order, settle_asks)
    return check.finish(budget)


class _Check:
    """One check's state: the peaks asked (by saved set), the report, and
    the rule that picks on them (:func:`checked_pick`)."""

    def __init__(self, front: Frontier, torch: Sequence[TorchDecision], peak_of: Callable[[int], int] | None,
                 same: Callable[[int], int], saved_bytes: Sequence[int] | None, holds_saved: bool,
                 keep_asking: Callable[[], bool]) -> None:
        self.n = n = len(front.peak_bytes)
        if not torch or torch[0].budget != 1.0:
            raise ValueError("checked_pick: torch[0] must be torch's default decision (budget 1)")
        self.torch, self.peak_of, self.same, self.keep_asking = torch, peak_of, same, keep_asking
        self.report = CheckReport()
        self.costs = [int(c) for c in front.recompute_flops] + [t.cost for t in torch]
        self.by_key: dict[int, int] = {}
        self.saved_bytes = saved_bytes
        self.held = None if saved_bytes is None else saved_bytes[n]
        self.holds_saved = holds_saved and saved_bytes is not None

    def saved(self, j: int) -> int:
        return 0 if self.saved_bytes is None else self.saved_bytes[j]

    def ask(self, j: int, limit: int) -> bool:
        """Candidate ``j``'s peak, asked unless its saved set was; False
        where ``limit`` asks were made already, or the time is up (the
        first ask always runs)."""
        key = self.same(j)
        if key not in self.by_key:
            if len(self.by_key) > limit or (self.by_key and not self.keep_asking()):
                return False
            assert self.peak_of is not None
            self.by_key[key] = self.peak_of(j)
        self.report.asked[j] = self.by_key[key]
        return True

    def eligible_peaks(self) -> dict[int, int]:
        """Inductor's peak where asked (or asked for the same saved set);
        torch's decisions otherwise the model's, those costlier than its
        default only, so that no candidate on the model's word alone beats
        the default; nothing saving more than the default."""
        n, torch = self.n, self.torch
        peaks = dict(self.report.asked)
        for k, t in enumerate(torch):
            key = self.same(n + k)
            if key in self.by_key:
                peaks[n + k] = self.by_key[key]
            elif k == 0 or t.cost > torch[0].cost:
                peaks[n + k] = t.peak
        held = self.held
        return {j: p for j, p in sorted(peaks.items()) if held is None or self.saved(j) <= held}

    def choose(self, b: float, peaks: dict[int, int]) -> tuple[int, int, int, bool]:
        """The pick at budget ``b`` on ``peaks``: (candidate, limit, held limit, held counted)."""
        n, torch, saved, costs = self.n, self.torch, self.saved, self.costs
        holds = self.holds_saved and b > 0.0
        held_limit = 0
        ref = [j for j in peaks if j >= n and torch[j - n].budget >= b]
        cap = min(peaks.values()) if b == 0.0 else min(peaks[j] for j in ref)
        within = [j for j in peaks if peaks[j] <= cap]
        if holds:
            # what the graph adds to the step while it runs and holds while the rest runs: no more than
            # torch's lowest at budgets >= b by either; where no candidate is, no more than the decision
            # of theirs with the lowest peak + saved
            held_size = {j: peaks[j] + saved(j) for j in peaks}
            held_limit = min(held_size[j] for j in ref)
            both = [j for j in within if held_size[j] <= held_limit]
            if not both:
                cap = peaks[min(ref, key=lambda j: (held_size[j], peaks[j], j))]
                both = [j for j in peaks if peaks[j] <= cap and held_size[j] <= held_limit]
            within = both
        if b == 0.0:
            return min(within, key=lambda j: (saved(j), costs[j], j)), cap, held_limit, holds
        return min(within, key=lambda j: (costs[j], peaks[j], saved(j), j)), cap, held_limit, holds

    def settle(self, order: list[int], settle_asks: int) -> None:
        """Ask, while some budget's pick is not asked, the first such pick
        in the asking order (up to ``settle_asks`` more asks).  Every
        budget's pick is one of these budgets' (torch's decisions count at
        the largest seed budget choosing them, so between two of them the
        limit is the larger one's)."""
        report = self.report
        settling = sorted({0.0} | {t.budget for t in self.torch})
        limit = len(self.by_key) - 1 + settle_asks
        while True:
            peaks = self.eligible_peaks()
            picks = {self.choose(b, peaks)[0] for b in settling}
            open_picks = [j for j in order if j in picks and j not in report.asked]
            if not open_picks:
                report.settled = True
                return
            before = len(self.by_key)
            if not self.ask(open_picks[0], limit):
                return
            if len(self.by_key) > before:
                report.settling.append(open_picks[0])

    def finish(self, budget: float) -> tuple[int, CheckReport]:
        """The pick at ``budget`` and the report of the whole check."""
        n, torch, report = self.n, self.torch, self.report
        peaks = self.eligible_peaks()
        report.picked, report.limit, report.held_limit, report.holds_saved = self.choose(budget, peaks)
        report.saved_limit = self.held
        report.picked_peak = peaks[report.picked]
        report.picked_by_model = report.picked not in report.asked
        report.torch_peak = report.asked.get(n, 0)
        report.lowest_peak = min(report.asked.values(), default=0)
        report.torch_asked = {torch[j - n].budget: p for j, p in report.asked.items() if j >= n}
        key = self.same(report.picked)
        report.picked_torch_budget = next((t.budget for k, t in enumerate(torch) if self.same(n + k) == key), None)
        return report.picked, report


__all__ = ["ASK_SECONDS_PER_NODE", "CheckReport", "OVERRUN", "TorchDecision", "asks_within", "checked_pick"]
