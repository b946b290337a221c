"""fxcut's partitioner against torch's, on GPT-style joint graphs.

:func:`run` captures ``fxcut.tools.models.gpt2`` with fake tensors (no parameter
is allocated, whatever the size) at each requested number of layers and
times, in one run, on the same joint graph:

(a) ``decision``: fxcut's :func:`fxcut.tools.decisions.decide_graph` (lowering + C core)
    vs torch's tag passes + classification + dist_from_bw + ``solve_min_cut``
    (:func:`torch_reference.torch_decision`), both on the graph after
    dead-code elimination and CSE, as the partitioner sees it;
(b) ``solver``: the min-cut alone on the flow network fxcut builds for that
    graph: ``fxcut._C.min_cut`` (push-relabel, the partitioner's default, and
    Dinic) vs networkx ``minimum_cut`` (what torch calls; the DiGraph is built
    outside the timer) vs ``scipy.sparse.csgraph.maximum_flow`` (Dinic; a CSR
    int32 matrix built outside the timer -- scipy takes int32 capacities only,
    so it solves a rescaled copy of the network, see :func:`scale_for_scipy`);
(c) ``partition``: the whole partition_fn, ``fxcut.min_cut_rematerialization_partition``
    vs torch's ``min_cut_rematerialization_partition``, on a fresh copy of the
    joint graph as AOT Autograd hands it over: a plain ``GraphModule`` (eager
    code generation, a direct call) and, in the ``releases`` set, ``_lazy``:
    a ``_LazyGraphModule`` joint under ``_use_lazy_graph_module(True)``, as
    inductor's ``compile_fx`` calls the partitioner;
(d) ``floor``: the least any partitioner returning torch's modules must do,
    given them: create the two output graphs' nodes once
    (``Graph.node_copy`` into fresh graphs, in their final order) and
    generate the code torch's result holds, once (the forward's and the
    backward's module, and the joint module's recompile after CSE; under
    lazy modules only the backward's, see :func:`floor_builder`);
(e) ``memory``: the peak of Python allocations (``tracemalloc``) during the
    decision (a).  fxcut's C core allocates its scratch with ``malloc``, which
    tracemalloc does not see, so the peak resident-set growth of the same call
    is reported next to it (``rss``; measured with ``/proc/self/clear_refs``
    where Linux allows it).

Every contender gets its own fresh copy of the graph for every repetition
(copying is not timed); repetitions of all contenders are interleaved (the
order reversed every other round) and the median is reported; ratios are
medians of per-round paired ratios.  Garbage is collected before each timed
call and the cyclic collector is ON during it (``with_gc``, the default), as
in a real compile, whose heap makes every collection costly; ``with_gc=False``
switches it off during the timed call, as timeit does.  torch's slow
contenders (and networkx) run ``slow_reps`` times, the others ``reps`` times.
fxcut's saved values are checked against torch's in the same run; solver
values are checked against each other.

:func:`phases` times where fxcut's whole partition_fn spends its time (and
torch's, for comparison), by wrapping the functions it calls.
"""

from __future__ import annotations

import argparse

import gc
import json
import math
import os
import platform
import shlex
import shutil
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch
import torch.fx as fx

from fxcut import _C

# torch's own decision, step by step (the tests' oracle), is this benchmark's baseline.
_TESTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests")
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)
_BENCH = os.path.dirname(os.path.abspath(__file__))  # docs_sections, when run as `fxcut bench`
if _BENCH not in sys.path:
    sys.path.insert(0, _BENCH)
from torch_reference import torch_prepared  # noqa: E402
from training import capture_model  # noqa: E402

Progress = Callable[[str], None]

#: Contenders and which group of the report they belong to.
CONTENDERS: dict[str, str] = {
    "decision_fxcut": "a",
    "decision_torch": "a",
    "solver_fxcut_pr": "b",
    "solver_fxcut_dinic": "b",
    "solver_networkx": "b",
    "solver_scipy": "b",
    "partition_fxcut": "c",
    "partition_torch": "c",
    "floor_extract": "d",
    "partition_fxcut_lazy": "c",
    "partition_torch_lazy": "c",
    "floor_lazy": "d",
}
#: Contenders that run ``slow_reps`` times.
SLOW = frozenset({"decision_torch", "solver_networkx", "partition_torch", "partition_torch_lazy"})
#: Which contenders a run times (``--set``): ``full`` is ``fxcut bench``'s
#: report; ``releases`` what bench/bench_releases.py runs on every release
#: (the decision, the whole partition_fn eager and lazy, and their floors).
CONTENDER_SETS: dict[str, tuple[str, ...]] = {
    "full": ("decision_fxcut", "decision_torch", "solver_fxcut_pr", "solver_fxcut_dinic", "solver_networkx",
             "solver_scipy", "partition_fxcut", "partition_torch", "floor_extract"),
    "releases": ("decision_fxcut", "decision_torch", "partition_fxcut", "partition_torch",
                 "partition_fxcut_lazy", "partition_torch_lazy", "floor_extract", "floor_lazy"),
}

#: The ratios reported: (numerator, denominator).
RATIOS = [("decision_torch", "decision_fxcut"), ("solver_networkx", "solver_fxcut_pr"),
          ("solver_scipy", "solver_fxcut_pr"), ("solver_fxcut_dinic", "solver_fxcut_pr"),
          ("partition_torch", "partition_fxcut"), ("partition_fxcut", "floor_extract"),
          ("partition_torch", "floor_extract"), ("partition_torch_lazy", "partition_fxcut_lazy"),
          ("partition_fxcut_lazy", "floor_lazy")]

SCIPY_INFINITE = 2**31 - 1
#: Finite capacities are scaled so that all of them together stay below this.
SCIPY_FINITE_TOTAL = 2**30


@dataclass(frozen=True)
class ModelConfig:
    """``fxcut.tools.models.gpt2`` options (besides ``layers``)."""

    hidden: int = 1024
    heads: int = 16
    seq: int = 512
    batch: int = 4
    vocab: int = 50257


@dataclass
class SizeResult:
    layers: int
    nodes: int  # the joint graph AOT Autograd hands the partitioner
    nodes_prepared: int  # after dead-code elimination and CSE
    vertices: int  # of the flow network
    edges: int
    saved: int  # values the forward saves for backward (fxcut == torch)
    saved_equal: bool
    cut_value: int
    seconds: dict[str, float] = field(default_factory=dict)  # medians
    samples: dict[str, list[float]] = field(default_factory=dict)
    memory: dict[str, int | None] = field(default_factory=dict)  # peak bytes
    scipy_scale: float = 1.0
    scipy_value: int = 0
    ratios: dict[str, float] = field(default_factory=dict)  # paired, see ratio()

    def ratio(self, num: str, den: str) -> float:
        """Median over the rounds of ``num``'s time / ``den``'s time in the
        same round: pairs measured close together, so a machine whose load
        drifts during the run moves both."""
        pairs = [a / b for a, b in zip(self.samples[num], self.samples[den]) if b > 0]
        return statistics.median(pairs) if pairs else self.seconds[num] / self.seconds[den]


@dataclass
class BenchResult:
    model: dict[str, Any]
    reps: int
    slow_reps: int
    sizes: list[SizeResult]
    phases: dict[str, Any] | None
    environment: dict[str, Any]
    gc_during_timing: bool = False
    targets: list[dict[str, Any]] = field(default_factory=list)
    contenders: list[str] = field(default_factory=lambda: list(CONTENDER_SETS["full"]))

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# --------------------------------------------------------------------------- capture and preparation


def capture(layers: int, model: ModelConfig):
    """The joint graph of ``gpt2(layers=...)`` with fake tensors.  torch's
    default partitioner finishes the compilation (faster than min-cut)."""
    from torch._functorch.partitioners import default_partition


    return capture_model("gpt2", fake=True, delegate=default_partition, layers=layers,
                         hidden=model.hidden, heads=model.heads, seq=model.seq, batch=model.batch,
                         vocab=model.vocab)


def prepare(gm: fx.GraphModule) -> fx.GraphModule:
    """What both partitioners do first, in place: dead-code elimination, then
    CSE if configured (torch's own passes, outside the timer for both sides)."""
    return torch_prepared(gm)


def copy_nodes(graph: fx.Graph) -> fx.Graph:
    """A new graph with a copy of every node of ``graph`` (the floor's node
    creation: what building an output graph costs at the least)."""
    g = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    for n in graph.nodes:
        env[n] = g.node_copy(n, env.__getitem__)
    return g


def floor_builder(fw: fx.GraphModule, bw: fx.GraphModule, lazy: bool) -> Callable[[fx.GraphModule], Any]:
    """The floor (d) given fxcut's result ``fw``, ``bw``: a function of the
    joint module that creates the two output graphs' nodes once (node_copy
    into fresh graphs, in their final order) and generates the code torch's
    result holds, once: the backward's always (torch's reordering pass
    returns a plain GraphModule), the forward's and the joint's recompile
    only when not ``lazy`` (under ``_use_lazy_graph_module(True)`` with a
    lazy joint, both are deferred).  Call it on a fresh joint module."""
    from torch.fx._lazy_graph_module import _make_graph_module, _use_lazy_graph_module

    def floor(joint: fx.GraphModule) -> Any:
        with _use_lazy_graph_module(lazy):
            out = _make_graph_module(joint, copy_nodes(fw.graph)), fx.GraphModule(joint, copy_nodes(bw.graph))
            joint.recompile()
        return out

    return floor


def fresh_joint(cap: Any, lazy: bool) -> fx.GraphModule:
    """A fresh copy of the captured joint module; a ``_LazyGraphModule`` when ``lazy``."""
    from torch.fx._lazy_graph_module import _LazyGraphModule

    gm = cap.fresh()
    return _LazyGraphModule.from_graphmodule(gm) if lazy else gm


def _saved_names(fw: fx.GraphModule, num_fwd_outputs: int) -> list[str]:
    output = next(iter(reversed(fw.graph.nodes)))
    return [n.name if isinstance(n, fx.Node) else repr(n) for n in output.args[0][num_fwd_outputs:]]


# --------------------------------------------------------------------------- the flow network


@dataclass
class Network:
    n_vertices: int
    tail: np.ndarray  # int32
    head: np.ndarray  # int32
    cap: np.ndarray  # int64, -1 infinite
    source: int
    sink: int


def network_of(graph: fx.Graph, num_fwd_outputs: int, static: list[int]) -> Network:
    """The flow network fxcut's decision builds for ``graph`` (not solved)."""
    from fxcut.tools.decisions import decide_graph, lower_graph

    d = decide_graph(lower_graph(graph), num_fwd_outputs=num_fwd_outputs, static_lifetime_input_indices=static,
                     keep_network=2)
    assert d.network is not None
    tail, head, cap = (np.array(a) for a in d.network)
    n = len(d.arrays)
    return Network(2 * n + 2, tail.astype(np.int32), head.astype(np.int32), cap.astype(np.int64), 2 * n, 2 * n + 1)


def scale_for_scipy(net: Network) -> tuple[Network, float]:
    """The network with int32 capacities, for scipy: finite capacities
    multiplied by ``factor`` (so that all of them together stay below 2^30)
    and rounded, at least 1 where non-zero; infinity as 2^31 - 1, which no
    cut through finite edges can reach.  Rounding may move ties, so scipy's
    value is checked against fxcut's on this same scaled network."""
    finite = net.cap[net.cap >= 0]
    total = int(finite.sum()) if finite.size else 0
    factor = min(1.0, SCIPY_FINITE_TOTAL / max(total, 1))
    scaled = np.maximum(1, np.floor(net.cap * factor)).astype(np.int64)
    scaled = np.where(net.cap == 0, 0, scaled)
    scaled = np.where(net.cap < 0, SCIPY_INFINITE, scaled)
    return Network(net.n_vertices, net.tail, net.head, scaled, net.source, net.sink), factor


def scipy_matrix(net: Network) -> Any:
    """CSR int32 matrix of ``net`` (parallel edges summed, capped at 2^31 - 1; self-loops dropped)."""
    from scipy.sparse import csr_matrix

    keep = net.tail != net.head
    tail, head, cap = net.tail[keep], net.head[keep], net.cap[keep]
    key = tail.astype(np.int64) * net.n_vertices + head
    uniq, inverse = np.unique(key, return_inverse=True)
    summed = np.zeros(len(uniq), dtype=np.int64)
    np.add.at(summed, inverse, cap)
    summed = np.minimum(summed, SCIPY_INFINITE).astype(np.int32)
    rows, cols = (uniq // net.n_vertices).astype(np.int32), (uniq % net.n_vertices).astype(np.int32)
    m = csr_matrix((summed, (rows, cols)), shape=(net.n_vertices, net.n_vertices))
    m.sort_indices()
    return m


def networkx_graph(net: Network) -> Any:
    """The DiGraph for networkx, as torch's solve_min_cut builds it: infinite
    edges with ``capacity=math.inf``; parallel edges summed; self-loops dropped."""
    import networkx as nx

    g = nx.DiGraph()
    for u, v, c in zip(net.tail.tolist(), net.head.tolist(), net.cap.tolist()):
        if u == v:
            continue
        c = math.inf if c < 0 else c
        if g.has_edge(u, v):
            g[u][v]["capacity"] += c
        else:
            g.add_edge(u, v, capacity=c)
    return g


# --------------------------------------------------------------------------- timing


@contextmanager
def _collector(with_gc: bool) -> Iterator[None]:
    """Collect garbage, then keep the cyclic collector off for the timed
    call unless ``with_gc`` (timeit's convention).  With it on, when a full
    collection strikes depends on the whole process's history, and it mostly
    strikes torch's side, which allocates far more: spot checks at 24 layers
    saw torch's decision take 270 ms without it and 570 ms with it."""
    gc.collect()
    was_enabled = gc.isenabled()
    if not with_gc:
        gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _timed(fn: Callable[[], Any], with_gc: bool = False) -> tuple[float, Any]:
    with _collector(with_gc):
        t0 = time.perf_counter()
        result = fn()
        seconds = time.perf_counter() - t0
    return seconds, result


def _rss_kib(field_name: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field_name + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _reset_rss_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _malloc_trim() -> None:
    """Hand glibc's free heap pages back, so that the RSS peak that follows
    counts new allocations rather than reused ones (no-op elsewhere)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def peak_memory(fn: Callable[[], Any]) -> tuple[int, int | None]:
    """(peak Python allocations above the start, in bytes, by tracemalloc;
    peak resident-set growth in bytes, or None where it cannot be measured).
    Two separate calls of ``fn``: tracemalloc's bookkeeping would count in the RSS.
    The RSS growth includes memory that C code gets from ``malloc`` (which
    tracemalloc does not see) but is a lower bound: pages that Python's
    allocator already holds are reused without growing the RSS."""
    gc.collect()
    _malloc_trim()
    rss = None
    if _reset_rss_peak():
        before = _rss_kib("VmRSS")
        fn()
        peak = _rss_kib("VmHWM")
        if before is not None and peak is not None:
            rss = max(0, peak - before) * 1024
    gc.collect()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        fn()
        peak_py = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    return peak_py, rss


# --------------------------------------------------------------------------- one size


class _Size:
    """The contenders of one model size, each a (setup, timed) pair."""

    def __init__(self, cap: Any, prepared: fx.GraphModule, net: Network, with_gc: bool = True) -> None:
        from torch._functorch import partitioners as tp

        from fxcut import min_cut_rematerialization_partition as fxcut_partition
        from fxcut.torchrules.snapshot import copy_graph_module
        from fxcut.tools.decisions import decide_graph as decide
        from fxcut.tools.decisions import lower_graph, torch_now
        from torch_reference import torch_decision

        self.adapter = adapter = torch_now()  # the running torch, looked up once (as a partition call does)
        self.cap, self.prepared, self.net, self.with_gc = cap, prepared, net, with_gc
        self.copy = lambda: copy_graph_module(prepared)
        self.nfo = cap.num_fwd_outputs
        self.static = list(cap.partition_kwargs.get("static_lifetime_input_indices") or [])
        self.scaled, self.scale = scale_for_scipy(net)
        self.results: dict[str, Any] = {}

        nfo, static, net_ = self.nfo, self.static, net

        def partition_call(fn: Callable[..., Any], lazy: bool = False) -> Callable[[], Callable[[], Any]]:
            from torch.fx._lazy_graph_module import _use_lazy_graph_module

            def setup() -> Callable[[], Any]:
                gm = fresh_joint(cap, lazy)

                def call() -> Any:
                    with _use_lazy_graph_module(lazy):
                        return fn(gm, cap.joint_inputs, *cap.partition_args, num_fwd_outputs=nfo,
                                  **cap.partition_kwargs)
                return call
            return setup

        def decision_fxcut() -> Callable[[], Any]:
            gm = self.copy()
            return lambda: decide(lower_graph(gm.graph, adapter), num_fwd_outputs=nfo,
                                  static_lifetime_input_indices=static, torch=adapter)

        def decision_torch() -> Callable[[], Any]:
            gm = self.copy()
            return lambda: torch_decision(gm, nfo, static)

        def solver_fxcut(algorithm: int) -> Callable[[], Callable[[], Any]]:
            return lambda: lambda: _C.min_cut(net_.n_vertices, net_.tail, net_.head, net_.cap,
                                              net_.source, net_.sink, algorithm)

        nx_graph = None

        def solver_networkx() -> Callable[[], Any]:
            import networkx as nx

            nonlocal nx_graph
            if nx_graph is None:
                nx_graph = networkx_graph(net_)
            g = nx_graph
            return lambda: nx.minimum_cut(g, net_.source, net_.sink)

        sp_matrix = scipy_matrix(self.scaled)

        def solver_scipy() -> Callable[[], Any]:
            from scipy.sparse.csgraph import maximum_flow

            return lambda: maximum_flow(sp_matrix, net_.source, net_.sink, method="dinic")

        built: list[Any] = []

        def floor_call(lazy: bool) -> Callable[[], Callable[[], Any]]:
            def setup() -> Callable[[], Any]:
                if not built:
                    built.extend(partition_call(fxcut_partition)()())
                floor = floor_builder(built[0], built[1], lazy)
                joint = fresh_joint(cap, lazy)
                return lambda: floor(joint)
            return setup

        self.setups: dict[str, Callable[[], Callable[[], Any]]] = {
            "decision_fxcut": decision_fxcut,
            "decision_torch": decision_torch,
            "solver_fxcut_pr": solver_fxcut(1),
            "solver_fxcut_dinic": solver_fxcut(2),
            "solver_networkx": solver_networkx,
            "solver_scipy": solver_scipy,
            "partition_fxcut": partition_call(fxcut_partition),
            "partition_torch": partition_call(tp.min_cut_rematerialization_partition),
            "floor_extract": floor_call(False),
            "partition_fxcut_lazy": partition_call(fxcut_partition, lazy=True),
            "partition_torch_lazy": partition_call(tp.min_cut_rematerialization_partition, lazy=True),
            "floor_lazy": floor_call(True),
        }

    def run(self, name: str) -> float:
        fn = self.setups[name]()
        seconds, result = _timed(fn, self.with_gc)
        self.results.setdefault(name, result)
        return seconds

    def check(self) -> tuple[int, bool, int, int]:
        """Cross-checks of the first results; returns (saved, saved_equal, cut value, scipy value)."""
        r = self.results
        fx_saved = [n.name for n in r["decision_fxcut"].arrays.nodes_at(r["decision_fxcut"].saved)]
        if fx_saved != r["decision_torch"].saved:
            raise AssertionError("fxcut's decision saves other values than torch's")
        p_fx = _saved_names(r["partition_fxcut"][0], self.nfo)
        p_torch = _saved_names(r["partition_torch"][0], self.nfo)
        if p_fx != p_torch:
            raise AssertionError("fxcut's partition_fn saves other values than torch's")
        if "partition_fxcut_lazy" in r and "partition_torch_lazy" in r:
            if (_saved_names(r["partition_fxcut_lazy"][0], self.nfo)
                    != _saved_names(r["partition_torch_lazy"][0], self.nfo)):
                raise AssertionError("fxcut's partition_fn saves other values than torch's (lazy modules)")
        if "solver_fxcut_pr" not in r:
            return len(fx_saved), p_fx == p_torch, r["decision_fxcut"].cut_value, 0
        value, side = r["solver_fxcut_pr"]
        if r["solver_fxcut_dinic"] != (value, side):
            raise AssertionError("push-relabel and Dinic disagree")
        if value != r["decision_fxcut"].cut_value:
            raise AssertionError("the network's cut differs from the decision's")
        nx_value, (_, nx_sink) = r["solver_networkx"]
        if nx_value != value or nx_sink != {v for v, bit in enumerate(side) if bit}:
            raise AssertionError(f"networkx's cut ({nx_value}) differs from fxcut's ({value})")
        sp_value = int(r["solver_scipy"].flow_value)
        s = self.scaled
        expected = _C.min_cut(s.n_vertices, s.tail, s.head, s.cap, s.source, s.sink, 1)[0]
        if sp_value != expected:
            raise AssertionError(f"scipy's flow ({sp_value}) differs from fxcut's ({expected}) on the scaled network")
        return len(fx_saved), p_fx == p_torch, value, sp_value

    def memory(self) -> dict[str, int | None]:
        from fxcut.tools.decisions import decide_graph as decide
        from fxcut.tools.decisions import lower_graph
        from torch_reference import torch_decision

        out: dict[str, int | None] = {}
        gm = self.copy()
        adapter = self.adapter
        out["decision_fxcut"], out["decision_fxcut_rss"] = peak_memory(
            lambda: decide(lower_graph(gm.graph, adapter), num_fwd_outputs=self.nfo,
                           static_lifetime_input_indices=self.static, torch=adapter))
        gms = [self.copy(), self.copy()]  # torch's passes write into the graph: one copy per call
        out["decision_torch"], out["decision_torch_rss"] = peak_memory(
            lambda: torch_decision(gms.pop(), self.nfo, self.static))
        return out


def bench_size(layers: int, model: ModelConfig, reps: int, slow_reps: int,
               progress: Progress = lambda s: None, cap: Any = None, with_gc: bool = True,
               contenders: Sequence[str] = CONTENDER_SETS["full"]) -> SizeResult:
    """One row of the benchmark: every contender once untimed (warm-up; its
    results are cross-checked), then the interleaved timed rounds.  The
    decision's peak memory (e) is measured when the set has the solvers
    (the ``full`` set)."""
    if cap is None:
        cap = capture(layers, model)
    progress(f"{layers} layers: {cap.num_nodes} nodes")
    prepared = prepare(cap.fresh())
    net = network_of(prepared.graph, cap.num_fwd_outputs,
                     list(cap.partition_kwargs.get("static_lifetime_input_indices") or []))
    size = _Size(cap, prepared, net, with_gc)
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    order = list(contenders)
    for name in order:
        size.run(name)
    saved, saved_equal, cut_value, sp_value = size.check()
    progress(f"{layers} layers: warm-up done, fxcut's saved values equal torch's ({saved})")
    for rep in range(max(reps, slow_reps)):
        for name in (order if rep % 2 == 0 else order[::-1]):
            if rep < (slow_reps if name in SLOW else reps):
                samples[name].append(size.run(name))
        progress(f"{layers} layers: round {rep + 1}/{max(reps, slow_reps)}")
    memory = size.memory() if "solver_fxcut_pr" in contenders else {}
    result = SizeResult(
        layers=layers, nodes=cap.num_nodes, nodes_prepared=len(prepared.graph.nodes),
        vertices=net.n_vertices, edges=len(net.tail), saved=saved, saved_equal=saved_equal,
        cut_value=cut_value, seconds={k: statistics.median(v) for k, v in samples.items()},
        samples=samples, memory=memory, scipy_scale=size.scale, scipy_value=sp_value)
    result.ratios = {f"{num}/{den}": result.ratio(num, den) for num, den in RATIOS
                     if num in samples and den in samples}
    return result


# --------------------------------------------------------------------------- phases


class _PhaseClock:
    """Wraps functions to add up the time spent in them.  ``top`` phases
    count only calls made while no other wrapped function is running."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.depth = 0

    @contextmanager
    def wrap(self, owner: Any, attr: str, phase: str, top: bool = False) -> Iterator[None]:
        original = getattr(owner, attr)
        clock = self

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if top and clock.depth:
                return original(*args, **kwargs)
            clock.depth += 1
            t0 = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                clock.seconds[phase] = clock.seconds.get(phase, 0.0) + time.perf_counter() - t0
                clock.depth -= 1

        setattr(owner, attr, wrapper)
        try:
            yield
        finally:
            setattr(owner, attr, original)


def _phases_of(cap: Any, fxcut_side: bool, with_gc: bool = True) -> dict[str, float]:
    from contextlib import ExitStack

    from torch._functorch import partitioners as tp

    from fxcut import partition as fp

    clock = _PhaseClock()
    gm = cap.fresh()
    with ExitStack() as stack:
        stack.enter_context(clock.wrap(tp, "_extract_fwd_bwd_modules", "extract"))
        if fxcut_side:
            from fxcut.route import decide as fdecide
            from fxcut.torchrules import build as fbuild
            from fxcut.torchrules import lower as flower
            from fxcut.torchrules import prepare as fprep

            stack.enter_context(clock.wrap(fprep, "plan", "plan"))
            # the route lowers through the adapter (lower.lower_prepared -> lower_for_partition)
            stack.enter_context(clock.wrap(flower, "lower_for_partition", "lower"))
            # the decision: the budget pass's inputs and the budget pass(es) under the plan
            stack.enter_context(clock.wrap(fdecide, "decide_plan", "decide"))
            stack.enter_context(clock.wrap(fprep, "apply", "apply"))
            stack.enter_context(clock.wrap(fbuild, "build_modules", "build_modules"))
            fn = fp.min_cut_rematerialization_partition
        else:
            stack.enter_context(clock.wrap(fx.Graph, "eliminate_dead_code", "dce", top=True))
            stack.enter_context(clock.wrap(fx.GraphModule, "recompile", "recompile", top=True))
            stack.enter_context(clock.wrap(tp, "fx_graph_cse", "cse"))
            stack.enter_context(clock.wrap(tp, "choose_saved_values_set", "choose_saved_values_set"))
            stack.enter_context(clock.wrap(tp, "classify_nodes", "classify_nodes"))
            stack.enter_context(clock.wrap(tp, "reordering_to_mimic_autograd_engine", "after_extract"))
            stack.enter_context(clock.wrap(tp, "raise_getitems", "after_extract"))
            stack.enter_context(clock.wrap(tp, "thread_graphsafe_rng_from_hops", "after_extract"))
            fn = tp.min_cut_rematerialization_partition
        with _collector(with_gc):
            t0 = time.perf_counter()
            fn(gm, cap.joint_inputs, *cap.partition_args, num_fwd_outputs=cap.num_fwd_outputs,
               **cap.partition_kwargs)
            total = time.perf_counter() - t0
    s = clock.seconds
    if fxcut_side:
        out = {
            "plan DCE + CSE (prepare.plan)": s.get("plan", 0.0),
            "lowering": s.get("lower", 0.0),
            "decision (C core, budget passes)": s.get("decide", 0.0),
            "apply DCE + CSE in place, recompile": s.get("apply", 0.0),
            "module building (fxcut.torchrules.extract; torch's passes where it declines)": s["build_modules"],
        }
    else:
        out = {
            "dce": s.get("dce", 0.0),
            "recompile (after DCE and CSE)": s.get("recompile", 0.0),
            "cse (torch's fx_graph_cse)": s.get("cse", 0.0),
            "classify_nodes": s.get("classify_nodes", 0.0),
            "choose_saved_values_set (solve_min_cut)": s.get("choose_saved_values_set", 0.0),
            "module extraction (torch's _extract_fwd_bwd_modules)": s.get("extract", 0.0),
            "after extraction (reorder, raise_getitems, rng)": s.get("after_extract", 0.0),
        }
    out["rest"] = total - sum(out.values())
    out["total"] = total
    return out


def phases(layers: int, model: ModelConfig, reps: int = 5, cap: Any = None,
           progress: Progress = lambda s: None, with_gc: bool = True) -> dict[str, Any]:
    """Median seconds per phase of fxcut's whole partition_fn (and torch's)
    at ``layers``; the phases are timed by wrapping the functions called."""
    if cap is None:
        cap = capture(layers, model)
    runs: dict[str, list[dict[str, float]]] = {"fxcut": [], "torch": []}
    for rep in range(reps):
        runs["fxcut"].append(_phases_of(cap, True, with_gc))
        runs["torch"].append(_phases_of(cap, False, with_gc))
        progress(f"phases at {layers} layers: round {rep + 1}/{reps}")
    return {
        "layers": layers,
        "reps": reps,
        **{side: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for side, rs in runs.items()},
    }


# --------------------------------------------------------------------------- the run


def _environment() -> dict[str, Any]:
    import networkx
    import scipy

    from fxcut._version import __version__

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "fxcut": __version__, "torch": torch.__version__, "networkx": networkx.__version__,
        "scipy": scipy.__version__, "numpy": np.__version__, "python": platform.python_version(),
        "cpu": cpu, "cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d %H:%M"),
    }


#: The targets (issue 17), checked at each of these sizes present in a run:
#: (name, numerator, denominator, goal text, met(ratio)).
TARGETS: list[tuple[str, str, str, str, Callable[[float], bool]]] = [
    ("decision vs torch's", "decision_torch", "decision_fxcut", ">= 25x faster", lambda x: x >= 25),
    ("solver vs networkx", "solver_networkx", "solver_fxcut_pr", ">= 100x faster", lambda x: x >= 100),
    ("solver vs scipy", "solver_scipy", "solver_fxcut_pr", "> 1x (faster)", lambda x: x > 1),
    ("whole partition_fn vs torch's", "partition_torch", "partition_fxcut", ">= 4x faster", lambda x: x >= 4),
    ("whole partition_fn vs torch's, lazy modules", "partition_torch_lazy", "partition_fxcut_lazy",
     ">= 4x faster", lambda x: x >= 4),
    ("whole partition_fn vs floor (d), lazy modules", "partition_fxcut_lazy", "floor_lazy",
     "<= 1.5x the floor", lambda x: x <= 1.5),
]
TARGET_LAYERS = (24, 48)


def targets(result: BenchResult, layers: Sequence[int] = TARGET_LAYERS) -> list[dict[str, Any]]:
    """The issue's targets at each of ``layers`` the run measured whose
    contenders it timed, with the measured ratios (medians of per-round ratios)."""
    out = []
    for row in result.sizes:
        if row.layers not in layers:
            continue
        for name, num, den, goal, met in TARGETS:
            if num in row.samples and den in row.samples:
                x = row.ratio(num, den)
                out.append({"layers": row.layers, "target": name, "goal": goal, "measured": x, "met": met(x)})
        mem_fx, mem_torch = row.memory.get("decision_fxcut"), row.memory.get("decision_torch")
        if mem_fx and mem_torch:
            x = mem_torch / mem_fx
            out.append({"layers": row.layers, "target": "decision Python memory vs torch's",
                        "goal": ">= 10x smaller", "measured": x, "met": x >= 10})
    return out


#: ``--quick``: a smoke test of the whole pipeline in seconds, not a measurement.
QUICK = dict(layers=(1, 2), reps=2, slow_reps=1, model=ModelConfig(hidden=64, heads=4, seq=32, batch=2, vocab=128),
             phase_layers=2, phase_reps=1)


def run(layers: Sequence[int] = (1, 4, 12, 24, 48), *, reps: int = 7, slow_reps: int = 5,
        model: ModelConfig = ModelConfig(), phase_layers: int | None = 24, phase_reps: int = 5,
        with_gc: bool = True, progress: Progress = lambda s: None,
        contenders: Sequence[str] = CONTENDER_SETS["full"]) -> BenchResult:
    """Run the benchmark and return its result (nothing is written).

    ``with_gc``: leave Python's cyclic garbage collector on during the timed
    calls (the default, as in a real compile; False: off, as timeit does;
    see :func:`_collector`).

    ``progress`` gets a line of text after each step.  ``phase_layers``:
    where to break fxcut's whole partition_fn into phases (None: nowhere).
    ``contenders``: which to time (a value of :data:`CONTENDER_SETS`).
    """
    if reps < 1 or slow_reps < 1:
        raise ValueError(f"reps ({reps}) and slow_reps ({slow_reps}) must be at least 1")
    unknown = [c for c in contenders if c not in CONTENDERS]
    missing = [c for c in ("decision_fxcut", "decision_torch", "partition_fxcut", "partition_torch")
               if c not in contenders]
    if unknown or missing:
        raise ValueError(f"contenders: unknown {unknown}, missing {missing}")
    sizes = []
    phase_cap = None
    for n in layers:
        t0 = time.perf_counter()
        cap = capture(n, model)
        progress(f"{n} layers: captured in {time.perf_counter() - t0:.1f} s")
        sizes.append(bench_size(n, model, reps, slow_reps, progress, cap=cap, with_gc=with_gc,
                                contenders=contenders))
        progress(format_row(sizes[-1]))
        if n == phase_layers:
            phase_cap = cap
        del cap
    ph = (phases(phase_layers, model, phase_reps, cap=phase_cap, progress=progress, with_gc=with_gc)
          if phase_layers else None)
    result = BenchResult(model=asdict(model), reps=reps, slow_reps=slow_reps, sizes=sizes, phases=ph,
                         gc_during_timing=with_gc, contenders=list(contenders),
                         environment=_environment())
    result.targets = targets(result)
    return result


# --------------------------------------------------------------------------- output


COLUMNS = [
    ("layers", "layers"), ("nodes", "nodes"),
    ("(a) fxcut", "decision_fxcut"), ("(a) torch", "decision_torch"), ("(a) x", "a_ratio"),
    ("(b) fxcut PR", "solver_fxcut_pr"), ("(b) fxcut Dinic", "solver_fxcut_dinic"),
    ("(b) networkx", "solver_networkx"), ("(b) scipy*", "solver_scipy"),
    ("(b) nx x", "nx_ratio"), ("(b) scipy x", "scipy_ratio"),
    ("(c) fxcut", "partition_fxcut"), ("(c) torch", "partition_torch"), ("(c) x", "c_ratio"),
    ("(c) lazy fxcut", "partition_fxcut_lazy"), ("(c) lazy torch", "partition_torch_lazy"),
    ("(c) lazy x", "c_lazy_ratio"),
    ("(d) floor", "floor_extract"), ("(d) fxcut/floor", "d_ratio"),
    ("(d) lazy floor", "floor_lazy"), ("(d) lazy fxcut/floor", "d_lazy_ratio"),
    ("(e) fxcut KiB", "mem_fxcut"), ("(e) torch KiB", "mem_torch"), ("(e) x", "e_ratio"),
]


def _cells(r: SizeResult) -> dict[str, str]:
    t = r.seconds
    cells = {"layers": str(r.layers), "nodes": str(r.nodes)}
    for key in CONTENDERS:
        cells[key] = "-" if key not in t else f"{t[key] * 1e3:.2f}" if t[key] < 0.1 else f"{t[key] * 1e3:.0f}"

    def ratio(num: str, den: str, digits: int) -> str:
        return f"{r.ratio(num, den):.{digits}f}" if num in t and den in t else "-"

    cells["a_ratio"] = ratio("decision_torch", "decision_fxcut", 1)
    cells["nx_ratio"] = ratio("solver_networkx", "solver_fxcut_pr", 0)
    cells["scipy_ratio"] = ratio("solver_scipy", "solver_fxcut_pr", 1)
    cells["c_ratio"] = ratio("partition_torch", "partition_fxcut", 2)
    cells["d_ratio"] = ratio("partition_fxcut", "floor_extract", 2)
    cells["c_lazy_ratio"] = ratio("partition_torch_lazy", "partition_fxcut_lazy", 2)
    cells["d_lazy_ratio"] = ratio("partition_fxcut_lazy", "floor_lazy", 2)
    mf, mt = r.memory.get("decision_fxcut"), r.memory.get("decision_torch")
    cells["mem_fxcut"] = f"{mf / 1024:.0f}" if mf is not None else "-"
    cells["mem_torch"] = f"{mt / 1024:.0f}" if mt is not None else "-"
    cells["e_ratio"] = f"{mt / mf:.1f}" if mf and mt else "-"
    return cells


def _columns(sizes: Sequence[SizeResult]) -> list[tuple[str, str]]:
    """The columns with a value in some row (a set of contenders leaves the others out)."""
    rows = [_cells(r) for r in sizes]
    return [(label, key) for label, key in COLUMNS if any(row[key] != "-" for row in rows)]


def format_row(r: SizeResult) -> str:
    c = _cells(r)
    return "  ".join(f"{label}={c[key]}" for label, key in _columns([r]))


def format_table(result: BenchResult, markdown: bool = False) -> str:
    rows = [_cells(r) for r in result.sizes]
    columns = _columns(result.sizes)
    labels = [label for label, _ in columns]
    keys = [key for _, key in columns]
    if markdown:
        lines = ["| " + " | ".join(labels) + " |", "|" + "|".join("---:" for _ in labels) + "|"]
        lines += ["| " + " | ".join(row[k] for k in keys) + " |" for row in rows]
        return "\n".join(lines)
    widths = [max(len(label), *(len(row[k]) for row in rows)) for label, k in columns]
    lines = ["  ".join(label.rjust(w) for label, w in zip(labels, widths))]
    lines += ["  ".join(row[k].rjust(w) for k, w in zip(keys, widths)) for row in rows]
    return "\n".join(lines)


LEGEND = """\
Times are medians in ms.  x = torch (or networkx, scipy) / fxcut, > 1 means fxcut is faster: the
median over the rounds of the ratio of two times measured in the same round (so that a shared
machine's changing load moves both), hence not always the ratio of the two medians shown.
(a) decision on the graph after DCE+CSE: fxcut's decide() (lowering + C core) vs torch's tag passes,
    classify_nodes, dist_from_bw and solve_min_cut.
(b) min-cut alone on the same flow network: fxcut's C push-relabel (the partitioner's default; ratios
    use it) and Dinic, networkx minimum_cut (preflow_push, what torch calls; DiGraph built outside the
    timer), scipy maximum_flow (Dinic).  * scipy takes int32 capacities only: it solves a copy whose
    finite capacities are scaled to sum below 2^30 (rounded, at least 1) and whose infinite ones are
    2^31-1; its flow is checked against fxcut's on that copy, not against the real cut.
(c) the whole partition_fn on a fresh joint graph: fxcut.min_cut_rematerialization_partition vs
    torch's min_cut_rematerialization_partition (both DCE + CSE + decision + module extraction);
    a plain GraphModule joint, and (lazy) a _LazyGraphModule joint under _use_lazy_graph_module(True),
    as inductor's compile_fx calls the partitioner.
(d) floor: node_copy of the two output graphs' nodes once into fresh graphs, and one code generation of
    each module torch's result holds compiled (forward, backward, joint after CSE; lazy: the backward
    only, the others deferred); fxcut/floor = (c) fxcut / (d).
(e) peak Python allocations (tracemalloc) of the decision (a); x = torch / fxcut.  fxcut's C core
    allocates its scratch with malloc, which tracemalloc does not see: the notes below give each
    side's peak RSS growth during one decision (after malloc_trim; includes malloc'd memory, but
    is a lower bound where Python reuses pages it already holds)."""


def format_report(result: BenchResult, command: str | None = None, markdown: bool = False) -> str:
    parts = []
    m = result.model
    env = result.environment
    head = (f"GPT-2 style model (fxcut.tools.models.gpt2, fake tensors): hidden {m['hidden']}, heads {m['heads']}, "
            f"seq {m['seq']}, batch {m['batch']}, vocab {m['vocab']}; reps {result.reps} "
            f"(torch's decision, torch's partition_fn and networkx: {result.slow_reps}), interleaved; "
            f"garbage collector {'on' if result.gc_during_timing else 'off'} during the timed calls.\n"
            f"torch {env['torch']}, networkx {env['networkx']}, scipy {env['scipy']}, python {env['python']}, "
            f"{env['cpu']} ({env['cpus']} CPUs), {env['date']}.")
    if markdown:
        parts.append("# fxcut vs torch's partitioner: benchmark\n")
        if command:
            parts.append(f"Command: `{command}`\n")
        parts.append(head + "\n")
        parts.append(format_table(result, markdown=True) + "\n")
        parts.append("```\n" + LEGEND + "\n```\n")
    else:
        parts.append(head)
        parts.append(format_table(result))
        parts.append(LEGEND)
    notes = []
    for r in result.sizes:
        mf, mt = r.memory.get("decision_fxcut_rss"), r.memory.get("decision_torch_rss")
        rss = (f"peak RSS growth fxcut {mf / 1024:.0f} KiB, torch {mt / 1024:.0f} KiB"
               if mf is not None and mt is not None
               else "memory not measured" if not r.memory else "RSS not measurable here")
        notes.append(f"{r.layers} layers: {r.nodes} nodes ({r.nodes_prepared} after DCE+CSE), network "
                     f"{r.vertices} vertices / {r.edges} edges, {r.saved} saved values (fxcut == torch: "
                     f"{r.saved_equal}), scipy scale {r.scipy_scale:.3g}; {rss}.")
    parts.append(("\n" if markdown else "") + "\n".join(("- " if markdown else "") + n for n in notes))
    if result.phases:
        parts.append(format_phases(result.phases, markdown))
    if result.targets:
        lines = [f"{'met ' if t['met'] else 'MISSED'} {t['target']} at {t['layers']} layers: "
                 f"{t['measured']:.2f} (goal {t['goal']})" for t in result.targets]
        if markdown:
            parts.append("\n## Targets\n\n" + "\n".join(f"- {line}" for line in lines))
        else:
            parts.append("Targets:\n" + "\n".join(f"  {line}" for line in lines))
    return "\n".join(parts) + "\n"


def format_phases(ph: dict[str, Any], markdown: bool = False) -> str:
    lines = []
    for side in ("fxcut", "torch"):
        p = ph[side]
        total = p["total"]
        title = f"{side}'s whole partition_fn at {ph['layers']} layers, median of {ph['reps']} (ms, share):"
        rows = [f"{k:<55}{v * 1e3:9.1f} {100 * v / total:5.1f}%" for k, v in p.items()]
        if markdown:
            lines.append(f"\n## {title}\n\n```\n" + "\n".join(rows) + "\n```")
        else:
            lines.append(title + "\n" + "\n".join("  " + r for r in rows))
    return "\n".join(lines)


def plot(result: BenchResult, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = [r.layers for r in result.sizes]

    def ms(key: str) -> list[float]:
        return [r.seconds[key] * 1e3 for r in result.sizes]

    panels = [
        ("(a) decision", [("fxcut decide()", "decision_fxcut"), ("torch", "decision_torch")]),
        ("(b) min-cut solver alone", [("fxcut push-relabel", "solver_fxcut_pr"),
                                      ("fxcut Dinic", "solver_fxcut_dinic"),
                                      ("networkx", "solver_networkx"), ("scipy (int32, rescaled)", "solver_scipy")]),
        ("(c) whole partition_fn, (d) floor", [("fxcut", "partition_fxcut"), ("torch", "partition_torch"),
                                               ("floor: build + codegen once", "floor_extract"),
                                               ("fxcut, lazy modules", "partition_fxcut_lazy"),
                                               ("torch, lazy modules", "partition_torch_lazy"),
                                               ("floor, lazy modules", "floor_lazy")]),
    ]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.6))
    for ax, (title, lines) in zip(axes, panels):
        for label, key in lines:
            if key in result.sizes[0].seconds:
                ax.plot(x, ms(key), marker="o", label=label)
        ax.set_yscale("log")
        ax.set_xscale("log")
        ax.set_xticks(x)
        ax.set_xticklabels([str(v) for v in x])
        ax.minorticks_off()
        ax.set_xlabel("layers")
        ax.set_ylabel("ms (median)")
        ax.set_title(title)
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=8)
    m = result.model
    fig.suptitle(f"fxcut vs torch {result.environment['torch']}: GPT-2 style, hidden {m['hidden']}, "
                 f"seq {m['seq']} ({', '.join(f'{r.layers}L={r.nodes} nodes' for r in result.sizes)})",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(result: BenchResult, out_dir: str, command: str | None = None) -> dict[str, str]:
    """Write ``bench_partition.json``, ``.md``, ``.txt`` and ``.png`` into ``out_dir``; returns their paths."""
    os.makedirs(out_dir, exist_ok=True)
    paths = {ext: os.path.join(out_dir, f"bench_partition.{ext}") for ext in ("json", "md", "txt", "png")}
    with open(paths["json"], "w") as f:
        json.dump({"command": command, **result.to_json()}, f, indent=1)
    with open(paths["md"], "w") as f:
        f.write(format_report(result, command, markdown=True))
    with open(paths["txt"], "w") as f:
        f.write(format_report(result, command))
    plot(result, paths["png"])
    return paths


__all__ = ["BenchResult", "ModelConfig", "SizeResult", "capture", "format_report", "format_table",
           "phases", "plot", "run", "targets", "write", "QUICK"]


class ProgressBar:
    """A one-line progress bar on stderr: ``[#####-----] k/N  last step``."""

    def __init__(self, total: int, width: int = 30) -> None:
        self.total = max(1, total)
        self.width = width
        self.done = 0
        self.start = time.perf_counter()

    def __call__(self, line: str) -> None:
        self.done = min(self.done + 1, self.total)
        filled = self.width * self.done // self.total
        bar = "#" * filled + "-" * (self.width - filled)
        elapsed = time.perf_counter() - self.start
        sys.stderr.write(f"\r[{bar}] {self.done}/{self.total} {elapsed:6.1f} s  {line[:60]:<60}")
        sys.stderr.flush()

    def close(self) -> None:
        sys.stderr.write("\n")
        sys.stderr.flush()


def expected_steps(kwargs: dict[str, Any]) -> int:
    """How many progress lines :func:`run` will emit for these arguments."""
    layers = list(kwargs.get("layers", (1, 4, 12, 24, 48)))
    rounds = max(int(kwargs.get("reps", 7)), int(kwargs.get("slow_reps", 5)))
    per_size = 4 + rounds  # captured, nodes, warm-up, rounds, row
    phases = int(kwargs.get("phase_reps", 5)) + 1 if kwargs.get("phase_layers", 24) else 0
    return len(layers) * per_size + phases


def main(argv: list[str] | None = None, prog: str = "bench/bench_partition.py") -> int:
    """The benchmark's command line (bench/bench_partition.py and ``fxcut bench``)."""
    p = argparse.ArgumentParser(prog=prog, description="fxcut's partitioner against torch's on GPT-style joint graphs.")
    p.add_argument("--layers", type=int, nargs="+", default=[1, 4, 12, 24, 48])
    p.add_argument("--reps", type=int, default=7, help="repetitions of the fast contenders (median reported)")
    p.add_argument("--slow-reps", type=int, default=5,
                   help="repetitions of torch's decision, torch's partition_fn and networkx")
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--heads", type=int, help="attention heads (default: hidden / 64)")
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--phase-layers", type=int, default=24,
                   help="break the whole partition_fn into phases at this size (0: skip)")
    p.add_argument("--phase-reps", type=int, default=5)
    p.add_argument("--with-gc", dest="with_gc", action="store_true", default=True,
                   help="leave Python's garbage collector on during the timed calls (the default, as a compile runs)")
    p.add_argument("--no-gc", dest="with_gc", action="store_false",
                   help="switch the garbage collector off during the timed calls, as timeit does")
    p.add_argument("--set", dest="contender_set", choices=sorted(CONTENDER_SETS), default="full",
                   help="which contenders to time: full (the default: decision, solvers, partition_fn, floor, "
                        "memory) or releases (decision, partition_fn and floor, plain and lazy modules)")
    p.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test of the pipeline")
    p.add_argument("--out", metavar="DIR", help="write bench_partition.{json,md,txt,png} into DIR (default: print only)")
    p.add_argument("--docs", metavar="DIR",
                   help="also write the report into its section of DIR/bench_partition.md and the plot into "
                        "DIR/bench_partition.png, e.g. docs (default: none)")
    p.add_argument("--json", metavar="FILE", help="write the result as JSON into FILE (nothing else)")
    args = p.parse_args(argv)

    if args.quick:
        kwargs = dict(QUICK)
        if args.contender_set != "full":
            kwargs["phase_layers"] = None
    else:
        heads = args.heads or max(1, args.hidden // 64)
        kwargs = dict(layers=args.layers, reps=args.reps, slow_reps=args.slow_reps,
                      model=ModelConfig(hidden=args.hidden, heads=heads, seq=args.seq,
                                                  batch=args.batch, vocab=args.vocab),
                      phase_layers=args.phase_layers or None, phase_reps=args.phase_reps)
    kwargs["contenders"] = CONTENDER_SETS[args.contender_set]
    bar = ProgressBar(expected_steps(kwargs))
    result = run(progress=bar, with_gc=args.with_gc, **kwargs)
    bar.close()
    command = ("fxcut bench " if prog == "fxcut bench" else "PYTHONPATH=python python bench/bench_partition.py ") + \
        shlex.join(sys.argv[1:] if argv is None else argv)
    print(format_report(result, command.strip()))
    if args.json is not None:
        with open(args.json, "w") as f:
            json.dump({"command": command.strip(), **result.to_json()}, f, indent=1)
    if args.out is None and args.docs is None:
        return 0
    # The docs copy is made from the written files: without --out they go to a
    # temporary directory that is removed afterwards.
    with tempfile.TemporaryDirectory() as scratch:
        paths = write(result, args.out or scratch, command.strip())
        if args.docs is not None:
            from docs_sections import replace_section  # bench/, next to this script

            os.makedirs(args.docs, exist_ok=True)
            shutil.copyfile(paths["png"], os.path.join(args.docs, "bench_partition.png"))
            report = format_report(result, command.strip(), markdown=True)
            report = report.replace("# fxcut vs torch's partitioner: benchmark\n",
                                    "## The full benchmark (`fxcut bench`)\n\n![plot](bench_partition.png)\n", 1)
            report = report.replace("\n## ", "\n### ")  # its sections nest under that heading
            replace_section(os.path.join(args.docs, "bench_partition.md"), "fxcut bench", report)
        written = [args.out] * (args.out is not None) + [args.docs] * (args.docs is not None)
    print("wrote into " + ", ".join(written))
    return 0


