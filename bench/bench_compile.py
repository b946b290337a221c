"""What a user feels: a cold ``torch.compile`` training step, stock inductor
vs ``fxcut.inductor_backend()``.

Each run is a fresh Python process with its own empty inductor cache
(``TORCHINDUCTOR_CACHE_DIR`` a new temporary folder, FX graph and AOT
autograd caches off), so every run compiles from scratch.  A run builds the
GPT of ``fxcut.tools.models`` (``--layers`` blocks), compiles it, and times the
first training step (forward, loss, backward: dynamo, AOT Autograd, the
partitioner, inductor's code generation and C++ compilation) and, inside
it, the partitioner call alone.  Rounds alternate which side goes first;
ratios are per round (stock / fxcut), medians reported.

    python bench/bench_compile.py --layers 24 --hidden 256 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any


def _child(side: str, cfg: dict[str, Any]) -> dict[str, Any]:
    import torch

    import fxcut
    from fxcut.tools.models import build_model

    torch.manual_seed(0)
    built = build_model("gpt2", **cfg)
    model = built.model
    model.train()
    inputs = built.make_inputs()
    spent: list[float] = []
    kinds: list[str] = []

    def timed(fn: Any) -> Any:
        def wrapper(gm: Any, *args: Any, **kwargs: Any) -> Any:
            from torch.fx._lazy_graph_module import _LazyGraphModule, _use_lazy_graph_module_flag

            kinds.append(f"joint lazy={isinstance(gm, _LazyGraphModule)} flag={_use_lazy_graph_module_flag}")
            t = time.perf_counter()
            try:
                return fn(gm, *args, **kwargs)
            finally:
                spent.append(time.perf_counter() - t)
        return wrapper

    if side == "stock":
        import torch._inductor.compile_fx as cfx

        cfx.min_cut_rematerialization_partition = timed(cfx.min_cut_rematerialization_partition)
        backend: Any = "inductor"
    else:
        from fxcut.integrations import torch_compile as tc

        tc.InductorPartitioner.__call__ = timed(tc.InductorPartitioner.__call__)  # type: ignore[method-assign]
        backend = fxcut.inductor_backend()
    compiled = torch.compile(model, backend=backend)
    t = time.perf_counter()
    loss = built.loss_fn(compiled(*inputs), inputs)
    loss.backward()
    total = time.perf_counter() - t
    return {"side": side, "compile_s": total, "partition_s": sum(spent), "calls": len(spent),
            "kinds": sorted(set(kinds)), "loss": float(loss)}


def _run(side: str, cfg: dict[str, Any]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="fxcut-inductor-") as cache:
        env = dict(os.environ)
        env.update(TORCHINDUCTOR_CACHE_DIR=cache, TORCHINDUCTOR_FX_GRAPH_CACHE="0",
                   TORCHINDUCTOR_AUTOGRAD_CACHE="0", TRITON_CACHE_DIR=os.path.join(cache, "triton"))
        out = subprocess.run([sys.executable, __file__, "--child", side, "--cfg", json.dumps(cfg)],
                             env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{side} run failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", help="write the runs here")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--cfg", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        print(json.dumps(_child(a.child, json.loads(a.cfg))))
        return 0
    cfg = {"layers": a.layers, "hidden": a.hidden, "heads": a.heads, "seq": a.seq, "batch": a.batch,
           "vocab": a.vocab}
    rounds = []
    for r in range(a.rounds):
        order = ("stock", "fxcut") if r % 2 == 0 else ("fxcut", "stock")
        runs = {side: _run(side, cfg) for side in order}
        rounds.append(runs)
        s, f = runs["stock"], runs["fxcut"]
        print(f"round {r + 1}: stock {s['compile_s']:.1f} s (partition {s['partition_s']:.2f} s), "
              f"fxcut {f['compile_s']:.1f} s (partition {f['partition_s']:.2f} s), "
              f"ratio {s['compile_s'] / f['compile_s']:.3f}", flush=True)

    def med(side: str, key: str) -> float:
        return statistics.median(r[side][key] for r in rounds)

    ratio = statistics.median(r["stock"]["compile_s"] / r["fxcut"]["compile_s"] for r in rounds)
    pratio = statistics.median(r["stock"]["partition_s"] / r["fxcut"]["partition_s"] for r in rounds)
    summary = {
        "config": cfg, "rounds": rounds,
        "stock_compile_s": med("stock", "compile_s"), "fxcut_compile_s": med("fxcut", "compile_s"),
        "stock_partition_s": med("stock", "partition_s"), "fxcut_partition_s": med("fxcut", "partition_s"),
        "compile_ratio": ratio, "partition_ratio": pratio,
        "stock_partition_share": statistics.median(r["stock"]["partition_s"] / r["stock"]["compile_s"] for r in rounds),
        "fxcut_partition_share": statistics.median(r["fxcut"]["partition_s"] / r["fxcut"]["compile_s"] for r in rounds),
    }
    print(f"cold compile of the first training step ({a.layers} layers, hidden {a.hidden}, seq {a.seq}, "
          f"batch {a.batch}), medians of {a.rounds} interleaved rounds:")
    print(f"  stock inductor {summary['stock_compile_s']:.1f} s, partitioner {summary['stock_partition_s']:.2f} s "
          f"({100 * summary['stock_partition_share']:.1f}%)")
    print(f"  fxcut          {summary['fxcut_compile_s']:.1f} s, partitioner {summary['fxcut_partition_s']:.2f} s "
          f"({100 * summary['fxcut_partition_share']:.1f}%)")
    print(f"  end-to-end ratio stock/fxcut {ratio:.3f}; partitioner ratio {pratio:.2f}")
    print(f"  joint module as the partitioner gets it: {rounds[0]['stock']['kinds']}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(summary, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
