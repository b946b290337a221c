"""fxcut's DeepCompile ZeRO-3 API: the parameter-alias walk, its op facts,
the partition_fn wrapper, and its handling of bad input.

The walk is checked three ways: against an independent pure-Python
statement of the rule (tests/reference_walk.py) on random fx graphs, on
DeepSpeed's own unit-test cases, and on hand-built graphs that pin single
rules (transitivity, positional-only, casts, ac_graph_id).
"""

from __future__ import annotations

import copy
import functools
import operator
from typing import Any

import pytest
import torch
import torch.fx as fx
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from torch.utils.checkpoint import CheckpointPolicy

import fxcut
from fxcut import get_no_copy_ops, get_wrapped_partitioner, is_cast_op, recompute_param_aliases
from reference_walk import reference_param_alias_walk

aten = torch.ops.aten
prims = torch.ops.prims
MUST_RECOMPUTE = CheckpointPolicy.MUST_RECOMPUTE
MUST_SAVE = CheckpointPolicy.MUST_SAVE


# ---------------------------------------------------------------------------
# helpers


def metas(graph: fx.Graph) -> list[tuple[str, dict[str, Any]]]:
    return [(node.name, dict(node.meta)) for node in graph.nodes]


def snapshot(graph: fx.Graph) -> tuple[list[fx.Node], list[dict[str, Any]], str]:
    nodes = list(graph.nodes)
    return nodes, [copy.copy(node.meta) for node in nodes], str(graph)


def assert_unchanged(graph: fx.Graph, before: tuple[list[fx.Node], list[dict[str, Any]], str]) -> None:
    nodes, meta_copies, text = before
    assert list(graph.nodes) == nodes
    assert [node.meta for node in graph.nodes] == meta_copies
    assert str(graph) == text


# ---------------------------------------------------------------------------
# differential test against the reference walk on random graphs

# Targets the random graphs use.  The aliasing ones are in DeepCompile's
# default no-copy set; the others are not (test_default_no_copy_set_* pins
# both claims, so the reference can use this hand-written membership).
ALIASING = {
    "view": aten.view.default,
    "t": aten.t.default,
    "permute": aten.permute.default,
    "expand": aten.expand.default,
    "unsqueeze": aten.unsqueeze.default,
    "alias": aten.alias.default,
    "detach": aten.detach.default,
    "add_": aten.add_.Tensor,
}
NOT_ALIASING = {
    "neg": aten.neg.default,
    "add": aten.add.Tensor,
    "mm": aten.mm.default,
    "split": aten.split.Tensor,
    "getitem": operator.getitem,
    "to_copy": aten._to_copy.default,
    "convert": prims.convert_element_type.default,
}
TARGETS = {**ALIASING, **NOT_ALIASING}
DEFAULT_SET_AMONG_TARGETS = frozenset(ALIASING.values())

POLICIES = list(CheckpointPolicy)
DTYPES = [torch.float16, torch.bfloat16, torch.float32]
PLACEHOLDER_ROLES = ["primals", "primals", "primals", "tangents", "fwd_seed", "fwd_base_offset",
                     "bwd_seed", "bwd_base_offset", "arg"]


NODE_REF = "node"


@functools.cache
def _node_ref(n_values: int, placeholders: tuple[int, ...]) -> st.SearchStrategy[tuple[str, int]]:
    # Besides any node: the last few nodes, so that chains of aliases form,
    # and the placeholders, so that parameters are used directly.
    anywhere = st.integers(0, n_values - 1)
    recent = st.integers(max(0, n_values - 3), n_values - 1)
    return st.tuples(st.just(NODE_REF), st.one_of(anywhere, recent, st.sampled_from(placeholders)))


_CONST = st.tuples(st.just("const"), st.sampled_from([0, 1, -1, 2.5, None, "s", torch.float16]))


@functools.cache
def _arg_spec(n_values: int, placeholders: tuple[int, ...]) -> st.SearchStrategy[Any]:
    """A Node (most often), a constant, or a list / tuple of those."""
    node = _node_ref(n_values, placeholders)
    nested = st.tuples(st.sampled_from(["list", "tuple"]), st.lists(st.one_of(node, _CONST), max_size=3))
    return st.one_of(node, node, _CONST, nested)


_META_PRESET = st.fixed_dictionaries(
    {},
    optional={
        "recompute": st.sampled_from(POLICIES),
        "ac_graph_id": st.integers(0, 5),
        "custom": st.integers(),
    },
)

# Aliasing targets are listed twice so that chains through them are common.
_TARGET_NAMES = st.sampled_from(sorted(TARGETS) + sorted(ALIASING) + ["convert", "to_copy"])
_TO_COPY_KWARGS = st.sampled_from([
    {},
    {"dtype": ("const", torch.float16)},
    {"dtype": ("const", torch.float16)},
    {"dtype": ("const", torch.bfloat16), "layout": ("const", torch.strided)},
    {"dtype": ("const", torch.float16), "device": ("const", "cpu")},
])


@st.composite
def graph_recipes(draw: st.DrawFn) -> dict[str, Any]:
    """Plain data describing a joint-graph-like fx.Graph; build() turns it
    into a graph, so two identical copies can be made."""
    items: list[tuple[Any, ...]] = [("placeholder", "primals", draw(_META_PRESET))]
    n_items = draw(st.integers(0, 30))
    for _ in range(n_items):
        n_values = len(items)
        placeholders = tuple(k for k, item in enumerate(items) if item[0] == "placeholder")
        node_ref, arg_spec = _node_ref(n_values, placeholders), _arg_spec(n_values, placeholders)
        choice = draw(st.integers(0, 9))
        if choice == 0:
            items.append(("placeholder", draw(st.sampled_from(PLACEHOLDER_ROLES)), draw(_META_PRESET)))
        elif choice == 1:
            kind = draw(st.sampled_from(["get_attr", "call_method"]))
            items.append((kind, draw(node_ref), draw(_META_PRESET)))
        else:
            name = draw(_TARGET_NAMES)
            first = draw(st.one_of(node_ref, node_ref, arg_spec))
            args = [first, *draw(st.lists(arg_spec, max_size=2))]
            if name == "convert":
                args = args[:1] + [("const", draw(st.sampled_from(DTYPES)))]
            kwargs = draw(st.dictionaries(st.sampled_from(["other", "src", "alpha"]), arg_spec, max_size=2))
            if name == "to_copy":
                kwargs = {**draw(_TO_COPY_KWARGS), **(kwargs if draw(st.integers(0, 3)) == 0 else {})}
            items.append(("call_function", name, args, kwargs, draw(_META_PRESET)))
    n_values = len(items)
    outputs = draw(st.lists(st.integers(0, n_values - 1), max_size=4))
    output_meta = draw(_META_PRESET)
    n_primals = sum(1 for item in items if item[0] == "placeholder" and item[1] in ("primals", "arg"))
    # Most primals are parameters, listed in any order, some twice.
    chosen = [k for k in range(n_primals) if draw(st.integers(0, 3)) < 3]
    repeated = draw(st.lists(st.sampled_from(chosen), max_size=2)) if chosen else []
    param_indices = []
    for k in draw(st.permutations(chosen + repeated)):
        entry = (k, draw(st.integers(-5, 1 << 40)), torch.Size(draw(st.lists(st.integers(1, 8), max_size=3))))
        param_indices.append(list(entry) if draw(st.booleans()) else entry)
    custom_set = draw(st.one_of(st.none(), st.frozensets(st.sampled_from(sorted(TARGETS)))))
    return {
        "items": items,
        "outputs": outputs,
        "output_meta": output_meta,
        "param_indices": param_indices,
        "no_copy": None if custom_set is None else frozenset(TARGETS[k] for k in custom_set),
    }


def build(recipe: dict[str, Any]) -> fx.Graph:
    graph = fx.Graph()
    values: list[fx.Node] = []

    def realise(spec: tuple[str, Any]) -> Any:
        kind, payload = spec
        if kind == NODE_REF:
            return values[payload]
        if kind == "const":
            return payload
        inner = [realise(s) for s in payload]
        return inner if kind == "list" else tuple(inner)

    for k, item in enumerate(recipe["items"]):
        if item[0] == "placeholder":
            role = item[1]
            node = graph.placeholder(f"arg{k}_1" if role == "arg" else f"{role}_{k}")
        elif item[0] == "get_attr":
            node = graph.get_attr(f"weight_{k}")
        elif item[0] == "call_method":
            node = graph.call_method("view", (realise(item[1]), 4))
        else:
            _, name, args, kwargs, _ = item
            node = graph.call_function(
                TARGETS[name], tuple(realise(a) for a in args), {key: realise(v) for key, v in kwargs.items()}
            )
        node.meta.update(copy.deepcopy(item[-1]))
        values.append(node)
    out = graph.output(tuple(values[i] for i in recipe["outputs"]))
    out.meta.update(copy.deepcopy(recipe["output_meta"]))
    return graph


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graph_recipes())
def test_walk_matches_reference_on_random_graphs(recipe: dict[str, Any]) -> None:
    ours, theirs = build(recipe), build(recipe)
    assert metas(ours) == metas(theirs)
    no_copy = recipe["no_copy"]
    tagged = recompute_param_aliases(ours, recipe["param_indices"], no_copy_ops=no_copy)
    expected = reference_param_alias_walk(
        theirs, recipe["param_indices"], DEFAULT_SET_AMONG_TARGETS if no_copy is None else no_copy
    )
    assert metas(ours) == metas(theirs)
    assert [n.name for n in tagged] == [n.name for n in expected]
    event(f"tagged nodes: {min(len(expected), 3)}{'+' if len(expected) >= 3 else ''}")


# ---------------------------------------------------------------------------
# DeepSpeed's own unit-test cases


def deepspeed_graph() -> tuple[fx.Graph, fx.Node, fx.Node]:
    graph = fx.Graph()
    param = graph.placeholder("primals_1")
    activation = graph.placeholder("primals_2")
    view = graph.call_function(aten.view.default, (param, [4]))
    neg = graph.call_function(aten.neg.default, (activation,))
    graph.output((view, neg))
    return graph, view, neg


DS_PARAMS = [(0, 1, torch.Size([4]))]


def test_deepspeed_view_of_param_is_recomputed_and_neg_untagged() -> None:
    graph, view, neg = deepspeed_graph()
    recompute_param_aliases(graph, DS_PARAMS, no_copy_ops={aten.view.default})
    assert view.meta["recompute"] == MUST_RECOMPUTE
    assert "recompute" not in neg.meta
    assert all(node.meta["ac_graph_id"] == 1 for node in graph.nodes)
    assert all(set(node.meta) <= {"recompute", "ac_graph_id"} for node in graph.nodes)


def test_deepspeed_existing_must_save_on_activation_is_kept() -> None:
    graph, view, neg = deepspeed_graph()
    neg.meta["recompute"] = MUST_SAVE
    recompute_param_aliases(graph, DS_PARAMS, no_copy_ops={aten.view.default})
    assert neg.meta["recompute"] == MUST_SAVE
    assert view.meta["recompute"] == MUST_RECOMPUTE


def test_no_copy_ops_argument_replaces_the_default_set() -> None:
    graph = fx.Graph()
    param = graph.placeholder("primals_1")
    t = graph.call_function(aten.t.default, (param,))
    neg = graph.call_function(aten.neg.default, (param,))
    graph.output((t, neg))
    recompute_param_aliases(graph, DS_PARAMS, no_copy_ops={aten.neg.default})
    assert "recompute" not in t.meta  # aten.t is no-copy by default, not here
    assert neg.meta["recompute"] == MUST_RECOMPUTE


# ---------------------------------------------------------------------------
# single rules on hand-built graphs


def test_chain_of_views_of_param_is_recomputed_transitively() -> None:
    graph = fx.Graph()
    param = graph.placeholder("primals_1")
    t = graph.call_function(aten.t.default, (param,))
    view = graph.call_function(aten.view.default, (t, [4]))
    graph.output((view,))
    tagged = recompute_param_aliases(graph, [(0, 7, torch.Size([2, 2]))])
    assert tagged == [t, view]
    assert t.meta["recompute"] == MUST_RECOMPUTE
    assert view.meta["recompute"] == MUST_RECOMPUTE
    assert "recompute" not in param.meta


def test_cast_of_view_of_param_is_recomputed() -> None:
    graph = fx.Graph()
    param = graph.placeholder("primals_1")
    view = graph.call_function(aten.view.default, (param, [4]))
    cast = graph.call_function(prims.convert_element_type.default, (view, torch.bfloat16))
    to_copy = graph.call_function(aten._to_copy.default, (cast,), {"dtype": torch.float16})
    graph.output((to_copy,))
    recompute_param_aliases(graph, DS_PARAMS)
    assert [n.meta.get("recompute") for n in (view, cast, to_copy)] == [MUST_RECOMPUTE] * 3


def test_to_copy_with_more_than_dtype_is_not_a_cast() -> None:
    graph = fx.Graph()
    param = graph.placeholder("primals_1")
    to_copy = graph.call_function(aten._to_copy.default, (param,), {"dtype": torch.float16, "layout": torch.strided})
    after = graph.call_function(aten.view.default, (to_copy, [4]))
    graph.output((after,))
    assert recompute_param_aliases(graph, DS_PARAMS) == []
    assert "recompute" not in to_copy.meta and "recompute" not in after.meta


def test_cast_of_activation_is_not_recomputed() -> None:
    graph = fx.Graph()
    param = graph.placeholder("primals_1")
    activation = graph.placeholder("primals_2")
    cast = graph.call_function(prims.convert_element_type.default, (activation, torch.bfloat16))
    to_copy = graph.call_function(aten._to_copy.default, (activation,), {"dtype": torch.float16})
    graph.output((cast, to_copy, param))
    assert recompute_param_aliases(graph, DS_PARAMS) == []
    assert "recompute" not in cast.meta and "recompute" not in to_copy.meta


@pytest.mark.parametrize(
    "make_args",
    [
        pytest.param(lambda act, p: ((act,), {"other": p}), id="kwarg"),
        pytest.param(lambda act, p: ((act,), {"other": [p]}), id="kwarg-list"),
        pytest.param(lambda act, p: (([p, act],), {}), id="list"),
        pytest.param(lambda act, p: (((act, p),), {}), id="tuple"),
        pytest.param(lambda act, p: ((act, [[p]]), {}), id="nested-list"),
    ],
)
def test_param_seen_only_through_kwargs_or_containers_is_not_followed(make_args: Any) -> None:
    graph = fx.Graph()
    param = graph.placeholder("primals_1")
    activation = graph.placeholder("primals_2")
    args, kwargs = make_args(activation, param)
    op = graph.call_function(aten.add_.Tensor, args, kwargs)
    graph.output((op,))
    assert recompute_param_aliases(graph, DS_PARAMS) == []
    assert "recompute" not in op.meta


def test_non_aliasing_op_breaks_the_chain() -> None:
    graph = fx.Graph()
    param = graph.placeholder("primals_1")
    neg = graph.call_function(aten.neg.default, (param,))
    view = graph.call_function(aten.view.default, (neg, [4]))
    split = graph.call_function(aten.split.Tensor, (param, 2))
    item = graph.call_function(operator.getitem, (split, 0))
    detach = graph.call_function(aten.detach.default, (item,))
    mm = graph.call_function(aten.mm.default, (param, param))
    graph.output((view, detach, mm))
    assert recompute_param_aliases(graph, DS_PARAMS) == []
    assert all("recompute" not in node.meta for node in graph.nodes)


def test_only_call_function_nodes_are_tagged() -> None:
    graph = fx.Graph()
    param = graph.placeholder("primals_1")
    method = graph.call_method("view", (param, 4))
    after = graph.call_function(aten.view.default, (method, [4]))
    graph.output((after,))
    assert recompute_param_aliases(graph, DS_PARAMS) == []


def test_arg_idx_counts_primals_only_in_graph_order() -> None:
    graph = fx.Graph()
    seed = graph.placeholder("fwd_seed")
    p1 = graph.placeholder("primals_1")
    tangent = graph.placeholder("tangents_1")
    offset = graph.placeholder("bwd_base_offset")
    views = [graph.call_function(aten.view.default, (x, [4])) for x in (seed, p1, tangent, offset)]
    p2 = graph.placeholder("primals_2")  # a primal after other nodes still counts, in order
    late = graph.call_function(aten.view.default, (p2, [4]))
    graph.output((*views, late))
    assert recompute_param_aliases(graph, [(1, 0, None)]) == [late]
    assert recompute_param_aliases(graph, [(0, 0, None)]) == [views[1]]


def test_only_arg_idx_of_each_entry_is_used_and_duplicates_are_fine() -> None:
    graph, view, _ = deepspeed_graph()
    tagged = recompute_param_aliases(graph, [(0, "not an id", object()), [0, None, None], (0, -1, torch.Size())])
    assert tagged == [view]


def test_existing_ac_graph_id_is_kept_and_missing_ones_become_1() -> None:
    graph, view, neg = deepspeed_graph()
    view.meta["ac_graph_id"] = 3
    neg.meta["ac_graph_id"] = 0
    recompute_param_aliases(graph, DS_PARAMS)
    assert [node.meta["ac_graph_id"] for node in graph.nodes] == [1, 1, 3, 0, 1]


def test_earlier_tag_on_an_alias_is_overwritten_and_other_meta_untouched() -> None:
    graph, view, neg = deepspeed_graph()
    view.meta.update(recompute=MUST_SAVE, val="a value", stack_trace="here")
    neg.meta.update(recompute=CheckpointPolicy.PREFER_RECOMPUTE, val=3)
    recompute_param_aliases(graph, DS_PARAMS)
    assert view.meta == {"recompute": MUST_RECOMPUTE, "val": "a value", "stack_trace": "here", "ac_graph_id": 1}
    assert neg.meta == {"recompute": CheckpointPolicy.PREFER_RECOMPUTE, "val": 3, "ac_graph_id": 1}


def test_empty_param_indices_only_sets_ac_graph_id() -> None:
    graph, _, _ = deepspeed_graph()
    assert recompute_param_aliases(graph, []) == []
    assert [node.meta for node in graph.nodes] == [{"ac_graph_id": 1}] * 5


def test_walk_is_idempotent() -> None:
    graph, _, _ = deepspeed_graph()
    recompute_param_aliases(graph, DS_PARAMS)
    first = metas(graph)
    recompute_param_aliases(graph, DS_PARAMS)
    assert metas(graph) == first


# ---------------------------------------------------------------------------
# get_no_copy_ops and is_cast_op

EXPECTED_NO_COPY = [
    aten.view.default, aten.view.dtype, aten.t.default, aten.permute.default, aten.expand.default,
    aten.squeeze.default, aten.squeeze.dim, aten.unsqueeze.default, aten.alias.default,
    aten.detach.default, aten.as_strided.default, aten.diagonal.default, aten.narrow.default,
    aten.unfold.default, aten.reshape.default, aten.transpose.int, aten.select.int,
    aten.slice.Tensor, aten.add_.Tensor, aten.mul_.Tensor, aten.copy_.default, aten.zero_.default,
]
EXPECTED_NOT_NO_COPY = [
    aten.split.Tensor, aten.unbind.int, aten.chunk.default, aten.split_with_sizes.default,
    aten.add.Tensor, aten.mm.default, aten.neg.default, aten.clone.default, aten._to_copy.default,
    prims.convert_element_type.default, operator.getitem,
]


@pytest.mark.parametrize("op", EXPECTED_NO_COPY, ids=str)
def test_default_no_copy_set_contains_views_and_inplace_ops(op: Any) -> None:
    assert op in get_no_copy_ops()


@pytest.mark.parametrize("op", EXPECTED_NOT_NO_COPY, ids=str)
def test_default_no_copy_set_excludes_list_returns_and_copies(op: Any) -> None:
    assert op not in get_no_copy_ops()


def test_default_no_copy_set_covers_every_aliasing_overload_of_a_packet() -> None:
    ops = get_no_copy_ops()
    for name in aten.view.overloads():
        assert getattr(aten.view, name) in ops


def test_get_no_copy_ops_extra_adds_ops() -> None:
    extra = [aten.neg.default, operator.getitem]
    ops = get_no_copy_ops(extra=extra)
    assert set(extra) <= ops
    assert ops - set(extra) == get_no_copy_ops()
    assert aten.neg.default not in get_no_copy_ops()  # extra does not leak into the cache


def test_get_no_copy_ops_is_cached(monkeypatch: pytest.MonkeyPatch) -> None:
    first = get_no_copy_ops()

    def enumerate_again() -> None:
        raise AssertionError("get_no_copy_ops re-enumerated the dispatcher")

    monkeypatch.setattr(torch._C, "_dispatch_get_all_op_names", enumerate_again)
    second = get_no_copy_ops()
    assert second == first
    assert isinstance(second, frozenset)  # callers cannot corrupt the cache


def _cast_graph() -> dict[str, fx.Node]:
    graph = fx.Graph()
    x = graph.placeholder("primals_1")
    nodes = {
        "convert": graph.call_function(prims.convert_element_type.default, (x, torch.bfloat16)),
        "to_copy": graph.call_function(aten._to_copy.default, (x,), {"dtype": torch.float16}),
        "to_copy_layout": graph.call_function(aten._to_copy.default, (x,), {"dtype": torch.float16, "layout": torch.strided}),
        "to_copy_device": graph.call_function(aten._to_copy.default, (x,), {"device": "cpu"}),
        "to_copy_bare": graph.call_function(aten._to_copy.default, (x,)),
        "neg": graph.call_function(aten.neg.default, (x,)),
        "method_to": graph.call_method("to", (x,), {"dtype": torch.float16}),
        "attr": graph.get_attr("weight"),
        "placeholder": x,
    }
    nodes["output"] = graph.output((nodes["neg"],))
    return nodes


def test_is_cast_op_recognises_both_forms_with_their_dtype() -> None:
    nodes = _cast_graph()
    assert is_cast_op(nodes["convert"]) == (True, torch.bfloat16)
    assert is_cast_op(nodes["to_copy"]) == (True, torch.float16)


@pytest.mark.parametrize(
    "name", ["to_copy_layout", "to_copy_device", "to_copy_bare", "neg", "method_to", "attr", "placeholder", "output"]
)
def test_is_cast_op_rejects_everything_else(name: str) -> None:
    assert is_cast_op(_cast_graph()[name]) == (False, None)


# ---------------------------------------------------------------------------
# get_wrapped_partitioner


class RecordingPartition:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, Any, dict[str, Any], list[dict[str, Any]]]] = []
        self.result = (object(), object())

    def __call__(self, joint_module: fx.GraphModule, joint_inputs: Any, **kwargs: Any) -> Any:
        self.calls.append((joint_module, joint_inputs, kwargs, [dict(n.meta) for n in joint_module.graph.nodes]))
        return self.result


def deepspeed_module() -> tuple[fx.GraphModule, fx.Node]:
    graph, view, _ = deepspeed_graph()
    return fx.GraphModule(torch.nn.Module(), graph), view


def test_wrapper_tags_before_partitioning_and_forwards_every_keyword() -> None:
    module, view = deepspeed_module()
    inner = RecordingPartition()
    frames = {11}
    wrapped = get_wrapped_partitioner(True, DS_PARAMS, inner, 42, frames)
    inputs = [torch.zeros(4), torch.zeros(4)]
    result = wrapped(module, inputs, num_fwd_outputs=1, static_lifetime_input_indices=[0], anything_else="x")
    assert result is inner.result
    assert frames == {11, 42}
    [(got_module, got_inputs, got_kwargs, meta_at_call)] = inner.calls
    assert got_module is module and got_inputs is inputs
    assert got_kwargs == {"num_fwd_outputs": 1, "static_lifetime_input_indices": [0], "anything_else": "x"}
    # the walk ran before partition_fn saw the graph
    assert meta_at_call[2] == {"recompute": MUST_RECOMPUTE, "ac_graph_id": 1}
    assert view.meta["recompute"] == MUST_RECOMPUTE


def test_wrapper_without_z3_partition_leaves_the_graph_alone() -> None:
    module, _ = deepspeed_module()
    inner = RecordingPartition()
    frames: set[int] = set()
    wrapped = get_wrapped_partitioner(False, DS_PARAMS, inner, 7, frames)
    assert wrapped(module, [], num_fwd_outputs=2) is inner.result
    assert frames == {7}
    assert inner.calls[0][2] == {"num_fwd_outputs": 2}
    assert all(node.meta == {} for node in module.graph.nodes)


def test_wrapper_requires_num_fwd_outputs_as_keyword() -> None:
    module, _ = deepspeed_module()
    wrapped = get_wrapped_partitioner(True, DS_PARAMS, RecordingPartition(), 0, set())
    with pytest.raises(TypeError):
        wrapped(module, [])


# ---------------------------------------------------------------------------
# bad input: the right exception, a message naming the culprit, no change


def bad_input_graph() -> fx.Graph:
    graph = fx.Graph()
    p1 = graph.placeholder("primals_1")
    graph.placeholder("tangents_1")
    p2 = graph.placeholder("primals_2")
    view = graph.call_function(aten.view.default, (p1, [4]))
    view.meta["recompute"] = MUST_SAVE
    add = graph.call_function(aten.add.Tensor, (view, p2))
    add.meta["ac_graph_id"] = 2
    graph.output((add,))
    return graph


@pytest.mark.parametrize(
    "param_indices, exc, words",
    [
        pytest.param([(0, 1, None), (2, 1, None)], IndexError, ["param_indices[1]", "2"], id="arg_idx==n_primals"),
        pytest.param([(0, 1, None), (-1, 1, None)], IndexError, ["param_indices[1]", "-1"], id="negative"),
        pytest.param([(0, 1, None), (0, 1)], TypeError, ["param_indices[1]"], id="pair"),
        pytest.param([(0, 1, None), (0, 1, None, 4)], TypeError, ["param_indices[1]"], id="quadruple"),
        pytest.param([0], TypeError, ["param_indices[0]"], id="bare-int"),
        pytest.param(["abc"], TypeError, ["param_indices[0]"], id="string"),
        pytest.param([(0, 1, None), ("0", 1, None)], TypeError, ["param_indices[1]", "'0'"], id="str-arg_idx"),
        pytest.param([(0, 1, None), (1.0, 1, None)], TypeError, ["param_indices[1]", "1.0"], id="float-arg_idx"),
        pytest.param([(True, 1, None)], TypeError, ["param_indices[0]", "True"], id="bool-arg_idx"),
    ],
)
def test_bad_param_indices_raise_and_leave_graph_unchanged(param_indices: Any, exc: type, words: list[str]) -> None:
    graph = bad_input_graph()
    before = snapshot(graph)
    with pytest.raises(exc) as info:
        recompute_param_aliases(graph, param_indices)
    for word in words:
        assert word in str(info.value)
    assert_unchanged(graph, before)


def test_graph_module_is_not_a_graph() -> None:
    module = fx.GraphModule(torch.nn.Module(), bad_input_graph())
    before = snapshot(module.graph)
    with pytest.raises(TypeError, match="GraphModule"):
        recompute_param_aliases(module, DS_PARAMS)  # type: ignore[arg-type]
    assert_unchanged(module.graph, before)


def test_list_is_not_a_graph() -> None:
    graph = bad_input_graph()
    before = snapshot(graph)
    with pytest.raises(TypeError, match="list"):
        recompute_param_aliases(list(graph.nodes), DS_PARAMS)  # type: ignore[arg-type]
    assert_unchanged(graph, before)


@pytest.mark.parametrize("param_indices", [[], DS_PARAMS])
def test_graph_without_placeholders_raises(param_indices: Any) -> None:
    graph = fx.Graph()
    attr = graph.get_attr("weight")
    view = graph.call_function(aten.view.default, (attr, [4]))
    graph.output((view,))
    before = snapshot(graph)
    with pytest.raises(ValueError, match="placeholder"):
        recompute_param_aliases(graph, param_indices)
    assert_unchanged(graph, before)


def test_empty_graph_raises() -> None:
    graph = fx.Graph()
    with pytest.raises(ValueError, match="placeholder"):
        recompute_param_aliases(graph, [])
    assert list(graph.nodes) == []


@pytest.mark.parametrize("where", ["positional", "kwarg", "nested"])
def test_node_from_another_graph_raises_naming_the_node(where: str) -> None:
    graph = bad_input_graph()
    other = fx.Graph()
    stranger = other.placeholder("stranger")
    args, kwargs = {
        "positional": ((stranger,), {}),
        "kwarg": ((), {"other": stranger}),
        "nested": (([1, (stranger,)],), {}),
    }[where]
    (output,) = [n for n in graph.nodes if n.op == "output"]
    with graph.inserting_before(output):
        culprit = graph.call_function(aten.view.default, args, kwargs)
    culprit._rename("culprit")
    before = snapshot(graph)
    with pytest.raises(ValueError) as info:
        recompute_param_aliases(graph, DS_PARAMS)
    assert "culprit" in str(info.value) and "stranger" in str(info.value)
    assert_unchanged(graph, before)
    assert stranger.meta == {}


def test_use_before_definition_raises_and_leaves_graph_unchanged() -> None:
    graph = bad_input_graph()
    view, add = [n for n in graph.nodes if n.op == "call_function"]
    # fx lets a node move after its user; the graph is then not in
    # topological order
    add.append(view)
    before = snapshot(graph)
    with pytest.raises(ValueError, match="cycle|topological"):
        recompute_param_aliases(graph, DS_PARAMS)
    assert_unchanged(graph, before)


def test_fxcut_exports_the_zero3_api() -> None:
    assert fxcut.recompute_param_aliases is recompute_param_aliases
    assert fxcut.get_wrapped_partitioner is get_wrapped_partitioner


# --------------------------------------------------------------------------- the facts cache (issue 12, item 7)


def test_the_facts_cache_keeps_no_fresh_target_alive() -> None:
    """500 graphs, each calling a fresh Python function: once the graphs
    and functions are gone, the cache holds none of them."""
    import gc
    import weakref

    from fxcut.torchrules.lower import lower_for_partition
    from fxcut.torchrules.ops import default_facts
    from fxcut.torchrules.versions import rules_or_nearest

    facts = default_facts()
    rules = rules_or_nearest()
    lower_for_partition(_fresh_target_graph(lambda x: x), facts, impure_random=True, rules=rules)  # warm the op lists
    before = len(facts._cache)
    refs = []
    for k in range(500):
        def fresh(x, k=k):  # a new function object each time
            return x
        refs.append(weakref.ref(fresh))
        lower_for_partition(_fresh_target_graph(fresh), facts, impure_random=True, rules=rules)
        del fresh
    gc.collect()
    assert all(r() is None for r in refs)
    assert len(facts._cache) <= before + 1


def test_the_facts_cache_is_bounded_for_targets_without_weak_references(monkeypatch) -> None:
    import fxcut.torchrules.ops as ops

    monkeypatch.setattr(ops, "MAX_CACHED_TARGETS", 64)
    facts = ops.TargetFacts()

    class Slotted:
        __slots__ = ()

        def __call__(self, x):
            return x

    for _ in range(1000):
        facts.flags(Slotted())
    assert len(facts._cache) <= 64


def test_the_facts_cache_answers_as_computed(monkeypatch) -> None:
    import fxcut.torchrules.ops as ops

    facts = ops.TargetFacts()

    def fn(x):
        return x

    first = facts.flags(fn)
    assert facts.flags(fn) == first == facts._compute(fn)
    assert facts.flags(aten.relu.default) == facts._compute(aten.relu.default)
    assert facts.flags(aten.relu.default) & ops.F_RECOMPUTABLE or facts.flags(aten.relu.default) & ops.F_FUSIBLE


def _fresh_target_graph(target) -> fx.Graph:
    g = fx.Graph()
    x = g.placeholder("primals_1")
    y = g.call_function(target, (x,))
    g.output((y,))
    return g
