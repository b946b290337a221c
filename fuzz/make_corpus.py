"""Writes the seed corpus of the fuzz targets into tests/fuzz_corpus/.

    PYTHONPATH=python:tests python fuzz/make_corpus.py

fuzz_graph seeds are real lowered graphs (random joint graphs of
tests/random_joint.py and a conflicting-tags graph) encoded in the input
format described in fuzz/fuzz_graph_input.h; fuzz_budget seeds are the same
graphs with a memory budget (fuzz/fuzz_budget.c); fuzz_maxflow seeds are
small networks in the format of fuzz/fuzz_maxflow.c; fuzz_knapsack seeds
small knapsack instances (fuzz/fuzz_knapsack.c).  The files are
committed; rerunning this script rewrites them identically.  Files named
regression_* are fuzzer finds kept by hand (the script leaves them).
"""

from __future__ import annotations

import operator
import struct
from pathlib import Path

import torch
import torch.fx as fx
from torch.utils.checkpoint import CheckpointPolicy

from fxcut import _C
from fxcut.route.lower import lower_for_partition
from fxcut.torchrules.ops import default_facts

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fuzz_corpus"


def _size_code(nbytes: int) -> int:
    if nbytes == _C.SIZE_UNKNOWN:
        return 0
    if nbytes == 0:
        return 254
    return max(1, min(250, round(nbytes / 64)))


def encode_graph(gm: fx.GraphModule, num_fwd_outputs: int, statics: list[int], *, options: int = 0b1111,
                 keep_network: int = 1) -> bytes:
    a = lower_for_partition(gm.graph, default_facts(), impure_random=True)
    n = len(a)
    assert n <= 255, n
    out = bytearray([n, options, (keep_network << 1) | 8])
    out += struct.pack("<H", 1000)
    primals = [i for i, f in enumerate(a.flags) if f & _C.F_PRIMAL]
    static_nodes = {primals[k] for k in statics if k < len(primals)}
    for i in range(n):
        out += bytes([a.kind[i]])
        out += struct.pack("<I", a.flags[i])
        out += bytes([(a.tag[i] + 1) & 0xFF, a.ac_graph_id[i] & 0xFF, _size_code(a.nbytes[i])])
        out += bytes([1 if i in static_nodes else 0])
        args = list(a.arg_idx[a.arg_ptr[i]:a.arg_ptr[i + 1]])[:4]
        ins = [j for j in a.in_idx[a.in_ptr[i]:a.in_ptr[i + 1]] if j not in args][:3]
        out += bytes([len(args), *args, len(ins), *ins])
    outputs = list(a.outputs)[:255]
    out += bytes([len(outputs), *[255 if j < 0 else j for j in outputs]])
    out += bytes([min(num_fwd_outputs, len(outputs))])
    out += bytes([0, 0])  # no forced saves, no fuse pairs
    params = primals[:7]
    out += bytes([len(params), *params])
    return bytes(out)


def _conflicting() -> fx.GraphModule:
    def meta() -> torch.Tensor:
        return torch.empty((4, 4), device="meta")

    g = fx.Graph()
    x = g.placeholder("primals_1")
    x.meta["val"] = meta()
    t = g.placeholder("tangents_1")
    t.meta["val"] = meta()
    drop = g.call_function(torch.ops.aten.native_dropout.default, (x, 0.5, True))
    drop.meta["val"] = (meta(), meta())
    kept = g.call_function(operator.getitem, (drop, 0))
    kept.meta["val"] = meta()
    kept.meta["recompute"] = CheckpointPolicy.MUST_RECOMPUTE
    out = g.call_function(torch.ops.aten.relu.default, (kept,))
    out.meta["val"] = meta()
    grad = g.call_function(torch.ops.aten.mul.Tensor, (t, kept))
    grad.meta["val"] = meta()
    g.output((out, grad))
    return fx.GraphModule(torch.nn.Module(), g)


def graph_seeds() -> dict[str, bytes]:
    from random_joint import random_joint

    seeds = {"conflict": encode_graph(_conflicting(), 1, [])}
    for seed in (1, 2, 3, 7, 11, 19):
        rj = random_joint(seed)
        seeds[f"random_{seed}"] = encode_graph(rj.module, rj.num_fwd_outputs, rj.static_lifetime_input_indices,
                                               options=0b1111 if seed % 2 else 0b11110111,
                                               keep_network=seed % 3)
    rj = random_joint(5, n_fw=120)
    seeds["random_long"] = encode_graph(rj.module, rj.num_fwd_outputs, rj.static_lifetime_input_indices)
    return seeds


def encode_network(n: int, edges: list[tuple[int, int, int]], source: int, sink: int, *, mode: int = 0,
                   algorithm: int = 1) -> bytes:
    """Capacity codes: 0 infinite, 24 zero, 40 + c for c in 0..15."""
    out = bytearray([n - 1, mode, source, sink, algorithm, len(edges)])
    for u, v, code in edges:
        out += bytes([u, v, code])
    return bytes(out)


def network_seeds() -> dict[str, bytes]:
    def c(x: int) -> int:
        return 48 + x  # 48 % 16 == 0, so code 48 + x is capacity x

    return {
        "clrs": encode_network(6, [(0, 1, c(12)), (0, 2, c(13)), (1, 2, c(10)),
                                   (2, 1, c(4)), (1, 3, c(12)), (3, 2, c(9)), (2, 4, c(14)),
                                   (4, 3, c(7)), (3, 5, c(15)), (4, 5, c(4))], 0, 5),
        "infinite_path": encode_network(4, [(0, 1, 0), (1, 2, 0), (2, 3, 0)], 0, 3),
        "split_nodes": encode_network(8, [(6, 0, 0), (0, 1, c(5)), (1, 2, 0), (2, 3, c(3)), (3, 7, 0),
                                          (1, 7, 0), (6, 4, 0), (4, 5, c(2)), (5, 2, 0)], 6, 7, algorithm=2),
        "huge": encode_network(5, [(0, 1, 0), (1, 2, 250), (1, 3, 245), (2, 4, 255), (3, 4, 241)], 0, 4,
                               mode=8),
        "parallel_and_loops": encode_network(3, [(0, 1, c(3)), (0, 1, c(4)), (1, 1, c(9)), (1, 2, c(5)),
                                                 (1, 2, 24)], 0, 2),
        "bad_index": encode_network(3, [(0, 200, c(1))], 0, 2, mode=2),
    }


def budget_seeds(graphs: dict[str, bytes]) -> dict[str, bytes]:
    """The graph seeds followed by fuzz/fuzz_budget.c's trailer: budget code
    (code / 255; 0 and 255 exact), input-storage flag (+ a byte per node),
    knapsack solver."""
    seeds: dict[str, bytes] = {}
    for k, (name, data) in enumerate(sorted(graphs.items())):
        n = data[0]
        storage = bytes([1, *[(i % 3 == 0) for i in range(n)]]) if k % 2 else bytes([0])
        seeds[f"{name}_half"] = data + bytes([128]) + storage + bytes([k % 4])
        seeds[f"{name}_tenth"] = data + bytes([25, 0, (k + 1) % 4])
    seeds["conflict_zero"] = graphs["conflict"] + bytes([0, 0, 0])
    seeds["random_1_one"] = graphs["random_1"] + bytes([255, 0, 0])
    return seeds


def memory_seeds(graphs: dict[str, bytes]) -> dict[str, bytes]:
    """The graph seeds followed by fuzz/fuzz_memory.c's trailer: mode, then
    per node a storage byte (0: its own), a saved bit with extraction marks,
    and a flops byte."""
    seeds: dict[str, bytes] = {}
    for k, (name, data) in enumerate(sorted(graphs.items())):
        n = data[0]
        per_node = bytes(b for i in range(n) for b in ((i % 4 == 3), i % 2 | (2 * (i % 11 == 5)), i % 7))
        seeds[f"{name}_save_all"] = data + bytes([16 | 8 | 3]) + per_node
        seeds[f"{name}_mask"] = data + bytes([k % 4]) + per_node
    return seeds


def plan_seeds(graphs: dict[str, bytes]) -> dict[str, bytes]:
    """The graph seeds followed by fuzz/fuzz_plan.c's trailer: mode, then per
    node a role byte, a storage byte (0: its own), a flops byte, a seed bit."""
    seeds: dict[str, bytes] = {}
    for k, (name, data) in enumerate(sorted(graphs.items())):
        n = data[0]
        per_node = bytes(b for i in range(n) for b in (2 if i % 3 else 1, (i % 4 == 3), i % 7, i % 2))
        seeds[f"{name}_model"] = data + bytes([0xE0 | 16 | 8 | 3]) + per_node
        seeds[f"{name}_own"] = data + bytes([0x60 | 16 | (k % 4)]) + per_node
    return seeds


def encode_knapsack(capacity: float, items: list[tuple[float, float]], *, mode: int = 0, solver: int = 0) -> bytes:
    """In fuzz/fuzz_knapsack.c's format: memory code = memory * 8192,
    runtime code = runtime * 16 (signed), capacity code = capacity * 65536."""
    out = bytearray([len(items), mode, solver])
    out += struct.pack("<H", round(capacity * 65536))
    for memory, runtime in items:
        out += struct.pack("<Hh", round(memory * 8192), round(runtime * 16))
    return bytes(out)


def knapsack_seeds() -> dict[str, bytes]:
    small = [(0.25, 3.0), (0.5, 2.0), (0.125, 1.0), (0.375, 2.5)]
    return {
        "small": encode_knapsack(0.5, small),
        "ties": encode_knapsack(0.5, [(0.25, 1.0)] * 6),
        "zero_memory": encode_knapsack(0.25, [(0.0, 1.0), (0.25, 2.0), (0.0, -1.0)]),
        "all_fit": encode_knapsack(0.99, small),
        "nothing_fits": encode_knapsack(0.0, small),
        "many": encode_knapsack(0.75, [((k * 37 % 64) / 128, (k * 11 % 17) / 4) for k in range(40)]),
        # raw mode: a NaN memory (0xFFFF, then the float64 bits)
        "nan": bytes([1, 1, 0]) + struct.pack("<H", 16384) + struct.pack("<H", 0xFFFF)
        + struct.pack("<d", float("nan")) + struct.pack("<h", 16),
        "unknown_solver": encode_knapsack(0.5, small, mode=2, solver=9),
    }


def main() -> None:
    graphs = graph_seeds()
    for target, seeds in (("fuzz_graph", graphs), ("fuzz_maxflow", network_seeds()),
                          ("fuzz_budget", budget_seeds(graphs)), ("fuzz_knapsack", knapsack_seeds()),
                          ("fuzz_memory", memory_seeds(graphs)), ("fuzz_plan", plan_seeds(graphs))):
        d = OUT / target
        d.mkdir(parents=True, exist_ok=True)
        for name, data in seeds.items():
            (d / name).write_bytes(data)
        print(f"{d}: {len(seeds)} seeds")


if __name__ == "__main__":
    main()
