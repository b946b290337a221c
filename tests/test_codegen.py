"""fxcut.torchrules.codegen writes the code torch.fx's generator writes: the same source
text, line-number map, prologue position and globals, on every zoo model's
forward, backward and joint graphs (partitioned by torch and by fxcut) and on
odd graphs built by hand; anything outside the kind of graph it writes falls
back to torch's generator.  In the fidelity set: it runs on every supported
torch release."""

from __future__ import annotations

import math
import operator
from typing import Any, Callable

import pytest
import torch
import torch.fx as fx
from torch._functorch.partitioners import min_cut_rematerialization_partition as torch_partition
from torch.fx.graph import PythonCode, _PyTreeCodeGen

import fxcut
import zoo
from fxcut.torchrules import codegen

aten = torch.ops.aten


def _fields(code: PythonCode) -> tuple[Any, ...]:
    return (code.src, code._lineno_map, code._prologue_start,
            sorted((k, id(v)) for k, v in code.globals.items()))


def assert_writes_as_torch(graph: fx.Graph) -> None:
    """fxcut's code of ``graph`` exists and equals torch's, field by field."""
    mine = codegen.python_code(graph)
    assert mine is not None, "fxcut.torchrules.codegen refused a graph it should write"
    theirs = graph.python_code(root_module="self")
    assert mine.src == theirs.src
    assert _fields(mine) == _fields(theirs)


def assert_falls_back(graph: fx.Graph, root: torch.nn.Module | None = None) -> None:
    """fxcut's generator refuses ``graph``, and a module built under
    ``generated_code`` still holds exactly torch's code."""
    assert codegen.python_code(graph) is None
    if any(n.meta.get("is_wrapped") for n in graph.nodes):
        # Running such code registers the target with torch.fx.wrap, for the
        # whole process: refusing the graph is what is tested.
        return
    expected = graph.python_code(root_module="self")
    with codegen.generated_code(graph):
        gm = fx.GraphModule(root if root is not None else torch.nn.Module(), graph)
    assert "python_code" not in vars(graph)
    assert gm.code == expected.src
    assert gm._lineno_map == expected._lineno_map


@pytest.mark.parametrize("name", sorted(zoo.CASES))
def test_zoo_graphs_written_as_torch_writes_them(name: str) -> None:
    cap = zoo.capture(name)
    partitioners: list[tuple[str, Callable[..., Any]]] = [
        ("torch", torch_partition), ("fxcut", fxcut.min_cut_rematerialization_partition)]
    for who, partition in partitioners:
        joint = cap.fresh()
        fw, bw = partition(joint, cap.joint_inputs, *cap.partition_args, num_fwd_outputs=cap.num_fwd_outputs,
                           **cap.partition_kwargs)
        for part, graph in (("forward", fw.graph), ("backward", bw.graph)):
            mine = codegen.python_code(graph)
            if mine is None:
                # Only a graph outside the kind fxcut writes: a node that is not a
                # placeholder, output, or call of an operator overload or Python operator.
                outside = [n for n in graph.nodes if n.type is not None or not (
                    n.op in ("placeholder", "output") or isinstance(n.target, torch._ops.OpOverload)
                    or getattr(n.target, "__module__", "") == "_operator")]
                assert outside, (who, part)
                continue
            theirs = graph.python_code(root_module="self")
            assert mine.src == theirs.src, (who, part)
            assert _fields(mine) == _fields(theirs), (who, part)
        # The joint after DCE + CSE, as the partition left it.
        if fxcut.torchrules.codegen.python_code(joint.graph) is not None:
            assert_writes_as_torch(joint.graph)


def test_the_common_zoo_graphs_are_written_by_fxcut() -> None:
    """The fast path is really taken: on plain models every module's graph and
    the joint after CSE are written by fxcut, not handed back."""
    for name in ("gpt2", "llama", "mlp", "vit"):
        cap = zoo.capture(name)
        joint = cap.fresh()
        fw, bw = fxcut.min_cut_rematerialization_partition(
            joint, cap.joint_inputs, *cap.partition_args, num_fwd_outputs=cap.num_fwd_outputs,
            **cap.partition_kwargs)
        for graph in (fw.graph, bw.graph, joint.graph):
            assert_writes_as_torch(graph)


def _graph(build: Callable[[fx.Graph, list[fx.Node]], Any], n_inputs: int = 2) -> fx.Graph:
    g = fx.Graph()
    xs = [g.placeholder(f"x_{i}") for i in range(n_inputs)]
    out = build(g, xs)
    g.output(out)
    return g


def test_plain_values_written_as_torch_writes_them() -> None:
    def build(g: fx.Graph, xs: list[fx.Node]) -> Any:
        a, b = xs
        c = g.call_function(aten.add.Tensor, (a, b), {"alpha": 0.5})
        d = g.call_function(aten.mul.Scalar, (c, -0.0))
        e = g.call_function(aten.clamp.default, (d, -math.inf, math.inf))
        f = g.call_function(aten.add.Scalar, (e, math.nan))
        h = g.call_function(aten.div.Tensor_mode, (f, b), {"rounding_mode": "floor"})
        v = g.call_function(aten.view.default, (h, [2, -1]))
        t = g.call_function(aten._to_copy.default, (v,), {"dtype": torch.bfloat16, "layout": torch.strided,
                                                          "device": torch.device("cpu")})
        m = g.call_function(aten.clone.default, (t,), {"memory_format": torch.contiguous_format})
        s = g.call_function(aten.split.Tensor, (m, 1, 1))
        s0 = g.call_function(operator.getitem, (s, 0))
        g.call_function(aten.sum.dim_IntList, (s0, [0, 1], True))  # unused: freed where it is made
        cat = g.call_function(aten.cat.default, ([s0, a],), {"dim": 0})
        e5 = g.call_function(aten.mul.Scalar, (cat, 1e-05))
        big = g.call_function(aten.add.Scalar, (e5, 2 ** 70))
        flag = g.call_function(aten.le.Scalar, (big, True))
        none = g.call_function(aten.new_zeros.default, (flag, [1]), {"dtype": None, "pin_memory": False})
        return (none, s0, None)

    assert_writes_as_torch(_graph(build))


@pytest.mark.parametrize("output", ["single", "list", "bare", "nested"])
def test_outputs_written_as_torch_writes_them(output: str) -> None:
    def build(g: fx.Graph, xs: list[fx.Node]) -> Any:
        y = g.call_function(aten.relu.default, (xs[0],))
        return {"single": (y,), "list": [y, xs[1]], "bare": y, "nested": ((y, [xs[1], None]), 3)}[output]

    assert_writes_as_torch(_graph(build))


def test_python_operators_written_as_torch_writes_them() -> None:
    def build(g: fx.Graph, xs: list[fx.Node]) -> Any:
        a, b = xs
        s = g.call_function(operator.mul, (a, b))
        t = g.call_function(operator.floordiv, (s, 2))
        u = g.call_function(operator.neg, (t,))
        v = g.call_function(operator.eq, (u, a))
        return (s, t, u, v)

    assert_writes_as_torch(_graph(build))


def test_only_placeholders_and_output() -> None:
    assert_writes_as_torch(_graph(lambda g, xs: tuple(xs), n_inputs=3))


def test_freed_values_in_the_order_torch_frees_them() -> None:
    made: dict[str, fx.Node] = {}

    def build(g: fx.Graph, xs: list[fx.Node]) -> Any:
        a, b = xs
        c = g.call_function(aten.mm.default, (a, b))
        made["d"] = d = g.call_function(aten.add.Tensor, (c, a))  # frees c and a
        return (g.call_function(aten.add.Tensor, (d, b)),)  # frees d, then b

    g = _graph(build)
    assert_writes_as_torch(g)
    src = codegen.python_code(g).src  # type: ignore[union-attr]
    assert f";  {made['d'].name} = x_1 = None" in src


def _renamed(name: str) -> fx.Graph:
    def build(g: fx.Graph, xs: list[fx.Node]) -> Any:
        y = g.call_function(aten.relu.default, (xs[0],))
        y.name = name  # a name torch's fresh code namespace would change
        return (y,)

    return _graph(build)


@pytest.mark.parametrize("name", ["sum", "torch", "inf", "class", "self", "9lives", "a-b"])
def test_names_torch_would_change_fall_back(name: str) -> None:
    assert_falls_back(_renamed(name))


@pytest.mark.parametrize("name", ["add_01", "sum_1", "_", "relu_0_7", "Torch"])
def test_names_torch_keeps_are_written(name: str) -> None:
    assert_writes_as_torch(_renamed(name))


class _Root(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(2, 2)
        self.register_buffer("w", torch.ones(2))


def _fallback_graphs() -> dict[str, fx.Graph]:
    graphs: dict[str, fx.Graph] = {}

    def one(name: str, build: Callable[[fx.Graph, list[fx.Node]], Any]) -> None:
        graphs[name] = _graph(build)

    one("get_attr", lambda g, xs: (g.call_function(aten.add.Tensor, (xs[0], g.get_attr("w"))),))
    one("call_module", lambda g, xs: (g.call_module("lin", (xs[0],)),))
    one("call_method", lambda g, xs: (g.call_method("relu", (xs[0],)),))
    one("in-place python operator", lambda g, xs: (g.call_function(operator.iadd, (xs[0], xs[1])),))
    one("python function", lambda g, xs: (g.call_function(torch.relu, (xs[0],)),))
    one("complex", lambda g, xs: (g.call_function(aten.mul.Scalar, (xs[0], 1j)),))
    one("slice", lambda g, xs: (g.call_function(operator.getitem, (xs[0], slice(0, 1))),))
    one("op as argument", lambda g, xs: (g.call_function(aten.relu.default, (xs[0],), {"x": aten.relu.default}),))

    def typed(g: fx.Graph, xs: list[fx.Node]) -> Any:
        y = g.call_function(aten.relu.default, (xs[0],))
        y.type = torch.Tensor
        return (y,)

    one("type annotation", typed)

    def wrapped(g: fx.Graph, xs: list[fx.Node]) -> Any:
        y = g.call_function(aten.relu.default, (xs[0],))
        y.meta["is_wrapped"] = True
        return (y,)

    one("wrapped", wrapped)

    def default_arg(g: fx.Graph, xs: list[fx.Node]) -> Any:
        p = g.placeholder("p_default", default_value=3)
        return (g.call_function(aten.add.Scalar, (xs[0], p)),)

    one("placeholder default", default_arg)
    return graphs


@pytest.mark.parametrize("case", sorted(_fallback_graphs()))
def test_graphs_outside_its_kind_fall_back_to_torch(case: str) -> None:
    assert_falls_back(_fallback_graphs()[case], _Root())


def test_another_code_generator_falls_back() -> None:
    g = _graph(lambda g, xs: (g.call_function(aten.relu.default, (xs[0],)),))
    g._codegen = _PyTreeCodeGen(g._codegen.pytree_info if hasattr(g._codegen, "pytree_info") else None)  # type: ignore[arg-type]
    assert codegen.python_code(g) is None


def test_meta_in_code_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    g = _graph(lambda g, xs: (g.call_function(aten.relu.default, (xs[0],)),))
    assert codegen.python_code(g) is not None
    monkeypatch.setenv("FX_GRAPH_SHOW_META", "1")
    assert_falls_back(g)


def test_generated_code_only_for_the_plain_call_and_always_restored() -> None:
    g = _graph(lambda g, xs: (g.call_function(aten.relu.default, (xs[0],)),))
    with codegen.generated_code(g):
        # Any other call (verbose, profiler records, another root) is torch's.
        verbose = g.python_code(root_module="self", verbose=True)
        assert verbose.src == fx.Graph.python_code(g, root_module="self", verbose=True).src
        assert g.python_code(root_module="self", record_func=True).src == fx.Graph.python_code(
            g, root_module="self", record_func=True).src
        assert g.python_code(root_module="self").src == fx.Graph.python_code(g, root_module="self").src
    assert "python_code" not in vars(g)
    with pytest.raises(ZeroDivisionError):
        with codegen.generated_code(g):
            1 / 0
    assert "python_code" not in vars(g)


def test_the_module_built_under_it_runs() -> None:
    def build(g: fx.Graph, xs: list[fx.Node]) -> Any:
        c = g.call_function(aten.mm.default, (xs[0], xs[1]))
        s = g.call_function(aten.split.Tensor, (c, 1, 1))
        return (g.call_function(operator.getitem, (s, 1)), g.call_function(aten.mul.Scalar, (c, 0.5)))

    g = _graph(build)
    with codegen.generated_code(g):
        gm = fx.GraphModule(torch.nn.Module(), g)
    a, b = torch.randn(3, 2), torch.randn(2, 2)
    first, second = gm(a, b)
    torch.testing.assert_close(first, (a @ b)[:, 1:2])
    torch.testing.assert_close(second, (a @ b) * 0.5)
