"""fxcut's partitioner against torch's on GPT-style joint graphs: the
decision, the min-cut solver alone, the whole partition_fn, the module
extraction floor, and the decision's peak Python memory.  A benchmark, not a
test: it prints one table of medians and ratios measured in the same run.

    PYTHONPATH=python python bench/bench_partition.py [--layers 1 4 12 24 48]
        [--reps 7] [--slow-reps 5] [--hidden 1024] [--seq 512] [--out bench/out]
    PYTHONPATH=python python bench/bench_partition.py --quick     # smoke test, seconds

Writes bench_partition.{json,md,txt,png} into --out and, unless --quick or
--no-docs, the table and the plot to docs/bench_partition.{md,png}.  What is
timed, and how, is described in fxcut/benchmark.py; the logic is
``fxcut.benchmark.run(...)``.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
import time

from fxcut import benchmark


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
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
    p.add_argument("--with-gc", action="store_true",
                   help="leave Python's garbage collector on during the timed calls (off by default, as timeit)")
    p.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test of the pipeline")
    p.add_argument("--out", default=os.path.join("bench", "out"), help="directory for json/md/txt/png")
    p.add_argument("--docs", default="docs", help="where the md table and png plot are copied")
    p.add_argument("--no-docs", action="store_true", help="do not copy into --docs")
    args = p.parse_args(argv)

    if args.quick:
        kwargs = dict(benchmark.QUICK)
    else:
        heads = args.heads or max(1, args.hidden // 64)
        kwargs = dict(layers=args.layers, reps=args.reps, slow_reps=args.slow_reps,
                      model=benchmark.ModelConfig(hidden=args.hidden, heads=heads, seq=args.seq,
                                                  batch=args.batch, vocab=args.vocab),
                      phase_layers=args.phase_layers or None, phase_reps=args.phase_reps)
    start = time.perf_counter()

    def progress(line: str) -> None:
        print(f"[{time.perf_counter() - start:7.1f} s] {line}", file=sys.stderr, flush=True)

    result = benchmark.run(progress=progress, with_gc=args.with_gc, **kwargs)
    command = "PYTHONPATH=python python bench/bench_partition.py " + shlex.join(
        sys.argv[1:] if argv is None else argv)
    paths = benchmark.write(result, args.out, command.strip())
    print(benchmark.format_report(result, command.strip()))
    if not (args.quick or args.no_docs):
        os.makedirs(args.docs, exist_ok=True)
        shutil.copyfile(paths["md"], os.path.join(args.docs, "bench_partition.md"))
        shutil.copyfile(paths["png"], os.path.join(args.docs, "bench_partition.png"))
        paths["docs"] = args.docs
    print("wrote " + ", ".join(paths.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
