"""The partition does not depend on the hash seed or on the run.

A child process captures several zoo graphs, partitions each with fxcut
twice (the two must agree), and prints per graph the saved values and a
hash of the forward and backward code; plus the saved set and cut of a
synthetic graph decided by the C core directly.  Two children with
different PYTHONHASHSEED values must print the same thing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent
CASES = ["mlp", "gpt2_ckpt", "llama_sac", "moe", "resnet"]

CHILD = r"""
import hashlib, sys
import numpy as np
import fxcut, zoo, synthetic_arrays

def run(name):
    cap = zoo.capture(name)
    fw, bw = fxcut.min_cut_rematerialization_partition(
        cap.fresh(), cap.joint_inputs, *cap.partition_args,
        num_fwd_outputs=cap.num_fwd_outputs, **cap.partition_kwargs)
    out = next(iter(reversed(fw.graph.nodes)))
    saved = [getattr(n, "name", repr(n)) for n in out.args[0][cap.num_fwd_outputs:]]
    code = hashlib.sha256((fw.code + "\0" + bw.code).encode()).hexdigest()
    return f"{name}: saved={','.join(saved)} code={code}"

for name in sys.argv[1:]:
    first, second = run(name), run(name)
    assert first == second, (first, second)
    print(first)
arrays = synthetic_arrays.build(500)
r = synthetic_arrays.decide(arrays)
saved = np.frombuffer(r.saved, dtype=np.int32)
print("synthetic:", len(saved), hashlib.sha256(saved.tobytes()).hexdigest(), r.cut_value)
"""


def _child(seed: str) -> str:
    env = dict(os.environ)
    env["PYTHONHASHSEED"] = seed
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS)] + [p for p in sys.path if p])
    proc = subprocess.run([sys.executable, "-c", CHILD, *CASES], env=env, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stdout


def test_partitions_are_independent_of_the_hash_seed_and_the_run() -> None:
    a = _child("0")
    b = _child("987654321")
    lines = a.splitlines()
    assert len(lines) == len(CASES) + 1 and all("saved=" in line for line in lines[:-1])
    assert all("saved= code" not in line for line in lines)
    assert a == b
