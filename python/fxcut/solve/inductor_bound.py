"""The inductor model restated for the exact solver: a relaxation that is a bound.

The inductor model (``csrc/memory_fused.c``; its rules above
``fxcut_fusion_kind`` in ``csrc/fxcut.h``) runs the same two modules as the
unfused one, in the same order, but kernel by kernel: a pointwise value is
inlined into its readers unless inductor realizes it, fused neighbours keep
their intermediates in registers, a pointwise kernel may write over a buffer
it reads last.  Which values are buffers depends on the decision (a value's
readers in the module, the expression inlining builds), so the exact MILP
does not restate all of it.  :func:`relax` turns the unfused description
into one whose peak never exceeds the inductor model's (docs/exact.md):

- **Buffers every decision makes** count: a saved value (an output of the
  forward, an input of the backward), an extern or concatenation kernel's
  output, an item of a multi-output kernel, a value an extern kernel of the
  module reads (inductor realizes its inputs), a module output.  Any other
  value counts only when saved (it may be inlined, or a fused kernel's
  local); a saved view of a value the backward recomputes inline does not.
- **Reads that keep a buffer alive** are those of nodes whose value reaches
  a kernel or an output of the module whatever is decided (:func:`_reach`).
  An inlined reader's read happens in a kernel at or after it in module
  order, so a buffer the description holds live at a step is live at the
  next kernel too: every step bounds the peak (but a recomputation in a slot
  whose order differs between decisions).
- **In place**: a pointwise value does not count at its own step, where the
  buffer it may write over does.
- **Chains** (:class:`_Chains`): a storage read by inlinable pointwise
  values no rule counts lives to their last reader.
- **Transient bytes** of the kernels every decision runs as kernels of
  their own (a CPU convolution's input copies; its workspace where the
  module certainly holds a layout kernel).

The MILP's bound over it is then a proven lower bound on the inductor
model's optimum; the plans it returns are scored by the C inductor model.
tests/test_exact.py checks the relaxation against the C model on every
decision of random graphs under random fusion kinds and on random decisions
of zoo graphs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

import fxcut._C as _C

from .liveness import NEVER, Reads, _forward_fixed_bytes, _skeleton_bytes, _storage_readers

if TYPE_CHECKING:
    from .liveness import Liveness, _Backward, _Forward, _G
    from .planner import PlanProblem

#: the ``Liveness.inexact`` note of a relaxed description
RELAXED = "the inductor model: only the buffers every decision makes, while reads that reach a kernel keep them (a lower bound)"

_KERNELS = (_C.FUSE_EXTERN, _C.FUSE_REDUCTION, _C.FUSE_CAT)


class _Kinds:
    """Per node: what the inductor model makes of it whatever is decided."""

    def __init__(self, g: _G, fusion: bytes) -> None:
        self.g = g
        self.fusion = fusion

    def kind(self, v: int) -> int:
        return self.fusion[v] & _C.FUSE_KIND_MASK

    def whole_kernel(self, v: int) -> bool:
        """A node the model makes a kernel of its own, whatever is decided
        (an extern kernel a reader may absorb is not)."""
        return (self.g.root[v] == v and self.kind(v) in _KERNELS
                and not self.fusion[v] & _C.FUSE_ABSORBED)

    def always_buffer(self, v: int) -> bool:
        """A storage root the model allocates whenever it runs and never
        keeps as a fused kernel's local."""
        g = self.g
        if not self.whole_kernel(v):
            return self._item_of_kernel(v)
        return self.kind(v) != _C.FUSE_REDUCTION or g.seq(v)

    def _item_of_kernel(self, v: int) -> bool:
        g = self.g
        if not g.getitem(v) or g.root[v] != v:
            return False
        p = g.ins[v][0]
        return self.whole_kernel(p) and g.seq(p)

    def in_place(self, v: int) -> bool:
        """A kernel that may write its buffer over one it reads last (a
        pointwise one): not counted at its own step, where the buffer it
        takes over is."""
        return (self.kind(v) == _C.FUSE_POINTWISE and not self.g.flags[v] & _C.F_VAL_IS_SEQ
                and not self._item_of_kernel(v))

    def extern_inputs(self, steps: set[int] | list[int]) -> set[int]:
        """Roots an extern kernel among ``steps`` reads: buffers (inductor
        realizes an extern kernel's inputs), unless a reader absorbs them."""
        g = self.g
        out: set[int] = set()
        for u in steps:
            if not self.whole_kernel(u) or self.kind(u) != _C.FUSE_EXTERN:
                continue
            for w in g.ins[u]:
                r = g.root[w]
                if not self.fusion[r] & _C.FUSE_ABSORBED:
                    out.add(r)
        return out

    def transient(self, v: int, arrays_nbytes: list[int], workspace: list[int] | None, layout: bool) -> int:
        """Bytes kernel v holds only while it runs (memory_fused.c's kernel_transient)."""
        g = self.g
        b = 0
        if self.fusion[v] & _C.FUSE_COPIES_INPUTS:
            for u in g.ins[v]:
                f = g.flags[u]
                if arrays_nbytes[u] > 0 and (not f & _C.F_NON_TENSOR or f & _C.F_VAL_IS_SEQ):
                    b += arrays_nbytes[u]
        if layout and workspace is not None:
            b += workspace[v]
        return b


def _reach(lv: Liveness, g: _G, bw: _Backward, fw: _Forward, ks: _Kinds, local: dict[int, int]) -> Reads:
    """Whose reads keep a buffer alive: a node whose value reaches a kernel
    or an output of its module, whatever is decided.  (A pointwise node no
    kernel reads, an impure one left without readers, is computed by no
    kernel: its reads free nothing later.)"""
    in_bw: set[int] = set()  # backward steps
    for u in sorted(bw.steps, reverse=True):
        if ks.whole_kernel(u) or u in bw.out or any(w in in_bw for w in g.users[u] if w in bw.steps):
            in_bw.add(u)
    in_fw: set[int] = set()  # fixed forward nodes
    for u in range(g.n - 1, -1, -1):
        if fw.fixed[u] and (ks.whole_kernel(u) or u in fw.out or any(w in in_fw for w in g.users[u] if fw.fixed[w])):
            in_fw.add(u)
    # a recomputed candidate whose every reason to run reaches a kernel
    sure = [False] * len(lv)
    for k in range(len(lv) - 1, -1, -1):
        v = lv.node[k]
        skel = [u for u in g.users[v] if u in bw.steps]
        sure[k] = (ks.whole_kernel(v) or v in bw.out or any(u in in_bw for u in skel)
                   or (all(u in in_bw and u in bw.slot_of for u in skel)
                       and all(sure[local[u]] for u in g.users[v] if u in local)))
    return Reads(in_bw, in_fw, sure)


class _Chains:
    """Inlining's other side: a pointwise value inductor inlines is not
    stored, but what it reads is then read where it is, so it lives on.
    Through a chain of pointwise values no rule counts (none a candidate,
    each at least as large as the storage it starts from), either a value
    of the chain is a buffer or the storage is still read: a storage's
    lifetime extends to the last reader of its chain.  Each value joins at
    most one chain (its buffer then stands for one storage only), and a
    chain value's own step adds nothing (a kernel writing over what it
    reads)."""

    def __init__(self, g: _G, reading: Callable[[int], bool], eligible: Callable[[int], bool],
                 position: Callable[[int], int]) -> None:
        self.g = g
        self.reading = reading  # a node whose reads keep a storage alive
        self.eligible = eligible  # a node that may join a chain
        self.position = position
        self.claimed: set[int] = set()
        self.aliases: dict[int, list[int]] = {}
        for v in range(g.n):
            if g.root[v] != v:
                self.aliases.setdefault(g.root[v], []).append(v)

    def last(self, root: int) -> int:
        """The last position a read of ``root``'s storage or of its chain
        happens (-1: none)."""
        g = self.g
        cost = g.cost[root]
        last = -1
        stack = [root]
        while stack:
            a = stack.pop()
            for v in [a] + self.aliases.get(a, []):
                for u in g.users[v]:
                    if not self.reading(u) or g.root[u] == a:
                        continue
                    last = max(last, self.position(u))
                    if u not in self.claimed and g.root[u] == u and g.cost[u] >= cost > 0 and self.eligible(u):
                        self.claimed.add(u)
                        stack.append(u)
        return last


def relax(lv: Liveness, g: _G, bw: _Backward, fw: _Forward, prob: PlanProblem) -> Liveness:
    """The relaxed description of ``prob`` under its inductor model (module docstring)."""
    assert prob.inductor is not None
    ks = _Kinds(g, prob.inductor.fusion)
    local = {v: k for k, v in enumerate(lv.node)}
    reach = _reach(lv, g, bw, fw, ks, local)
    nbytes = [int(x) for x in prob.arrays.nbytes]
    workspace = [int(x) for x in prob.workspace] if prob.workspace is not None else None
    bw_reads = ks.extern_inputs(bw.steps)
    fw_reads = ks.extern_inputs([i for i in range(g.n) if fw.fixed[i]])
    own = {g.root[v] for v in bw.order}
    counted = {r for r in own if ks.always_buffer(r) or r in bw_reads}
    counted |= {g.root[o] for o in bw.out if g.root[o] in own}
    fw_certain = {i for i in range(g.n) if fw.fixed[i] and (ks.always_buffer(i) or i in fw_reads)}
    fw_certain |= {g.root[o] for o in fw.out}
    bw_chains = _Chains(g, lambda u: u in bw.slot_of and u in reach.bw,
                        lambda y: y in bw.slot_of and y in reach.bw and y not in counted and ks.in_place(y),
                        lambda u: bw.slot_of[u])
    fw_chains = _Chains(g, lambda u: bool(fw.fixed[u]) and u in reach.fw,
                        lambda y: (bool(fw.fixed[y]) and y in reach.fw and y not in local and y not in fw_certain
                                   and ks.in_place(y)), lambda u: fw.event_of[u])
    storages = []
    for s in lv.storages:
        r = lv.node[s.root]
        ok = ks.always_buffer(r)
        t = replace(s, skel_last=-1, skel_first=NEVER, fw_fixed_last=-1)  # who reads it, the reads that count
        _storage_readers(g, bw, fw, lv.node, local, t, reach)
        fw_counts = ok or s.fw_pinned or r in fw_reads
        storages.append(replace(t, rc_counts=ok or r in bw_reads, fw_counts=fw_counts, own_counts=not ks.in_place(r),
                                skel_last=max(t.skel_last, bw_chains.last(r)),
                                fw_fixed_last=max(t.fw_fixed_last, fw_chains.last(r)) if fw.fixed[r] and fw_counts
                                else t.fw_fixed_last))
    bw_extend = {r: bw_chains.last(r) for r in sorted(counted)}
    at, in_group = _skeleton_bytes(g, bw.order, bw.n_slots, bw.out, counted, reach.bw, bw_extend)
    bw_layout = any(prob.inductor.fusion[v] & _C.FUSE_LAYOUT for v in bw.steps)
    for k, v in enumerate(bw.order):
        if v in counted and ks.in_place(v):
            at[k] -= g.cost[v]  # its own buffer, which may be one it reads
        if ks.always_buffer(v):  # (a fused kernel's local holds nothing while it runs)
            at[k] += ks.transient(v, nbytes, workspace, bw_layout)
    return replace(lv, storages=storages, fixed_at_step=at, fixed_in_group=in_group,
                   fw_fixed_bytes=_forward(g, fw, ks, local, fw_certain, reach.fw, fw_chains, nbytes, workspace, prob),
                   inexact=sorted(set(lv.inexact) | {RELAXED}), relaxed=True)


def _forward(g: _G, fw: _Forward, ks: _Kinds, local: dict[int, int], certain: set[int], readers: set[int],
             chains: _Chains, nbytes: list[int], workspace: list[int] | None, prob: PlanProblem) -> list[int]:
    """The forward's fixed bytes: the buffers every decision makes of the
    storages no candidate lives on (``certain``), and what its kernels hold
    while they run."""
    assert prob.inductor is not None
    extend = {r: chains.last(r) for r in sorted(certain) if r not in local}
    fixed_bytes = _forward_fixed_bytes(g, len(fw.event_node), fw.event_of, fw.fixed, fw.out, local, certain, readers,
                                       {r for r in certain if ks.in_place(r)}, extend)
    layout = any(prob.inductor.fusion[i] & _C.FUSE_LAYOUT for i in range(g.n) if fw.fixed[i])
    for i, t in fw.event_of.items():
        if g.getitem(i) and g.ins[i][0] in fw.event_of:
            continue  # an item shares its producer's event
        if fw.fixed[i] and ks.always_buffer(i):  # (a candidate's event may not run; a local holds nothing)
            fixed_bytes[t] += ks.transient(i, nbytes, workspace, layout)
    return fixed_bytes


__all__ = ["RELAXED", "relax"]
