"""fxcut's partitioner against torch's on GPT-style joint graphs: the
decision, the min-cut solver alone, the whole partition_fn, the module
extraction floor, and the decision's peak Python memory.  A benchmark, not a
test: it prints one table of medians and ratios measured in the same run.

    PYTHONPATH=python python bench/bench_partition.py [--layers 1 4 12 24 48]
        [--reps 7] [--slow-reps 5] [--hidden 1024] [--seq 512] [--out bench/out] [--docs docs]
    PYTHONPATH=python python bench/bench_partition.py --quick     # smoke test, seconds
    PYTHONPATH=python python bench/bench_partition.py --set releases --layers 24 48 --json FILE
        # the decision and the whole partition_fn, plain and lazy modules (what
        # bench/bench_releases.py runs in every release's venv)

Prints the report; writes bench_partition.{json,md,txt,png} into --out DIR and
writes the report into its generated section of DIR/bench_partition.md and the
plot into DIR/bench_partition.png for --docs DIR, only when asked (``fxcut bench``
runs the same benchmark, with the same options).  What is
timed, and how, is described in bench/partition_benchmark.py; the logic is
``partition_benchmark.run(...)``.
"""

from __future__ import annotations

import sys

import partition_benchmark as benchmark  # bench/, next to this script

if __name__ == "__main__":
    sys.exit(benchmark.main())
