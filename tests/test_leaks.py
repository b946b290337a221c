"""No entry point of the C core leaks: 10,000 calls of each, on success and
on every kind of error path, leave

- the reference count of every input unchanged (and every buffer released:
  an array.array can be resized again only when no export is left),
- memory flat: Python allocations (tracemalloc), bytes in use by malloc
  (glibc's mallinfo2, which sees the C core's own allocations), and the
  resident set (/proc/self/statm), each within a tolerance that a leak of
  64 bytes per call (640 KB over 10,000 calls) would exceed.

Under AddressSanitizer (scripts/sanitize.sh) freed memory sits in ASan's
quarantine, so the memory bounds are skipped there; the reference counts
and buffer releases are still checked, over 100 calls of each.
"""

from __future__ import annotations

import ctypes
import dataclasses
import gc
import operator
import os
import sys
import tracemalloc
import types
from array import array
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.fx as fx

import fxcut
import fxcut.torchrules.versions
from fxcut import _C
from fxcut.solve.arrays import GraphArrays
from fxcut.torchrules.lower import LoweredGraph, lower_for_partition
from fxcut.torchrules.ops import default_facts
import small_graphs
from synthetic_arrays import DEFAULT_OPTIONS

aten = torch.ops.aten

from profiled import UNDER_ASAN  # noqa: E402
# Under ASan only reference counts and buffer exports are checked, and a
# leaked reference shows after one call: 100 calls there keep every path under
# the sanitizer without 10,000 slow ones (the memory bounds need the 10,000).
CALLS = 100 if UNDER_ASAN else 10_000
WARMUP = 10 if UNDER_ASAN else 500
TOLERANCE = 256 * 1024  # bytes over CALLS calls; 64 B/call would be 640,000
OPTIONS = DEFAULT_OPTIONS


def _joint(conflict: bool = False) -> fx.Graph:
    """small_graphs.mm_relu_joint's graph; ``conflict``: its relu (a value
    the backward needs) made unsaveable, an infinite path."""
    g = small_graphs.mm_relu_joint().graph
    if conflict:
        relu = next(n for n in g.nodes if n.target is aten.relu.default)
        relu.meta["val"] = "not a tensor"
    return g


def _lowered(conflict: bool = False) -> LoweredGraph:
    return lower_for_partition(_joint(conflict), default_facts(), impure_random=True,
                               rules=fxcut.torchrules.versions.rules_or_nearest())


def _edited(arrays: GraphArrays, field: str, index: int, value: int) -> GraphArrays:
    buf = array(getattr(arrays, field).typecode, getattr(arrays, field))
    buf[index] = value
    return dataclasses.replace(arrays, **{field: buf})


def _inputs_of(args: tuple[Any, ...]) -> list[Any]:
    """Every object whose reference count must not move: the arguments and,
    for a GraphArrays, each of its arrays.  Shared singletons (None, small
    ints) are left out: other code moves their counts."""
    out: list[Any] = []
    for a in args:
        if a is None or isinstance(a, int):
            continue
        out.append(a)
        if isinstance(a, GraphArrays):
            out += [getattr(a, f.name) for f in dataclasses.fields(a) if f.name not in ("nodes", "index")]
    return out


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


def _malloc_in_use() -> int | None:
    """Bytes malloc has handed out and not had back (glibc), or None."""
    try:
        libc = ctypes.CDLL(None)
        fn = libc.mallinfo2
    except (OSError, AttributeError):
        return None
    fn.restype = _Mallinfo2
    info = fn()
    return int(info.uordblks + info.hblkhd)


def _exports_released(args: tuple[Any, ...]) -> None:
    for a in _inputs_of(args):
        if isinstance(a, array):
            a.append(a[0] if len(a) else 0)  # BufferError while an export is alive
            a.pop()


def _run(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], exc: type[BaseException] | None,
         calls: int) -> None:
    for _ in range(calls):
        if exc is None:
            fn(*args, **kwargs)
        else:
            try:
                fn(*args, **kwargs)
            except exc:
                pass
            else:  # pragma: no cover - the case is built to fail
                raise AssertionError(f"{fn.__name__} did not raise {exc.__name__}")


Case = tuple[str, Callable[..., Any], tuple[Any, ...], dict[str, Any], type[BaseException] | None]


def _cases() -> list[Case]:
    ok = _lowered()
    conflict = _lowered(conflict=True)
    bad_index = _edited(ok, "in_idx", 0, 99)
    no_size = _edited(ok, "nbytes", 4, _C.SIZE_UNKNOWN)
    t, h = array("i", [0, 1, 0, 2]), array("i", [1, 3, 2, 3])
    cap = array("q", [3, 2, -1, 5])
    nfwd = {"num_fwd_outputs": 1}
    plan = {"num_fwd_outputs": 1, "memory_budget": 0.5}
    full = {"static_lifetime": bytes(8), "force_save": array("i", [3]), "fuse_a": array("i", [3]),
            "fuse_b": array("i", [4])}
    mem, rt = [0.5, 0.25, 0.125], [3.0, 2, 1.0]
    dp = _C.partition_decide
    bp = _C.budget_plan
    kn = _C.knapsack
    ms = _C.memory_simulate
    mem_ok = {"num_fwd_outputs": 1, "saved": array("i", [0, 4])}
    mem_full = {**mem_ok, "storage_of": array("i", range(8)), "flops": array("q", [0, 0, 0, 64, 16, 16, 64, 0]),
                "timeline": True}
    ps, pf = _C.plan_simulate, _C.plan_frontier
    inputs = (_C.KIND_PLACEHOLDER, _C.KIND_GET_ATTR)
    dep = [False] * len(ok.kind)  # depends on a tangent: the backward's
    for i in range(len(ok.kind)):
        dep[i] = bool(ok.flags[i] & _C.F_TANGENT) or ok.kind[i] == _C.KIND_OUTPUT or any(
            dep[u] for u in ok.in_idx[ok.in_ptr[i]:ok.in_ptr[i + 1]])
    roles = bytes(_C.PLAN_ROLE_INPUT if ok.kind[i] in inputs else _C.PLAN_ROLE_BACKWARD if dep[i]
                  else _C.PLAN_ROLE_FREE for i in range(len(ok.kind)))
    n = len(roles)
    plan_ok = {"num_fwd_outputs": 1, "role": roles}
    plan_full = {**plan_ok, "storage_of": array("i", range(n)), "flops": array("q", [7] * n)}
    # the inductor model: an extern kernel, a fused pointwise pair, every option array
    kinds = bytes([_C.FUSE_EXTERN if k % 3 == 0 else _C.FUSE_POINTWISE for k in range(n)])
    fused = {"fusion": kinds, "fused_cost": array("q", [1] * n), "iteration": array("q", [64] * n),
             "realize": (4, 8, 30)}
    plan_cases: list[Case] = [
        ("plan_simulate", ps, (ok,), {**plan_ok, "saved": bytes(n)}, None),
        ("plan_simulate/all saved", ps, (ok,), {**plan_full, "saved": bytes([1] * n)}, None),
        ("plan_simulate/bad role", ps, (ok,), {**plan_ok, "role": bytes([9] * n), "saved": bytes(n)}, ValueError),
        ("plan_simulate/storage length", ps, (ok,), {**plan_ok, "saved": bytes(n), "storage_of": array("i", [0])},
         ValueError),
        ("plan_simulate/bad graph", ps, (bad_index,), {**plan_ok, "saved": bytes(n)}, IndexError),
        ("plan_simulate/missing role", ps, (ok,), {"num_fwd_outputs": 1, "saved": bytes(n)}, TypeError),
        ("plan_frontier", pf, (ok,), {**plan_full, "seeds": bytes(2 * n)}, None),
        ("plan_frontier/search", pf, (ok,), {**plan_full, "exact_max_free": 0, "max_work": 500}, None),
        ("plan_frontier/lanes", pf, (ok,), {**plan_full, "exact_max_free": 0, "max_work": 500, "threads": 3}, None),
        ("plan_frontier/bad threads", pf, (ok,), {**plan_ok, "threads": -1}, ValueError),
        ("plan_frontier/seeds length", pf, (ok,), {**plan_ok, "seeds": bytes(n + 1)}, ValueError),
        ("plan_simulate/inductor model", ps, (ok,), {**plan_full, "saved": bytes(n), **fused}, None),
        ("plan_frontier/inductor model", pf, (ok,), {**plan_full, "seeds": bytes(n), **fused}, None),
        ("plan_frontier/bad fusion", pf, (ok,), {**plan_full, "fusion": bytes([0xC0] * n)}, ValueError),
        ("plan_frontier/time limit", pf, (ok,), {**plan_ok, "time_limit": 0.0}, ValueError),
        ("plan_frontier/max_work", pf, (ok,), {**plan_ok, "max_work": 0}, ValueError),
        ("plan_frontier/exact_max_free", pf, (ok,), {**plan_ok, "exact_max_free": 99}, ValueError),
        ("plan_frontier/bad graph", pf, (bad_index,), plan_ok, IndexError),
    ]
    return plan_cases + _cse_key_cases() + _prepare_plan_cases() + _lower_read_cases() + [
        ("validate", _C.validate, (ok,), {}, None),
        ("validate/bad index", _C.validate, (bad_index,), {}, IndexError),
        ("validate/not arrays", _C.validate, (object(),), {}, TypeError),
        ("walk", _C.param_alias_walk, (ok, array("i", [0, 1])), {}, None),
        ("walk/param out of range", _C.param_alias_walk, (ok, array("i", [0, 99])), {}, IndexError),
        ("walk/bad graph", _C.param_alias_walk, (bad_index, array("i", [0])), {}, IndexError),
        ("walk/params not int32", _C.param_alias_walk, (ok, array("q", [0])), {}, TypeError),
        ("min_cut/push-relabel", _C.min_cut, (4, t, h, cap, 0, 3, _C.MAXFLOW_PUSH_RELABEL), {}, None),
        ("min_cut/dinic", _C.min_cut, (4, t, h, cap, 0, 3), {"algorithm": _C.MAXFLOW_DINIC}, None),
        ("min_cut/infinite", _C.min_cut, (4, t, h, array("q", [-1, -1, -1, 5]), 0, 3), {}, fxcut.InfiniteCutError),
        ("min_cut/bad head", _C.min_cut, (4, t, array("i", [1, 9, 2, 3]), cap, 0, 3), {}, IndexError),
        ("min_cut/bad cap buffer", _C.min_cut, (4, t, h, array("i", [1, 1, 1, 1]), 0, 3), {}, TypeError),
        ("min_cut/short head", _C.min_cut, (4, t, array("i", [1]), cap, 0, 3), {}, ValueError),
        ("decide", dp, (ok, OPTIONS), nfwd, None),
        ("decide/network", dp, (ok, OPTIONS), {**nfwd, **full, "dont_ban": bytes(8), "keep_network": _C.KEEP_NETWORK},
         None),
        ("decide/build only", dp, (ok, OPTIONS), {**nfwd, "keep_network": _C.KEEP_BUILD_ONLY}, None),
        ("decide/infinite", dp, (conflict, OPTIONS), nfwd, fxcut.InfiniteCutError),
        ("decide/no size", dp, (no_size, OPTIONS), nfwd, RuntimeError),
        ("decide/bad graph", dp, (bad_index, OPTIONS), nfwd, IndexError),
        ("decide/bad mask", dp, (ok, OPTIONS), {**nfwd, "static_lifetime": bytes(8), "dont_ban": bytes(3)}, ValueError),
        ("decide/fuse lengths", dp, (ok, OPTIONS), {**nfwd, "fuse_a": array("i", [1])}, ValueError),
        ("decide/force out of range", dp, (ok, OPTIONS), {**nfwd, "force_save": array("i", [99])}, IndexError),
        ("decide/bad options", dp, (ok, object()), nfwd, TypeError),
        ("decide/keep_network out of range", dp, (ok, OPTIONS), {**nfwd, "keep_network": 3}, ValueError),
        ("budget_plan", bp, (ok, OPTIONS), {**plan, **full, "input_storage": bytes(8)}, None),
        ("budget_plan/budget 0", bp, (ok, OPTIONS), {**plan, "memory_budget": 0.0}, None),
        ("budget_plan/budget 1", bp, (ok, OPTIONS), {**plan, "memory_budget": 1.0}, None),
        ("budget_plan/infinite", bp, (conflict, OPTIONS), plan, fxcut.InfiniteCutError),
        ("budget_plan/bad budget", bp, (ok, OPTIONS), {**plan, "memory_budget": 2.0}, ValueError),
        ("budget_plan/bad mask", bp, (ok, OPTIONS), {**plan, "input_storage": bytes(3)}, ValueError),
        ("budget_plan/bad graph", bp, (bad_index, OPTIONS), plan, IndexError),
        ("budget_plan/missing budget", bp, (ok, OPTIONS), nfwd, TypeError),
        ("aggressive_options", _C.aggressive_options, (OPTIONS,), {}, None),
        ("aggressive_options/bad options", _C.aggressive_options, (object(),), {}, TypeError),
        ("memory_simulate", ms, (ok,), mem_ok, None),
        ("memory_simulate/timeline", ms, (ok,), mem_full, None),
        ("memory_simulate/saved out of range", ms, (ok,), {**mem_ok, "saved": array("i", [0, 99])}, IndexError),
        ("memory_simulate/storage forward", ms, (ok,), {**mem_full, "storage_of": array("i", [0, 1, 2, 4, 4, 5, 6, 7])},
         ValueError),
        ("memory_simulate/storage length", ms, (ok,), {**mem_ok, "storage_of": array("i", [0])}, ValueError),
        ("memory_simulate/not realisable", ms, (ok,), {**mem_ok, "saved": array("i", [])}, ValueError),
        ("memory_simulate/bad graph", ms, (bad_index,), mem_ok, IndexError),
        ("memory_simulate/missing saved", ms, (ok,), nfwd, TypeError),
        ("memory_simulate/inductor model", ms, (ok,), {**mem_full, "fusion": bytes([_C.FUSE_EXTERN, 0] * 4),
                                                       "fused_cost": array("q", [1] * 8),
                                                       "iteration": array("q", [64] * 8), "realize": (4, 8, 30)},
         None),
        ("memory_simulate/bad realize", ms, (ok,), {**mem_ok, "fusion": bytes(8), "realize": (4, -1, 30)}, ValueError),
        ("memory_simulate/fused_cost without fusion", ms, (ok,), {**mem_ok, "fused_cost": array("q", [1] * 8)},
         ValueError),
        ("knapsack/dp", kn, (mem, rt, 0.5, "dp"), {}, None),
        ("knapsack/dp_lean", kn, (mem, rt, 0.5, "dp_lean"), {}, None),
        ("knapsack/greedy", kn, (mem, rt, 0.5, "greedy"), {}, None),
        ("knapsack/hirschberg", kn, (mem, rt, 0.5, "dp_knapsack_sliding_hirschberg"), {}, None),
        ("knapsack/unknown solver", kn, (mem, rt, 0.5, "nope"), {}, ValueError),
        ("knapsack/lengths", kn, (mem, rt[:2], 0.5, "dp"), {}, ValueError),
        ("knapsack/not a number", kn, (mem, [1.0, "x", 2.0], 0.5, "dp"), {}, TypeError),
        ("knapsack/huge int", kn, (mem, [1.0, 10**400, 2.0], 0.5, "dp"), {}, OverflowError),
        ("knapsack/negative memory", kn, ([-1.0], [1.0], 0.5, "dp"), {}, ValueError),
    ]


def _cse_key_cases() -> list[Case]:
    """_C.cse_key (fxcut.torchrules.prepare's per-node CSE key): a key, the fallback
    (None), and its error paths (a leaf test that raises, an unhashable
    leaf, a bad config)."""
    import collections

    from fxcut.torchrules.prepare import cse_key_config

    g = fx.Graph()
    x, y = g.placeholder("primals_1"), g.placeholder("primals_2")
    env = {y: x}
    config = cse_key_config(True)
    args = (x, [y, 1.5, 2j, {"k": (y, None)}], torch.float16)
    kwargs = {"dim": -1, "out": [x]}

    def raising_is_leaf(value: Any) -> bool:
        raise RuntimeError("leaf test")

    raising = dataclasses.replace(config, tree_is_leaf=raising_is_leaf)
    pair = collections.namedtuple("pair", "a b")(x, y)
    ck = _C.cse_key
    return [
        ("cse_key", ck, (args, kwargs, env, config), {}, None),
        ("cse_key/fallback", ck, ((x, pair), {}, env, config), {}, None),
        ("cse_key/fallback in kwargs", ck, ((x,), {"p": pair}, env, config), {}, None),
        ("cse_key/leaf test raises", ck, ((x, [object()]), {}, env, raising), {}, RuntimeError),
        ("cse_key/unhashable leaf", ck, ((x, [y, slice(1)]), {}, env, config), {}, TypeError),
        ("cse_key/missing field", ck, (args, kwargs, env, _without(config, "containers")), {}, TypeError),
        ("cse_key/ill-typed field", ck, (args, kwargs, env, dataclasses.replace(config, known_leaves=set())), {},
         TypeError),
    ]


def _prepare_plan_cases() -> list[Case]:
    """_C.prepare_plan (fxcut.torchrules.prepare's plan): dead code, duplicates merged
    (one through pytree's key, floats by bits, a stream), values aliasing an
    output skipped (a table entry dropped), backward values apart; and its
    error paths (bad arguments, callbacks that raise or answer nonsense, an
    element that is no node, no live node)."""
    import collections

    from fxcut.torchrules import versions
    from fxcut.torchrules.prepare import node_facts_of, plan_config

    pair = collections.namedtuple("pair", "a b")
    g = fx.Graph()
    x, t = g.placeholder("primals_1"), g.placeholder("tangents_1")
    out_val = torch.empty(4)
    keep = g.call_function(aten.sigmoid.default, (x,))
    keep.meta["val"] = out_val
    dups = []
    for k in range(2):
        dups.append(g.call_function(aten.sin.default, (x,)))
        dups.append(g.call_function(aten.add.Tensor, (x, -0.0)))
        dups.append(g.call_function(operator.getitem, (x, pair(x, [t, 1.5]))))
        e = g.call_function(aten.exp.default, (x,))
        e.meta["custom"] = {"stream": k % 2}
        dups.append(e)
        g.call_function(aten.cos.default, (x,))  # dead
    dups[0].meta["val"] = out_val  # aliases an output: its table entry goes
    bwd = g.call_function(aten.mul.Tensor, (dups[4], t))
    g.output((keep, *dups, bwd))
    nodes = list(g.nodes)
    rules = versions.RELEASES["2.15"]
    facts = node_facts_of(default_facts(), True, rules)
    config = plan_config(rules, len(dups) + 1)
    plain = plan_config(versions.RELEASES["2.13"], None)
    flags = {"eliminate_dead": True, "cse": True}
    pp = _C.prepare_plan

    def raising(node: fx.Node) -> int:
        raise RuntimeError("node facts")

    # the error paths on a small graph (each call cheap): a fallback key, a backward output
    s = fx.Graph()
    y = s.placeholder("primals_1")
    item = s.call_function(operator.getitem, (y, pair(y, 2)))
    s.output((item, s.call_function(aten.neg.default, (item,))))
    small = list(s.nodes)
    config1 = plan_config(rules, 1)

    return [
        ("prepare_plan", pp, (nodes, facts, config), flags, None),
        ("prepare_plan/2.13 rules, no dead code", pp, (nodes, facts, plain), {**flags, "eliminate_dead": False},
         None),
        ("prepare_plan/dead code only", pp, (nodes, facts, config), {**flags, "cse": False}, None),
        ("prepare_plan/nodes not a list", pp, (tuple(small), facts, config1), flags, TypeError),
        ("prepare_plan/node_facts raises", pp, (small, raising, config1), flags, RuntimeError),
        ("prepare_plan/node_facts nonsense", pp, (small, lambda n: "x", config1), flags, TypeError),
        ("prepare_plan/missing field", pp, (small, facts, _without(config1, "keys_stream")), flags, TypeError),
        ("prepare_plan/ill-typed field", pp, (small, facts, dataclasses.replace(config1, skips_impure=1)), flags,
         TypeError),
        ("prepare_plan/bits out of range", pp, (small, facts, dataclasses.replace(config1, mutates=-1)), flags,
         ValueError),
        ("prepare_plan/bad key config", pp,
         (small, facts, dataclasses.replace(config1, key=_without(config1.key, "leaf_key"))), flags, TypeError),
        ("prepare_plan/python_key nonsense", pp, (small, facts, dataclasses.replace(config1, python_key=lambda *a: 3)),
         flags, TypeError),
        ("prepare_plan/seeds not iterable", pp,
         (small, facts, dataclasses.replace(config1, backward_seeds=lambda o: 3)), flags, TypeError),
        ("prepare_plan/not a node", pp, ([small[0], "x", small[-1]], facts, config1), flags, AttributeError),
        ("prepare_plan/no live node", pp, ([], facts, config1), flags, IndexError),
    ]


def _lower_read_cases() -> list[Case]:
    """_C.lower_read (fxcut.torchrules.lower's C reader): plain and slow-path nodes,
    tuple and list values (None, nested, zero-size and odd items, opaque), a
    replacement, the give-ups (None) on a foreign node, a non-node in the
    list, a replacement that is not a node or not in the graph, and its error
    paths (the slow path or opaque raising or answering nonsense, a tag whose
    comparison raises, a config field missing, ill-typed or out of range);
    and the reader's two rules asked from Python."""
    from fxcut.torchrules.lower import _NodeFacts, _ValueFacts

    def not_opaque(node: fx.Node) -> bool:  # fxcut.torchrules.lower._is_opaque's answer, without its inductor import
        return False

    facts = default_facts()
    node_facts = _NodeFacts(facts, _ValueFacts(facts, True, fxcut.torchrules.versions.rules_or_nearest()), True)
    config = dataclasses.replace(node_facts.reader_config(), opaque=not_opaque)
    g = fx.Graph()
    x, t = g.placeholder("primals_1"), g.placeholder("tangents_1")
    for n in (x, t):
        n.meta["val"] = torch.empty(4, device="meta")
    a = g.call_function(aten.mul.Tensor, (x, t))
    b = g.call_function(aten.mul.Tensor, (x, t))
    c = g.call_function(aten.add.Tensor, (a, b))
    for n in (a, b, c):
        n.meta.update(val=torch.empty(4, device="meta"), partitioner_tag="is_backward")
    b.meta["partitioner_tag"] = _Tag("must_be_in_backward")  # compared through its __eq__
    s = g.call_function(aten.split.Tensor, (c, 2))
    s.meta["val"] = [torch.empty(2, device="meta")] * 2
    ln = g.call_function(aten.native_layer_norm.default, (c, [4], None, None, 1e-5))
    ln.meta["val"] = (torch.empty(4, device="meta"), None, [torch.empty(0, device="meta"), 3], torch.empty(0))
    g.output(([c, s, ln],))
    nodes = list(g.nodes)
    stranger = fx.Graph().placeholder("y")
    bad_tag = fx.Graph()
    z = bad_tag.placeholder("primals_1")
    z.meta["val"] = torch.empty(4, device="meta")
    neg = bad_tag.call_function(aten.neg.default, (z,))
    neg.meta.update(val=torch.empty(4, device="meta"), partitioner_tag=_Tag(None))
    bad_tag.output((neg,))

    def raising(node: fx.Node) -> Any:
        raise RuntimeError("slow path")

    def cfg(**changes: Any) -> Any:
        return dataclasses.replace(config, **changes)

    lr, role, tag = _C.lower_read, _C.placeholder_role, _C.partitioner_tag_flags
    return [
        ("lower_read", lr, (nodes, None, config), {}, None),
        ("lower_read/replace", lr, (nodes, {b: a}, config), {}, None),
        ("lower_read/opaque sequences", lr, (nodes, None, cfg(opaque=lambda n: True)), {}, None),
        ("lower_read/give up", lr, (nodes[:1] + nodes[2:], None, config), {}, None),
        ("lower_read/stranger", lr, ([x, stranger], None, config), {}, None),
        ("lower_read/not a node", lr, ([x, "t"], None, config), {}, None),
        ("lower_read/replace by a stranger", lr, (nodes, {b: stranger}, config), {}, None),
        ("lower_read/replace key not a node", lr, (nodes, {"b": a}, config), {}, None),
        ("lower_read/slow raises", lr, (nodes, None, cfg(slow=raising)), {}, RuntimeError),
        ("lower_read/opaque raises", lr, (nodes, None, cfg(opaque=raising)), {}, RuntimeError),
        ("lower_read/opaque answers nonsense", lr, (nodes, None, cfg(opaque=lambda n: _NoTruth())), {}, TypeError),
        ("lower_read/slow answers nonsense", lr, (nodes, None, cfg(slow=lambda n: "x")), {}, TypeError),
        ("lower_read/tag comparison raises", lr, (list(bad_tag.nodes), None, config), {}, RuntimeError),
        ("lower_read/missing field", lr, (nodes, None, _without(config, "slow_meta_keys")), {}, TypeError),
        ("lower_read/ill-typed field", lr, (nodes, None, cfg(special_targets=[])), {}, TypeError),
        ("lower_read/bits out of range", lr, (nodes, None, cfg(impure_bits=1 << 64)), {}, ValueError),
        ("placeholder_role", role, ("tangents_1",), {}, None),
        ("placeholder_role/surrogate", role, ("bwd_seed\udc80",), {}, None),
        ("placeholder_role/not a str", role, (b"tangents",), {}, TypeError),
        ("partitioner_tag_flags", tag, ("is_backward", True), {}, None),
        ("partitioner_tag_flags/by __eq__", tag, (_Tag("must_be_in_backward"), False), {}, None),
        ("partitioner_tag_flags/__eq__ raises", tag, (_Tag(None), False), {}, RuntimeError),
    ]


def _without(config: Any, name: str) -> types.SimpleNamespace:
    """``config``'s fields but ``name``, as an object the C readers read by name."""
    return types.SimpleNamespace(**{f.name: getattr(config, f.name) for f in dataclasses.fields(config)
                                    if f.name != name})


class _Tag:
    """A partitioner tag that is no str: equal to ``text``, or raising when compared (``text`` None)."""

    def __init__(self, text: str | None) -> None:
        self.text = text

    def __eq__(self, other: object) -> bool:
        if self.text is None:
            raise RuntimeError("tag comparison")
        return other == self.text

    __hash__ = object.__hash__


class _NoTruth:
    def __bool__(self) -> bool:
        raise TypeError("no truth value")


CASES = _cases()


@pytest.mark.parametrize("name, fn, args, kwargs, exc", CASES, ids=[c[0] for c in CASES])
def test_ten_thousand_calls_leak_nothing(name: str, fn: Callable[..., Any], args: tuple[Any, ...],
                                         kwargs: dict[str, Any], exc: type[BaseException] | None) -> None:
    everything = args + tuple(kwargs.values())
    inputs = _inputs_of(everything)
    _run(fn, args, kwargs, exc, WARMUP)
    gc.collect()
    refs = [sys.getrefcount(a) for a in inputs]

    rss0, heap0 = _rss(), _malloc_in_use()
    _run(fn, args, kwargs, exc, CALLS)
    gc.collect()
    rss1, heap1 = _rss(), _malloc_in_use()

    assert [sys.getrefcount(a) for a in inputs] == refs
    _exports_released(everything)
    if UNDER_ASAN:
        return
    if heap0 is not None and heap1 is not None:
        assert heap1 - heap0 < TOLERANCE, f"malloc in use grew {heap1 - heap0} bytes over {CALLS} calls"
    assert rss1 - rss0 < TOLERANCE, f"RSS grew {rss1 - rss0} bytes over {CALLS} calls"

    tracemalloc.start()
    try:
        _run(fn, args, kwargs, exc, WARMUP)
        gc.collect()
        before = tracemalloc.take_snapshot()
        _run(fn, args, kwargs, exc, CALLS)
        gc.collect()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    grown = sum(s.size_diff for s in after.compare_to(before, "filename"))
    assert grown < TOLERANCE, f"Python allocations grew {grown} bytes over {CALLS} calls"


def test_the_leak_check_would_see_a_leak_of_64_bytes_per_call() -> None:
    """The bound is meaningful: 64 leaked bytes per call trips it."""
    if UNDER_ASAN:
        pytest.skip("ASan's quarantine hides the malloc counters")
    heap0 = _malloc_in_use()
    if heap0 is None:
        pytest.skip("no mallinfo2 here")
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    leaked = [libc.malloc(64) for _ in range(CALLS)]
    try:
        assert _malloc_in_use() - heap0 >= TOLERANCE  # type: ignore[operator]
    finally:
        for p in leaked:
            libc.free(p)
