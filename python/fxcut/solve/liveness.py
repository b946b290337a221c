"""The peak plan's problem as a clean description: decisions, events, live sets, costs.

The memory model (``csrc/memory.c``; semantics above ``fxcut_memory_options``
in ``csrc/fxcut.h``) turns a saved set into a forward and a backward module
and walks them.  For the exact solver (:mod:`fxcut.solve.exact`) the same
semantics are restated here as a structure that does not depend on the
decision, plus rules that do:

- **Candidates**: the forward values the backward may read (FREE: the plan
  chooses; SAVE: saved whenever the backward needs them; RECOMPUTE: never
  saved).  A decision is the set ``e`` of candidates it saves *and the
  backward needs* (what the model keeps); ``need`` and ``rc`` (recomputed)
  follow from it, consumers first:
  ``need[v] = read by a backward step or a gradient output, or by a
  recomputed consumer``; ``rc[v] = need[v] and not e[v]``.
- **The backward timeline**: the backward's own steps (tangent-dependent,
  independent of the decision) in the order the model runs them, one *slot*
  each, plus a last slot for the gradients pulled at the end.  A recomputed
  candidate is emitted in the slot of its first *pull*:
  ``slot[v] = min(first_pull[v], min(slot of recomputed consumers))``
  (torch's reordering emits a node just before the first step that needs
  it), a getitem right after its producer (``raise_getitems``).  Inside a
  slot the recomputed nodes run in ``key`` order, then the slot's step.
- **Storages**: bytes counted once per storage while any value on it is live;
  a saved storage is live from the backward's start, a recomputed one from
  its emission, until its last reader.  The backward's own storages are
  fixed: ``fixed_at_step[k]`` / ``fixed_in_group[k]`` bytes.
- **The forward**: joint order (getitems raised); a node runs in the forward
  when a forward output needs it (fixed) or a saved value does; a saved
  storage lives to the forward's end.

What the description does not model exactly it lists in ``inexact`` (each
such feature can only make the true peak *higher* than the description's,
so a bound from it stays a bound); :func:`describe_parts` raises
:class:`NotModelled` for graphs it cannot describe at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import fxcut._C as _C

if TYPE_CHECKING:
    from .planner import PlanProblem

FREE, SAVE, RECOMPUTE = 0, 1, 2
NEVER = 1 << 30  # a slot later than any


class NotModelled(ValueError):
    """The graph has a feature the exact formulation does not describe."""


@dataclass
class Storage:
    """One storage candidate values live on (bytes counted once while any is live)."""

    nbytes: int
    root: int  # the candidate whose step allocates it
    values: list[int]  # candidates on it: saving any holds it
    readers: list[int]  # candidates reading a value on it (a view's own step included)
    skel_last: int  # last slot whose backward step reads it (n_slots: a gradient output; -1: none)
    skel_first: int  # first slot whose backward step reads it (NEVER: none)
    seq: bool  # a multi-output op's allocation: counted whole at its own step, nowhere else
    after_producer: bool  # a getitem's: born with its producer, counted from just after its step
    fw_born: int  # forward event of its birth (-1: never in the forward)
    fw_fixed_last: int  # last forward event a fixed forward node reads it (-1: none)
    fw_var_readers: list[int]  # candidates reading it that run in the forward only for a saved value
    fw_pinned: bool  # a forward output lives on it
    # (a relaxed description, fxcut.solve.inductor_bound: False where only a saved value on it is certain to count)
    rc_counts: bool = True  # counted in the backward when its root is recomputed
    fw_counts: bool = True  # counted in the forward when its root runs there
    own_counts: bool = True  # counted at its root's own step (False: a kernel that may write over what it reads)


@dataclass
class Liveness:
    """The decision-independent structure of one plan problem (module docstring)."""

    node: list[int]
    kind: list[int]
    flops: list[int]
    consumers: list[list[int]]
    inputs: list[list[int]]
    skel_need: list[bool]  # read by a backward step or is a gradient output
    first_pull: list[int]  # earliest slot something fixed pulls it (NEVER: none)
    producer: list[int]  # a getitem's producer (raised right after it); -1 otherwise
    fw_ok: list[bool]  # the forward can compute it (it may be saved)
    fw_fixed: list[bool]  # runs in the forward whatever is saved
    fw_event: list[int]  # its forward event (a getitem: its producer's); -1: not in the forward
    key: list[int]  # even numbers: order inside a slot (own-turn nodes first, then joint order)
    storage: list[int]  # its storage (-1: costs nothing)
    storages: list[Storage]
    n_slots: int  # backward steps + 1 (the last: gradients pulled at the end)
    slot_node: list[int]
    fixed_at_step: list[int]  # bytes of the backward's own storages at its step k
    fixed_in_group: list[int]  # ... while slot k's recomputation runs
    messy_slots: set[int]  # slots whose order inside is not key order for some decision
    fw_fixed_bytes: list[int]  # bytes of non-candidate forward storages at each forward event
    fw_event_node: list[int]  # the candidate whose step each forward event is (-1: a fixed node)
    fw_event_of: dict[int, int]  # graph node -> its forward event (a getitem: its producer's)
    inexact: list[str] = field(default_factory=list)
    hold_saved: bool = False  # the backward holds every saved value to its end (memory model "unfused_held")
    # a relaxed description (fxcut.solve.inductor_bound): a bound on its model's peaks, not their equal; it
    # leaves out the recomputation steps of messy slots, whose order it does not know
    relaxed: bool = False

    def __len__(self) -> int:
        return len(self.node)

    @property
    def free(self) -> list[int]:
        return [k for k, t in enumerate(self.kind) if t == FREE]

    # ----------------------------------------------------------------- a decision

    def decide(self, saved: set[int]) -> Decision:
        """The decision saving the FREE candidates in ``saved`` (local indices)."""
        m = len(self)
        need = [False] * m
        rc = [False] * m
        e = [False] * m
        for v in range(m - 1, -1, -1):
            need[v] = self.skel_need[v] or any(rc[c] for c in self.consumers[v])
            if not need[v]:
                continue
            t = self.kind[v]
            e[v] = t == SAVE or (t == FREE and v in saved)
            rc[v] = not e[v]
        pull = [NEVER] * m
        for v in range(m - 1, -1, -1):
            if rc[v]:
                pull[v] = min([self.first_pull[v]] + [pull[c] for c in self.consumers[v] if rc[c]])
        slot = [pull[v] if self.producer[v] < 0 or not rc[v] else pull[self.producer[v]] for v in range(m)]
        fk = [False] * m
        for v in range(m - 1, -1, -1):
            fk[v] = self.fw_ok[v] and (self.fw_fixed[v] or e[v] or any(fk[c] for c in self.consumers[v]))
        return Decision(e, rc, slot, fk)

    def flops_of(self, d: Decision) -> int:
        return sum(f for f, r in zip(self.flops, d.rc) if r)

    def held(self, s: Storage, d: Decision) -> bool:
        return any(d.e[w] for w in s.values)

    def bw_live(self, s: Storage, d: Decision, k: int, pos: int) -> bool:
        """Is storage s live at backward event (slot k, position pos)?  pos:
        a key (an in-slot recomputation step) or STEP (the slot's own step)."""
        r = s.root
        if s.seq:
            return s.rc_counts and d.rc[r] and d.slot[r] == k and self.key[r] == pos
        # (a relaxed description: a saved view of a root the backward recomputes inline is read through the
        # recomputation, not from the saved storage, which the inductor model drops at once)
        if self.held(s, d) and (s.rc_counts or not d.rc[r]):
            if self.hold_saved:
                return True
            born = True
        elif d.rc[r] and s.rc_counts:
            bk = self.key[self.producer[r]] + 1 if s.after_producer else self.key[r]
            born = d.slot[r] < k or (d.slot[r] == k and (bk <= pos if s.own_counts else bk < pos))
        else:
            born = False
        if not born:
            return False
        if s.skel_last >= k:
            return True
        if d.rc[r] and d.slot[r] == k and not s.after_producer and self.key[r] == pos and s.own_counts:
            return True
        return any(d.rc[c] and (d.slot[c] > k or (d.slot[c] == k and self.key[c] >= pos)) for c in s.readers)

    def fw_live(self, s: Storage, d: Decision, t: int) -> bool:
        r = s.root
        if s.fw_born < 0 or not d.fk[r]:
            return False
        if s.seq:
            return s.fw_counts and t == s.fw_born
        if t < s.fw_born or (s.after_producer and t == s.fw_born):
            return False
        if t == s.fw_born and not s.own_counts:
            return False
        if not s.fw_counts:
            return self.held(s, d)  # a saved value: an output of the forward
        if t == s.fw_born:
            return True  # its own step
        if s.fw_pinned or s.fw_fixed_last >= t or self.held(s, d):
            return True
        return any(d.fk[c] and self.fw_event[c] >= t for c in s.fw_var_readers)

    def bw_events(self, d: Decision) -> list[tuple[int, int]]:
        """The backward's events (slot, position) in the order they run (the
        in-slot order by key: exact outside messy slots)."""
        by_slot: dict[int, list[int]] = {}
        for v in range(len(self)):
            if d.rc[v] and self.producer[v] < 0:
                by_slot.setdefault(d.slot[v], []).append(self.key[v])
        out: list[tuple[int, int]] = []
        for k in range(self.n_slots):
            out.extend((k, p) for p in sorted(by_slot.get(k, [])))
            if k < self.n_slots - 1:
                out.append((k, STEP))
        return out

    def certain_bw(self, s: Storage, k: int, pos: int) -> bool:
        """Is s live at backward event (k, pos) whatever the decision?  A
        backward step reads it at or before (so it was born) and at or after."""
        return (not s.seq and s.rc_counts and s.skel_last >= k
                and (s.skel_first < k or (s.skel_first == k and pos == STEP)))

    def certain_bound(self) -> int:
        """A lower bound on every decision's peak, from the bytes live at some
        step whatever is decided: the backward's own storages, the forward
        values a backward step reads before and after it, the forward's fixed
        storages.  Instant; the MILP's bound is at least this."""
        best = 0
        for k in range(self.n_slots - 1):
            best = max(best, self.fixed_at_step[k] + sum(s.nbytes for s in self.storages
                                                         if self.certain_bw(s, k, STEP)))
        for t, c in enumerate(self.fw_event_node):
            if c >= 0:
                continue  # a step only some decisions run
            live = self.fw_fixed_bytes[t]
            for s in self.storages:
                if s.seq or not s.fw_counts or s.fw_born < 0 or not self.fw_fixed[s.root] or t < s.fw_born:
                    continue
                if t == s.fw_born and not s.own_counts:
                    continue
                if s.after_producer and t == s.fw_born:
                    continue
                if t == s.fw_born or s.fw_pinned or s.fw_fixed_last >= t:
                    live += s.nbytes
            best = max(best, live)
        return best

    def events_of_schedule(self, schedule: list[int], n_fw: int) -> list[tuple[str, int, int] | None]:
        """The event of each step of the memory model's schedule (forward
        steps, then backward): ("fw", event, 0) or ("bw", slot, position);
        None for a step no row describes (a recomputation in a messy slot)."""
        local = {v: k for k, v in enumerate(self.node)}
        slot_of = {v: k for k, v in enumerate(self.slot_node) if v >= 0}
        out: list[tuple[str, int, int] | None] = []
        slot = 0
        for t, v in enumerate(schedule):
            if t < n_fw:
                e = self.fw_event_of.get(v)
                out.append(("fw", e, 0) if e is not None else None)
            elif v in slot_of:
                slot = slot_of[v]
                out.append(("bw", slot, STEP))
                slot += 1
            elif v in local:
                k = local[v]
                while self.producer[k] >= 0:
                    k = self.producer[k]
                out.append(None if slot in self.messy_slots else ("bw", slot, self.key[k]))
            else:
                out.append(None)
        return out

    def peaks(self, saved: set[int]) -> tuple[int, int, int]:
        """(peak, forward peak, backward peak) of a decision, by the description."""
        d = self.decide(saved)
        fw = 0
        for t in range(len(self.fw_fixed_bytes)):
            c = self.fw_event_node[t]
            if c >= 0 and not d.fk[c]:
                continue
            fw = max(fw, self.fw_fixed_bytes[t] + sum(s.nbytes for s in self.storages if self.fw_live(s, d, t)))
        bw = 0
        for k, p in self.bw_events(d):
            if self.relaxed and p != STEP and k in self.messy_slots:
                continue
            fixed = self.fixed_at_step[k] if p == STEP else self.fixed_in_group[k]
            bw = max(bw, fixed + sum(s.nbytes for s in self.storages if self.bw_live(s, d, k, p)))
        return max(fw, bw), fw, bw


STEP = 1 << 40  # the position of a slot's own step (after every recomputation in it)


@dataclass
class Decision:
    e: list[bool]  # saved and read by the backward
    rc: list[bool]  # recomputed by the backward
    slot: list[int]  # the slot a recomputed candidate runs in
    fk: list[bool]  # runs in the forward


# --------------------------------------------------------------------------- building


class _G:
    """The graph facts the model reads, as Python lists."""

    def __init__(self, prob: PlanProblem) -> None:
        a = prob.arrays
        n = self.n = len(a)
        self.kind = list(a.kind)
        self.flags = list(a.flags)
        self.ins = [list(a.in_idx[a.in_ptr[i]:a.in_ptr[i + 1]]) for i in range(n)]
        self.users: list[list[int]] = [[] for _ in range(n)]
        for i in range(n):
            for u in self.ins[i]:
                if not self.users[u] or self.users[u][-1] != i:
                    self.users[u].append(i)
        self.outputs = list(a.outputs)
        self.nfo = prob.num_fwd_outputs
        self.roles = prob.roles
        self.marks = prob.marks if prob.marks is not None else bytes(n)
        self.flops = list(prob.flops)
        storage = list(prob.storage)
        self.root = [0] * n
        self.cost = [0] * n
        self.tdep = [False] * n
        for i in range(n):
            so = storage[i]
            self.root[i] = self.root[so] if so < i else i
            f = self.flags[i]
            b = int(a.nbytes[i])
            if b < 0 or self.kind[i] == _C.KIND_PLACEHOLDER or (f & _C.F_NON_TENSOR and not f & _C.F_VAL_IS_SEQ):
                b = 0
            self.cost[i] = b
            self.tdep[i] = self.bw_placeholder(i) or any(self.tdep[u] for u in self.ins[i])

    def bw_placeholder(self, i: int) -> bool:
        return self.kind[i] == _C.KIND_PLACEHOLDER and bool(self.flags[i] & (_C.F_TANGENT | _C.F_BWD_SEED))

    def is_input(self, i: int) -> bool:
        return self.kind[i] == _C.KIND_PLACEHOLDER and bool(self.flags[i] & (_C.F_PRIMAL | _C.F_FWD_SEED))

    def computed(self, i: int) -> bool:
        return self.kind[i] not in (_C.KIND_PLACEHOLDER, _C.KIND_OUTPUT)

    def getitem(self, i: int) -> bool:
        return bool(self.flags[i] & _C.F_GETITEM) and len(self.ins[i]) == 1

    def seq(self, i: int) -> bool:
        return bool(self.flags[i] & _C.F_VAL_IS_SEQ) and self.root[i] == i

    def base_mask(self, i: int) -> int:
        """The planner's saved mask for node i: 1 always, 0 never, -1 the decision's."""
        r = self.roles[i]
        if r == _C.PLAN_ROLE_SAVE:
            return 1
        if r == _C.PLAN_ROLE_FREE:
            return -1
        if r == _C.PLAN_ROLE_INPUT:
            return int(self.kind[i] == _C.KIND_GET_ATTR or self.is_input(i))
        return 0

    def raise_getitems(self, order: list[int], kept: set[int]) -> list[int]:
        """memory.c's raise_getitems over ``order`` (``kept``: the module's nodes)."""
        out = [v for v in order if self.getitem(v) and self.ins[v][0] not in kept]
        for v in order:
            if self.getitem(v):
                continue
            out.append(v)
            out.extend(u for u in self.users[v] if u in kept and self.getitem(u))
        return out


def _bw_order(g: _G, kept: set[int]) -> tuple[list[int], int]:
    """The backward module's order (memory.c's reordering, then
    raise_getitems) for the kept set, and the graph index of the first
    tangent user (-1: no tangent is used)."""
    body = sorted(kept)
    pos = {v: k for k, v in enumerate(body)}
    first = len(body) + 1
    for i in range(g.n):
        if g.kind[i] != _C.KIND_PLACEHOLDER or not g.flags[i] & _C.F_TANGENT:
            continue
        for u in g.users[i]:
            if u in kept:
                first = min(first, pos[u])
                break
        if i in g.outputs[g.nfo:]:
            first = min(first, len(body))
    if first > len(body):
        return g.raise_getitems(body, kept), -1
    emitted: set[int] = set()
    order: list[int] = []

    def pull(x: int) -> None:
        if x in emitted:
            return
        found = {x}
        stack = [x]
        while stack:
            v = stack.pop()
            for u in g.ins[v]:
                if u in kept and u not in emitted and u not in found:
                    found.add(u)
                    stack.append(u)
        for v in sorted(found):
            emitted.add(v)
            order.append(v)

    for k in range(first):
        if g.marks[body[k]] & _C.X_COPY:
            pull(body[k])
    for k in range(first, len(body)):
        pull(body[k])
    for o in g.outputs[g.nfo:]:
        if o >= 0 and o in kept:
            pull(o)
    return g.raise_getitems(order, set(order)), (body[first] if first < len(body) else g.n)


@dataclass
class _Backward:
    """The backward's own steps: the slots of the timeline, whatever is decided."""

    steps: set[int]
    order: list[int]  # the order the model runs them
    slot_of: dict[int, int]  # step -> its slot
    first_node: int  # the first tangent user (-1: no tangent is used)
    n_slots: int  # steps + 1 (the last: gradients pulled at the end)
    outputs: list[int]  # the gradient outputs
    out: set[int]


def _backward_steps(g: _G, inexact: list[str]) -> _Backward:
    """Tangent-dependent nodes a gradient needs, or impure ones: the model
    runs them in the backward whatever is saved, so they fix the slots."""
    n = g.n
    bw_outputs = [o for o in g.outputs[g.nfo:] if o >= 0]
    needed = bytearray(n)
    for o in bw_outputs:
        needed[o] = 1
    skel: set[int] = set()
    for i in range(n - 1, -1, -1):
        if g.tdep[i] and g.computed(i) and not g.marks[i] & _C.X_MUST_FW and (needed[i] or g.flags[i] & _C.F_IMPURE):
            skel.add(i)
            for u in g.ins[i]:
                needed[u] = 1
    for o in bw_outputs:
        if g.tdep[o] and g.computed(o) and o not in skel:
            raise NotModelled(f"gradient output node {o} cannot run in the backward")
    skel_order, first_node = _bw_order(g, skel)
    slot_of = {v: k for k, v in enumerate(skel_order)}
    n_slots = len(skel_order) + 1
    if set(skel_order) != skel:
        inexact.append("backward steps before the first tangent user that nothing pulls")
    return _Backward(skel, skel_order, slot_of, first_node, n_slots, bw_outputs, set(bw_outputs))


def _candidates(g: _G, bw: _Backward) -> list[int]:
    """The forward values the backward may reach: what a decision chooses
    among.  A non-computed node (an output) reaching it is not describable."""
    cand_set: set[int] = set()
    stack = [u for b in bw.order for u in g.ins[b]] + bw.outputs
    while stack:
        v = stack.pop()
        if v in cand_set or g.tdep[v] or g.kind[v] == _C.KIND_PLACEHOLDER:
            continue
        if not g.computed(v):
            raise NotModelled(f"node {v} (kind {g.kind[v]}) reaches the backward")
        cand_set.add(v)
        stack.extend(g.ins[v])
    return sorted(cand_set)


def _candidate_kinds(g: _G, cands: list[int], local: dict[int, int]) -> list[int]:
    """FREE / SAVE / RECOMPUTE from the planner's mask.  Raises where a
    candidate's placement is not the plan's to choose in a way the model
    can follow (a must-forward or copy_ node the backward may recompute, a
    placeholder that belongs to neither module)."""
    kinds = []
    for v in cands:
        b = g.base_mask(v)
        kinds.append(FREE if b < 0 else SAVE if b == 1 else RECOMPUTE)
        if b != 1 and g.marks[v] & _C.X_MUST_FW:
            raise NotModelled(f"node {v} must stay in the forward but is not always saved")
        if b != 1 and g.marks[v] & _C.X_COPY:
            raise NotModelled(f"node {v} is a copy_ the backward may recompute")
    for i in range(g.n):
        if (g.kind[i] == _C.KIND_PLACEHOLDER and not g.is_input(i) and not g.bw_placeholder(i)
                and any(u in local for u in g.users[i])):
            raise NotModelled(f"placeholder {i} is neither a forward input nor a backward one")
    return kinds


def _slot_after(bw: _Backward, idx: int) -> int:
    """The slot a node at joint index idx runs in at its own turn."""
    for k, b in enumerate(bw.order):
        if b > idx:
            return k
    return bw.n_slots - 1


@dataclass
class _Links:
    """How candidates reach each other and the backward's steps (local indices)."""

    consumers: list[list[int]]
    inputs: list[list[int]]
    skel_need: list[bool]
    first_pull: list[int]
    own_turn: list[bool]  # after the first tangent user: the reordering runs it at its own turn
    producer: list[int]


def _candidate_links(g: _G, bw: _Backward, cands: list[int], local: dict[int, int], kinds: list[int],
                     inexact: list[str]) -> _Links:
    """When each candidate is first pulled, and by whom; notes the reads
    the description cannot place exactly (each only raises the true peak)."""
    m = len(cands)
    ln = _Links([[] for _ in range(m)], [[] for _ in range(m)], [False] * m, [NEVER] * m, [False] * m, [-1] * m)
    consumers, inputs, skel_need, first_pull = ln.consumers, ln.inputs, ln.skel_need, ln.first_pull
    for k, v in enumerate(cands):
        for u in g.users[v]:
            if u in local:
                consumers[k].append(local[u])
                inputs[local[u]].append(k)
            elif u in bw.slot_of:
                skel_need[k] = True
                first_pull[k] = min(first_pull[k], bw.slot_of[u])
            elif u in bw.steps:
                inexact.append(f"node {v} is read by a backward step nothing pulls")
        if v in bw.out:
            skel_need[k] = True
            first_pull[k] = min(first_pull[k], bw.n_slots - 1)
        if bw.first_node < 0 or v > bw.first_node:
            ln.own_turn[k] = True
            first_pull[k] = min(first_pull[k], _slot_after(bw, v))
        if g.getitem(v) and g.ins[v][0] in local:
            ln.producer[k] = local[g.ins[v][0]]
        if g.seq(v):
            owned = [u for u in g.users[v] if g.getitem(u) and g.root[u] == u]
            if any(not g.getitem(u) for u in g.users[v] if u in local or u in bw.steps):
                inexact.append(f"multi-output node {v} is read other than through getitems")
            if sum(g.cost[u] for u in owned) > g.cost[v]:
                inexact.append(f"multi-output node {v}: its getitems' bytes exceed its own")
        if g.flags[v] & _C.F_IMPURE and kinds[k] != SAVE:
            inexact.append(f"impure node {v} may be unsaved (the model then keeps its inputs' saved values)")
    return ln


def _in_slot_order(n: int, bw: _Backward, cands: list[int], ln: _Links, kinds: list[int]
                   ) -> tuple[list[int], set[int]]:
    """The key order inside a slot (own-turn nodes first, then joint order),
    and the slots where some decision breaks it: a recomputed ancestor of an
    own-turn node is pulled in just before it, against key order."""
    key = [2 * (v if ln.own_turn[k] else n + 1 + v) for k, v in enumerate(cands)]
    messy: set[int] = set()
    if bw.first_node >= 0:
        for k in range(len(cands)):
            if ln.own_turn[k] and any(kinds[a] != SAVE for a in _ancestors(k, ln.inputs)):
                messy.add(ln.first_pull[k])
    return key, messy


@dataclass
class _Forward:
    """The forward's events: the nodes that may run there, in joint order."""

    valid: bytearray  # the forward can compute it
    fixed: bytearray  # runs there whatever is saved
    event_of: dict[int, int]  # graph node -> its event (a getitem: its producer's)
    event_node: list[int]  # the candidate each event is (-1: a fixed node)
    out: set[int]  # the forward's outputs


def _forward_events(g: _G, local: dict[int, int]) -> _Forward:
    """A candidate runs in the forward only when a saved value needs it, so
    it is an event of its own; getitems share their producer's event."""
    n = g.n
    fw_valid = bytearray(n)
    for i in range(n):
        if g.kind[i] == _C.KIND_PLACEHOLDER:
            fw_valid[i] = g.is_input(i)
        elif g.computed(i) and not g.flags[i] & _C.F_MUST_BE_IN_BW:
            fw_valid[i] = all(fw_valid[u] for u in g.ins[i])
    fixed_fw = bytearray(n)
    need_fw = bytearray(n)
    for o in g.outputs[:g.nfo]:
        if o >= 0:
            need_fw[o] = 1
    for i in range(n - 1, -1, -1):
        if fw_valid[i] and g.computed(i) and (need_fw[i] or g.flags[i] & _C.F_IMPURE):
            fixed_fw[i] = 1
            for u in g.ins[i]:
                need_fw[u] = 1
    fw_event_of: dict[int, int] = {}
    fw_event_node: list[int] = []
    for i in range(n):
        if not fw_valid[i] or not g.computed(i) or not (fixed_fw[i] or i in local):
            continue
        if g.getitem(i) and g.ins[i][0] in fw_event_of:
            fw_event_of[i] = fw_event_of[g.ins[i][0]]
            continue
        fw_event_of[i] = len(fw_event_node)
        fw_event_node.append(-1 if fixed_fw[i] else local[i])
    fw_out = {o for o in g.outputs[:g.nfo] if o >= 0}
    return _Forward(fw_valid, fixed_fw, fw_event_of, fw_event_node, fw_out)


def _storages(g: _G, bw: _Backward, fw: _Forward, cands: list[int], local: dict[int, int], producer: list[int],
              inexact: list[str]) -> tuple[list[Storage], list[int]]:
    """The storages the candidates live on (bytes counted once per storage),
    and each candidate's (-1: it costs nothing)."""
    st_of: dict[int, int] = {}
    storages: list[Storage] = []
    storage = [-1] * len(cands)
    for k, v in enumerate(cands):
        r = g.root[v]
        if g.cost[r] == 0:
            continue
        if r not in local:
            raise NotModelled(f"node {v} lives on node {r}'s storage, which the backward cannot reach")
        if r not in st_of:
            st_of[r] = len(storages)
            storages.append(Storage(g.cost[r], local[r], [], [], -1, NEVER, g.seq(r),
                                    g.getitem(r) and producer[local[r]] >= 0 and g.seq(g.ins[r][0]),
                                    fw.event_of.get(r, -1), -1, [], False))
        storage[k] = st_of[r]
        storages[st_of[r]].values.append(k)
    for s in storages:
        _storage_readers(g, bw, fw, cands, local, s)
    for b in bw.steps:
        if g.root[b] in st_of:
            inexact.append(f"backward step {b} lives on a forward value's storage")
    return storages, storage


@dataclass
class Reads:
    """Whose reads keep a storage alive, where not every read does (a relaxed
    description's, :mod:`fxcut.solve.inductor_bound`): backward steps, fixed
    forward nodes, and candidates (local indices) whose reads count."""

    bw: set[int]
    fw: set[int]
    sure: list[bool]


def _storage_readers(g: _G, bw: _Backward, fw: _Forward, cands: list[int], local: dict[int, int],
                     s: Storage, reads: Reads | None = None) -> None:
    """Fills in who reads ``s`` and so how long it lives: the backward steps
    (skel_first/skel_last), the fixed forward (fw_fixed_last), and the
    candidates, whose reads depend on the decision (readers, fw_var_readers);
    with ``reads``, only the reads it counts.  A multi-output node's getitems
    are its own storages, not readers."""
    readers: set[int] = set()
    var: set[int] = set()

    def fixed_read(u: int) -> None:
        if reads is None or u in reads.fw:
            s.fw_fixed_last = max(s.fw_fixed_last, fw.event_of[u])

    for k in s.values:
        v = cands[k]
        if k != s.root:
            if reads is None or reads.sure[k]:
                readers.add(k)
            if fw.fixed[v]:
                fixed_read(v)
            elif fw.valid[v]:
                var.add(k)
        elif fw.fixed[v]:
            s.fw_fixed_last = max(s.fw_fixed_last, fw.event_of[v])
        if v in bw.out:
            s.skel_last = bw.n_slots
        if v in fw.out:
            s.fw_pinned = True
        for u in g.users[v]:
            if s.seq and g.getitem(u):
                continue
            if u in local:
                if reads is None or reads.sure[local[u]]:
                    readers.add(local[u])
                if fw.fixed[u]:
                    fixed_read(u)
                elif fw.valid[u]:
                    var.add(local[u])
            elif u in bw.slot_of:
                if reads is None or u in reads.bw:
                    s.skel_last = max(s.skel_last, bw.slot_of[u])
                    s.skel_first = min(s.skel_first, bw.slot_of[u])
            elif fw.fixed[u]:
                fixed_read(u)
    s.readers = sorted(readers)
    s.fw_var_readers = sorted(var)


def describe_parts(prob: PlanProblem) -> tuple[Liveness, _G, _Backward, _Forward]:
    """The description of ``prob`` under the unfused (or held) model, and the
    graph facts it was built from (:func:`fxcut.solve.description.describe`
    describes every memory model)."""
    g = _G(prob)
    inexact: list[str] = []
    if prob.workspace is not None and any(prob.workspace):
        # never below the model: a workspace only adds to a step's bytes
        inexact.append("kernel workspaces (the kernel table) are left out: the peaks are a lower bound")
    bw = _backward_steps(g, inexact)
    cands = _candidates(g, bw)
    local = {v: k for k, v in enumerate(cands)}
    kinds = _candidate_kinds(g, cands, local)
    ln = _candidate_links(g, bw, cands, local, kinds, inexact)
    key, messy = _in_slot_order(g.n, bw, cands, ln, kinds)
    fw = _forward_events(g, local)
    for k, v in enumerate(cands):
        if kinds[k] == SAVE and not fw.valid[v]:
            raise NotModelled(f"node {v} is always saved but the forward cannot compute it")
    storages, storage = _storages(g, bw, fw, cands, local, ln.producer, inexact)
    own = {g.root[v] for v in bw.order}
    fixed_at_step, fixed_in_group = _skeleton_bytes(g, bw.order, bw.n_slots, bw.out, own)
    fw_fixed_bytes = _forward_fixed_bytes(g, len(fw.event_node), fw.event_of, fw.fixed, fw.out, local)
    lv = Liveness(
        node=cands, kind=kinds, flops=[g.flops[v] for v in cands], consumers=ln.consumers, inputs=ln.inputs,
        skel_need=ln.skel_need, first_pull=ln.first_pull, producer=ln.producer,
        fw_ok=[bool(fw.valid[v]) for v in cands], fw_fixed=[bool(fw.fixed[v]) for v in cands],
        fw_event=[fw.event_of.get(v, -1) for v in cands], key=key, storage=storage, storages=storages,
        n_slots=bw.n_slots, slot_node=bw.order + [-1], fixed_at_step=fixed_at_step, fixed_in_group=fixed_in_group,
        messy_slots=messy, fw_fixed_bytes=fw_fixed_bytes, fw_event_node=fw.event_node, fw_event_of=fw.event_of,
        inexact=sorted(set(inexact)), hold_saved=prob.hold_saved)
    return lv, g, bw, fw


def _ancestors(k: int, inputs: list[list[int]]) -> set[int]:
    seen: set[int] = set()
    stack = list(inputs[k])
    while stack:
        u = stack.pop()
        if u not in seen:
            seen.add(u)
            stack.extend(inputs[u])
    return seen


def _walk(g: _G, order: list[int], kept: set[int], counted: set[int], held: set[int], pinned: set[int],
          readers: set[int] | None = None, extend: dict[int, int] | None = None) -> tuple[list[int], list[int]]:
    """memory.c's walk_module over ``order``, counting only the storages
    (roots) in ``counted``: the live bytes while each step runs, and after
    the frees that follow it.  ``readers``: the steps whose reads keep a
    storage alive (None: all; a storage lives at least to its own step);
    ``extend``: a step index some roots live to at least."""
    last: dict[int, int] = {}
    for k, v in enumerate(order):
        read = readers is None or v in readers
        for r in [g.root[v]] + ([g.root[u] for u in g.ins[v]] if read else []):
            if read or r == v:
                last[r] = max(last.get(r, -1), k)
    for r, k in (extend or {}).items():
        if r in last:
            last[r] = max(last[r], k)
    for r in pinned:
        last[r] = 1 << 30
    dies: dict[int, list[int]] = {}
    for r, k in last.items():
        dies.setdefault(k, []).append(r)
    charge: dict[int, int] = {}
    live = 0
    for r in held:
        if r in counted and r not in charge:
            charge[r] = g.cost[r]
            live += g.cost[r]
    out: list[int] = []
    after: list[int] = []
    for k, v in enumerate(order):
        r = g.root[v]
        if r in counted and r not in charge:
            if r == v and g.flags[v] & _C.F_VAL_IS_SEQ:
                owned = [u for u in g.users[v] if u in kept and g.root[u] == u and g.getitem(u)]
                charge[r] = max(0, g.cost[v] - sum(g.cost[u] for u in owned))
                live += charge[r]
                for u in owned:
                    if u in counted and u not in charge:
                        charge[u] = g.cost[u]
                        live += g.cost[u]
            else:
                charge[r] = g.cost[r]
                live += charge[r]
        out.append(live)
        for r2 in dies.get(k, ()):  # (a root ``extend``s may die after a step that does not read it)
            if r2 in charge:
                live -= charge[r2]
        after.append(live)
    return out, after


def _skeleton_bytes(g: _G, order: list[int], n_slots: int, bw_out: set[int], counted: set[int],
                    readers: set[int] | None = None, extend: dict[int, int] | None = None
                    ) -> tuple[list[int], list[int]]:
    """Bytes of the backward's own storages (the roots in ``counted``) live
    at each of its steps, and while each slot's recomputation runs (before
    its step); ``readers`` and ``extend`` as :func:`_walk`'s."""
    kept = set(order)
    own = {r for r in counted if r in kept}
    pinned = {g.root[o] for o in bw_out if g.root[o] in own}
    at, after = _walk(g, order, kept, own, set(), pinned, readers, extend)
    return at + [0], [0] + after


def _forward_fixed_bytes(g: _G, n_fw: int, event: dict[int, int], fixed: bytearray, fw_out: set[int],
                         local: dict[int, int], counted: set[int] | None = None, readers: set[int] | None = None,
                         skip_own: set[int] | None = None, extend: dict[int, int] | None = None) -> list[int]:
    """Bytes of the forward's storages that no candidate lives on (of those
    whose roots are in ``counted``; None: all), at each event; ``readers``:
    the nodes whose reads keep a storage alive (None: every fixed one);
    ``skip_own``: roots not counted at their own step; ``extend``: an event
    some roots live to at least."""
    out = [0] * n_fw
    roots = {g.root[i] for i in range(g.n) if fixed[i] and i not in local and g.cost[g.root[i]] > 0}
    if counted is not None:
        roots &= counted
    for r in roots:
        if r in local or r not in event:
            continue
        born = event[r]
        if g.seq(r):  # the whole allocation, at its own step (memory.c's step_alloc + prepay_getitems)
            owned = sum(g.cost[u] for u in g.users[r] if fixed[u] and g.getitem(u) and g.root[u] == u)
            out[born] += max(g.cost[r], owned)
            continue
        start = born + 1 if (g.getitem(r) and g.seq(g.ins[r][0])) or (skip_own and r in skip_own) else born
        last = max(born, (extend or {}).get(r, born))
        for i in range(g.n):
            if g.root[i] != r or not fixed[i]:
                continue
            if i in fw_out:
                last = n_fw
            if readers is not None and i != r and i not in readers:
                continue  # a view no kernel reads through
            last = max(last, event[i])
            for u in g.users[i]:
                if fixed[u] and not (g.seq(i) and g.getitem(u)) and (readers is None or u in readers):
                    last = max(last, event[u])
        for t in range(start, min(last, n_fw - 1) + 1):
            out[t] += g.cost[r]
    return out


__all__ = ["Decision", "FREE", "Liveness", "NEVER", "NotModelled", "RECOMPUTE", "Reads", "SAVE", "STEP", "Storage",
           "describe_parts"]
