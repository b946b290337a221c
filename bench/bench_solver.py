"""Times fxcut's min-cut solver alone against networkx and scipy on networks
of the partitioner's shape.  A benchmark, not a test: it prints one table of
medians and ratios measured in the same run.

    PYTHONPATH=python python bench/bench_solver.py [--sizes 1000 10000 100000]
        [--reps 5] [--nx-limit 20] [--json out.json]

Networks (both built the way torch's solve_min_cut builds them: every forward
fx node X is split into X_in -> X_out with its weight, X_out -> U_in is
infinite for every user U, banned nodes hang from the source and backward
nodes into the sink by infinite edges):

  transformer  layers of a pre-norm transformer block (layer norm, q/k/v
               projections, attention, MLP, residual adds), parameters as
               banned placeholders, matmuls banned, views of infinite
               weight, each forward op used by the backward op that
               differentiates it; weights are byte sizes from a handful of
               tensor shapes scaled by 1.1^min(distance to backward, 100),
               so many cuts tie.
  random_dag   forward nodes with 1-3 inputs among the 30 before them, 30%
               banned, half of them used by 1-2 backward nodes, weights from a
               small set.

What is timed: only the solver call, on inputs built beforehand (numpy
arrays for fxcut, an nx.DiGraph for networkx, a CSR matrix for scipy).

scipy's maximum_flow takes int32 capacities only, so it gets a rescaled copy
of the network: finite weights scaled into [1, 2^30 / edges] and infinity as
2^31 - 1.  Its value is checked against fxcut run on the same rescaled
network; it is not the partitioner's cut.  networkx runs on the exact
network (infinite edges as float('inf')) and its value and sink side are
checked against fxcut's.  networkx is skipped at sizes where the previous
size's time, scaled by the size ratio, predicts more than --nx-limit seconds.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from fxcut import _C

INFINITE = -1


@dataclass
class Network:
    name: str
    fx_nodes: int
    n_vertices: int
    tail: np.ndarray
    head: np.ndarray
    cap: np.ndarray
    source: int
    sink: int


class _Builder:
    """Collects fx nodes and lays out the min-cut network as torch does."""

    def __init__(self) -> None:
        self.inputs: list[list[int]] = []
        self.weight: list[int] = []  # -1: infinite (a view)
        self.banned: list[bool] = []
        self.backward: list[bool] = []

    def node(self, inputs: list[int], weight: int, banned: bool = False, backward: bool = False) -> int:
        self.inputs.append(inputs)
        self.weight.append(weight)
        self.banned.append(banned)
        self.backward.append(backward)
        return len(self.inputs) - 1

    def network(self, name: str) -> Network:
        n = len(self.inputs)
        # Vertex ids: a forward node gets X_in and X_out, a backward node only
        # X_in (it is required in backward, so torch does not split it).
        v_in = [0] * n
        nv = 0
        for i in range(n):
            v_in[i] = nv
            nv += 1 if self.backward[i] else 2
        source, sink = nv, nv + 1
        tail: list[int] = []
        head: list[int] = []
        cap: list[int] = []

        def edge(u: int, v: int, c: int) -> None:
            tail.append(u)
            head.append(v)
            cap.append(c)

        for i in range(n):
            if self.backward[i]:
                edge(v_in[i], sink, INFINITE)
                continue
            edge(v_in[i], v_in[i] + 1, self.weight[i])
            if self.banned[i]:
                edge(source, v_in[i], INFINITE)
        for i in range(n):
            for j in set(self.inputs[i]):
                if not self.backward[j]:
                    edge(v_in[j] + 1, v_in[i], INFINITE)
        return Network(
            name, n, nv + 2,
            np.array(tail, dtype=np.int32), np.array(head, dtype=np.int32), np.array(cap, dtype=np.int64),
            source, sink,
        )


def transformer(fx_nodes: int, seed: int = 0) -> Network:
    rng = np.random.default_rng(seed)
    hidden, seq, batch, heads = 1024, 512, 4, 16
    act = batch * seq * hidden * 2  # bf16 activation
    shapes = {"act": act, "stat": batch * seq * 4, "scores": batch * heads * seq * seq * 2, "mlp": 4 * act}
    layers = max(1, fx_nodes // 60)
    b = _Builder()

    def size(kind: str, layer: int) -> int:
        dist = min((layers - layer) * 3, 100)  # roughly the distance to the backward
        return int(shapes[kind] * 1.1**dist)

    x = b.node([], act, banned=True)  # the input placeholder
    fwd_ops: list[tuple[int, list[int]]] = []
    for layer in range(layers):
        def op(inputs: list[int], kind: str, banned: bool = False, view: bool = False) -> int:
            i = b.node(inputs, -1 if view else size(kind, layer), banned)
            fwd_ops.append((i, inputs))
            return i

        def param(numel: int) -> int:
            return b.node([], numel * 2, banned=True)

        w_ln, w_q, w_k, w_v, w_o, w_up, w_down, w_ln2 = (param(hidden * m) for m in (1, hidden, hidden, hidden, hidden, 4 * hidden, 4 * hidden, 1))
        mean = op([x], "stat")
        centered = op([x, mean], "act")
        var = op([centered], "stat")
        normed = op([centered, var], "act")
        h = op([normed, w_ln], "act")
        q, k, v = (op([h, w], "act", banned=True) for w in (w_q, w_k, w_v))
        qv, kv, vv = (op([t], "act", view=True) for t in (q, k, v))
        scores = op([qv, kv], "scores", banned=True)
        ex = op([scores], "scores")
        total = op([ex], "stat")
        probs = op([ex, total], "scores")
        ctx = op([probs, vv], "act", banned=True)
        ctxv = op([ctx], "act", view=True)
        attn = op([ctxv, w_o], "act", banned=True)
        x1 = op([x, attn], "act")
        mean2 = op([x1], "stat")
        c2 = op([x1, mean2], "act")
        var2 = op([c2], "stat")
        n2 = op([c2, var2], "act")
        h2 = op([n2, w_ln2], "act")
        up = op([h2, w_up], "mlp", banned=True)
        act_ = op([up], "mlp")
        down = op([act_, w_down], "act", banned=True)
        x = op([x1, down], "act")
    # Backward: the op that differentiates each forward op uses its inputs
    # (and, for a few ops, its output), in reverse order.
    for i, inputs in reversed(fwd_ops):
        saved = list(inputs) + ([i] if rng.random() < 0.3 else [])
        b.node(saved, 0, backward=True)
    return b.network("transformer")


def random_dag(fx_nodes: int, seed: int = 0) -> Network:
    rng = np.random.default_rng(seed)
    n_fwd = int(fx_nodes * 0.6)
    weights = np.array([1, 2, 2, 4, 4, 4, 8, 16, 1024]) * 4096
    b = _Builder()
    for i in range(n_fwd):
        k = 0 if i < 10 else int(rng.integers(1, 4))
        inputs = sorted({int(i - 1 - rng.integers(0, min(i, 30))) for _ in range(k)})
        b.node(inputs, int(rng.choice(weights)), banned=bool(rng.random() < 0.3))
    while len(b.inputs) < fx_nodes:
        users = [int(rng.integers(0, n_fwd)) for _ in range(int(rng.integers(1, 3)))]
        b.node(users, 0, backward=True)
    return b.network("random_dag")


# ---- solvers ----------------------------------------------------------------


def run_fxcut(net: Network, algorithm: int) -> Callable[[], tuple[int, bytes]]:
    return lambda: _C.min_cut(net.n_vertices, net.tail, net.head, net.cap, net.source, net.sink, algorithm)


def run_networkx(net: Network) -> Callable[[], tuple[int, Any]]:
    import networkx as nx

    g = nx.DiGraph()
    g.add_nodes_from(range(net.n_vertices))
    for u, v, c in zip(net.tail.tolist(), net.head.tolist(), net.cap.tolist()):
        g.add_edge(u, v, capacity=math.inf if c == INFINITE else c)
    return lambda: nx.minimum_cut(g, net.source, net.sink)


def scaled_for_scipy(net: Network) -> Network:
    """int32 capacities: finite weights scaled so that all of them together
    stay below 2^30, at least 1; infinity as 2^31 - 1."""
    finite = net.cap[net.cap != INFINITE]
    total = int(finite.sum()) if finite.size else 0
    factor = min(1.0, (2**30) / max(total, 1))
    cap = np.where(net.cap == INFINITE, 2**31 - 1, np.maximum(1, (net.cap * factor).astype(np.int64)))
    cap = np.where(net.cap == 0, 0, cap)
    return Network(net.name, net.fx_nodes, net.n_vertices, net.tail, net.head, cap.astype(np.int64), net.source, net.sink)


def run_scipy(net: Network) -> Callable[[], Any]:
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import maximum_flow

    m = csr_matrix((net.cap.astype(np.int32), (net.tail, net.head)), shape=(net.n_vertices, net.n_vertices))
    m.sort_indices()
    return lambda: maximum_flow(m, net.source, net.sink, method="dinic")


def median_time(fn: Callable[[], Any], reps: int) -> tuple[float, Any]:
    times = []
    result = None
    for _ in range(reps):
        gc.collect()
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


# ---- main -------------------------------------------------------------------


@dataclass
class Row:
    network: str
    fx_nodes: int
    vertices: int
    edges: int
    times: dict[str, float | None] = field(default_factory=dict)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    p.add_argument("--networks", nargs="+", default=["transformer", "random_dag"])
    p.add_argument("--reps", type=int, default=5, help="repetitions per fast solver (median reported)")
    p.add_argument("--nx-reps", type=int, default=3, help="repetitions for networkx (1 when a run takes > 5 s)")
    p.add_argument("--nx-limit", type=float, default=20.0, help="skip networkx when predicted above this (s); 0: never run it")
    p.add_argument("--json", help="write the rows here")
    args = p.parse_args(argv)

    gens = {"transformer": transformer, "random_dag": random_dag}
    rows: list[Row] = []
    for name in args.networks:
        nx_prev: tuple[int, float] | None = None
        for size in sorted(args.sizes):
            net = gens[name](size)
            row = Row(name, net.fx_nodes, net.n_vertices, len(net.tail))
            t_pr, (value, side) = median_time(run_fxcut(net, 1), args.reps)
            t_dinic, (value_d, side_d) = median_time(run_fxcut(net, 2), args.reps)
            assert (value_d, side_d) == (value, side), "push-relabel and Dinic disagree"
            row.times["fxcut_pr"], row.times["fxcut_dinic"] = t_pr, t_dinic

            scaled = scaled_for_scipy(net)
            t_sp, sp = median_time(run_scipy(scaled), args.reps)
            assert sp.flow_value == run_fxcut(scaled, 1)()[0], "scipy disagrees on the rescaled network"
            row.times["scipy"] = t_sp

            predicted = nx_prev[1] * net.n_vertices / nx_prev[0] if nx_prev else 0.0
            if args.nx_limit <= 0 or predicted > args.nx_limit:
                row.times["networkx"] = None
            else:
                solve_nx = run_networkx(net)
                t_first, (nx_value, (_, nx_sink)) = median_time(solve_nx, 1)
                assert nx_value == value, f"networkx value {nx_value} != {value}"
                assert nx_sink == {v for v, bit in enumerate(side) if bit}, "networkx sink side differs"
                reps = args.nx_reps - 1 if t_first <= 5 else 0
                t_rest = [median_time(solve_nx, 1)[0] for _ in range(reps)]
                row.times["networkx"] = statistics.median([t_first] + t_rest)
                nx_prev = (net.n_vertices, row.times["networkx"])
            rows.append(row)
            print_row(row, header=len(rows) == 1)
            sys.stdout.flush()

    if args.json:
        with open(args.json, "w") as f:
            json.dump([row.__dict__ for row in rows], f, indent=1)
    return 0


def print_row(row: Row, header: bool) -> None:
    cols = ["fxcut_pr", "fxcut_dinic", "scipy", "networkx"]
    if header:
        print(f"{'network':<12}{'fx nodes':>9}{'V':>9}{'E':>9}"
              + "".join(f"{c + ' ms':>16}" for c in cols)
              + f"{'dinic/pr':>10}{'scipy/pr':>10}{'nx/pr':>10}")
    t = row.times

    def ms(v: float | None) -> str:
        return f"{v * 1e3:16.2f}" if v is not None else f"{'skipped':>16}"

    def ratio(v: float | None) -> str:
        return f"{v / t['fxcut_pr']:10.1f}" if v is not None else f"{'-':>10}"

    print(f"{row.network:<12}{row.fx_nodes:>9}{row.vertices:>9}{row.edges:>9}"
          + "".join(ms(t[c]) for c in cols)
          + ratio(t["fxcut_dinic"]) + ratio(t["scipy"]) + ratio(t["networkx"]))


if __name__ == "__main__":
    sys.exit(main())
