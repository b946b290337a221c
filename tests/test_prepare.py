"""fxcut's planned dead-code elimination and in-place CSE leave exactly the
graph torch's partitioner builds with ``eliminate_dead_code`` and
``fx_graph_cse``: same nodes, names, order, arguments, users and meta."""

from __future__ import annotations

import copy
from typing import Any
import operator

import pytest
import torch
import torch.fx as fx

from fxcut import prepare
from fxcut.ops import default_facts
from fxcut.ops import dce_impure_random

import zoo
from random_joint import random_joint
from torch_reference import torch_prepared


def _torch_prepared(gm: fx.GraphModule) -> fx.GraphModule:
    return torch_prepared(gm, cse=True)


def _fxcut_prepared(gm: fx.GraphModule) -> tuple[fx.GraphModule, prepare.Preparation]:
    prep = prepare.plan(gm.graph, default_facts(), cse=True, impure_random=dce_impure_random())
    expected = [n for n in gm.graph.nodes if n not in prep.removed]
    prepare.apply(gm, prep, expected)
    return gm, prep


def _assert_same_graph(a: fx.GraphModule, b: fx.GraphModule) -> None:
    assert a.code == b.code
    na, nb = list(a.graph.nodes), list(b.graph.nodes)
    assert [n.name for n in na] == [n.name for n in nb]
    for x, y in zip(na, nb):
        assert [u.name for u in x.users] == [u.name for u in y.users], x.name
        assert [u.name for u in x.all_input_nodes] == [u.name for u in y.all_input_nodes], x.name
        assert set(x.meta) == set(y.meta), x.name
        assert x.meta.get("mutation_region_id") == y.meta.get("mutation_region_id"), x.name


@pytest.mark.parametrize("name", sorted(zoo.CASES))
def test_zoo_graph_prepares_like_torch(name: str) -> None:
    cap = zoo.capture(name)
    a = _torch_prepared(cap.fresh())
    b, _ = _fxcut_prepared(cap.fresh())
    _assert_same_graph(a, b)


def _with_duplicates_and_dead_code() -> fx.GraphModule:
    g = fx.Graph()
    x = g.placeholder("primals_1")
    x.meta["val"] = torch.empty(4, device="meta")
    t = g.placeholder("tangents_1")
    t.meta["val"] = torch.empty(4, device="meta")
    a1 = g.call_function(torch.ops.aten.sin.default, (x,))
    a2 = g.call_function(torch.ops.aten.sin.default, (x,))  # duplicate of a1
    dead = g.call_function(torch.ops.aten.cos.default, (x,))  # no users: dead
    b1 = g.call_function(torch.ops.aten.mul.Tensor, (a1, a2))
    b2 = g.call_function(torch.ops.aten.mul.Tensor, (a2, a1))  # mul(a1, a1) once a2 -> a1
    b3 = g.call_function(torch.ops.aten.mul.Tensor, (a2, a2))  # likewise
    r = g.call_function(torch.ops.aten.rand_like.default, (x,))
    r2 = g.call_function(torch.ops.aten.rand_like.default, (x,))  # random: never merged
    s = g.call_function(torch.ops.aten.add.Tensor, (b1, b2))
    s2 = g.call_function(torch.ops.aten.add.Tensor, (s, b3))
    s3 = g.call_function(torch.ops.aten.add.Tensor, (r, r2))
    grad = g.call_function(torch.ops.aten.mul.Tensor, (t, s2))
    g.output((s2, s3, grad))
    for n in g.nodes:
        if n.op != "output" and "val" not in n.meta:
            n.meta["val"] = torch.empty(4, device="meta")
    del dead
    return fx.GraphModule(torch.nn.Module(), g)


def test_planned_preparation_merges_and_removes_what_torch_does() -> None:
    a = _torch_prepared(_with_duplicates_and_dead_code())
    b, prep = _fxcut_prepared(_with_duplicates_and_dead_code())
    _assert_same_graph(a, b)
    assert {n.name for n in prep.dead} == {"cos_default"}
    assert {d.name: r.name for d, r in prep.replace.items()} == {
        "sin_default_1": "sin_default",
        "mul_tensor_1": "mul_tensor",
        "mul_tensor_2": "mul_tensor",
    }
    # Random ops are never merged.
    assert not any(n.name.startswith("rand_like") for n in prep.replace)


def test_plan_does_not_touch_the_graph() -> None:
    gm = _with_duplicates_and_dead_code()
    before = (gm.code, [n.name for n in gm.graph.nodes], [dict(n.meta) for n in gm.graph.nodes])
    prepare.plan(gm.graph, default_facts(), cse=True, impure_random=True)
    after = (gm.code, [n.name for n in gm.graph.nodes], [dict(n.meta) for n in gm.graph.nodes])
    assert before == after


@pytest.mark.parametrize("seed", range(40))
def test_random_graph_prepares_like_torch(seed: int) -> None:
    rj = random_joint(seed)
    a = _torch_prepared(copy.deepcopy(rj.module))
    b, _ = _fxcut_prepared(copy.deepcopy(rj.module))
    _assert_same_graph(a, b)


def _odd_args_graph() -> fx.Graph:
    """Nodes whose args hold every kind of value fx_graph_cse keys on: nested
    fx lists and dicts, floats (0.0 vs -0.0, nan), complexes, dtypes, a
    namedtuple (a pytree container fx does not make), a slice, None."""
    import collections

    Pair = collections.namedtuple("Pair", "a b")
    g = fx.Graph()
    x = g.placeholder("primals_1")
    y = g.placeholder("primals_2")
    cat = torch.ops.aten.cat.default
    g.call_function(cat, ([x, y], 0))
    g.call_function(cat, ([x, y],), {"dim": 0})
    g.call_function(torch.ops.aten.add.Tensor, (x, 0.0))
    g.call_function(torch.ops.aten.add.Tensor, (x, -0.0))
    g.call_function(torch.ops.aten.add.Tensor, (x, float("nan")))
    g.call_function(torch.ops.aten.add.Tensor, (x, 1j))
    g.call_function(torch.ops.aten.add.Tensor, (x, 1))
    g.call_function(torch.ops.aten.add.Tensor, (x, True))
    g.call_function(torch.ops.aten._to_copy.default, (x,), {"dtype": torch.float16, "layout": torch.strided})
    g.call_function(operator.getitem, (x, (None, Ellipsis, "s")))
    g.call_function(operator.getitem, (x, Pair(x, {"k": [y, 2.5]})))
    g.call_function(operator.getitem, (x, {"b": [x, (y, {"c": 3})], "a": None}))
    g.output((x,))
    return g


@pytest.mark.parametrize("floats_by_bits", [False, True])
def test_c_cse_key_equals_the_python_key(floats_by_bits: bool) -> None:
    """_C.cse_key gives exactly prepare.python_cse_key's key (leaves, their
    substitution, structure, hash) on odd args and on every node of a zoo
    joint graph, or None where pytree must flatten (the namedtuple)."""
    from fxcut import _C

    graphs = [_odd_args_graph(), zoo.capture("gpt2_dynamic").fresh().graph]
    config = prepare.cse_key_config(floats_by_bits)
    fallbacks = 0
    for graph in graphs:
        nodes = list(graph.nodes)
        env = {n: nodes[0] for n in nodes[1::2]}  # substitution of every other node
        for n in nodes:
            want = prepare.python_cse_key(n.args, n.kwargs, env, floats_by_bits)
            got = _C.cse_key(n.args, n.kwargs, env, config)
            if got is None:
                fallbacks += 1
                continue
            assert got == want, n.name
            assert [type(a) for a in got[0]] == [type(a) for a in want[0]], n.name
    assert fallbacks == 1  # the namedtuple's node


def test_c_cse_key_rejects_a_bad_config() -> None:
    from fxcut import _C

    with pytest.raises(TypeError, match="config"):
        _C.cse_key((), {}, {}, ("not", "enough"))
    config = list(prepare.cse_key_config(False))
    config[5] = 3  # tree_is_leaf not callable
    with pytest.raises(TypeError, match="callable"):
        _C.cse_key((), {}, {}, tuple(config))


def _namespace_state(ns: Any) -> tuple[Any, ...]:
    return (sorted(ns._used_names), sorted(ns._base_count.items()), dict(ns._obj_to_name))


_NAME_PARTS = ["add", "add_1", "add_3", "sum", "sum_1", "x_01", "x_1", "9x", "", "a-b", "self", "class",
               "torch", "_", "relu_0_7", "getitem", "getitem_12", "primals_1", "tangents_1"]


@pytest.mark.parametrize("names", [
    ["add", "add_1", "add", "add_3", "add"],
    ["add_3", "add", "add_1", "add_2", "add_4"],
    ["sum", "sum_1", "sum", "class", "9x", "", "a-b", "x_01", "x_1", "x"],
    list(_NAME_PARTS),
    list(reversed(_NAME_PARTS)) * 2,
])
def test_names_registered_as_create_name_registers_them(names: list[str]) -> None:
    from torch.fx.graph import _Namespace

    expected = _Namespace()
    for name in names:
        expected.create_name(name, None)
    assert _namespace_state(prepare._names_registered(names)) == _namespace_state(expected)


def test_names_registered_on_random_name_lists() -> None:
    import random

    from torch.fx.graph import _Namespace

    rng = random.Random(7)
    for _ in range(300):
        names = [rng.choice(_NAME_PARTS) + rng.choice(["", "", "_1", "_2", "_10", "_02"]) for _ in range(rng.randint(0, 30))]
        expected = _Namespace()
        for name in names:
            expected.create_name(name, None)
        assert _namespace_state(prepare._names_registered(names)) == _namespace_state(expected), names
