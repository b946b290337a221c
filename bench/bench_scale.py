"""How the C partition decision scales: synthetic transformer-like graph
arrays (tests/synthetic_arrays.py, built with numpy, no fx) of 10^4 .. 10^7
nodes through ``_C.partition_decide``, each size in a fresh process.

    PYTHONPATH=python python bench/bench_scale.py [--sizes 1e4 1e5 1e6 1e7] [--json out.json]

Per size it reports the time of the call (best of --reps), the peak
resident memory the call adds (VmHWM after the call minus VmRSS before it,
with the peak reset by /proc/self/clear_refs just before the call, so the
numpy temporaries of building the arrays do not count), that peak per node
and per edge (an edge = one entry of in_idx, an input of a node), and the
size of the input arrays themselves (held by the caller, not counted in
the peak).  The target is a peak of at most 100 bytes per node plus 40 per
edge; the last column is the peak over that budget.

A benchmark, not a test: it prints a table, and fails only if a call fails.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, os, resource, sys, time
import numpy as np
import synthetic_arrays as sa

def status(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(key)

def reset_peak():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False

nodes, reps = int(sys.argv[1]), int(sys.argv[2])
arrays = sa.build(sa.layers_for(nodes))
times = []
peak = None
for rep in range(reps):
    exact = reset_peak()
    before = status("VmRSS")
    hwm_before = status("VmHWM") if exact else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    t0 = time.perf_counter()
    out = sa.decide(arrays)
    times.append(time.perf_counter() - t0)
    hwm = status("VmHWM") if exact else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if peak is None:
        peak = hwm - before if exact else max(0, hwm - hwm_before)
    del out
saved = sa.decide(arrays).saved
print(json.dumps(dict(nodes=len(arrays), edges=arrays.n_edges, layers=arrays.layers,
                      seconds=min(times), peak=peak, exact_peak=exact, input_bytes=arrays.nbytes_total(),
                      saved=len(saved))))
"""


def run(nodes: int, reps: int) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "tests"), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-c", CHILD, str(nodes), str(reps)], env=env, capture_output=True,
                          text=True)
    if proc.returncode != 0:
        raise SystemExit(f"size {nodes}: child failed\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", nargs="+", type=float, default=[1e4, 1e5, 1e6, 1e7])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    rows = []
    header = (f"{'nodes':>10} {'edges':>10} {'time s':>8} {'us/node':>8} {'peak MiB':>9} {'B/node':>7} "
              f"{'B/edge':>7} {'budget':>7} {'inputs B/node':>13}")
    print(header)
    for size in args.sizes:
        r = run(int(size), args.reps if size < 5e6 else 1)
        n, m = r["nodes"], r["edges"]
        budget = 100 * n + 40 * m
        r["bytes_per_node"] = r["peak"] / n
        r["bytes_per_edge"] = r["peak"] / m
        r["over_budget"] = r["peak"] / budget
        rows.append(r)
        print(f"{n:>10} {m:>10} {r['seconds']:>8.3f} {1e6 * r['seconds'] / n:>8.3f} {r['peak'] / 2**20:>9.1f} "
              f"{r['bytes_per_node']:>7.1f} {r['bytes_per_edge']:>7.1f} {r['over_budget']:>6.2f}x "
              f"{r['input_bytes'] / n:>13.1f}", flush=True)
    if len(rows) > 1:
        a, b = rows[0], rows[-1]
        print(f"time grows {b['seconds'] / a['seconds']:.0f}x for {b['nodes'] / a['nodes']:.0f}x nodes; "
              f"peak {b['peak'] / max(a['peak'], 1):.0f}x")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
