"""fxcut's min-cut solver against networkx's ``minimum_cut`` (the reference
torch's partitioner uses), on networks of the partitioner's shape and on
generic ones, for every algorithm the C core has.

A vertex that no edge touches cannot reach the sink, so the solver puts it on
the source side; the networkx graphs here hold every vertex (isolated ones
too), so the whole mask is compared, not only vertices touched by an edge.
"""

from __future__ import annotations

import array
import functools
import math
import random

import networkx as nx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fxcut import InfiniteCutError, _C
from fxcut.solve.maxflow import INFINITE, minimum_cut, minimum_cut_arrays

INF = math.inf
ALGORITHMS = ["push_relabel", "dinic"]
N_PARTITIONER_SEEDS = 1000
N_GENERIC_SEEDS = 500

Edge = tuple[int, int, float]  # capacity: int or math.inf


# ---- reference --------------------------------------------------------------


def nx_min_cut(n: int, edges: list[Edge], s: int, t: int) -> tuple[int, frozenset[int]] | None:
    """networkx's (value, sink side); None when networkx finds no finite cut.
    Parallel edges are merged by adding capacities (what they mean as flow)."""
    g = nx.DiGraph()
    g.add_nodes_from(range(n))
    for u, v, c in edges:
        if g.has_edge(u, v):
            g[u][v]["capacity"] += c
        else:
            g.add_edge(u, v, capacity=c)
    try:
        value, (_, sink_side) = nx.minimum_cut(g, s, t)
    except nx.NetworkXUnbounded:
        return None
    return value, frozenset(sink_side)


def solve(n: int, edges: list[Edge], s: int, t: int, algorithm: str) -> tuple[int, frozenset[int]] | None:
    try:
        value, side = minimum_cut(n, edges, s, t, algorithm=algorithm)
    except InfiniteCutError:
        return None
    return value, frozenset(side)


# ---- generators -------------------------------------------------------------

WEIGHTS = [0, 1, 1, 2, 2, 2, 3, 4, 4, 8]  # few distinct values: cuts tie


def partitioner_network(rng: random.Random) -> tuple[int, list[Edge], int, int]:
    """The shape torch's solve_min_cut builds: fx node i is split into
    in = 2i -> out = 2i+1 with its weight; out -> in of every user is
    infinite; banned nodes hang from the source, required-backward and
    must-recompute nodes from the sink, by infinite edges.  Some weights are
    infinite (views), a few weight edges are doubled (parallel edges)."""
    k = rng.randint(1, 24)
    source, sink = 2 * k, 2 * k + 1
    edges: list[Edge] = []
    for i in range(k):
        w = INF if rng.random() < 0.06 else rng.choice(WEIGHTS)
        edges.append((2 * i, 2 * i + 1, w))
        if rng.random() < 0.05:
            edges.append((2 * i, 2 * i + 1, rng.choice(WEIGHTS)))
        if i > 0:
            # Inputs mostly from recent nodes, as in a real graph.
            for _ in range(rng.choice([0, 1, 1, 1, 2, 2, 3])):
                j = max(0, i - 1 - int(rng.expovariate(0.4)))
                edges.append((2 * j + 1, 2 * i, INF))
        r = rng.random()
        if r < 0.2:
            edges.append((source, 2 * i, INF))  # banned
        elif r < 0.35:
            edges.append((2 * i, sink, INF))  # must recompute / backward
        elif r < 0.5:
            edges.append((2 * i + 1, sink, INF))  # required in backward
    rng.shuffle(edges)
    return 2 * k + 2, edges, source, sink


def generic_network(rng: random.Random) -> tuple[int, list[Edge], int, int]:
    """Any directed multigraph: self-loops, anti-parallel and parallel edges,
    zero and infinite capacities, isolated vertices."""
    n = rng.randint(2, 14)
    caps = [0, 1, 2, 3, 5, 7, INF] if rng.random() < 0.5 else [1, 1, 2, 10, 100, 1000, INF]
    edges = [
        (rng.randrange(n), rng.randrange(n), rng.choice(caps) if rng.random() > 0.1 else INF)
        for _ in range(rng.randint(0, 3 * n))
    ]
    s, t = rng.sample(range(n), 2)
    return n, edges, s, t


@functools.cache
def partitioner_case(seed: int) -> tuple[tuple[int, list[Edge], int, int], object]:
    net = partitioner_network(random.Random(seed))
    return net, nx_min_cut(*net)


@functools.cache
def generic_case(seed: int) -> tuple[tuple[int, list[Edge], int, int], object]:
    net = generic_network(random.Random(10**6 + seed))
    return net, nx_min_cut(*net)


# ---- against networkx -------------------------------------------------------


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_partitioner_networks_match_networkx(algorithm: str) -> None:
    unbounded = 0
    for seed in range(N_PARTITIONER_SEEDS):
        net, expected = partitioner_case(seed)
        assert solve(*net, algorithm) == expected, f"seed {seed}: {net}"
        unbounded += expected is None
    # The sample covers both outcomes.
    assert 0 < unbounded < N_PARTITIONER_SEEDS // 4


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_generic_networks_match_networkx(algorithm: str) -> None:
    for seed in range(N_GENERIC_SEEDS):
        net, expected = generic_case(seed)
        assert solve(*net, algorithm) == expected, f"seed {seed}: {net}"


def medium_network(rng: random.Random) -> tuple[int, list[Edge], int, int]:
    """A few hundred vertices, sparse, small tied capacities: long enough
    residual paths for relabels, gaps and global relabelling to matter."""
    n = rng.randint(100, 400)
    edges: list[Edge] = []
    for _ in range(rng.randint(2 * n, 4 * n)):
        u = rng.randrange(n)
        v = min(n - 1, max(0, u + rng.randint(-3, 12)))
        edges.append((u, v, INF if rng.random() < 0.1 else rng.choice(WEIGHTS)))
    return n, edges, 0, n - 1


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_medium_networks_match_networkx(algorithm: str) -> None:
    for seed in range(40):
        net = medium_network(random.Random(2 * 10**6 + seed))
        assert solve(*net, algorithm) == nx_min_cut(*net), f"seed {seed}"


@st.composite
def partitioner_networks(draw: st.DrawFn) -> tuple[int, list[Edge], int, int]:
    return partitioner_network(random.Random(draw(st.integers(0, 2**32))))


@st.composite
def generic_networks(draw: st.DrawFn) -> tuple[int, list[Edge], int, int]:
    n = draw(st.integers(2, 10))
    vertex = st.integers(0, n - 1)
    capacity = st.one_of(st.integers(0, 6), st.just(INF), st.integers(0, 2**62))
    edges = draw(st.lists(st.tuples(vertex, vertex, capacity), max_size=25))
    s = draw(vertex)
    t = draw(vertex.filter(lambda v: v != s))
    return n, edges, s, t


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(net=partitioner_networks())
def test_hypothesis_partitioner_networks(algorithm: str, net: tuple[int, list[Edge], int, int]) -> None:
    assert solve(*net, algorithm) == nx_min_cut(*net)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(net=generic_networks())
def test_hypothesis_generic_networks(algorithm: str, net: tuple[int, list[Edge], int, int]) -> None:
    assert solve(*net, algorithm) == nx_min_cut(*net)


def test_algorithms_agree_on_large_partitioner_networks() -> None:
    """Networks too big to check against networkx quickly: the algorithms
    must give the same (unique) sink side, and scipy the same value."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import maximum_flow

    rng = random.Random(7)
    for _ in range(4):
        pieces = []
        while len(pieces) < 150:
            k, pe, s, t = partitioner_network(rng)
            if t not in _infinite_reach(k, pe, s, False):
                pieces.append((k, pe, s, t))
        # Chain the small networks side by side under one source and sink.
        n = 2
        edges: list[Edge] = []
        for k, pe, s, t in pieces:
            remap = {s: 0, t: 1}
            for u, v, c in pe:
                edges.append((remap.get(u, n + u), remap.get(v, n + v), c))
            n += k
        results = {a: solve(n, edges, 0, 1, a) for a in ALGORITHMS}
        assert results["push_relabel"] == results["dinic"] is not None
        # scipy: int32 capacities, an entry per (u, v), no self-loops.
        big = 2**31 - 1
        merged: dict[tuple[int, int], int] = {}
        for u, v, c in edges:
            if u != v:
                merged[(u, v)] = min(big, merged.get((u, v), 0) + (big if c == INF else c))
        rows, cols = zip(*merged)
        m = csr_matrix((np.array(list(merged.values()), dtype=np.int32), (rows, cols)), shape=(n, n))
        assert maximum_flow(m, 0, 1).flow_value == results["dinic"][0]


# ---- infinite paths ---------------------------------------------------------


def _infinite_reach(n: int, edges: list[Edge], start: int, reverse: bool) -> set[int]:
    adj: dict[int, list[int]] = {}
    for u, v, c in edges:
        if c == INF and u != v:
            a, b = (v, u) if reverse else (u, v)
            adj.setdefault(a, []).append(b)
    seen, todo = {start}, [start]
    while todo:
        for w in adj.get(todo.pop(), []):
            if w not in seen:
                seen.add(w)
                todo.append(w)
    return seen


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_unbounded_error_names_a_vertex_on_an_infinite_path(algorithm: str) -> None:
    checked = 0
    for seed in range(N_PARTITIONER_SEEDS):
        (n, edges, s, t), expected = partitioner_case(seed)
        if expected is not None:
            continue
        with pytest.raises(InfiniteCutError) as info:
            minimum_cut(n, edges, s, t, algorithm=algorithm)
        v = info.value.node
        assert v in _infinite_reach(n, edges, s, False) and v in _infinite_reach(n, edges, t, True)
        assert f"the source ({s}) and the sink ({t})" in str(info.value)
        checked += 1
    assert checked > 10


def test_unbounded_message_shows_the_path() -> None:
    edges = [(0, 3, INF), (3, 5, INF), (5, 1, INF), (0, 2, 4), (2, 1, 1)]
    with pytest.raises(InfiniteCutError, match=r"path of 3 infinite-capacity edges.*: 0 -> 3 -> 5 -> 1$") as info:
        minimum_cut(6, edges, 0, 1)
    assert info.value.node == 3
    assert isinstance(info.value, RuntimeError)


def test_unbounded_message_shortens_a_long_path() -> None:
    n = 50
    edges = [(i, i + 1, INF) for i in range(n - 1)]
    with pytest.raises(InfiniteCutError, match=r"path of 49 infinite-capacity edges.*0 -> 1 -> .* -> 7 -> \.\.\.$"):
        minimum_cut(n, edges, 0, n - 1)


def test_infinite_edges_that_do_not_join_source_and_sink_are_fine() -> None:
    # source -inf-> a -2-> b -inf-> sink, plus an infinite edge into the source.
    edges = [(0, 2, INF), (2, 3, 2), (3, 1, INF), (1, 0, INF)]
    assert minimum_cut(4, edges, 0, 1) == (2, {1, 3})


# ---- semantics pinned by hand -------------------------------------------------


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_ties_resolve_to_the_smallest_sink_side(algorithm: str) -> None:
    # 0 -1-> 2 -1-> 3 -1-> 1: three cuts of value 1; the smallest sink side is {1}.
    edges = [(0, 2, 1), (2, 3, 1), (3, 1, 1)]
    assert minimum_cut(4, edges, 0, 1, algorithm=algorithm) == (1, {1})


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_isolated_and_unreachable_vertices_are_on_the_source_side(algorithm: str) -> None:
    # 4 has no edges, 5 only a self-loop and a zero edge, 6 hangs off the sink.
    edges = [(0, 2, 3), (2, 1, 1), (5, 5, 9), (5, 3, 0), (1, 6, 5), (0, 3, 2), (3, 1, 3)]
    value, mask = minimum_cut(7, edges, 0, 1, algorithm=algorithm, as_mask=True)
    assert value == 3
    assert list(mask) == [0, 1, 0, 1, 0, 0, 0]


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_no_edges_gives_an_empty_cut(algorithm: str) -> None:
    assert minimum_cut(3, [], 2, 0, algorithm=algorithm) == (0, {0})


def test_numpy_buffers_and_default_algorithm() -> None:
    tail = np.array([0, 2, 0], dtype=np.int32)
    head = np.array([2, 1, 1], dtype=np.int32)
    cap = np.array([5, -1, 2], dtype=np.int64)
    assert minimum_cut_arrays(3, tail, head, cap, 0, 1) == (7, {1, 2})
    assert minimum_cut_arrays(3, tail, head, cap, 0, 1, algorithm="default", as_mask=True) == (7, b"\x00\x01\x01")
    assert _C.min_cut(3, tail, head, cap, 0, 1) == (7, b"\x00\x01\x01")
    assert _C.min_cut(3, tail, head, cap, source=0, sink=1, algorithm=_C.MAXFLOW_DINIC) == (7, b"\x00\x01\x01")


# ---- bad input --------------------------------------------------------------


def _arrays(edges: list[tuple[int, int, int]]) -> tuple[array.array, array.array, array.array]:
    return (
        array.array("i", [e[0] for e in edges]),
        array.array("i", [e[1] for e in edges]),
        array.array("q", [e[2] for e in edges]),
    )


@pytest.mark.parametrize(
    ("n", "edges", "s", "t", "alg", "exc", "message"),
    [
        (6, [], 7, 1, 0, IndexError, r"^source value \(7\) must be between 0 and 5$"),
        (6, [], -1, 1, 0, IndexError, r"^source value \(-1\) must be between 0 and 5$"),
        (6, [], 0, 6, 0, IndexError, r"^sink value \(6\) must be between 0 and 5$"),
        (6, [], 2**40, 1, 0, IndexError, r"^source value \(1099511627776\) must be between 0 and 5$"),
        (6, [(0, 9, 1)], 0, 1, 0, IndexError, r"^head\[0\] value \(9\) must be between 0 and 5$"),
        (6, [(0, 1, 1), (-2, 1, 1)], 0, 1, 0, IndexError, r"^tail\[1\] value \(-2\) must be between 0 and 5$"),
        (6, [(0, 1, -5)], 0, 1, 0, ValueError, r"^cap\[0\] value \(-5\) of edge 0 -> 1 must be >= 0, or -1"),
        (6, [], 3, 3, 0, ValueError, r"^source and sink must be different vertices, both are 3$"),
        (0, [], 0, 1, 0, ValueError, r"^n_vertices must be between 1 and"),
        (-3, [], 0, 1, 0, ValueError, r"^n_vertices must be between 1 and"),
        (6, [], 0, 1, 3, ValueError, r"^algorithm must be 0 \(default\), 1 \(push-relabel\) or 2 \(Dinic\), got 3$"),
    ],
)
def test_bad_input_raises_named_exception(n, edges, s, t, alg, exc, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(exc, match=message):
        _C.min_cut(n, *_arrays(edges), s, t, alg)


def test_bad_buffers_raise() -> None:
    tail, head, cap = _arrays([(0, 1, 1), (1, 2, 1)])
    with pytest.raises(ValueError, match=r"head has 1 entries, expected 2"):
        _C.min_cut(3, tail, array.array("i", [1]), cap, 0, 2)
    with pytest.raises(ValueError, match=r"cap has 3 entries, expected 2"):
        _C.min_cut(3, tail, head, array.array("q", [1, 1, 1]), 0, 2)
    with pytest.raises(TypeError, match=r"cap must be a flat array of 8-byte integers"):
        _C.min_cut(3, tail, head, array.array("i", [1, 1]), 0, 2)
    with pytest.raises(TypeError, match=r"tail must support the buffer protocol"):
        _C.min_cut(3, [0, 1], head, cap, 0, 2)
    with pytest.raises(ValueError, match=r"algorithm must be one of"):
        minimum_cut(3, [(0, 1, 1)], 0, 1, algorithm="simplex")


# ---- exact arithmetic -------------------------------------------------------

BIG = 2**62


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_huge_capacities_give_the_exact_value(algorithm: str) -> None:
    """Thousands of disjoint source-a-b-sink paths with capacities near 2^62,
    each with infinite ends (the partitioner's banned / required edges) and
    crossing edges that cannot add flow: the minimum cut is the sum of the
    middle capacities, far past 2^63."""
    rng = random.Random(3)
    k = 3000
    n = 2 + 2 * k
    edges: list[Edge] = []
    expected = 0
    side = {1}
    for i in range(k):
        a, b = 2 + 2 * i, 3 + 2 * i
        first, middle = BIG - rng.randrange(1000), BIG - rng.randrange(1000)
        if rng.random() < 0.5:
            edges += [(0, a, INF), (a, b, middle), (b, 1, INF)]
            expected += middle
            side.add(b)
        else:
            edges += [(0, a, first), (a, b, middle), (b, 1, INF)]
            expected += min(first, middle)
            side.update({b} if middle <= first else {a, b})
        if i:
            edges.append((b, b - 2, rng.randrange(BIG)))  # sink side to sink side
    assert expected > 2**64
    assert solve(n, edges, 0, 1, algorithm) == (expected, frozenset(side))


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("excess", [-2, -1, 0, 1])
def test_int64_boundary_of_the_capacity_leaving_the_source(algorithm: str, excess: int) -> None:
    """The capacity leaving the source set decides int64 vs 128-bit flows;
    values around 2^63 - 1 come out exact either way."""
    total = 2**63 - 1 + excess
    caps = [BIG, total - BIG]
    edges: list[Edge] = [(0, 2, INF), (2, 3, caps[0]), (2, 4, caps[1]), (3, 5, INF), (4, 5, INF), (5, 1, INF)]
    assert solve(6, edges, 0, 1, algorithm) == (total, frozenset({1, 3, 4, 5}))
    # Now the cut is one step later and the path carries all of it.
    edges[-1] = (5, 1, 2**63 - 1)
    expected = min(total, 2**63 - 1)
    result = solve(6, edges, 0, 1, algorithm)
    assert result is not None and result[0] == expected


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@settings(max_examples=100, deadline=None)
@given(net=generic_networks())
def test_hypothesis_huge_capacities_match_networkx(algorithm: str, net: tuple[int, list[Edge], int, int]) -> None:
    n, edges, s, t = net
    scaled = [(u, v, c if c == INF or c > 6 else c * 2**59) for u, v, c in edges]
    assert solve(n, scaled, s, t, algorithm) == nx_min_cut(n, scaled, s, t)


# ---- scale ------------------------------------------------------------------


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_chain_of_a_million_vertices(algorithm: str) -> None:
    """No recursion and no quadratic work on a 10^6-vertex path: the cut is
    the last of the equal smallest edges (the smallest sink side)."""
    n = 10**6
    rng = np.random.default_rng(1)
    cap = rng.integers(5, 1000, size=n - 1, dtype=np.int64)
    low = np.sort(rng.choice(n - 1, size=3, replace=False))
    cap[rng.choice(n - 1, size=1000, replace=False)] = INFINITE
    cap[low] = 3
    order = rng.permutation(n - 1)  # edges in no particular order
    tail = np.arange(n - 1, dtype=np.int32)[order]
    head = tail + 1
    value, mask = minimum_cut_arrays(n, tail, head, cap[order], 0, n - 1, algorithm=algorithm, as_mask=True)
    assert value == 3
    side = np.frombuffer(mask, dtype=np.uint8)
    assert side.sum() == n - 1 - low[-1]
    assert side[low[-1] + 1 :].all() and not side[: low[-1] + 1].any()


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_long_chain_with_a_user_per_node(algorithm: str) -> None:
    """pytorch#145081's shape: a long chain of fx nodes where every node is
    also used in the backward; all weights equal, so all cuts tie."""
    k = 100_000
    i = np.arange(k, dtype=np.int32)
    source, sink = 2 * k, 2 * k + 1
    tail = np.concatenate([2 * i, 2 * i[:-1] + 1, 2 * i + 1, [source]]).astype(np.int32)
    head = np.concatenate([2 * i + 1, 2 * i[1:], np.full(k, sink), [0]]).astype(np.int32)
    cap = np.concatenate([np.full(k, 4), np.full(k - 1, INFINITE), np.full(k, INFINITE), [INFINITE]]).astype(np.int64)
    value, mask = minimum_cut_arrays(2 * k + 2, tail, head, cap, source, sink, algorithm=algorithm, as_mask=True)
    # Saving the first node's output is the only finite cut.
    assert value == 4
    assert mask.count(1) == 2 * k  # all but the source and the first node's in


# ---- torch's own networks ---------------------------------------------------


@functools.cache
def _torch_networks() -> list[nx.DiGraph]:
    """The networks the installed torch's min-cut partitioner hands to its
    max-flow solver for two small functions (recorded, then solved as
    usual): networkx's ``minimum_cut``, or from 2.15 torch's own (same
    signature, imported into the partitioner's module)."""
    torch = pytest.importorskip("torch")
    from functorch.compile import aot_function, make_boxed_func, min_cut_rematerialization_partition
    from torch._functorch import partitioners

    recorded: list[nx.DiGraph] = []
    solver_home = partitioners if hasattr(partitioners, "minimum_cut") else nx
    real_minimum_cut = solver_home.minimum_cut

    def recording_minimum_cut(g, s, t, *args, **kwargs):  # type: ignore[no-untyped-def]
        recorded.append(g.copy())
        return real_minimum_cut(g, s, t, *args, **kwargs)

    def mlp(x, w1, w2):  # type: ignore[no-untyped-def]
        h = torch.nn.functional.layer_norm(torch.nn.functional.gelu(x @ w1), (16,))
        return (torch.softmax(h @ w2, -1) * h.sum()).sin().sum()

    def chain(x, w1, w2):  # type: ignore[no-untyped-def]
        for _ in range(6):
            x = (x @ w1).relu().cos() * x.sigmoid() + (x @ w2).exp().t().t()
        return x.sum()

    def compiler(gm, _):  # type: ignore[no-untyped-def]
        return make_boxed_func(gm)

    solver_home.minimum_cut = recording_minimum_cut
    try:
        for fn in (mlp, chain):
            args = [torch.randn(16, 16, requires_grad=True) for _ in range(3)]
            compiled = aot_function(fn, fw_compiler=compiler, bw_compiler=compiler,
                                    partition_fn=min_cut_rematerialization_partition)
            compiled(*args).backward()
    finally:
        solver_home.minimum_cut = real_minimum_cut
    assert len(recorded) == 2
    return recorded


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_torch_partitioner_networks_match_networkx(algorithm: str) -> None:
    for g in _torch_networks():
        index = {name: i for i, name in enumerate(g.nodes)}
        edges = [(index[u], index[v], d["capacity"]) for u, v, d in g.edges(data=True)]
        value, side = minimum_cut(len(index), edges, index["source"], index["sink"], algorithm=algorithm)
        nx_value, (_, nx_side) = nx.minimum_cut(g, "source", "sink")
        assert value == nx_value
        assert side == {index[name] for name in nx_side}
