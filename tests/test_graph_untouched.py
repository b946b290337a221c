"""The user's module is left exactly as it was on every error (issue 12, item 3).

Each exception path of ``fxcut.min_cut_rematerialization_partition``, of the
ZeRO-3 walk and of its wrapper: the same graph object, the same node objects
in the same order, each node's op, target, args, kwargs and users order, the
same meta dict with the same keys bound to the same objects, the same
generated code -- including paths that fail only after dead-code elimination
and CSE have been applied (Python's compiler, torch's module extraction,
torch's partitioner in the fallback path).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.fx as fx
from torch._functorch import config
from torch._functorch import partitioners as tp

import fxcut
import small_graphs
import fxcut.extract
import fxcut.partition as fxp
from fxcut import zero3

aten = torch.ops.aten


def _meta(shape: tuple[int, ...] = (4, 4)) -> torch.Tensor:
    return torch.empty(shape, device="meta")


def _joint(dead: bool = True, duplicate: bool = True) -> fx.GraphModule:
    """x @ w -> relu -> grads, with a dead node and a CSE duplicate, so that
    dead-code elimination and CSE both change the graph."""
    return small_graphs.mm_relu_joint(dead=dead, duplicate=duplicate)


def _node(gm: fx.GraphModule, name: str) -> fx.Node:
    return next(n for n in gm.graph.nodes if n.name == name)


@dataclasses.dataclass
class State:
    graph: fx.Graph
    nodes: list[fx.Node]
    rows: list[tuple[Any, ...]]
    metas: list[tuple[dict[str, Any], dict[str, Any]]]
    code: str
    graph_code: str | None

    @classmethod
    def of(cls, gm: fx.GraphModule) -> "State":
        graph = gm.graph
        nodes = list(graph.nodes)
        rows = [(n.op, n.name, n.target, n.args, n.kwargs, tuple(n.users)) for n in nodes]
        metas = [(n.meta, dict(n.meta) if isinstance(n.meta, dict) else {"not a dict": n.meta}) for n in nodes]
        try:
            graph_code: str | None = graph.python_code("self").src
        except Exception:
            graph_code = None
        return cls(graph, nodes, rows, metas, gm.code, graph_code)

    def assert_same(self, gm: fx.GraphModule) -> None:
        assert gm.graph is self.graph
        nodes = list(gm.graph.nodes)
        assert len(nodes) == len(self.nodes) and all(a is b for a, b in zip(nodes, self.nodes))
        assert gm.graph._len == len(nodes)
        rows = [(n.op, n.name, n.target, n.args, n.kwargs, tuple(n.users)) for n in nodes]
        assert rows == self.rows
        for n, (meta, items) in zip(nodes, self.metas):
            assert n.meta is meta, n.name
            if not isinstance(meta, dict):
                continue
            assert n.meta.keys() == items.keys(), n.name
            assert all(n.meta[k] is v for k, v in items.items()), n.name
        assert gm.code == self.code
        if self.graph_code is not None:
            assert gm.graph.python_code("self").src == self.graph_code
        gm.graph.lint()


def check(gm: fx.GraphModule, call: Callable[[fx.GraphModule], Any], exc: type[BaseException], match: str | None) -> None:
    before = State.of(gm)
    with pytest.raises(exc, match=match):
        call(gm)
    before.assert_same(gm)


def partition(gm: fx.GraphModule, **kwargs: Any) -> Any:
    """fxcut's own partition, unguarded: the public entry hands a graph that
    fxcut fails on for a gap of its own (ImportError, KeyError, ...) to
    torch's partitioner instead (fxcut.guard; tested below)."""
    kwargs.setdefault("num_fwd_outputs", 1)
    return fxp._partition(gm, None, **kwargs)


def test_the_graph_is_rewritten_on_success_as_torch_rewrites_it() -> None:
    """The baseline: a successful partition applies DCE and CSE to the
    module (as torch's does), so the failure tests below test something."""
    gm, theirs_gm = _joint(), _joint()
    ours = partition(gm)
    theirs = tp.min_cut_rematerialization_partition(theirs_gm, None, num_fwd_outputs=1)
    names = [n.name for n in gm.graph.nodes]
    assert names == [n.name for n in theirs_gm.graph.nodes]
    assert "neg_default" not in names and gm.code == theirs_gm.code
    assert ours[0].code == theirs[0].code and ours[1].code == theirs[1].code


def test_a_syntax_error_from_a_deeply_nested_argument_leaves_the_module() -> None:
    """Python's compiler rejects the 250-deep literal only when the module
    is recompiled after DCE/CSE."""
    gm = _joint()
    nested: Any = 0
    for _ in range(250):
        nested = [nested]
    grad = _node(gm, "threshold_backward_default")
    grad.args = (grad.args[0], grad.args[1], nested)
    check(gm, partition, SyntaxError, "nested")


def test_a_failing_module_extraction_leaves_the_module(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("extraction failed")

    monkeypatch.setattr(tp, "_extract_fwd_bwd_modules", fail)  # torch's passes
    monkeypatch.setattr(fxcut.extract, "build_modules", fail)  # fxcut's own builder
    check(_joint(), partition, RuntimeError, "extraction failed")


def test_a_failing_activation_offloading_import_leaves_the_module(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail() -> Any:
        raise ImportError("no offloading here")

    monkeypatch.setattr(fxp, "_offloading_pass", fail)
    with config.patch(enable_activation_offloading=True):
        check(_joint(), partition, ImportError, "no offloading here")


def test_a_failing_activation_offloading_pass_leaves_the_module(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch._functorch._activation_offloading.activation_offloading as ao

    def fail(*args: Any) -> None:
        raise RuntimeError("offloading failed")

    monkeypatch.setattr(ao, "enable_activation_offloading", fail)
    with config.patch(enable_activation_offloading=True):
        check(_joint(), partition, RuntimeError, "offloading failed")


def _output_only() -> fx.GraphModule:
    g = fx.Graph()
    g.output(())
    return fx.GraphModule(torch.nn.Module(), g)


def test_a_graph_with_only_an_output_node_fails_as_torchs_and_is_left() -> None:
    with pytest.raises(AssertionError) as theirs:
        tp.min_cut_rematerialization_partition(_output_only(), None, num_fwd_outputs=0)
    check(_output_only(), lambda gm: partition(gm, num_fwd_outputs=0), AssertionError, str(theirs.value))


def test_a_graph_of_dead_code_and_an_empty_output_partitions_as_torchs() -> None:
    def make() -> fx.GraphModule:
        g = fx.Graph()
        x = g.placeholder("primals_1")
        x.meta["val"] = _meta()
        neg = g.call_function(aten.neg.default, (x,))
        neg.meta["val"] = _meta()
        g.output(())
        return fx.GraphModule(torch.nn.Module(), g)

    fw, bw = partition(make(), num_fwd_outputs=0)
    tfw, tbw = tp.min_cut_rematerialization_partition(make(), None, num_fwd_outputs=0)
    assert (fw.code, bw.code) == (tfw.code, tbw.code)


def _conflicting_with_dead_code() -> fx.GraphModule:
    """Unsatisfiable tags (torch raises after its DCE and CSE), plus dead code."""
    return small_graphs.conflicting_joint(dead=True)


def test_a_failure_in_the_fallback_to_torchs_partitioner_leaves_the_module(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """torch's partitioner eliminates dead code in place and swaps in its
    CSE graph before it fails; fxcut puts the module back."""
    def use_torch(*args: Any, **kwargs: Any) -> Any:
        raise fxp._UseTorch("a shape the classification does not model")

    monkeypatch.setattr(fxp, "plan_partition", use_torch)
    check(_conflicting_with_dead_code(), partition, RuntimeError, ".")


def test_the_fallback_to_torchs_partitioner_succeeds_as_torchs(monkeypatch: pytest.MonkeyPatch) -> None:
    def use_torch(*args: Any, **kwargs: Any) -> Any:
        raise fxp._UseTorch("a shape the classification does not model")

    monkeypatch.setattr(fxp, "plan_partition", use_torch)
    fw, bw = partition(_joint())
    tfw, tbw = tp.min_cut_rematerialization_partition(_joint(), None, num_fwd_outputs=1)
    assert (fw.code, bw.code) == (tfw.code, tbw.code)


def test_an_unsatisfiable_decision_leaves_the_module() -> None:
    check(_conflicting_with_dead_code(), partition, fxcut.InfiniteCutError, "chain of nodes")


def test_a_keyboard_interrupt_during_extraction_leaves_the_module(monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupt(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(tp, "reordering_to_mimic_autograd_engine", interrupt)  # torch's passes
    monkeypatch.setattr(fxcut.extract, "build_modules", interrupt)  # fxcut's own builder
    check(_joint(), partition, KeyboardInterrupt, None)


def test_a_failure_in_a_subgraph_module_is_undone_there_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """Dead-code elimination recurses into subgraph modules named by get_attr."""
    gm = _joint()
    sg = fx.Graph()
    a = sg.placeholder("a")
    sg.call_function(aten.neg.default, (a,))  # dead in the subgraph
    sg.output(a)
    sub = fx.GraphModule(torch.nn.Module(), sg)
    gm.add_submodule("body", sub)
    with gm.graph.inserting_before(_node(gm, "mm_default")):
        gm.graph.get_attr("body")
    gm.recompile()
    sub_before = State.of(sub)

    def fail(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("extraction failed")

    monkeypatch.setattr(tp, "_extract_fwd_bwd_modules", fail)
    monkeypatch.setattr(fxcut.extract, "build_modules", fail)
    check(gm, partition, RuntimeError, "extraction failed")
    sub_before.assert_same(sub)


# ---------------------------------------------------------------- ZeRO-3 walk


def _walk_graph() -> fx.GraphModule:
    """A parameter cast and viewed in forward (two nodes the walk tags)."""
    g = fx.Graph()
    x = g.placeholder("primals_1")
    x.meta["val"] = _meta()
    w = g.placeholder("primals_2")
    w.meta["val"] = _meta()
    t = g.placeholder("tangents_1")
    t.meta["val"] = _meta()
    cast = g.call_function(torch.ops.prims.convert_element_type.default, (w, torch.bfloat16))
    cast.meta["val"] = _meta()
    view = g.call_function(aten.t.default, (cast,))
    view.meta["val"] = _meta()
    mm = g.call_function(aten.mm.default, (x, view))
    mm.meta["val"] = _meta()
    gx = g.call_function(aten.mm.default, (t, view))
    gx.meta["val"] = _meta()
    g.output((mm, gx, None))
    return fx.GraphModule(torch.nn.Module(), g)


def test_the_walk_tags_the_aliases_on_success() -> None:
    gm = _walk_graph()
    tagged = zero3.recompute_param_aliases(gm.graph, [(1, 0, (4, 4))])
    assert [n.name for n in tagged] == ["convert_element_type_default", "t_default"]


def test_the_walk_fails_on_a_meta_that_is_not_a_dict_before_writing() -> None:
    gm = _walk_graph()
    _node(gm, "mm_default").meta = ["not", "a", "dict"]  # type: ignore[assignment]
    check(gm, lambda m: zero3.recompute_param_aliases(m.graph, [(1, 0, (4, 4))]), TypeError,
          r"node 'mm_default': meta is list, not a dict")


def test_the_wrapper_removes_the_walks_tags_when_the_inner_partitioner_fails() -> None:
    def reject(*args: Any, **kwargs: Any) -> Any:
        raise ValueError("inner partitioner rejects this input")

    wrapped = zero3.get_wrapped_partitioner(True, [(1, 0, (4, 4))], reject)
    check(_walk_graph(), lambda m: wrapped(m, None, num_fwd_outputs=1), ValueError, "rejects")


def test_the_wrapper_removes_the_walks_tags_when_fxcut_fails() -> None:
    gm = _walk_graph()
    _node(gm, "mm_default").meta["recompute"] = "MUST_SAVE"  # not a CheckpointPolicy
    wrapped = zero3.get_wrapped_partitioner(True, [(1, 0, (4, 4))])
    check(gm, lambda m: wrapped(m, None, num_fwd_outputs=1), fxcut.LoweringError, "CheckpointPolicy")


def test_the_public_entry_hands_an_fxcut_gap_to_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Through fxcut.guard, an ImportError inside fxcut (a gap of fxcut's,
    not a bad input) falls back to torch's partitioner with one warning: the
    same modules torch builds from the untouched graph."""
    def fail() -> Any:
        raise ImportError("no offloading here")

    monkeypatch.setattr(fxp, "_offloading_pass", fail)
    with config.patch(enable_activation_offloading=True):
        with pytest.warns(fxcut.FallbackWarning, match="ImportError: no offloading here"):
            fw, bw = fxcut.min_cut_rematerialization_partition(_joint(), None, num_fwd_outputs=1)
        tfw, tbw = tp.min_cut_rematerialization_partition(_joint(), None, num_fwd_outputs=1)
    assert (fw.code, bw.code) == (tfw.code, tbw.code)
