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
import fxcut.torchrules.extract
import fxcut.partition as fxp
import fxcut.torchrules.build
from fxcut.route import guard
from fxcut.torchrules.gate import TorchChanged
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
    """fxcut's route behind its guard, with fxcut's own gaps (ImportError,
    KeyError, ...) raised instead of handed to torch's partitioner (that
    hand-off is tested below and in test_route_defects.py)."""
    kwargs.setdefault("num_fwd_outputs", 1)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(guard, "FXCUT_GAPS", ())
        return fxcut.min_cut_rematerialization_partition(gm, None, **kwargs)


def _conflicting_with_dead_code() -> fx.GraphModule:
    """Unsatisfiable tags (torch raises after its DCE and CSE), plus dead code."""
    return small_graphs.conflicting_joint(dead=True)


def _use_torch(*args: Any, **kwargs: Any) -> Any:
    raise NotImplementedError("a shape the classification does not model")


def test_a_failure_in_the_fallback_to_torchs_partitioner_leaves_the_module(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """torch's partitioner eliminates dead code in place and swaps in its
    CSE graph before it fails; fxcut puts the module back."""
    monkeypatch.setattr(fxp, "make_plan", _use_torch)
    monkeypatch.setattr(guard, "_warned", set())
    with pytest.warns(fxcut.FallbackWarning, match="does not model"):
        check(_conflicting_with_dead_code(),
              lambda gm: fxcut.min_cut_rematerialization_partition(gm, None, num_fwd_outputs=1), RuntimeError, ".")


def test_the_fallback_to_torchs_partitioner_succeeds_as_torchs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fxp, "make_plan", _use_torch)
    monkeypatch.setattr(guard, "_warned", set())
    with pytest.warns(fxcut.FallbackWarning, match="does not model"):
        fw, bw = fxcut.min_cut_rematerialization_partition(_joint(), None, num_fwd_outputs=1)
    tfw, tbw = tp.min_cut_rematerialization_partition(_joint(), None, num_fwd_outputs=1)
    assert (fw.code, bw.code) == (tfw.code, tbw.code)


def test_an_unsatisfiable_decision_leaves_the_module() -> None:
    check(_conflicting_with_dead_code(), partition, fxcut.InfiniteCutError, "chain of nodes")


def test_a_keyboard_interrupt_during_extraction_leaves_the_module(monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupt(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(tp, "reordering_to_mimic_autograd_engine", interrupt)  # torch's passes
    monkeypatch.setattr(fxcut.torchrules.extract, "build_modules", interrupt)  # fxcut's own builder
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
    monkeypatch.setattr(fxcut.torchrules.extract, "build_modules", fail)
    # a failure inside fxcut's copy of torch's module builder is a gap
    # (TorchChanged, the builder's error its cause), raised here with the gaps unhandled
    check(gm, partition, TorchChanged, "module builder .*RuntimeError: extraction failed")
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
    """Through fxcut.route.guard, an ImportError inside fxcut (a gap of fxcut's,
    not a bad input) falls back to torch's partitioner with one warning: the
    same modules torch builds from the untouched graph."""
    def fail(rules: Any) -> Any:
        raise ImportError("no offloading here")

    monkeypatch.setattr(fxcut.torchrules.build, "offloading_pass", fail)
    with config.patch(enable_activation_offloading=True):
        with pytest.warns(fxcut.FallbackWarning, match="ImportError: no offloading here"):
            fw, bw = fxcut.min_cut_rematerialization_partition(_joint(), None, num_fwd_outputs=1)
        tfw, tbw = tp.min_cut_rematerialization_partition(_joint(), None, num_fwd_outputs=1)
    assert (fw.code, bw.code) == (tfw.code, tbw.code)
