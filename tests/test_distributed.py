"""A real 2-process distributed run: FSDP2 (``fully_shard``) on CPU with gloo,
a small transformer trained for 5 steps under
``torch.compile(backend=fxcut.inductor_backend(zero3_params=True))``, against
the same run with torch's partitioner behind the same ZeRO-3 walk.

Each rank (tests/distributed_worker.py, launched by ``torch.distributed.run``
on localhost) must see the same losses, step by step, bit for bit, in both
runs; every partition of the fxcut run must be fxcut's (torch's min-cut never
called, no fallback), and the reference run's must be torch's.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import fxcut

WORKER = Path(__file__).with_name("distributed_worker.py")
#: where this process imported fxcut from (the sanitizer run's copy included)
PACKAGE_ROOT = Path(fxcut.__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(tmp_path: Path, mode: str) -> list[dict]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(PACKAGE_ROOT), env.get("PYTHONPATH", "")])
    env["FXCUT_DIST_MODE"] = mode
    # A fresh inductor/AOT cache: a cached graph would skip the partitioner.
    env["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path / "inductor-cache")
    env["OMP_NUM_THREADS"] = "1"
    env.pop("FXCUT_VERIFY", None)
    out = tmp_path / "out"
    out.mkdir()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--nnodes=1",
           "--master_addr=127.0.0.1", f"--master_port={_free_port()}", str(WORKER), str(out)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    for r in results:
        assert "error" not in r, f"rank {r['rank']}: {r['error']}\n{r.get('traceback', '')}"
    return results


@pytest.mark.parametrize("mode", ["fsdp2"])
def test_two_rank_training_equals_torchs_partitioner(tmp_path: Path, mode: str) -> None:
    results = _launch(tmp_path, mode)
    assert [r["rank"] for r in results] == [0, 1] and all(r["world"] == 2 for r in results)
    for r in results:
        assert len(r["fxcut_losses"]) == 5
        assert r["fxcut_losses"] == r["torch_losses"], f"rank {r['rank']}"
        fx_calls, torch_calls = r["fxcut_calls"], r["torch_calls"]
        n_graphs = fx_calls["guard"].get("fxcut", 0)
        # every partition of the fxcut run is fxcut's ...
        assert n_graphs >= 1 and fx_calls["guard"] == {"fxcut": n_graphs}
        assert fx_calls["torch_min_cut_calls"] == 0
        # ... as many as torch makes in the reference run, none of them fxcut's
        assert torch_calls["torch_min_cut_calls"] == n_graphs and torch_calls["guard"] == {}
        # the ZeRO-3 walk ran over the sharded parameters of each graph
        assert len(fx_calls["walked_params"]) == n_graphs and min(fx_calls["walked_params"]) > 0
        assert fx_calls["walked_params"] == torch_calls["walked_params"]
    # the ranks trained on different data: a real two-rank run, not two copies
    assert results[0]["fxcut_losses"] != results[1]["fxcut_losses"]
