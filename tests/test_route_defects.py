"""The eight defects of issue 16 (item 8), each on a real joint graph.

Every test here failed on the code before the one-route redesign (the
commit message that added it records how); each asserts what torch's own
partitioner does, or the promise fxcut makes (docs/bad_input.md).
"""

from __future__ import annotations

import copy
import functools
from typing import Any

import pytest
import torch
import torch.fx as fx
import torch.nn as nn
from torch._functorch import partitioners as tp
from torch.utils.checkpoint import CheckpointPolicy

import fxcut
import small_graphs
from fxcut.route import guard
from small_graphs import _node, _placeholders, meta
from test_graph_untouched import State

aten = torch.ops.aten
#: torch's own partitioner, taken before any test rebinds its name
TORCH_MIN_CUT = tp.min_cut_rematerialization_partition


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(guard, "_warned", set())
    monkeypatch.delenv(guard.VERIFY_ENV, raising=False)
    guard.reset_counts()
    yield
    guard.reset_counts()


def _rebind(monkeypatch: pytest.MonkeyPatch, fn: Any) -> None:
    """Bind torch's name (in its partitioner and its compilers module) to ``fn``."""
    import torch._functorch.compilers as tc

    monkeypatch.setattr(tp, "min_cut_rematerialization_partition", fn)
    monkeypatch.setattr(tc, "min_cut_rematerialization_partition", fn)


def tangent_output_joint(dead: bool = True) -> fx.GraphModule:
    """A forward output that reads the tangent: the C classification does not
    model it (fxcut hands the graph to torch), and torch's partitioner fails
    on it ("invalid, but is output") after its dead-code elimination has
    removed ``dead``'s neg."""
    g = fx.Graph()
    x, w, t = _placeholders(g, "primals_1", "primals_2", "tangents_1")
    if dead:
        _node(g, aten.neg.default, (x,), meta())
    mm = _node(g, aten.mm.default, (x, w), meta())
    relu = _node(g, aten.relu.default, (mm,), meta())
    odd = _node(g, aten.mul.Tensor, (relu, t), meta())
    grad = _node(g, aten.threshold_backward.default, (t, relu, 0), meta())
    gw = _node(g, aten.mm.default, (x, grad), meta())
    g.output((relu, odd, None, gw))
    return fx.GraphModule(torch.nn.Module(), g)


# ------------------------------------------------------------ 1. invoke_subgraph tags


@torch.compiler.nested_compile_region
def _block(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    y = torch.relu(x @ w)
    return y.sin(), y.cos()


class _Regions(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(8, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = _block(x.sin(), self.w)
        a, b = _block(a + b, self.w)
        c, d = _block(a + b, self.w)
        return (c * d).sum()


@pytest.fixture(scope="module")
def region_joint() -> tuple[fx.GraphModule, dict[str, Any]]:
    """The outer joint graph AOT Autograd hands the partitioner for three
    calls of one ``nested_compile_region`` (kept as ``invoke_subgraph``)."""
    from torch._dynamo.backends.common import aot_autograd

    seen: list[tuple[fx.GraphModule, dict[str, Any]]] = []

    def record(gm: fx.GraphModule, joint_inputs: Any, **kwargs: Any) -> Any:
        seen.append((copy.deepcopy(gm), dict(kwargs)))
        return TORCH_MIN_CUT(gm, joint_inputs, **kwargs)

    torch.manual_seed(0)
    backend = aot_autograd(fw_compiler=lambda g, _: g, bw_compiler=lambda g, _: g, partition_fn=record)
    torch._dynamo.reset()
    torch.compile(_Regions(), backend=backend, fullgraph=True)(torch.randn(4, 8)).backward()
    torch._dynamo.reset()
    gm, kwargs = seen[-1]
    hop = torch.ops.higher_order.invoke_subgraph
    assert any(n.target is hop for n in gm.graph.nodes), "the region must stay an invoke_subgraph"
    return gm, kwargs


def _tags(gm: fx.GraphModule) -> dict[str, Any]:
    return {n.name: n.meta.get("recompute") for n in gm.graph.nodes if "recompute" in n.meta}


def test_invoke_subgraph_getitems_are_tagged_as_torch_tags_them(region_joint: Any) -> None:
    gm, kwargs = region_joint
    theirs, ours = copy.deepcopy(gm), copy.deepcopy(gm)
    tfw, tbw = TORCH_MIN_CUT(theirs, None, **kwargs)
    fw, bw = fxcut.min_cut_rematerialization_partition(ours, None, **kwargs)
    assert _tags(ours) == _tags(theirs)
    assert _tags(fw) == _tags(tfw) and _tags(bw) == _tags(tbw)
    assert (fw.code, bw.code) == (tfw.code, tbw.code)


def test_verify_compares_the_tags_torch_writes() -> None:
    """Equal code but a ``meta["recompute"]`` torch did not write: a mismatch."""
    gm = small_graphs.mm_relu_joint()
    expected = TORCH_MIN_CUT(copy.deepcopy(gm), None, num_fwd_outputs=1)
    got = TORCH_MIN_CUT(copy.deepcopy(gm), None, num_fwd_outputs=1)
    assert guard.compare(expected, got, num_fwd_outputs=1) is None
    relu = next(n for n in got[0].graph.nodes if n.name == "relu_default")
    relu.meta["recompute"] = CheckpointPolicy.MUST_SAVE
    diff = guard.compare(expected, got, num_fwd_outputs=1)
    assert diff is not None
    assert "relu_default" in diff.diff and "recompute" in diff.diff and "MUST_SAVE" in diff.diff


# ------------------------------------------------------------ 2. snake-cased names


@pytest.mark.parametrize("name", ["reluOut", "__saved__", "Relu2Out"])
def test_saved_values_get_torchs_snake_cased_placeholder_names(name: str) -> None:
    def joint() -> fx.GraphModule:
        gm = small_graphs.mm_relu_joint()
        relu = next(n for n in gm.graph.nodes if n.name == "relu_default")
        relu.name = name
        gm.recompile()
        return gm

    tfw, tbw = TORCH_MIN_CUT(joint(), None, num_fwd_outputs=1)
    fw, bw = fxcut.min_cut_rematerialization_partition(joint(), None, num_fwd_outputs=1)
    assert [n.name for n in bw.graph.nodes] == [n.name for n in tbw.graph.nodes]
    assert [n.target for n in bw.graph.nodes] == [n.target for n in tbw.graph.nodes]
    assert (fw.code, bw.code) == (tfw.code, tbw.code)


# ------------------------------------------------------------ 3. no recursion after rebinding


@pytest.mark.parametrize("binding", ["function", "partial", "lambda"])
def test_a_fallback_reaches_torch_when_torchs_name_is_rebound_to_fxcut(
    monkeypatch: pytest.MonkeyPatch, binding: str
) -> None:
    ours = fxcut.min_cut_rematerialization_partition
    fn = {"function": ours, "partial": functools.partial(ours, verify=False),
          "lambda": lambda *a, **k: ours(*a, **k)}[binding]
    with pytest.raises(AssertionError) as theirs:
        TORCH_MIN_CUT(tangent_output_joint(), None, num_fwd_outputs=2)
    _rebind(monkeypatch, fn)
    with pytest.warns(fxcut.FallbackWarning):
        with pytest.raises(AssertionError) as got:
            ours(tangent_output_joint(), None, num_fwd_outputs=2)
    assert str(got.value) == str(theirs.value)


# ------------------------------------------------------------ 4. unknown keyword arguments


@pytest.mark.parametrize("kwargs", [{"verfiy": True}, {"static_lifetime_input_indice": [0]}])
def test_an_unknown_keyword_argument_is_a_type_error_as_in_torch(kwargs: dict[str, Any]) -> None:
    with pytest.raises(TypeError, match=next(iter(kwargs))):
        TORCH_MIN_CUT(small_graphs.mm_relu_joint(), None, num_fwd_outputs=1, **kwargs)
    gm = small_graphs.mm_relu_joint()
    before = State.of(gm)
    with pytest.raises(TypeError, match=next(iter(kwargs))):
        fxcut.min_cut_rematerialization_partition(gm, None, num_fwd_outputs=1, **kwargs)
    before.assert_same(gm)
    assert fxcut.partition_counts() == {}


# ------------------------------------------------------------ 5. one count per graph


@pytest.mark.parametrize("verify", [False, True])
def test_a_graph_handed_to_torch_is_counted_once(verify: bool) -> None:
    with pytest.warns(fxcut.FallbackWarning), pytest.raises(AssertionError):
        fxcut.min_cut_rematerialization_partition(tangent_output_joint(), None, num_fwd_outputs=2,
                                                  verify=verify)
    assert fxcut.partition_counts() == {"torch_unmodelled": 1}


def test_a_graph_fxcut_decides_is_counted_once() -> None:
    fxcut.min_cut_rematerialization_partition(small_graphs.mm_relu_joint(), None, num_fwd_outputs=1)
    fxcut.min_cut_rematerialization_partition(small_graphs.mm_relu_joint(), None, num_fwd_outputs=1,
                                              verify=True)
    assert fxcut.partition_counts() == {"fxcut": 1, "verified": 1}


# ------------------------------------------------------------ 6. verify keeps a lazy module lazy


def _lazy_joint_with_deep_dead_argument() -> fx.GraphModule:
    """A lazy joint (as AOT Autograd makes them) whose dead node has a
    250-deep literal: Python's compiler rejects its code, but dead-code
    elimination removes the node before either partitioner generates any."""
    from torch.fx._lazy_graph_module import _LazyGraphModule

    gm = small_graphs.mm_relu_joint()
    nested: Any = 0
    for _ in range(250):
        nested = [nested]
    graph = gm.graph
    x = next(iter(graph.nodes))
    with graph.inserting_after(x):
        dead = graph.call_function(aten.add.Tensor, (x, nested))
        dead.meta["val"] = meta()
    return _LazyGraphModule(gm, graph)


def test_verify_mode_keeps_a_lazy_joint_lazy() -> None:
    tfw, tbw = TORCH_MIN_CUT(_lazy_joint_with_deep_dead_argument(), None, num_fwd_outputs=1)
    fw, bw = fxcut.min_cut_rematerialization_partition(_lazy_joint_with_deep_dead_argument(), None,
                                                       num_fwd_outputs=1, verify=True)
    assert (fw.code, bw.code) == (tfw.code, tbw.code)
    assert fxcut.partition_counts() == {"verified": 1}


# ------------------------------------------------------------ 7. "verified" means torch ran


@pytest.mark.parametrize("binding", ["partial", "lambda", "wrapper"])
def test_verify_runs_torchs_own_partitioner_whatever_its_name_is_bound_to(
    monkeypatch: pytest.MonkeyPatch, binding: str
) -> None:
    ours = fxcut.min_cut_rematerialization_partition

    @functools.wraps(TORCH_MIN_CUT)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return ours(*args, **kwargs)

    fn = {"partial": functools.partial(ours, verify=False), "lambda": lambda *a, **k: ours(*a, **k),
          "wrapper": wrapper}[binding]
    _rebind(monkeypatch, fn)
    cuts: list[int] = []
    real_cut = tp.solve_min_cut
    monkeypatch.setattr(tp, "solve_min_cut", lambda *a, **k: cuts.append(1) or real_cut(*a, **k))
    ours(small_graphs.mm_relu_joint(), None, num_fwd_outputs=1, verify=True)
    assert cuts == [1], "torch's own partitioner must have decided the reference"
    assert fxcut.partition_counts() == {"verified": 1}


# ------------------------------------------------------------ 8. a failing fallback


def test_the_graph_is_restored_when_the_fallback_to_torch_fails_too() -> None:
    gm = tangent_output_joint(dead=True)
    before = State.of(gm)
    with pytest.warns(fxcut.FallbackWarning), pytest.raises(AssertionError, match="invalid, but is output"):
        fxcut.min_cut_rematerialization_partition(gm, None, num_fwd_outputs=2)
    before.assert_same(gm)
    theirs = tangent_output_joint(dead=True)
    with pytest.raises(AssertionError):
        TORCH_MIN_CUT(theirs, None, num_fwd_outputs=2)
    assert len(theirs.graph.nodes) < len(gm.graph.nodes), "torch's own partitioner changed its graph"


