"""Every row of docs/bad_input.md: a bad input, the exception it raises (type
and message pattern), and the user's graph left exactly as it was.

"As it was": the same node objects in the same order, each node's meta dict
with the same keys bound to the same objects, and the same generated code.
fxcut.min_cut_rematerialization_partition removes dead code first, as
torch's does, so its graphs here have none.
"""

from __future__ import annotations

import dataclasses
import operator
from array import array
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
import torch.fx as fx
from torch.utils.checkpoint import CheckpointPolicy

import fxcut
import fxcut.torchrules.versions
import small_graphs
from synthetic_arrays import DEFAULT_OPTIONS as OPTIONS
from fxcut import _C
from fxcut.torchrules import lower as torch_lower
from fxcut.torchrules.lower import LoweringError, lower_for_partition
from fxcut.solve.arrays import GraphArrays
from fxcut.torchrules.ops import default_facts
from fxcut.torchrules.options import min_cut_options
from fxcut.tools.decisions import decide_graph as decide

aten = torch.ops.aten

# ---------------------------------------------------------------------------
# graphs and snapshots


def _meta(shape: tuple[int, ...] = (4, 4)) -> torch.Tensor:
    return torch.empty(shape, device="meta")


def joint() -> fx.GraphModule:
    """x @ w -> relu (a forward output, needed by backward) -> grads; no dead code.

    nodes: 0 primals_1, 1 primals_2, 2 tangents_1, 3 mm_default,
    4 relu_default, 5 threshold_backward_default, 6 mm_default_1, 7 output
    """
    return small_graphs.mm_relu_joint()


def node(gm: fx.GraphModule, name: str) -> fx.Node:
    return next(n for n in gm.graph.nodes if n.name == name)


RELU = 4


def lower_graph(graph: fx.Graph) -> Any:
    """The graph array of ``graph`` as it is, lowered as the running torch's
    rules read it (the lowering itself, not the adapter's gated entry)."""
    return torch_lower.lower_graph(graph, fxcut.torchrules.versions.rules_or_nearest())


@dataclasses.dataclass
class Snapshot:
    nodes: list[fx.Node]
    metas: list[dict[str, Any]]
    code: str

    @classmethod
    def of(cls, graph: fx.Graph) -> "Snapshot":
        nodes = list(graph.nodes)
        return cls(nodes, [dict(n.meta) for n in nodes], graph.python_code("self").src)

    def assert_same(self, graph: fx.Graph) -> None:
        nodes = list(graph.nodes)
        assert len(nodes) == len(self.nodes) and all(a is b for a, b in zip(nodes, self.nodes))
        for n, before in zip(nodes, self.metas):
            assert n.meta.keys() == before.keys(), n.name
            assert all(n.meta[k] is before[k] for k in before), n.name
        assert graph.python_code("self").src == self.code


def check(
    make: Callable[[], fx.GraphModule],
    call: Callable[[fx.GraphModule], Any],
    exc: type[BaseException],
    match: str,
) -> BaseException:
    """call(make()) raises exactly `exc` matching `match`; the graph is unchanged."""
    gm = make()
    graph = gm.graph
    before = Snapshot.of(graph)
    code = gm.code
    with pytest.raises(exc, match=match) as info:
        call(gm)
    assert type(info.value) is exc, f"{type(info.value).__name__} is not exactly {exc.__name__}"
    assert gm.graph is graph
    before.assert_same(graph)
    assert gm.code == code
    return info.value


def partition(gm: fx.GraphModule, **kwargs: Any) -> Any:
    kwargs.setdefault("num_fwd_outputs", 1)
    return fxcut.min_cut_rematerialization_partition(gm, None, **kwargs)


def edited(make: Callable[[], fx.GraphModule], **changes: Callable[[GraphArrays], Any]):
    """A lowering of make()'s graph with some arrays replaced."""
    def lower(gm: fx.GraphModule) -> GraphArrays:
        arrays = lower_for_partition(gm.graph, default_facts(), impure_random=True,
                                     rules=fxcut.torchrules.versions.rules_or_nearest())
        return dataclasses.replace(arrays, **{k: f(arrays) for k, f in changes.items()})
    return lower


def set_at(field: str, index: int, value: int) -> Callable[[GraphArrays], array]:
    def f(arrays: GraphArrays) -> array:
        buf = array(getattr(arrays, field).typecode, getattr(arrays, field))
        buf[index] = value
        return buf
    return f


def c_decide(lower: Callable[[fx.GraphModule], Any], options: Any = OPTIONS, static: Any = None,
             dont_ban: Any = None, force: Any = None, fuse: tuple[Any, Any] | None = None,
             num_fwd_outputs: Any = 1, **extra: Any):
    def call(gm: fx.GraphModule) -> Any:
        arrays = lower(gm)
        fa, fb = fuse if fuse is not None else (None, None)
        return _C.partition_decide(arrays, options, num_fwd_outputs=num_fwd_outputs, static_lifetime=static,
                                   dont_ban=dont_ban, force_save=force, fuse_a=fa, fuse_b=fb, **extra)
    return call


def test_the_good_graph_partitions_and_is_left_alone_by_decide() -> None:
    gm = joint()
    before = Snapshot.of(gm.graph)
    assert decide(lower_graph(gm.graph), num_fwd_outputs=1).saved == [0, RELU]
    before.assert_same(gm.graph)
    fw, bw = partition(joint())
    assert "relu" in fw.code and "threshold_backward" in bw.code


# ---------------------------------------------------------------------------
# wrong types


def test_partition_of_a_graph_instead_of_a_module() -> None:
    check(joint, lambda gm: partition(gm.graph), TypeError, "joint_module must be a torch.fx.GraphModule, got Graph")


def test_partition_with_a_non_int_num_fwd_outputs() -> None:
    check(joint, lambda gm: partition(gm, num_fwd_outputs="1"), TypeError, "num_fwd_outputs must be an int")


def test_partition_with_num_fwd_outputs_past_the_outputs() -> None:
    check(joint, lambda gm: partition(gm, num_fwd_outputs=9), ValueError,
          r"num_fwd_outputs \(9\) must be between 0 and the graph's 3 outputs")


def test_decide_of_a_module_instead_of_a_graph() -> None:
    check(joint, lambda gm: decide(lower_graph(gm), num_fwd_outputs=1), TypeError, "expected a torch.fx.Graph, got GraphModule")


def test_zero3_walk_of_a_module_instead_of_a_graph() -> None:
    check(joint, lambda gm: fxcut.recompute_param_aliases(gm, [(0, 0, (4, 4))]), TypeError,
          "joint_graph must be a torch.fx.Graph, got GraphModule")


def test_c_core_given_an_object_without_the_arrays() -> None:
    check(joint, c_decide(lambda gm: gm.graph), TypeError, "graph arrays object has no attribute 'kind'")


def test_c_core_given_float_sizes() -> None:
    check(joint, c_decide(edited(joint, nbytes=lambda a: np.asarray(a.nbytes, dtype=np.float64))), TypeError,
          "nbytes must be a flat array of 8-byte integers, got format 'd'")


def test_c_core_given_a_strided_array() -> None:
    check(joint, c_decide(edited(joint, nbytes=lambda a: np.repeat(np.asarray(a.nbytes), 2)[::2])), TypeError,
          "nbytes must be a C-contiguous buffer")


def test_c_core_given_options_without_an_attribute() -> None:
    check(joint, c_decide(edited(joint), options=object()), TypeError,
          "options has no attribute 'ban_if_used_far_apart'")
    partial = type("Partial", (), {f.name: getattr(OPTIONS, f.name) for f in dataclasses.fields(OPTIONS)
                                   if f.name != "max_dist_from_bw"})()
    check(joint, c_decide(edited(joint), options=partial), TypeError, "options has no attribute 'max_dist_from_bw'")


# ---------------------------------------------------------------------------
# graph structure


def _cycle() -> fx.GraphModule:
    """mm_default (node 3) reads relu_default (node 4), defined after it."""
    gm = joint()
    mm = node(gm, "mm_default")
    mm.args = (node(gm, "primals_1"), node(gm, "relu_default"))
    return gm


def _foreign() -> fx.GraphModule:
    gm = joint()
    node(gm, "relu_default").args = (node(joint(), "mm_default"),)
    return gm


def test_partition_of_a_graph_edited_into_a_cycle() -> None:
    check(_cycle, partition, ValueError,
          r"node 3 uses node 4, which does not come before it .*cycle.* \[node 3 is 'mm_default'\]")


def test_decide_of_a_graph_edited_into_a_cycle() -> None:
    check(_cycle, lambda gm: decide(lower_graph(gm.graph), num_fwd_outputs=1), ValueError,
          r"node 3 uses node 4, which does not come before it .*cycle.* \[node 3 is 'mm_default'\]")


def test_zero3_walk_of_a_graph_edited_into_a_cycle() -> None:
    check(_cycle, lambda gm: fxcut.recompute_param_aliases(gm.graph, [(0, 0, (4, 4))]), ValueError,
          "node 3 uses node 4, which does not come before it")


def test_partition_of_a_graph_using_a_foreign_node() -> None:
    check(_foreign, partition, LoweringError, "node 'relu_default' uses 'mm_default', which is not in this graph")


def test_decide_of_a_graph_using_a_foreign_node() -> None:
    check(_foreign, lambda gm: decide(lower_graph(gm.graph), num_fwd_outputs=1), LoweringError,
          "node 'relu_default' uses 'mm_default', which is not in this graph")


def test_zero3_walk_of_a_graph_using_a_foreign_node() -> None:
    check(_foreign, lambda gm: fxcut.recompute_param_aliases(gm.graph, [(0, 0, (4, 4))]), LoweringError,
          "node 'relu_default' uses 'mm_default', which is not in this graph")


def _duplicate_name() -> fx.GraphModule:
    gm = joint()
    node(gm, "relu_default").name = "mm_default"
    return gm


def test_partition_of_a_graph_with_a_duplicate_node_name() -> None:
    check(_duplicate_name, partition, ValueError, "node name 'mm_default' is used by two nodes")


def test_decide_does_not_read_node_names() -> None:
    gm = _duplicate_name()
    before = Snapshot.of(gm.graph)
    assert decide(lower_graph(gm.graph), num_fwd_outputs=1).saved == [0, RELU]
    before.assert_same(gm.graph)


def test_c_core_given_an_index_out_of_range() -> None:
    e = check(joint, c_decide(edited(joint, in_idx=set_at("in_idx", 0, 99))), IndexError,
              r"in_idx\[0\] = 99 of node 3 is outside \[0, 8\)")
    assert e.node == 3  # type: ignore[attr-defined]


def test_c_core_given_a_forward_reference() -> None:
    check(joint, c_decide(edited(joint, arg_idx=set_at("arg_idx", 0, 5))), ValueError,
          "node 3 uses node 5, which does not come before it")


def test_c_core_given_a_decreasing_csr_pointer() -> None:
    check(joint, c_decide(edited(joint, in_ptr=set_at("in_ptr", 5, 0))), ValueError, r"in_ptr decreases at node 4 \(2 > 0\)")


def test_c_core_given_arrays_of_different_lengths() -> None:
    check(joint, c_decide(edited(joint, nbytes=lambda a: a.nbytes[:-1])), ValueError, "nbytes has 7 entries, expected 8")


def test_c_core_given_an_output_out_of_range() -> None:
    check(joint, c_decide(edited(joint, outputs=set_at("outputs", 0, 8))), IndexError,
          r"outputs\[0\] = 8 is outside \[-1, 8\)")


# ---------------------------------------------------------------------------
# parameter indices


def test_zero3_walk_with_a_parameter_index_past_the_primals() -> None:
    check(joint, lambda gm: fxcut.recompute_param_aliases(gm.graph, [(0, 0, (4, 4)), (5, 1, (4, 4))]), IndexError,
          r"param_indices\[1\]: arg_idx 5 is outside the graph's 2 primal placeholders")


def test_zero3_walk_with_a_negative_parameter_index() -> None:
    check(joint, lambda gm: fxcut.recompute_param_aliases(gm.graph, [(-1, 0, (4, 4))]), IndexError,
          r"param_indices\[0\]: arg_idx -1 is outside")


def test_zero3_walk_with_a_parameter_entry_that_is_not_a_triple() -> None:
    check(joint, lambda gm: fxcut.recompute_param_aliases(gm.graph, [0]), TypeError,
          r"param_indices\[0\] = 0 is not an \(arg_idx, ds_id, shape\) triple")


def test_zero3_walk_with_a_non_int_parameter_index() -> None:
    check(joint, lambda gm: fxcut.recompute_param_aliases(gm.graph, [("0", 0, (4, 4))]), TypeError,
          r"param_indices\[0\]: arg_idx '0' is not an int")


def test_zero3_wrapper_with_a_bad_parameter_index_fails_before_partitioning() -> None:
    fn = fxcut.get_wrapped_partitioner(True, [(7, 0, (4, 4))])
    check(joint, lambda gm: fn(gm, None, num_fwd_outputs=1), IndexError, "arg_idx 7 is outside")


def test_zero3_walk_of_a_graph_without_placeholders() -> None:
    def make() -> fx.GraphModule:
        g = fx.Graph()
        g.output(())
        return fx.GraphModule(torch.nn.Module(), g)
    check(make, lambda gm: fxcut.recompute_param_aliases(gm.graph, []), ValueError, "has no placeholders")


def test_c_walk_with_parameter_indices_out_of_range_or_not_placeholders() -> None:
    lower = edited(joint)
    e = check(joint, lambda gm: _C.param_alias_walk(lower(gm), array("i", [99])), IndexError,
              r"params\[0\] = 99 is outside \[0, 8\)")
    assert e.node == -1  # type: ignore[attr-defined]
    e = check(joint, lambda gm: _C.param_alias_walk(lower(gm), array("i", [3])), ValueError,
              r"params\[0\] = node 3 is not a placeholder")
    assert e.node == 3  # type: ignore[attr-defined]


def test_static_lifetime_indices_out_of_range_are_ignored_as_torch_does() -> None:
    gm = joint()
    before = Snapshot.of(gm.graph)
    plain = decide(lower_graph(gm.graph), num_fwd_outputs=1)
    ignored = decide(lower_graph(gm.graph), num_fwd_outputs=1, static_lifetime_input_indices=[-3, 2, 99])
    assert ignored.saved == plain.saved
    before.assert_same(gm.graph)


def test_c_core_given_forced_saves_and_fuse_pairs_out_of_range() -> None:
    lower = edited(joint)
    check(joint, c_decide(lower, force=array("i", [99])), IndexError, r"force_save\[0\] = 99 is outside \[0, 8\)")
    check(joint, c_decide(lower, fuse=(array("i", [1]), array("i", [-1]))), IndexError,
          r"fuse pair 0 = \(1, -1\) is outside \[0, 8\)")
    check(joint, c_decide(lower, fuse=(array("i", [1]), array("i", []))), ValueError, "fuse_b has 0 entries, expected 1")
    check(joint, c_decide(lower, static=bytes(3)), ValueError, "static_lifetime has 3 entries, expected 8")


def test_c_core_given_num_fwd_outputs_past_the_outputs() -> None:
    check(joint, c_decide(edited(joint), num_fwd_outputs=9), ValueError,
          r"num_fwd_outputs \(9\) must be between 0 and the number of outputs \(3\)")
    check(joint, c_decide(edited(joint), num_fwd_outputs=-1), ValueError,
          r"num_fwd_outputs \(-1\) must be between 0 and 2147483647")


# ---------------------------------------------------------------------------
# sizes


@pytest.mark.parametrize("value", [-2, -(2**63)])
def test_c_core_given_a_negative_size(value: int) -> None:
    e = check(joint, c_decide(edited(joint, nbytes=set_at("nbytes", RELU, value))), ValueError,
              rf"nbytes\[4\] = {value} is negative")
    assert e.node == RELU  # type: ignore[attr-defined]


@pytest.mark.parametrize("value", [2**62, 2**63 - 1])
def test_c_core_given_an_enormous_size(value: int) -> None:
    e = check(joint, c_decide(edited(joint, nbytes=set_at("nbytes", RELU, value))), OverflowError,
              rf"weight of node 4 \({value} bytes\) exceeds 2\^62")
    assert e.node == RELU  # type: ignore[attr-defined]


def test_decide_given_an_enormous_size_names_the_node() -> None:
    lower = edited(joint, nbytes=set_at("nbytes", RELU, 2**62))
    check(joint, lambda gm: decide(lower(gm), num_fwd_outputs=1), OverflowError,
          r"exceeds 2\^62 \[node 4 is 'relu_default'\]")


def test_large_sizes_below_the_limit_are_exact() -> None:
    gm = joint()
    arrays = edited(joint, nbytes=set_at("nbytes", RELU, 2**61))(gm)
    d = decide(arrays, num_fwd_outputs=1)
    assert d.saved == [0, RELU]
    assert d.cut_value == d.weight[0] + d.weight[RELU] and d.weight[RELU] > 2**61


def test_c_core_given_an_unknown_size_where_one_is_needed() -> None:
    check(joint, c_decide(edited(joint, nbytes=set_at("nbytes", RELU, _C.SIZE_UNKNOWN))), RuntimeError,
          "node 4 has no meta\\['val'\\] to size it")


def _without_val() -> fx.GraphModule:
    gm = joint()
    del node(gm, "relu_default").meta["val"]
    return gm


def _tensor_meta_only() -> fx.GraphModule:
    gm = joint()
    relu = node(gm, "relu_default")
    relu.meta["tensor_meta"] = relu.meta.pop("val")
    return gm


def _val(value: Any) -> Callable[[], fx.GraphModule]:
    def make() -> fx.GraphModule:
        gm = joint()
        node(gm, "relu_default").meta["val"] = value
        return gm
    return make


def _assert_core_chain(e: BaseException) -> None:
    """The C core's exception itself, its attributes kept: ``chain`` the
    node indices of the path (as ``nodes``), ``node`` its first."""
    assert type(e) is _C.InfiniteCutError
    chain = e.chain  # type: ignore[attr-defined]
    nodes = e.nodes  # type: ignore[attr-defined]
    assert all(type(i) is int for i in chain) and len(chain) == len(nodes) >= 2
    assert e.node == chain[0]  # type: ignore[attr-defined]
    graph_nodes = list(nodes[0].graph.nodes)
    assert [graph_nodes.index(n) for n in nodes] == chain


def test_partition_of_a_needed_node_without_meta_val() -> None:
    e = check(_without_val, partition, fxcut.InfiniteCutError,
              r"relu_default \(call_function aten.relu.default\) \[no meta\['val'\]: cannot be saved\]")
    assert [n.name for n in e.nodes] == ["relu_default", "threshold_backward_default"]  # type: ignore[attr-defined]
    _assert_core_chain(e)


def test_partition_of_a_needed_node_with_tensor_meta_but_no_val() -> None:
    check(_tensor_meta_only, partition, RuntimeError,
          r"node 4 has no meta\['val'\] to size it \[node 4 is 'relu_default'\]")


def test_partition_of_a_needed_node_with_a_non_tensor_value() -> None:
    check(_val("hello"), partition, fxcut.InfiniteCutError, r"meta\['val'\] is str 'hello', not a tensor")


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_partition_of_a_needed_node_with_a_nan_or_inf_value(value: float) -> None:
    check(_val(value), partition, fxcut.InfiniteCutError, rf"meta\['val'\] is float {value}, not a tensor")


def test_partition_of_a_value_whose_size_overflows_int64() -> None:
    huge = torch.empty((), device="meta").expand(2**30, 2**30, 4)  # 2^64 bytes
    check(_val(huge), partition, LoweringError,
          r"node 'relu_default': meta\['val'\] takes 18446744073709551616 bytes, which does not fit a signed "
          r"64-bit size \(shape \(1073741824, 1073741824, 4\), torch.float32\)")


def test_partition_of_a_value_of_at_least_2_62_bytes() -> None:
    big = torch.empty((), device="meta", dtype=torch.uint8).expand(2**31, 2**31)  # 2^62 bytes
    check(_val(big), partition, OverflowError, r"exceeds 2\^62 \[node 4 is 'relu_default'\]")


# ---------------------------------------------------------------------------
# recompute tags


def _tagged(policy: Any, key: str = "recompute") -> Callable[[], fx.GraphModule]:
    def make() -> fx.GraphModule:
        gm = joint()
        node(gm, "relu_default").meta[key] = policy
        return gm
    return make


@pytest.mark.parametrize("policy", ["MUST_SAVE", 2, None.__class__])
def test_partition_with_an_unknown_recompute_tag(policy: Any) -> None:
    check(_tagged(policy), partition, LoweringError,
          r"node 'relu_default': meta\['recompute'\] = .* is not a torch.utils.checkpoint.CheckpointPolicy")


@pytest.mark.parametrize("value", ["1", 2**40, True])
def test_partition_with_a_bad_ac_graph_id(value: Any) -> None:
    check(_tagged(value, "ac_graph_id"), partition, LoweringError,
          r"node 'relu_default': meta\['ac_graph_id'\] = .* is not a 32-bit integer")


@pytest.mark.parametrize("value", [9, -2])
def test_c_core_given_an_unknown_tag(value: int) -> None:
    check(joint, c_decide(edited(joint, tag=set_at("tag", RELU, value))), ValueError,
          rf"tag\[4\] = {value} is not a recompute policy")


def _conflicting() -> fx.GraphModule:
    """A MUST_RECOMPUTE getitem of dropout: dropout is random (banned from
    recompute) and returns a tuple (cannot be saved)."""
    g = fx.Graph()
    x = g.placeholder("primals_1")
    x.meta["val"] = _meta()
    t = g.placeholder("tangents_1")
    t.meta["val"] = _meta()
    drop = g.call_function(aten.native_dropout.default, (x, 0.5, True))
    drop.meta["val"] = (_meta(), _meta())
    kept = g.call_function(operator.getitem, (drop, 0))
    kept.meta["val"] = _meta()
    kept.meta["recompute"] = CheckpointPolicy.MUST_RECOMPUTE
    out = g.call_function(aten.relu.default, (kept,))
    out.meta["val"] = _meta()
    grad = g.call_function(aten.mul.Tensor, (t, kept))
    grad.meta["val"] = _meta()
    g.output((out, grad))
    return fx.GraphModule(torch.nn.Module(), g)


def test_partition_with_conflicting_tags_names_the_chain() -> None:
    e = check(_conflicting, partition, fxcut.InfiniteCutError,
              r"the chain of nodes is: native_dropout_default .*\[its value is a tuple: cannot be saved\] -> "
              r"getitem .*\[MUST_RECOMPUTE\]")
    assert [n.name for n in e.nodes] == ["native_dropout_default", "getitem"]  # type: ignore[attr-defined]
    _assert_core_chain(e)


def test_decide_with_conflicting_tags_under_every_option_set() -> None:
    options = min_cut_options(fxcut.torchrules.versions.rules_or_nearest())
    for recompute_views in (False, True):
        opts = dataclasses.replace(options, recompute_views=recompute_views)
        check(_conflicting, lambda gm: decide(lower_graph(gm.graph), num_fwd_outputs=1, options=opts), fxcut.InfiniteCutError,
              "native_dropout_default")


# ---------------------------------------------------------------------------
# the max-flow entry point


def test_min_cut_bad_networks() -> None:
    t, h = array("i", [0, 1]), array("i", [1, 2])
    with pytest.raises(IndexError, match=r"source value \(9\) must be between 0 and 2"):
        _C.min_cut(3, t, h, array("q", [1, 1]), 9, 2)
    with pytest.raises(ValueError, match=r"cap\[1\] value \(-5\) of edge 1 -> 2 must be >= 0"):
        _C.min_cut(3, t, h, array("q", [1, -5]), 0, 2)
    with pytest.raises(IndexError, match=r"head\[1\] value \(7\) must be between 0 and 2"):
        _C.min_cut(3, t, array("i", [1, 7]), array("q", [1, 1]), 0, 2)
    with pytest.raises(ValueError, match="source and sink must be different vertices"):
        _C.min_cut(3, t, h, array("q", [1, 1]), 1, 1)
    with pytest.raises(fxcut.InfiniteCutError, match=r"joined by a path of 2 infinite-capacity edges.*0 -> 1 -> 2"):
        _C.min_cut(3, t, h, array("q", [-1, -1]), 0, 2)
    with pytest.raises(ValueError, match="algorithm must be"):
        _C.min_cut(3, t, h, array("q", [1, 1]), 0, 2, 7)
    with pytest.raises(ValueError, match="n_vertices must be between 1 and"):
        _C.min_cut(0, t, h, array("q", [1, 1]), 0, 2)


# ---------------------------------------------------------------------------
# the binding: options by attribute, conversions that keep the real error,
# sequences and buffers the caller can change during a call


def test_c_core_given_keep_network_out_of_range() -> None:
    for value in (3, -1, 256):
        check(joint, c_decide(edited(joint), keep_network=value), ValueError,
              rf"keep_network \(KEEP_NONE, KEEP_NETWORK or KEEP_BUILD_ONLY\) \({value}\) must be between 0 and 2")
    check(joint, c_decide(edited(joint), keep_network="1"), TypeError, "keep_network .* must be an integer, got str")


def test_c_core_given_an_option_that_is_not_an_integer() -> None:
    check(joint, c_decide(edited(joint), options=dataclasses.replace(OPTIONS, max_dist_from_bw=1.5)), TypeError,
          r"options.max_dist_from_bw must be an integer, got float")
    e = check(joint, c_decide(edited(joint), options=dataclasses.replace(OPTIONS, max_dist_from_bw=10**400)),
              OverflowError, r"options.max_dist_from_bw \(1000000000.*\) must be between")
    assert "got int" not in str(e)
    check(joint, c_decide(edited(joint), num_fwd_outputs=10**400), OverflowError,
          r"num_fwd_outputs \(1000000000.*\) must be between 0 and 2147483647")


class _Interrupting:
    """A graph arrays object (or options) whose attribute `name` raises
    KeyboardInterrupt when read; every other attribute is the wrapped one's."""

    def __init__(self, wrapped: Any, name: str) -> None:
        self._wrapped = wrapped
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        if attr == self._name:
            raise KeyboardInterrupt(f"reading {attr}")
        return getattr(self._wrapped, attr)


def test_c_core_keeps_an_exception_a_getter_raises() -> None:
    """Only a missing attribute is reported as missing; a KeyboardInterrupt
    (or any other error) from a getter is raised as it is."""
    for field in ("kind", "in_idx"):
        e = check(joint, c_decide(lambda gm, f=field: _Interrupting(edited(joint)(gm), f)), KeyboardInterrupt,
                  f"reading {field}")
        assert type(e) is KeyboardInterrupt
    e = check(joint, c_decide(edited(joint), options=_Interrupting(OPTIONS, "recompute_views")), KeyboardInterrupt,
              "reading recompute_views")
    assert type(e) is KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt, match="reading kind"):
        _C.validate(_Interrupting(lower_for_partition(joint().graph, default_facts(), impure_random=True,
                                                     rules=fxcut.torchrules.versions.rules_or_nearest()), "kind"))


def test_c_core_given_a_released_memoryview() -> None:
    def released(a: GraphArrays) -> memoryview:
        view = memoryview(a.nbytes)
        view.release()
        return view

    e = check(joint, c_decide(edited(joint, nbytes=released)), ValueError, "released memoryview")
    assert "contiguous" not in str(e)


def test_c_readers_given_a_config_with_a_field_missing_or_ill_typed() -> None:
    """The C readers read their config by name: an object without a field,
    or with one of the wrong kind, is a TypeError naming the field (a
    missing one with the AttributeError as its cause), a bit set outside
    64 bits a ValueError; a getter's own exception is kept.  The graph is
    only read.  (_C.cse_key and _C.prepare_plan: tests/test_prepare.py.)"""
    import types

    from fxcut.torchrules.lower import _NodeFacts, _ValueFacts

    facts = default_facts()
    config = _NodeFacts(facts, _ValueFacts(facts, True, fxcut.torchrules.versions.rules_or_nearest()), True).reader_config()
    gm = joint()
    before = Snapshot.of(gm.graph)
    nodes = list(gm.graph.nodes)
    fields = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}

    def without(name: str) -> types.SimpleNamespace:
        return types.SimpleNamespace(**{k: v for k, v in fields.items() if k != name})

    with pytest.raises(TypeError, match=r"lower_read: config has no field 'kind_of_op' \(a dict\), got object") as e:
        _C.lower_read(nodes, None, object())
    assert isinstance(e.value.__cause__, AttributeError)
    with pytest.raises(TypeError, match="lower_read: config has no field 'mutable_bit'"):
        _C.lower_read(nodes, None, without("mutable_bit"))
    for name, value, kind in [("slow", None, "callable"), ("special_targets", [], "a tuple"),
                              ("node_cls", 3, "a type"),
                              ("kind_of_op", [], "a dict"), ("slow_bits", True, r"an int \(a bit set\)"),
                              ("impure_bits", 1.0, r"an int \(a bit set\)")]:
        with pytest.raises(TypeError, match=f"lower_read: config field '{name}' must be {kind}, got "):
            _C.lower_read(nodes, None, dataclasses.replace(config, **{name: value}))
    with pytest.raises(ValueError, match=r"config field 'impure_bits' \(-1\) must be a bit set in \[0, 2\*\*64\)"):
        _C.lower_read(nodes, None, dataclasses.replace(config, impure_bits=-1))
    with pytest.raises(KeyboardInterrupt, match="reading slow"):
        _C.lower_read(nodes, None, _Interrupting(config, "slow"))
    before.assert_same(gm.graph)


class _ClearsList:
    """A number whose conversion empties the list holding it (and, with
    `bad`, then returns no float at all): once the list's last reference to
    it is gone, the item itself is freed on return."""

    def __init__(self, victim: list[Any], value: Any) -> None:
        self.victim = victim
        self.value = value

    def __float__(self) -> Any:
        self.victim.clear()
        return self.value


def test_c_knapsack_given_an_item_that_empties_its_list() -> None:
    """Before the fix: a read past the emptied list (segfault) / of the freed
    item (heap-use-after-free under ASan).  Now the list is copied first."""
    memory: list[Any] = [0.25, 0.5, 0.125]
    memory.insert(1, _ClearsList(memory, 0.375))
    runtime = [3.0, 2.0, 1.0, 2.5]
    got = _C.knapsack(memory, runtime, 0.5, "dp")
    want = _C.knapsack([0.25, 0.375, 0.5, 0.125], runtime, 0.5, "dp")
    assert memory == []
    assert (list(got.save), list(got.order), got.value) == (list(want.save), list(want.order), want.value)
    assert list(got.save) == [1, 0, 0, 1]

    runtime2: list[Any] = [1.0, 2.0]
    runtime2.append(_ClearsList(runtime2, "not a float"))
    with pytest.raises(TypeError, match=r"runtime\[2\] must be a number, got _ClearsList") as info:
        _C.knapsack([0.1, 0.2, 0.3], runtime2, 0.5, "greedy")
    assert type(info.value.__cause__) is TypeError and "__float__ returned non-float" in str(info.value.__cause__)
    assert runtime2 == []


def test_c_knapsack_given_an_int_too_large_for_a_float() -> None:
    with pytest.raises(OverflowError, match=r"runtime\[1\] \(int\) is too large for a float64") as info:
        _C.knapsack([0.1, 0.2], [1.0, 10**400], 0.5, "dp")
    assert type(info.value.__cause__) is OverflowError
    with pytest.raises(TypeError, match=r"memory\[0\] must be a number, got str"):
        _C.knapsack(["x"], [1.0], 0.5, "dp")
    with pytest.raises(TypeError, match="memory must be a sequence of numbers, got int"):
        _C.knapsack(3, [1.0], 0.5, "dp")


# ---------------------------------------------------------------------------
# issue 12, item 6: errors that name the problem


def test_partition_of_an_empty_graph() -> None:
    check(lambda: fx.GraphModule(torch.nn.Module(), fx.Graph()), lambda gm: partition(gm, num_fwd_outputs=0),
          ValueError, "graph is empty")


def test_partition_of_a_graph_that_does_not_end_in_an_output() -> None:
    def make() -> fx.GraphModule:
        gm = joint()
        gm.graph.output_node()._remove_from_list()  # as a careless edit would leave it
        gm.graph._len -= 1
        return gm

    check(make, partition, ValueError, "does not end in an output node")


def test_partition_of_a_node_whose_op_is_not_an_fx_op() -> None:
    gm = joint()
    code = gm.code
    nodes = list(gm.graph.nodes)
    nodes[RELU].op = "bogus"
    with pytest.raises(ValueError, match=r"node 4 \('relu_default'\) has op 'bogus', which is not an fx op"):
        partition(gm)
    assert list(gm.graph.nodes) == nodes and gm.code == code


def _string_target() -> fx.GraphModule:
    gm = joint()
    node(gm, "relu_default").target = "relu"
    return gm


def test_partition_of_a_call_function_with_a_string_target() -> None:
    gm = _string_target()  # (fx's own code generator rejects it with an AssertionError)
    code = gm.code
    nodes = [(n, n.args, dict(n.meta)) for n in gm.graph.nodes]
    with pytest.raises(TypeError, match=r"node 4 \('relu_default'\) is a call_function whose target 'relu' "
                                        "is not callable"):
        partition(gm)
    assert [(n, n.args, dict(n.meta)) for n in gm.graph.nodes] == nodes and gm.code == code


@pytest.mark.parametrize("indices", [["0"], [0.5], [None], [True]])
def test_partition_with_non_int_static_lifetime_indices(indices: list[Any]) -> None:
    check(joint, lambda gm: partition(gm, static_lifetime_input_indices=indices), TypeError,
          r"static_lifetime_input_indices\[0\] = .* is not an int")


def test_partition_with_static_lifetime_indices_not_a_list() -> None:
    check(joint, lambda gm: partition(gm, static_lifetime_input_indices=5), TypeError,
          "static_lifetime_input_indices must be a list of ints, got int")


@pytest.mark.parametrize("value, exc, match", [
    ("3", TypeError, "max_dist_from_bw must be an int, got str '3'"),
    (None, TypeError, "max_dist_from_bw must be an int, got NoneType"),
    (float("nan"), ValueError, "max_dist_from_bw must be a finite number, got nan"),
])
def test_partition_with_a_max_dist_from_bw_that_is_not_an_int(value: Any, exc: type, match: str) -> None:
    from torch._functorch import config

    with config.patch(max_dist_from_bw=value):
        check(joint, partition, exc, match)
        check(joint, lambda gm: decide(lower_graph(gm.graph), num_fwd_outputs=1), exc, match)


def test_partition_with_a_float_max_dist_from_bw_decides_as_torch() -> None:
    from torch._functorch import config
    from torch._functorch.partitioners import min_cut_rematerialization_partition as torch_partition

    with config.patch(max_dist_from_bw=2.5):
        fw, bw = partition(joint())
        tfw, tbw = torch_partition(joint(), None, num_fwd_outputs=1)
    assert (fw.code, bw.code) == (tfw.code, tbw.code)


def test_partition_with_a_nan_region_budget_names_the_region() -> None:
    import torch.fx.traceback as fx_traceback

    key = getattr(fx_traceback, "MEMORY_BUDGET_ANNOTATION_KEY", "_region_activation_memory_budget")

    def make() -> fx.GraphModule:
        gm = joint()
        for n in gm.graph.nodes:
            n.meta["custom"] = {key: float("nan")}
        return gm

    if not fxcut.torchrules.versions.rules_or_nearest().region_memory_budgets:
        # torch 2.12 has no region budgets: the annotation means nothing,
        # to torch and to fxcut alike.
        from torch._functorch.partitioners import min_cut_rematerialization_partition as torch_partition

        fw, bw = partition(make())
        tfw, tbw = torch_partition(make(), None, num_fwd_outputs=1)
        assert (fw.code, bw.code) == (tfw.code, tbw.code)
        return
    err = check(make, partition, ValueError,
                r"region_activation_memory_budget: the region budget nan \(meta\['custom'\] of node 'primals_1'\)")
    assert "config" not in str(err) and "activation_memory_budget must" not in str(err)


def test_memory_pareto_given_a_graph() -> None:
    gm = joint()
    with pytest.raises(TypeError, match="joint_module must be a torch.fx.GraphModule, got Graph"):
        fxcut.memory_pareto(gm.graph, 1)


@pytest.mark.parametrize("path, exc, match", [
    ("/nonexistent-dir/pareto.png", ValueError, "plot '/nonexistent-dir/pareto.png': directory '/nonexistent-dir' does not exist"),
    ("", ValueError, "plot: the path is empty"),
    (".", ValueError, "plot '.' is a directory"),
    (3, TypeError, "plot must be a path"),
])
def test_memory_pareto_checks_the_plot_path_before_the_sweep(
    monkeypatch: pytest.MonkeyPatch, path: Any, exc: type, match: str
) -> None:
    import fxcut.route.plan

    calls = []
    monkeypatch.setattr(fxcut.route.plan, "budget_pass", lambda *a, **k: calls.append(1))
    check(joint, lambda gm: fxcut.memory_pareto(gm, 1, plot=path), exc, match)
    assert calls == []
