"""The exact peak plan: a MILP over the memory model's description, solved by HiGHS.

Input: a :class:`fxcut.solve.liveness.Liveness` (the model restated as
decisions, events and live sets) and the C model itself (the ground truth:
every plan returned is simulated by it).  The formulation, per candidate v
(FREE: ``s[v]`` binary, the only integer variables):

- ``need[v] >= rc[c]`` for each candidate consumer c, ``need[v] <= sum rc[c]``
  (``need = 1`` when a backward step or a gradient reads v); FREE:
  ``rc = need - s``, ``s <= need``; SAVE: ``rc = 0``; RECOMPUTE: ``rc = need``.
- the pull rule, cumulative over slots: ``y[v,k]`` = "v is pulled by slot k":
  ``y <= rc[v]``, ``y >= y[c,k] + rc[v] - 1``, ``y <= sum_c y[c,k]`` below
  ``first_pull[v]``, ``= rc[v]`` from there.  A getitem is born with its
  producer: ``z[g,k] = rc[g] and y[p,k]``.
- every event (each backward step; a recomputation step inside a slot, added
  as the solutions need them; each forward step) bounds the peak:
  ``P >= fixed + sum_storage bytes * L`` with ``L >= born + alive - 1`` and
  born / alive the OR of terms, each at most the true indicator (exact with
  integral s).  An event added where the decision runs no step is a moment
  between two steps: its live set is inside the next step's, so the row is
  valid for every decision.

With every s integral the rows are the description exactly (the auxiliaries
are forced integral), so the MILP's optimum is the description's optimum, and
the description equals the C model where ``Liveness.inexact`` is empty and no
slot is messy (there the formulation omits terms: still a relaxation).  The
loop: solve, simulate the answer with the C model, add the rows it shows
missing (or, when none are, a no-good cut on the answer), repeat until the
bound meets the best plan or the time is up.  The bound is HiGHS's dual bound
of the last solve, capped by the best plan found: a proven lower bound on the
lowest peak (``objective="peak"``) or on the least recompute under a peak limit
(``objective="cost"``).
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

from .liveness import FREE, NEVER, RECOMPUTE, SAVE, STEP, Liveness, Storage

EXTRA = "exact"  # the pyproject extra that installs the solver
#: rows of backward steps the lazy MILP starts with at most (the highest certain bytes): each row
#: has a term per storage, so on a 24-layer GPT all of them would take longer than the time limit
MAX_FIRST_ROWS = 64


_BANNER_LOCK = threading.Lock()
_banner_done = False


def _highs() -> Any:
    """highspy, imported; a clear ImportError naming the extra when it is missing."""
    try:
        import highspy
    except ImportError:
        raise ImportError(f"the exact plan solver needs HiGHS: pip install 'fxcut[{EXTRA}]' (or highspy>=1.7)") \
            from None
    return highspy


def require() -> None:
    """Raise the ImportError naming the extra when HiGHS is not installed."""
    _highs()


def _new_highs() -> Any:
    """A silent Highs instance.  HiGHS prints a banner on stdout when the
    first instance of a process is made, before any option can stop it; that
    would corrupt a caller's stdout (``fxcut partition --json``), so the
    first one is made with file descriptor 1 pointed at /dev/null."""
    global _banner_done
    hs = _highs()
    with _BANNER_LOCK:
        if _banner_done:
            h = hs.Highs()
        else:
            sys.stdout.flush()
            saved = os.dup(1)
            try:
                with open(os.devnull, "w") as null:
                    os.dup2(null.fileno(), 1)
                    h = hs.Highs()
            finally:
                os.dup2(saved, 1)
                os.close(saved)
            _banner_done = True
    h.setOptionValue("output_flag", False)
    return h


Expr = tuple[float, dict[int, float]]  # constant, {column: coefficient}


@dataclass
class ExactResult:
    """What :func:`solve` found."""

    saved: set[int]  # FREE candidates saved (local indices of the Liveness)
    value: int  # the objective of that plan by the C model (peak bytes or recompute flops)
    bound: float  # a proven lower bound on the optimum (the value itself when proven optimal)
    optimal: bool
    seconds: float
    iterations: int
    rows: int
    cols: int
    exact_model: bool  # the formulation is the C model exactly (no inexact feature, no messy slot)


class _Model:
    """The MILP of one Liveness, built row by row (HiGHS columns and rows)."""

    def __init__(self, lv: Liveness, objective: str, limit: int | None) -> None:
        self.lv = lv
        self.h = _new_highs()
        self.h.setOptionValue("random_seed", 0)
        self.h.setOptionValue("mip_rel_gap", 0.0)
        self.h.setOptionValue("mip_abs_gap", 0.999)  # bytes and flops are integers
        self.objective = objective
        self.limit = limit
        self.ncol = 0
        self.nrow = 0
        self.s: dict[int, int] = {}
        self.need: dict[int, Expr] = {}
        self.y: dict[tuple[int, int], Expr] = {}
        self.fk: dict[int, Expr] = {}
        self.events: set[tuple[str, int, int]] = set()
        m = len(lv)
        # earliest / latest slot each candidate can be pulled in
        self.lo = [NEVER] * m
        self.hi = [-1] * m
        for v in range(m - 1, -1, -1):
            cs = [c for c in lv.consumers[v] if lv.kind[c] != SAVE]
            self.lo[v] = min([lv.first_pull[v]] + [self.lo[c] for c in cs])
            self.hi[v] = lv.first_pull[v] if lv.first_pull[v] < NEVER else max([-1] + [self.hi[c] for c in cs])
        self.peak_col = self.var(0.0, math.inf, 1.0 if objective == "peak" else 0.0)
        self.costs: dict[int, float] = {}
        self.offset = 0.0  # the objective's constant part (recompute no decision avoids)
        for v in range(m - 1, -1, -1):
            self._candidate(v)
        for c, a in self.costs.items():
            self.h.changeColCost(c, a)

    # ------------------------------------------------------------------ columns and rows

    def var(self, lb: float, ub: float, cost: float = 0.0, integer: bool = False) -> int:
        self.h.addVar(lb, ub)
        c = self.ncol
        self.ncol += 1
        if cost:
            self.h.changeColCost(c, cost)
        if integer:
            self.h.changeColIntegrality(c, _highs().HighsVarType.kInteger)
        return c

    def row(self, terms: dict[int, float], lo: float, hi: float) -> None:
        import numpy as np  # highspy's own dependency: the package imports nothing but torch at import

        idx = np.array([c for c, a in terms.items() if a != 0.0], dtype=np.int32)
        val = np.array([terms[c] for c in idx], dtype=np.float64)
        self.h.addRow(lo, hi, len(idx), idx, val)
        self.nrow += 1

    def geq(self, a: Expr, b: Expr) -> None:
        """a >= b."""
        terms = dict(a[1])
        for c, x in b[1].items():
            terms[c] = terms.get(c, 0.0) - x
        self.row(terms, b[0] - a[0], math.inf)

    @staticmethod
    def lin(*parts: tuple[float, Expr], const: float = 0.0) -> Expr:
        out: dict[int, float] = {}
        k = const
        for coef, (c0, terms) in parts:
            k += coef * c0
            for c, x in terms.items():
                out[c] = out.get(c, 0.0) + coef * x
        return k, out

    @staticmethod
    def col(c: int) -> Expr:
        return 0.0, {c: 1.0}

    @staticmethod
    def const(x: float) -> Expr:
        return x, {}

    # ------------------------------------------------------------------ decisions

    def _candidate(self, v: int) -> None:
        lv = self.lv
        if lv.skel_need[v]:
            need = self.const(1.0)
        else:
            rcs = [self.rc(c) for c in lv.consumers[v]]
            if not any(r[1] or r[0] for r in rcs):
                need = self.const(0.0)
            else:
                n = self.var(0.0, 1.0)
                need = self.col(n)
                for r in rcs:
                    self.geq(need, r)
                self.geq(self.lin(*((1.0, r) for r in rcs)), need)
        self.need[v] = need
        if lv.kind[v] == FREE:
            s = self.var(0.0, 1.0 if lv.fw_ok[v] and (need[0] or need[1]) else 0.0, integer=True)
            self.s[v] = s
            self.geq(need, self.col(s))
        if self.objective == "cost" and lv.flops[v]:
            k0, terms = self.rc(v)
            self.offset += lv.flops[v] * k0
            for c, a in terms.items():
                self.costs[c] = self.costs.get(c, 0.0) + lv.flops[v] * a

    def e(self, v: int) -> Expr:
        t = self.lv.kind[v]
        if t == FREE:
            return self.col(self.s[v])
        return self.need[v] if t == SAVE else self.const(0.0)

    def rc(self, v: int) -> Expr:
        t = self.lv.kind[v]
        if t == FREE:
            return self.lin((1.0, self.need[v]), (-1.0, self.col(self.s[v])))
        return self.const(0.0) if t == SAVE else self.need[v]

    def pulled(self, v: int, k: int) -> Expr:
        """y[v,k]: v recomputed and pulled by slot k (creates what it needs)."""
        if self.lv.kind[v] == SAVE or k < self.lo[v]:
            return self.const(0.0)
        if k >= self.hi[v]:
            return self.rc(v)
        key = (v, k)
        if key in self.y:
            return self.y[key]
        # consumers first (they are later candidates): an explicit stack, no recursion
        todo = [v]
        order: list[int] = []
        seen = {v}
        while todo:
            x = todo.pop()
            order.append(x)
            for c in self.lv.consumers[x]:
                if (c not in seen and self.lv.kind[c] != SAVE and self.lo[c] <= k < self.hi[c]
                        and (c, k) not in self.y):
                    seen.add(c)
                    todo.append(c)
        for x in sorted(order, reverse=True):
            rcx = self.rc(x)
            y = self.col(self.var(0.0, 1.0))
            self.y[(x, k)] = y
            self.geq(rcx, y)
            ys = [self.pulled(c, k) for c in self.lv.consumers[x] if self.lv.kind[c] != SAVE]
            ex = self.e(x)
            for yc in ys:
                # a consumer pulled by k pulls x unless x is saved (stronger than y_c + rc_x - 1)
                self.geq(y, self.lin((1.0, yc), (-1.0, ex)))
            self.geq(self.lin(*((1.0, yc) for yc in ys)), y)
        return self.y[key]

    def emitted(self, v: int, k: int) -> Expr:
        """v runs in the backward by slot k (a getitem: with its producer)."""
        if k < 0:
            return self.const(0.0)
        p = self.lv.producer[v]
        if p < 0:
            return self.pulled(v, k)
        key = (-1 - v, k)
        if key in self.y:
            return self.y[key]
        yp, rg = self.pulled(p, k), self.rc(v)
        if not yp[1] and not rg[1]:
            z = self.const(min(yp[0], rg[0]))
        elif not yp[1]:
            z = rg if yp[0] >= 1 else self.const(0.0)
        else:
            z = self.col(self.var(0.0, 1.0))
            self.geq(rg, z)
            self.geq(yp, z)
            self.geq(z, self.lin((1.0, rg), (1.0, yp), const=-1.0))
            self.geq(z, self.pulled(v, k))  # pulled itself by k: born with its producer by k
        self.y[key] = z
        return z

    def forward(self, v: int) -> Expr:
        """v runs in the forward (a forward output or a saved value needs it)."""
        lv = self.lv
        if v in self.fk:
            return self.fk[v]
        if not lv.fw_ok[v]:
            out = self.const(0.0)
        elif lv.fw_fixed[v]:
            out = self.const(1.0)
        else:
            terms = [self.e(v)] + [self.forward(c) for c in lv.consumers[v] if lv.fw_ok[c]]
            terms = [t for t in terms if t[0] or t[1]]
            if not terms:
                out = self.const(0.0)
            else:
                out = self.col(self.var(0.0, 1.0))
                for t in terms:
                    self.geq(out, t)
        self.fk[v] = out
        return out

    # ------------------------------------------------------------------ events

    def _live(self, nbytes: int, born: list[Expr], alive: list[Expr] | None, held: list[Expr] | None = None) -> Expr:
        """bytes * [some born term and some alive term, or some ``held`` term]
        (alive None: certainly alive once born; each held term implies a born one)."""
        born = [b for b in born if b[0] or b[1]]
        if not born:
            return self.const(0.0)
        held = [h for h in held or [] if h[0] or h[1]]
        if alive is not None:
            alive = [a for a in alive if a[0] or a[1]]
            if not alive:
                if not held:
                    return self.const(0.0)
                born, alive = held, None
            elif any(not a[1] and a[0] >= 1 for a in alive):
                alive = None
        if alive is None and len(born) == 1:
            return self.lin((float(nbytes), born[0]))
        if any(not b[1] and b[0] >= 1 for b in born):
            born = [self.const(1.0)]
        L = self.col(self.var(0.0, 1.0))
        if alive is None:
            for b in born:
                self.geq(L, b)
            return self.lin((float(nbytes), L))
        if len(alive) == 1:
            A = alive[0]
        else:
            A = self.col(self.var(0.0, 1.0))
            for a in alive:
                self.geq(A, a)
        for b in born:
            self.geq(L, self.lin((1.0, b), (1.0, A), const=-1.0))
        for h in held:
            self.geq(L, h)
        return self.lin((float(nbytes), L))

    def _bw_storage(self, s: Storage, k: int, pos: int) -> Expr:
        lv = self.lv
        r = s.root
        if s.seq:
            if pos != lv.key[r] or not s.rc_counts:
                return self.const(0.0)
            return self.lin((float(s.nbytes), self.emitted(r, k)), (-float(s.nbytes), self.emitted(r, k - 1)))
        if lv.certain_bw(s, k, pos):
            return self.const(float(s.nbytes))
        birth_key = lv.key[lv.producer[r]] + 1 if s.after_producer else lv.key[r]
        # the root saved, or recomputed and emitted by then: exclusive, so one term, their sum (a relaxed
        # description counts a recomputed root only where it is a buffer whatever is decided)
        if s.rc_counts:  # (a root not counted at its own step: born there only after it)
            by = k if birth_key < pos or (birth_key == pos and s.own_counts) else k - 1
            born = [self.lin((1.0, self.e(r)), (1.0, self.emitted(r, by)))]
            born += [self.e(w) for w in s.values if w != r and lv.kind[w] != RECOMPUTE]
        else:  # a saved view counts unless its root is recomputed (then read inline: Liveness.bw_live)
            born = [self.e(r)] + [self.lin((1.0, self.e(w)), (-1.0, self.rc(r)))
                                  for w in s.values if w != r and lv.kind[w] != RECOMPUTE]
        if s.skel_last >= k:
            return self._live(s.nbytes, born, None)
        alive: list[Expr] = []
        if not s.after_producer and pos == lv.key[r] and s.own_counts:
            alive.append(self.lin((1.0, self.emitted(r, k)), (-1.0, self.emitted(r, k - 1))))
        for c in s.readers:
            if lv.kind[c] == SAVE:
                continue
            kc = k - 1 if pos != STEP and lv.key[c] >= pos else k
            alive.append(self.lin((1.0, self.rc(c)), (-1.0, self.emitted(c, kc))))
        # the held model: a saved value lives to the backward's end
        held = [self.e(w) for w in s.values if lv.kind[w] != RECOMPUTE] if lv.hold_saved else None
        return self._live(s.nbytes, born, alive, held)

    def _fw_storage(self, s: Storage, t: int) -> Expr:
        lv = self.lv
        if s.fw_born < 0 or t < s.fw_born:
            return self.const(0.0)
        fr = self.forward(s.root)
        if s.seq:
            return self.lin((float(s.nbytes), fr)) if t == s.fw_born and s.fw_counts else self.const(0.0)
        if (s.after_producer or not s.own_counts) and t == s.fw_born:
            return self.const(0.0)
        if not s.fw_counts:  # (a relaxed description) counted only as a saved value, an output of the forward
            return self._live(s.nbytes, [self.e(w) for w in s.values if lv.kind[w] != RECOMPUTE], None)
        if t == s.fw_born or s.fw_pinned or s.fw_fixed_last >= t:
            return self.lin((float(s.nbytes), fr))
        alive = [self.e(w) for w in s.values if lv.kind[w] != RECOMPUTE]
        alive += [self.forward(c) for c in s.fw_var_readers if lv.fw_event[c] >= t]
        return self._live(s.nbytes, [fr], alive)

    def add_event(self, phase: str, k: int, pos: int) -> bool:
        """The row of one event: ("bw", slot, position) or ("fw", event, 0)."""
        key = (phase, k, pos)
        if key in self.events or (phase == "bw" and pos != STEP and k in self.lv.messy_slots):
            return False  # (a messy slot's recomputation order is not key order: no row there)
        self.events.add(key)
        lv = self.lv
        if phase == "fw":
            fixed = lv.fw_fixed_bytes[k]
            parts = [self._fw_storage(s, k) for s in lv.storages]
        else:
            fixed = lv.fixed_at_step[k] if pos == STEP else lv.fixed_in_group[k]
            parts = [self._bw_storage(s, k, pos) for s in lv.storages]
        mem = self.lin(*((1.0, p) for p in parts), const=float(fixed))
        if self.objective == "peak":
            self.geq(self.col(self.peak_col), mem)
        else:
            assert self.limit is not None
            self.geq(self.const(float(self.limit)), mem)
        return True

    def add_all_steps(self) -> None:
        for t in range(len(self.lv.fw_fixed_bytes)):
            self.add_event("fw", t, 0)
        for k in range(self.lv.n_slots - 1):
            self.add_event("bw", k, STEP)

    def add_near_steps(self, level: float, most: int, deadline: float) -> None:
        """The rows of the backward steps whose certain bytes reach ``level``:
        the ``most`` highest, while time is left (fewer rows only relax)."""
        lv = self.lv
        certain = [(lv.fixed_at_step[k] + sum(s.nbytes for s in lv.storages if lv.certain_bw(s, k, STEP)), k)
                   for k in range(lv.n_slots - 1)]
        for c, k in sorted(certain, reverse=True)[:most]:
            if c < level or time.perf_counter() > deadline:
                break
            self.add_event("bw", k, STEP)

    def add_recompute_events(self, saved: set[int]) -> int:
        """The rows of the recomputation steps the decision ``saved`` runs
        (outside messy slots); returns how many were new."""
        lv = self.lv
        d = lv.decide(saved)
        added = 0
        for v in range(len(lv)):
            if d.rc[v] and lv.producer[v] < 0 and d.slot[v] not in lv.messy_slots:
                added += self.add_event("bw", d.slot[v], lv.key[v])
        return added

    def no_good(self, saved: set[int]) -> None:
        terms: dict[int, float] = {}
        k = 0.0
        for v, c in self.s.items():
            if v in saved:
                terms[c] = -1.0
                k -= 1.0
            else:
                terms[c] = 1.0
        self.row(terms, 1.0 + k, math.inf)

    # ------------------------------------------------------------------ solving

    def hint(self, saved: set[int]) -> None:
        import numpy as np

        idx = np.array(list(self.s.values()), dtype=np.int32)
        val = np.array([1.0 if v in saved else 0.0 for v in self.s], dtype=np.float64)
        self.h.setSolution(len(idx), idx, val)

    def run(self, seconds: float) -> tuple[set[int] | None, float, float]:
        """(the solution's saved set or None, its objective, the dual bound)."""
        self.h.setOptionValue("time_limit", max(0.01, seconds))
        self.h.run()
        info = self.h.getInfo()
        bound = info.mip_dual_bound
        if bound is None or not math.isfinite(bound):
            bound = -math.inf
        bound += self.offset
        status = self.h.getModelStatus()
        hs = _highs()
        if status == hs.HighsModelStatus.kInfeasible:
            return None, math.inf, math.inf
        if info.primal_solution_status < 2:
            return None, math.inf, bound
        x = self.h.getSolution().col_value
        saved = {v for v, c in self.s.items() if x[c] > 0.5}
        return saved, info.objective_function_value + self.offset, bound


class _Loop:
    """One solve's MILP loop state: the rows are only as good as the C model
    says, so each answer is scored by it and the best plan kept apart from
    the MILP's own objective."""

    def __init__(self, lv: Liveness, model: _Model, true_value: Any, timeline: Any, objective: str,
                 limit: int | None, deadline: float) -> None:
        self.lv = lv
        self.model = model
        self.true_value = true_value
        self.timeline = timeline
        self.objective = objective
        self.limit = limit
        self.deadline = deadline
        self.best: set[int] | None = None
        self.best_value = math.inf
        self.bound = -math.inf
        self.iterations = 0

    def add_violated(self, saved: set[int], above: float) -> int:
        """Rows of the steps of ``saved``'s timeline live above ``above``,
        the highest first, while time is left."""
        schedule, live, n_fw = self.timeline(saved)
        events = self.lv.events_of_schedule(list(schedule), n_fw)
        added = 0
        for b, ev in sorted(((b, ev) for ev, b in zip(events, live) if ev is not None and b > above),
                            key=lambda x: -x[0]):
            if time.perf_counter() > self.deadline:
                break
            added += self.model.add_event(*ev)
        return added

    def score(self, saved: set[int]) -> float:
        """The C model's objective of ``saved`` (a plan over the limit: never better)."""
        peak, flops = self.true_value(saved)
        if self.objective == "peak":
            return float(peak)
        return float(flops) if peak <= (self.limit or 0) else math.inf

    def start_from(self, incumbent: set[int]) -> None:
        """The incumbent (what the model keeps of it) is the plan to beat; its
        rows go in first so the first answer cannot ignore its peak steps."""
        kept = self.lv.decide(incumbent).e
        inc = {v for v in incumbent if kept[v]}
        self.best, self.best_value = inc, self.score(inc)
        if self.timeline is not None:  # its steps near its peak
            self.add_violated(inc, 0.9 * (self.true_value(inc)[0] if self.limit is None else self.limit))
        else:
            self.model.add_recompute_events(inc)

    def run(self) -> None:
        """Solve, score the answer, tighten, until the bound meets the best
        plan, the MILP has no answer left, or the time is up."""
        model = self.model
        while True:
            left = self.deadline - time.perf_counter()
            if left <= 0:
                break
            if self.best is not None and math.isfinite(self.best_value):
                model.hint(self.best)
            saved, value, dual = model.run(left)
            self.iterations += 1
            if saved is None:
                if math.isinf(dual) and dual > 0:  # infeasible: every decision was excluded or violates the limit
                    self.bound = max(self.bound, self.best_value)
                    break
                self.bound = max(self.bound, min(dual, self.best_value))
                break
            true = self.score(saved)
            if true < self.best_value:
                self.best, self.best_value = saved, true
            self.bound = max(self.bound, min(dual, self.best_value))
            if math.isfinite(self.bound) and math.ceil(self.bound - 1e-6) >= self.best_value:
                break
            # the answer's value disagrees with the model: add its missing rows, else exclude it
            added = self.add_violated(saved, value if self.objective == "peak" else float(self.limit or 0)) \
                if self.timeline is not None else model.add_recompute_events(saved)
            if added == 0:
                model.no_good(saved)


def solve(lv: Liveness, true_value: Any, *, objective: str = "peak", limit: int | None = None,
          incumbent: set[int] | None = None, time_limit: float = 60.0, timeline: Any = None) -> ExactResult:
    """The best decision by the MILP loop (module docstring).

    ``true_value(saved) -> (peak, flops)``: the C model's answer for a set of
    FREE candidates.  ``objective``: "peak" (the lowest peak) or "cost" (the
    least recompute with peak <= ``limit``).  ``incumbent``: a decision to
    start from (the search's); the result is never worse than it.
    ``timeline(saved) -> (schedule, live_bytes, n_fw_steps)``: the C model's
    timeline; given, the MILP starts with the rows of the steps that come
    near the peak and adds the others as answers exceed them (rows left out
    only relax it: the bound stays a bound); else every step's row is there
    from the start.
    """
    if objective not in ("peak", "cost"):
        raise ValueError(f"objective must be 'peak' or 'cost', got {objective!r}")
    if objective == "cost" and limit is None:
        raise ValueError("objective 'cost' needs a peak limit")
    t0 = time.perf_counter()
    deadline = t0 + time_limit
    model = _Model(lv, objective, limit)
    # building rows takes time too: the first rows may use half of it, each round's what is left
    build_by = t0 + time_limit / 2
    if timeline is None:
        model.add_all_steps()
    else:
        model.add_near_steps(0.9 * (lv.certain_bound() if limit is None else limit), MAX_FIRST_ROWS, build_by)
    loop = _Loop(lv, model, true_value, timeline, objective, limit, deadline)
    if incumbent is not None:
        loop.start_from(incumbent)
    loop.run()
    best, best_value, bound = loop.best, loop.best_value, loop.bound
    if best is None:
        best = set()
        best_value = loop.score(best)
    # the optimum is an integer (bytes, flops): a bound rounds up
    bound = min(math.ceil(bound - 1e-6) if math.isfinite(bound) else bound, best_value)
    return ExactResult(saved=best, value=int(best_value) if math.isfinite(best_value) else -1,
                       bound=bound, optimal=bound >= best_value - 0.5, seconds=time.perf_counter() - t0,
                       iterations=loop.iterations, rows=model.nrow, cols=model.ncol,
                       exact_model=not lv.inexact and not lv.messy_slots)


@dataclass
class Certificate:
    """An exact solve of one plan problem, seeded with the search's plan
    (:func:`certify`): the plan to use and what is proven about it."""

    mask: bytes  # the plan's saved mask (graph nodes), for PlanProblem.simulate
    peak_bytes: int
    recompute_flops: int
    peak_bound: int | None  # proven: no decision has a lower peak
    cost_bound: int | None  # proven: no decision under the limit recomputes less (None: not asked)
    peak_optimal: bool
    cost_optimal: bool
    from_exact: bool  # the plan is the exact solver's (not the search's)
    exact_model: bool  # the formulation equals the C model on this graph (else a relaxation)
    seconds: float
    why_not: str | None = None  # set when the graph could not be described (then no bound)


def _peak_and_flops(prob: Any, mask: bytes) -> tuple[int, int]:
    r = prob.simulate(mask)
    return r.peak_bytes, r.recompute_flops


class _Answers:
    """The C model's answers for sets of FREE candidates (local indices of
    ``lv``), as :func:`solve` asks for them; each set is simulated once."""

    def __init__(self, prob: Any, lv: Liveness) -> None:
        self.prob = prob
        self.lv = lv
        self.n = len(prob.arrays)
        self.local = {v: k for k, v in enumerate(lv.node)}
        self.cache: dict[frozenset[int], tuple[int, int]] = {}

    def to_mask(self, saved: set[int]) -> bytes:
        m = bytearray(self.n)
        for k in saved:
            m[self.lv.node[k]] = 1
        return bytes(m)

    def to_free(self, mask: bytes) -> set[int]:
        """The FREE candidates a mask saves, as the model keeps them."""
        kept = self.prob.simulate(mask).saved
        local, kind = self.local, self.lv.kind
        return {local[i] for i in range(self.n) if kept[i] and i in local and kind[local[i]] == FREE}

    def timeline(self, saved: set[int]) -> tuple[Any, Any, int]:
        r = self.prob.simulate(self.to_mask(saved))
        return r.schedule, r.live_bytes, r.n_fw_steps

    def true_value(self, saved: set[int]) -> tuple[int, int]:
        key = frozenset(saved)
        if key not in self.cache:
            self.cache[key] = _peak_and_flops(self.prob, self.to_mask(saved))
        return self.cache[key]


def _exact_solves(lv: Liveness, ans: _Answers, start: set[int], lowest_mask: bytes | None, limit: int | None,
                  time_limit: float, t0: float) -> tuple[ExactResult | None, ExactResult | None, int]:
    """The peak solve (limit None) and the cost solve, and the peak limit of
    the cost solve.  The cost solve runs only after a proven peak (else its
    limit would not be the lowest peak), seeded with the least recompute of
    the plans already under that limit."""
    true_value = ans.true_value
    pr: ExactResult | None = None
    if limit is None:
        seeds = [start] + ([ans.to_free(lowest_mask)] if lowest_mask is not None else [])
        seed = min(seeds, key=lambda x: true_value(x))
        pr = solve(lv, true_value, objective="peak", incumbent=seed, time_limit=time_limit, timeline=ans.timeline)
        cost_limit = pr.value
        candidates = [x for x in (start, pr.saved, seed) if true_value(x)[0] <= cost_limit]
    else:  # the objective is the recompute: all the time for it, the peak bound the instant one
        cost_limit = limit
        candidates = [start] if true_value(start)[0] <= limit else []
    cr: ExactResult | None = None
    left = time_limit - (time.perf_counter() - t0)
    if (pr is None or pr.optimal) and left > 0.05 and candidates:
        inc = min(candidates, key=lambda x: (true_value(x)[1], true_value(x)[0]))
        cr = solve(lv, true_value, objective="cost", limit=cost_limit, incumbent=inc, time_limit=left,
                   timeline=ans.timeline)
    return pr, cr, cost_limit


def _exact_plan(ans: _Answers, pr: ExactResult | None, cr: ExactResult | None, start: set[int],
                base: tuple[int, int], cost_limit: int) -> tuple[set[int], bool, bool]:
    """The exact solver's plan, whether it is proven, and whether it beats
    the search's (``base``): by (peak, recompute) when the peak was the
    objective, else by (recompute, peak) under the limit."""
    if pr is not None:
        exact_plan = cr.saved if cr is not None else pr.saved
        return exact_plan, pr.optimal, ans.true_value(exact_plan) < base
    exact_plan = cr.saved if cr is not None else start
    proven = cr is not None and cr.optimal
    ev = ans.true_value(exact_plan)
    return exact_plan, proven, ev[0] <= cost_limit and (ev[1], ev[0]) < (base[1], base[0])


def certify(prob: Any, search_mask: bytes, *, limit: int | None, time_limit: float,
            lowest_mask: bytes | None = None, take: str = "best") -> Certificate:
    """Solve ``prob`` (a :class:`fxcut.solve.planner.PlanProblem`) exactly.

    ``limit`` None: the lowest peak (then, with time left, the least
    recompute at that peak); else the least recompute with peak <= limit
    (the bound on the lowest peak then the instant one, Liveness.certain_bound).  ``search_mask``:
    the search's plan (the incumbent; never beaten by a worse one);
    ``lowest_mask``: the search's lowest-peak plan (seeds the peak bound).
    ``take``: "best" (the better plan, proven or not) or "proven" (the exact
    plan only when proven optimal, else the search's)."""
    from .description import describe
    from .liveness import NotModelled

    t0 = time.perf_counter()
    base = _peak_and_flops(prob, search_mask)
    try:
        lv = describe(prob)
    except NotModelled as e:
        return Certificate(search_mask, base[0], base[1], None, None, False, False, False, False,
                           time.perf_counter() - t0, str(e))
    ans = _Answers(prob, lv)
    start = ans.to_free(search_mask)
    pr, cr, cost_limit = _exact_solves(lv, ans, start, lowest_mask, limit, time_limit, t0)
    exact_plan, proven, better = _exact_plan(ans, pr, cr, start, base, cost_limit)
    use = better and (take == "best" or proven)
    mask = _normalised(prob, ans.to_mask(exact_plan)) if use else search_mask
    peak, flops = _peak_and_flops(prob, mask)
    peak_bound = int(max(float(lv.certain_bound()), pr.bound if pr is not None and math.isfinite(pr.bound) else 0.0))
    cost_bound = int(max(0.0, cr.bound)) if cr is not None and math.isfinite(cr.bound) else None
    # Proven is what the bounds prove of the plan returned, whichever solve (or none) reached them: a
    # peak at its proven bound is the lowest (the instant bound alone may show it before the MILP
    # does), so a gap of 0 and "optimal" never disagree.
    return Certificate(
        mask=mask, peak_bytes=peak, recompute_flops=flops, peak_bound=peak_bound, cost_bound=cost_bound,
        peak_optimal=peak_bound >= peak, cost_optimal=cost_bound is not None and cost_bound >= flops,
        from_exact=use, exact_model=not lv.inexact and not lv.messy_slots, seconds=time.perf_counter() - t0)


def _normalised(prob: Any, mask: bytes) -> bytes:
    """A decision as the search's frontier keeps it: the saved set the model
    keeps, plus the saved FREE values it dropped that are impure (unsaved,
    the backward would keep them: plan.c's evaluate)."""
    import fxcut._C as _C

    kept = prob.simulate(mask).saved
    flags = prob.arrays.flags
    return bytes(int(bool(kept[i]) or (prob.roles[i] == _C.PLAN_ROLE_FREE and bool(mask[i])
                                        and bool(flags[i] & _C.F_IMPURE))) for i in range(len(mask)))


__all__ = ["Certificate", "EXTRA", "ExactResult", "certify", "require", "solve"]
