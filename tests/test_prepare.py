"""fxcut's planned dead-code elimination and in-place CSE leave exactly the
graph torch's partitioner builds with ``eliminate_dead_code`` and
``fx_graph_cse``: same nodes, names, order, arguments, users and meta."""

from __future__ import annotations

import copy
import dataclasses
import operator
import types
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.fx as fx

from fxcut.torchrules import prepare, versions
from fxcut.torchrules.ops import default_facts
from fxcut.torchrules.ops import dce_impure_random

import zoo
from random_joint import random_joint
from torch_reference import torch_prepared


def _without(config: Any, name: str) -> Any:
    """``config``'s fields but ``name``, as an object read by name."""
    return types.SimpleNamespace(**{f.name: getattr(config, f.name) for f in dataclasses.fields(config)
                                    if f.name != name})


def _with(config: Any, **changes: Any) -> Any:
    return dataclasses.replace(config, **changes)


def _torch_prepared(gm: fx.GraphModule) -> fx.GraphModule:
    return torch_prepared(gm, cse=True)


def _fxcut_prepared(gm: fx.GraphModule) -> tuple[fx.GraphModule, prepare.Preparation]:
    prep = prepare.plan(gm.graph, default_facts(), cse=True, impure_random=dce_impure_random(),
                        rules=versions.rules_or_nearest())
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


def _assert_c_plan_is_the_python_plan(graph: fx.Graph, num_fwd_outputs: int | None) -> int:
    """The C extension's plan (prepare_plan) is the Python loop's, exactly:
    the dead set, each duplicate's representative (in the same order) and
    every mutation region, under every release's CSE rules, as the
    partitioner runs CSE (``num_fwd_outputs``) and as fx_graph_cse alone
    does; with and without random ops taken as impure by dead-code
    elimination.  Returns how many duplicates the plans found."""
    facts = default_facts()
    merged = 0
    newest = list(versions.RELEASES.values())[-1]
    for rules in versions.RELEASES.values():
        for num_fwd in {None, num_fwd_outputs}:
            # DCE reads no rule: random ops kept alive (False) once is enough
            for impure_random in (True, False) if rules is newest and num_fwd is None else (True,):
                c, py = (prepare.plan(graph, facts, cse=True, impure_random=impure_random, rules=rules,
                                      num_fwd_outputs=num_fwd, use_c=use_c) for use_c in (True, False))
                where = (rules.release, num_fwd, impure_random)
                assert c.dead == py.dead, where
                assert list(c.replace.items()) == list(py.replace.items()), where
                assert c.region_ids is not None and py.region_ids is not None
                assert list(c.region_ids.items()) == list(py.region_ids.items()), where
                merged += len(c.replace)
        no_cse = prepare.plan(graph, facts, cse=False, impure_random=True, rules=rules)
        assert no_cse.replace == {} and no_cse.region_ids is None
        assert no_cse.dead == prepare.plan_dead_code(list(graph.nodes), facts, True)
    return merged


@pytest.mark.parametrize("name", sorted(zoo.CASES))
def test_zoo_graph_prepares_like_torch(name: str) -> None:
    cap = zoo.capture(name)
    a = _torch_prepared(cap.fresh())
    b, _ = _fxcut_prepared(cap.fresh())
    _assert_same_graph(a, b)
    _assert_c_plan_is_the_python_plan(cap.graph, cap.num_fwd_outputs)


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
    prepare.plan(gm.graph, default_facts(), cse=True, impure_random=True, rules=versions.rules_or_nearest())
    after = (gm.code, [n.name for n in gm.graph.nodes], [dict(n.meta) for n in gm.graph.nodes])
    assert before == after


@pytest.mark.parametrize("seed", range(40))
def test_random_graph_prepares_like_torch(seed: int) -> None:
    rj = random_joint(seed)
    a = _torch_prepared(copy.deepcopy(rj.module))
    b, _ = _fxcut_prepared(copy.deepcopy(rj.module))
    _assert_same_graph(a, b)
    _assert_c_plan_is_the_python_plan(rj.module.graph, None)


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
    """A config missing a field, or with one of the wrong kind: a TypeError
    naming the field (the AttributeError its cause)."""
    from fxcut import _C

    config = prepare.cse_key_config(False)
    with pytest.raises(TypeError, match="cse_key: config has no field 'node_cls' \\(a type\\), got tuple") as e:
        _C.cse_key((), {}, {}, ("not", "a", "config"))
    assert isinstance(e.value.__cause__, AttributeError)
    with pytest.raises(TypeError, match="cse_key: config has no field 'by_bits'"):
        _C.cse_key((), {}, {}, _without(config, "by_bits"))
    with pytest.raises(TypeError, match="config field 'tree_is_leaf' must be callable, got int"):
        _C.cse_key((), {}, {}, _with(config, tree_is_leaf=3))
    with pytest.raises(TypeError, match="config field 'by_bits' must be callable or None, got str"):
        _C.cse_key((), {}, {}, _with(config, by_bits="x"))
    with pytest.raises(TypeError, match="config field 'known_leaves' must be a frozenset, got set"):
        _C.cse_key((), {}, {}, _with(config, known_leaves=set(config.known_leaves)))
    assert _C.cse_key((1,), {}, {}, _with(config, leaf_key="any object")) is not None


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

def _scale_(x: torch.Tensor) -> torch.Tensor:
    """A Python call_function target whose name says "in place" (fx's
    mutation test reads it), compared by identity."""
    return x


def _odd_plan_graph() -> tuple[fx.Graph, int]:
    """A joint graph with a duplicate of every kind the plan decides: pure
    ops, a namedtuple argument (pytree's key), floats (0.0, -0.0, nan: by
    bits from 2.14), SymInt arguments and unbacked-symbol values, random
    ops and aten.empty (never merged), impure ops, mutations (in place, and
    an ``out=`` keyword) splitting regions, stream and mempool meta,
    call_method nodes, a get_attr, values that alias an output (skipped,
    either the first or a later duplicate), dead code, and values only the
    forward or the backward needs."""
    import collections

    from torch._dynamo.source import ConstantSource
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    aten = torch.ops.aten
    env = ShapeEnv()
    s0 = env.create_symintnode(env.create_symbol(5, ConstantSource("s0")), hint=5)
    u0 = env.create_unbacked_symint()
    warnings.filterwarnings("ignore", "Raw SymInt value", UserWarning)  # SymInt arguments, on purpose
    Pair = collections.namedtuple("Pair", "a b")
    g = fx.Graph()
    x = g.placeholder("primals_1")
    y = g.placeholder("primals_2")
    t = g.placeholder("tangents_1")
    out_val = torch.empty(4)
    c = g.get_attr("const")
    fwd: list[fx.Node] = []
    bwd: list[fx.Node] = []

    def op(target: object, *args: object, kwargs: dict[str, object] | None = None,
           val: object = None, **meta: object) -> fx.Node:
        n = g.call_function(target, args, kwargs)  # type: ignore[arg-type]
        if val is not None:  # no value: a node that never aliases an output
            n.meta["val"] = val
        n.meta.update(meta)
        return n

    for _ in range(2):
        a = op(aten.sin.default, x)
        fwd.append(a)
        bwd.append(op(aten.mul.Tensor, a, t))  # the backward needs the second sin
        op(aten.cos.default, x)  # dead
        for scalar in (0.0, -0.0, float("nan"), 1j, 1, True):
            fwd.append(op(aten.add.Tensor, x, scalar))
        fwd.append(op(operator.getitem, x, Pair(y, {"k": [x, 2.5]})))
        fwd.append(op(aten.view.default, x, [s0, -1]))
        fwd.append(op(aten.view.default, x, [u0, 2]))
        fwd.append(op(aten._local_scalar_dense.default, x, val=u0.node.expr))
        fwd.append(op(aten._local_scalar_dense.default, y, val=s0.node.expr))
        fwd.append(op(aten.rand_like.default, x))
        fwd.append(op(aten.empty.memory_format, [4], kwargs={"device": torch.device("cpu")}))
        fwd.append(op(aten._assert_async.msg, x, "msg"))
        fwd.append(op(aten.exp.default, x, custom={"stream": 1}))
        fwd.append(op(aten.exp.default, x, custom={"stream": 1, "mempool": (0, 1), "mempool_device": 0}))
        fwd.append(op(aten.exp.default, x))
        fwd.append(op(operator.add, x, y))
        fwd.append(op(operator.mul, x, y, kwargs={"out": None}))
        fwd.append(op(aten.neg.default, c))
        fwd.append(g.call_method("add", (x, y)))
        fwd.append(op(aten.to.dtype, x, torch.float16, kwargs={"non_blocking": False}))
        fwd.append(op(aten.sum.dim_IntList, x, [0], True, kwargs={"dtype": None}))
    # Three duplicates of one value: the first's storage is an output's,
    # then a later one's (another view of it).
    keep = op(aten.sigmoid.default, y, val=out_val)
    tan = [op(aten.tan.default, y) for _ in range(3)]
    tan[0].meta["val"] = out_val
    atan = [op(aten.atan.default, y) for _ in range(3)]
    atan[1].meta["val"] = out_val.view(2, 2)
    op(aten.add_.Tensor, x, 1)  # a mutation: a new region
    fwd.append(op(_scale_, x))  # a mutation by its name
    fwd.append(op(aten.sin.default, x))  # not merged across the region
    fwd.append(op(operator.add, x, y, kwargs={"out": x}))  # a mutation through out=
    fwd.append(op(aten.sin.default, x))
    # Two identical buffers, each the mutable base of a functional wrapper:
    # kept apart from 2.14.
    v2 = getattr(torch.ops.higher_order, "auto_functionalized_v2", None)
    if v2 is not None:
        for _ in range(2):
            base = op(aten.full.default, [4], 1.0)
            fwd.append(op(v2, aten.add_.Tensor, kwargs={"_self_base_index": 0, "_all_bases": [base], "other": 1}))
    g.output((*fwd, keep, *tan, *atan, *bwd))
    return g, len(fwd) + 7


def test_c_plan_equals_the_python_plan_on_odd_graphs() -> None:
    """prepare_plan decides exactly as the Python loop on a graph with every
    odd case (namedtuples, floats by bits, symbols, impure, random and
    mutation ops, streams, aliases of outputs, dead code) under every
    release's rules; and on the same nodes in shuffled orders (plan_cse
    takes any list: the C key of a representative is built lazily, with the
    substitutions in force when it was visited)."""
    import random

    graph, num_fwd = _odd_plan_graph()
    assert _assert_c_plan_is_the_python_plan(graph, num_fwd) > 0
    nodes = list(graph.nodes)
    rng = random.Random(0)
    facts = default_facts()
    for _ in range(6):
        order = nodes[:-1]
        rng.shuffle(order)
        order.append(nodes[-1])
        for rules in versions.RELEASES.values():
            for nf in (None, num_fwd):
                c = prepare.plan_cse(order, rules, nf, facts)
                py = prepare.plan_cse(order, rules, nf, facts, use_c=False)
                assert list(c[0].items()) == list(py[0].items()), rules.release
                assert list(c[1].items()) == list(py[1].items()), rules.release


def test_c_plan_skips_the_values_that_alias_an_output() -> None:
    """Of three identical tan and atan values, the one whose storage is an
    output's is never merged nor a representative: torch skips it."""
    graph, num_fwd = _odd_plan_graph()
    replace, _ = prepare.plan_cse(list(graph.nodes), versions.RELEASES["2.13"], num_fwd, default_facts())
    merged = {(a.name, b.name) for a, b in replace.items()}
    assert ("tan_default_2", "tan_default_1") in merged and not any("tan_default" == a or "tan_default" == b
                                                                    for a, b in merged)
    assert ("atan_default_2", "atan_default") in merged and not any("atan_default_1" in (a, b) for a, b in merged)


def test_c_plan_asks_node_facts_once_for_nodes_alike() -> None:
    """prepare_plan asks node_facts once per call_function target and once
    per op for placeholders, outputs and get_attrs with a str target (the
    answers say so: SAME_FOR_TARGET, SAME_FOR_OP), and for each node with an
    ``out`` keyword (a mutation by that alone); the plan is the Python
    loop's, the placeholder with ``out`` opening a mutation region."""
    from fxcut import _C

    aten = torch.ops.aten
    g = fx.Graph()
    xs = [g.placeholder(f"primals_{k}") for k in range(4)]
    xs[2].kwargs = {"out": xs[0]}
    adds = [g.call_function(aten.add.Tensor, (xs[0], x)) for x in xs[1:]]
    attrs = [g.get_attr(f"w{k}") for k in range(2)]
    g.output((*adds, *attrs))
    for n in g.nodes:
        if n.op != "output":
            n.meta["val"] = torch.empty(4)
    rules = versions.RELEASES["2.13"]
    node_facts = prepare.node_facts_of(default_facts(), True, rules)
    asked: list[str] = []

    def recording(node: fx.Node) -> int:
        asked.append(node.name)
        return node_facts(node)

    dead, replace, regions = _C.prepare_plan(list(g.nodes), recording, prepare.plan_config(rules, None),
                                             eliminate_dead=True, cse=True)
    assert sorted(asked) == sorted(["primals_0", "primals_2", adds[0].name, "w0", "output"])
    py = prepare.plan(g, default_facts(), cse=True, impure_random=True, rules=rules, use_c=False)
    assert dead == py.dead and replace == py.replace and regions == py.region_ids
    assert regions is not None and regions[xs[1]] == 0 and regions[xs[2]] == 1


def _plan_args() -> tuple[list[fx.Node], object, tuple[object, ...]]:
    graph, num_fwd = _odd_plan_graph()
    rules = versions.RELEASES["2.15"]
    return (list(graph.nodes), prepare.node_facts_of(default_facts(), True, rules),
            prepare.plan_config(rules, num_fwd))


@pytest.mark.parametrize("mangle, error, match", [
    (lambda n, f, c: ((tuple(n), f, c), {}), TypeError, "nodes"),
    (lambda n, f, c: ((n, 3, c), {}), TypeError, "node_facts"),
    (lambda n, f, c: ((n, f, c.key), {}), TypeError, "prepare_plan: config has no field 'never_merged'"),
    (lambda n, f, c: ((n, f, _without(c, "mutates")), {}), TypeError, "config has no field 'mutates'"),
    (lambda n, f, c: ((n, f, _with(c, never_merged="x")), {}), TypeError,
     "config field 'never_merged' must be an int"),
    (lambda n, f, c: ((n, f, _with(c, same_for_target=-1)), {}), ValueError,
     r"config field 'same_for_target' \(-1\) must be a bit set"),
    (lambda n, f, c: ((n, f, _with(c, python_key=None)), {}), TypeError, "field 'python_key' must be callable"),
    (lambda n, f, c: ((n, f, _with(c, keys_stream=1)), {}), TypeError, "field 'keys_stream' must be a bool"),
    (lambda n, f, c: ((n, f, _with(c, tensor_cls=torch.empty(1))), {}), TypeError, "field 'tensor_cls' must be a type"),
    (lambda n, f, c: ((n, f, _with(c, key=_without(c.key, "dict_types"))), {}), TypeError,
     r"prepare_plan config\.key: config has no field 'dict_types'"),
    (lambda n, f, c: ((n, f, _with(c, key=_with(c.key, containers=()))), {}), TypeError,
     "field 'containers' must be a dict"),
    (lambda n, f, c: ((n, lambda node: "x", c), {}), TypeError, "node_facts must return an int"),
    (lambda n, f, c: ((n, lambda node: 1 / 0, c), {}), ZeroDivisionError, None),
    (lambda n, f, c: (([*n[:3], 7, n[-1]], f, c), {}), AttributeError, None),
    (lambda n, f, c: (([], f, c), {}), IndexError, "no live node"),
    (lambda n, f, c: ((n, f, _with(c, backward_seeds=lambda out: 5)), {}), TypeError, "not iterable"),
    (lambda n, f, c: ((n, f, _with(c, python_key=lambda *a: "bad")), {}), TypeError, "python_key must return"),
])
def test_c_plan_rejects_bad_input(mangle: Callable[..., Any], error: type[BaseException], match: str | None) -> None:
    """Bad arguments and callbacks that raise or answer nonsense: a clear
    exception naming what is wrong, never a crash."""
    from fxcut import _C

    args, _ = mangle(*_plan_args())
    with pytest.raises(error, match=match):
        _C.prepare_plan(*args, eliminate_dead=True, cse=True)


def test_c_plan_keywords_are_required() -> None:
    from fxcut import _C

    nodes, facts_fn, config = _plan_args()
    with pytest.raises(TypeError):
        _C.prepare_plan(nodes, facts_fn, config)  # type: ignore[call-arg]  # the keywords are missing
    dead, replace, regions = _C.prepare_plan(nodes, facts_fn, config, eliminate_dead=True, cse=False)
    assert replace == {} and regions is None and {n.name for n in dead} == {"cos_default", "cos_default_1"}
