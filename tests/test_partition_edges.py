"""The partitioner's edge cases: conflicting tags, no backward, bad input."""

from __future__ import annotations

import copy
import operator

import pytest
import torch
import torch.fx as fx
from torch._functorch.partitioners import min_cut_rematerialization_partition as torch_partition
from torch.utils.checkpoint import CheckpointPolicy

import fxcut

aten = torch.ops.aten


def _meta(shape=(4, 4)):
    return torch.empty(shape, device="meta")


def _conflicting_graph() -> fx.GraphModule:
    """A MUST_RECOMPUTE getitem of dropout: dropout is random (banned from
    recompute) and returns a tuple (cannot be saved), so the value the
    backward needs can be neither saved nor recomputed."""
    g = fx.Graph()
    x = g.placeholder("primals_1")
    x.meta["val"] = _meta()
    t = g.placeholder("tangents_1")
    t.meta["val"] = _meta()
    drop = g.call_function(aten.native_dropout.default, (x, 0.5, True))
    drop.meta["val"] = (_meta(), _meta())
    mask_kept = g.call_function(operator.getitem, (drop, 0))
    mask_kept.meta["val"] = _meta()
    mask_kept.meta["recompute"] = CheckpointPolicy.MUST_RECOMPUTE
    out = g.call_function(aten.relu.default, (mask_kept,))
    out.meta["val"] = _meta()
    grad = g.call_function(aten.mul.Tensor, (t, mask_kept))
    grad.meta["val"] = _meta()
    g.output((out, grad))
    return fx.GraphModule(torch.nn.Module(), g)


def test_conflicting_tags_raise_an_error_naming_the_chain() -> None:
    gm = _conflicting_graph()
    with pytest.raises(RuntimeError):
        torch_partition(copy.deepcopy(gm), None, num_fwd_outputs=1)
    with pytest.raises(fxcut.InfiniteCutError) as info:
        fxcut.min_cut_rematerialization_partition(gm, None, num_fwd_outputs=1)
    assert info.value.chain == ["native_dropout_default", "getitem"]
    assert "native_dropout_default" in str(info.value) and "MUST_RECOMPUTE" in str(info.value)


def test_conflict_leaves_the_module_graph_in_place() -> None:
    gm = _conflicting_graph()
    graph = gm.graph
    code = gm.code
    with pytest.raises(fxcut.InfiniteCutError):
        fxcut.min_cut_rematerialization_partition(gm, None, num_fwd_outputs=1)
    assert gm.graph is graph and gm.code == code


def _forward_only_graph() -> fx.GraphModule:
    g = fx.Graph()
    x = g.placeholder("primals_1")
    x.meta["val"] = _meta()
    y = g.call_function(aten.sin.default, (x,))
    y.meta["val"] = _meta()
    z = g.call_function(aten.cos.default, (y,))
    z.meta["val"] = _meta()
    g.output((z, None))
    return fx.GraphModule(torch.nn.Module(), g)


def test_graph_without_backward_takes_torchs_default_partition() -> None:
    gm = _forward_only_graph()
    expected = torch_partition(copy.deepcopy(gm), None, num_fwd_outputs=1)
    got = fxcut.min_cut_rematerialization_partition(gm, None, num_fwd_outputs=1)
    assert got[0].code == expected[0].code and got[1].code == expected[1].code


def test_bad_input_names_the_problem() -> None:
    gm = _forward_only_graph()
    with pytest.raises(TypeError, match="GraphModule"):
        fxcut.min_cut_rematerialization_partition(gm.graph, None, num_fwd_outputs=1)
    with pytest.raises(TypeError, match="num_fwd_outputs"):
        fxcut.min_cut_rematerialization_partition(gm, None, num_fwd_outputs="1")
    with pytest.raises(ValueError, match="num_fwd_outputs"):
        fxcut.min_cut_rematerialization_partition(gm, None, num_fwd_outputs=5)
    bad = _forward_only_graph()
    next(iter(bad.graph.nodes)).meta["recompute"] = "sometimes"
    with pytest.raises(ValueError, match="primals_1"):
        fxcut.min_cut_rematerialization_partition(bad, None, num_fwd_outputs=1)


def test_wrapped_partitioner_defaults_to_fxcut(monkeypatch) -> None:
    calls = []
    real = fxcut.partition.min_cut_rematerialization_partition

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(fxcut.partition, "min_cut_rematerialization_partition", spy)
    frames: set[int] = set()
    fn = fxcut.get_wrapped_partitioner(False, [], None, 7, frames)
    fn(_forward_only_graph(), None, num_fwd_outputs=1)
    assert calls == [{"num_fwd_outputs": 1}] and frames == {7}
