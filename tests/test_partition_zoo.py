"""fxcut's partitioner equals torch's on every real joint graph of the zoo.

For each case: the saved values and saved sym nodes (the forward's extra
outputs) are equal node for node and in order, and the forward and backward
graphs print identically -- with CSE on and off, and after DeepCompile's
ZeRO-3 walk.  One training step through fxcut's partition_fn matches eager.
"""

from __future__ import annotations

import pytest
import torch
import torch.fx as fx
from torch._functorch import config
from torch._functorch.partitioners import min_cut_rematerialization_partition as torch_partition

import fxcut
import zoo

CASES = sorted(zoo.CASES)


def _saved(fw: fx.GraphModule, num_fwd_outputs: int) -> list[str]:
    output = next(iter(reversed(fw.graph.nodes)))
    return [n.name if isinstance(n, fx.Node) else repr(n) for n in output.args[0][num_fwd_outputs:]]


def _partition_both(cap, walk: bool = False):
    results = []
    for fn in (torch_partition, fxcut.min_cut_rematerialization_partition):
        gm = cap.fresh()
        if walk:
            fxcut.recompute_param_aliases(gm.graph, cap.param_indices)
        results.append(fn(gm, cap.joint_inputs, *cap.partition_args,
                          num_fwd_outputs=cap.num_fwd_outputs, **cap.partition_kwargs))
    return results


def _assert_same(cap, expected, got) -> None:
    (tfw, tbw), (ffw, fbw) = expected, got
    assert _saved(ffw, cap.num_fwd_outputs) == _saved(tfw, cap.num_fwd_outputs)
    assert ffw.code == tfw.code
    assert fbw.code == tbw.code


@pytest.mark.parametrize("name", CASES)
def test_partition_equals_torch(name: str) -> None:
    cap = zoo.capture(name)
    expected, got = _partition_both(cap)
    _assert_same(cap, expected, got)
    # Something was actually decided: the forward saves values for backward.
    assert len(_saved(got[0], cap.num_fwd_outputs)) > 0


@pytest.mark.parametrize("name", ["gpt2", "llama_sac", "resnet", "moe", "gpt2_dynamic"])
def test_partition_equals_torch_without_cse(name: str) -> None:
    cap = zoo.capture(name)
    with config.patch(cse=False):
        expected, got = _partition_both(cap)
    _assert_same(cap, expected, got)


@pytest.mark.parametrize("name", ["llama_bf16", "gpt2", "vit", "llama_ckpt"])
def test_partition_equals_torch_after_zero3_walk(name: str) -> None:
    cap = zoo.capture(name)
    expected, got = _partition_both(cap, walk=True)
    _assert_same(cap, expected, got)


@pytest.mark.parametrize(
    "patch",
    [{"recompute_views": True}, {"aggressive_recomputation": True}, {"ban_recompute_not_in_allowlist": False},
     {"treat_parameters_as_free_to_save": True}],
    ids=lambda p: ",".join(p),
)
def test_partition_equals_torch_under_config(patch: dict) -> None:
    for name in ("gpt2", "llama_bf16", "resnet"):
        cap = zoo.capture(name)
        with config.patch(**patch):
            expected, got = _partition_both(cap)
        _assert_same(cap, expected, got)


def test_llama_bf16_zero3_saves_no_parameter_alias() -> None:
    cap = zoo.capture("llama_bf16")
    gm = cap.fresh()
    tagged = {n.name for n in fxcut.recompute_param_aliases(gm.graph, cap.param_indices)}
    assert tagged, "bf16 autocast must produce parameter casts"
    fw, _ = fxcut.min_cut_rematerialization_partition(
        gm, cap.joint_inputs, num_fwd_outputs=cap.num_fwd_outputs, **cap.partition_kwargs)
    assert not tagged & set(_saved(fw, cap.num_fwd_outputs))
    # Without the walk the forward does save some of those aliases.
    plain, _ = fxcut.min_cut_rematerialization_partition(
        cap.fresh(), cap.joint_inputs, num_fwd_outputs=cap.num_fwd_outputs, **cap.partition_kwargs)
    assert tagged & set(_saved(plain, cap.num_fwd_outputs))


@pytest.mark.parametrize("name", CASES)
def test_training_step_matches_eager(name: str) -> None:
    zoo.assert_same_step(zoo.train(name, fxcut.min_cut_rematerialization_partition), zoo.eager(name),
                         **zoo.tolerances(name))
