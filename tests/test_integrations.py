"""fxcut behind torch.compile: inductor and AOT Autograd backends (CPU)."""

from __future__ import annotations

import pickle

import pytest
import torch
import torch.fx as fx
import torch.nn as nn

from functorch.compile import make_boxed_func

import fxcut
import fxcut.route.decide
import fxcut.partition
import fxcut.zero3
from fxcut.integrations.torch_compile import InductorPartitioner, zero3_param_indices
from fxcut.tools.models import build_model


@pytest.fixture
def fresh_compile():
    """No cached compilation: every compile partitions (inductor's FX graph
    cache and AOT Autograd's cache would otherwise skip the partitioner)."""
    torch._dynamo.reset()
    with torch._inductor.config.patch(fx_graph_cache=False), \
            torch._functorch.config.patch(enable_autograd_cache=False):
        yield
    torch._dynamo.reset()


@pytest.fixture
def decisions(monkeypatch):
    """Every decision fxcut's C core makes during the test, as (nodes, saved) pairs."""
    made: list[tuple[int, int]] = []
    decide = fxcut.route.decide.decide_plan  # every partition decides through it

    def spy(*args, **kwargs):
        chosen = decide(*args, **kwargs)
        made.append((len(chosen.decision.arrays), len(chosen.decision.saved)))
        return chosen

    monkeypatch.setattr(fxcut.route.decide, "decide_plan", spy)
    return made


@pytest.fixture
def walks(monkeypatch):
    """The nodes each ZeRO-3 walk tagged during the test."""
    tagged: list[list[fx.Node]] = []
    walk = fxcut.zero3.recompute_param_aliases

    def spy(graph, param_indices, **kwargs):
        nodes = walk(graph, param_indices, **kwargs)
        tagged.append(nodes)
        return nodes

    monkeypatch.setattr(fxcut.zero3, "recompute_param_aliases", spy)
    return tagged


def _step(model: nn.Module, run, inputs, loss_fn) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    for p in model.parameters():
        p.grad = None
    loss = loss_fn(run(*inputs), inputs)
    loss.backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters()}
    return loss.detach(), grads


def _assert_compiled_matches_eager(compile_kwargs, name: str = "mlp", rtol: float = 1e-4, atol: float = 1e-5,
                                   built=None, **cfg):
    model, make_inputs, loss_fn = built or build_model(name, **cfg)
    inputs = make_inputs()
    compiled = torch.compile(model, **compile_kwargs)
    loss_c, grads_c = _step(model, compiled, inputs, loss_fn)
    loss_e, grads_e = _step(model, model, inputs, loss_fn)
    torch.testing.assert_close(loss_c, loss_e, rtol=rtol, atol=atol)
    assert grads_c.keys() == grads_e.keys()
    for k in grads_e:
        torch.testing.assert_close(grads_c[k], grads_e[k], rtol=rtol, atol=atol, msg=lambda m: f"{k}: {m}")
    return model


# --------------------------------------------------------------------------- inductor


def test_inductor_backend_partitions_with_fxcut_and_walks_zero3_params(fresh_compile, decisions, walks):
    _assert_compiled_matches_eager(dict(backend=fxcut.inductor_backend(zero3_params=True)))
    assert len(decisions) == 1
    nodes, saved = decisions[0]
    assert nodes > 0 and saved > 0
    # Every Linear weight reaches its matmul through a transpose: the walk tags them.
    assert len(walks) == 1
    assert {str(n.target) for n in walks[0]} & {"aten.t.default", "aten.permute.default"}


def test_inductor_option_custom_partitioner_fn_partitions_with_fxcut(fresh_compile, decisions, walks):
    options = {"custom_partitioner_fn": fxcut.InductorPartitioner()}
    _assert_compiled_matches_eager(dict(backend="inductor", options=options))
    assert len(decisions) == 1
    assert walks == []  # no ZeRO-3 parameters given


def test_inductor_backend_rejects_unknown_options():
    with pytest.raises(TypeError, match="no_such_option"):
        fxcut.inductor_backend(no_such_option=True)
    with pytest.raises(ValueError, match="custom_partitioner_fn"):
        fxcut.inductor_backend(custom_partitioner_fn=None)


def test_inductor_partitioner_cache_key_names_code_and_params():
    """Inductor pickles its config (this object too) and adds uuid() to its
    cache keys: both must be plain data naming fxcut's code and the walk."""
    a = InductorPartitioner()
    b = InductorPartitioner([(0, 7, torch.Size([4])), (2, 8, torch.Size([4]))])
    assert a.uuid() == InductorPartitioner().uuid()
    assert a.uuid() != b.uuid()
    assert a.uuid()[0] == b.uuid()[0] and len(a.uuid()[0]) == 64
    assert b.uuid()[1] == (0, 2)
    again = pickle.loads(pickle.dumps(b))
    assert again.param_indices == b.param_indices and again.uuid() == b.uuid()


# --------------------------------------------------------------------------- aot_autograd


def test_aot_backend_partitions_with_fxcut(fresh_compile, decisions, walks):
    _assert_compiled_matches_eager(dict(backend=fxcut.aot_backend()), "gpt2", layers=1)
    assert len(decisions) == 1 and decisions[0][1] > 0
    assert walks == []


def test_aot_backend_walks_the_given_parameters_only(fresh_compile, decisions, walks):
    built = build_model("mlp")
    head = [built.model.head.weight, built.model.head.bias]
    saw_tags: list[bool] = []

    def fw_compiler(gm, example_inputs):
        saw_tags.append(any("recompute" in n.meta for n in gm.graph.nodes))
        return make_boxed_func(gm)

    backend = fxcut.aot_backend(fw_compiler=fw_compiler, zero3_params=head)
    _assert_compiled_matches_eager(dict(backend=backend), built=built)
    assert len(decisions) == 1 and len(walks) == 1 and saw_tags
    tagged = walks[0]
    assert tagged, "the head weight's transpose should be tagged"
    # Every tagged node is an alias of a head parameter: follow its first
    # positional node argument back to a placeholder.
    head_shapes = {tuple(p.shape) for p in head}
    roots = set()
    for node in tagged:
        while node.op != "placeholder":
            node = next(a for a in node.args if isinstance(a, fx.Node))
        roots.add(node)
    assert roots and {tuple(r.meta["val"].shape) for r in roots} <= head_shapes


# --------------------------------------------------------------------------- zero3_params


def _graph_module() -> fx.GraphModule:
    return fx.GraphModule(nn.Module(), fx.Graph())


def test_zero3_param_indices_forms():
    a, b = nn.Parameter(torch.ones(2, 3)), nn.Parameter(torch.ones(4))
    x = torch.ones(5)
    inputs = [x, a, b]
    gm = _graph_module()
    assert zero3_param_indices(gm, inputs, None) == []
    assert zero3_param_indices(gm, inputs, True) == [(1, 1, a.shape), (2, 2, b.shape)]
    assert zero3_param_indices(gm, inputs, [b]) == [(2, 2, b.shape)]
    owner = nn.Module()
    owner.w = a
    assert zero3_param_indices(gm, inputs, owner) == [(1, 1, a.shape)]
    triples = [(0, 5, torch.Size([5]))]
    assert zero3_param_indices(gm, inputs, triples) == triples
    b.ds_id, b.ds_shape = 42, torch.Size([8])
    assert zero3_param_indices(gm, inputs, [b]) == [(2, 42, torch.Size([8]))]
    with pytest.raises(TypeError, match=r"zero3_params\[0\]"):
        zero3_param_indices(gm, inputs, ["w"])


def test_zero3_param_indices_count_the_modules_own_parameters_first():
    owner = nn.Linear(2, 2)
    graph = fx.Graph()
    graph.output((graph.get_attr("weight"), graph.get_attr("bias")))
    gm = fx.GraphModule(owner, graph)
    p = nn.Parameter(torch.ones(3))
    # weight, bias are primals 0 and 1; the graph input p is primal 2.
    assert zero3_param_indices(gm, [p], [p]) == [(2, 2, p.shape)]
    assert [i for i, _, _ in zero3_param_indices(gm, [p], True)] == [0, 1, 2]


def test_backends_are_exported_lazily():
    assert "inductor_backend" in dir(fxcut) and "aot_backend" in fxcut.__all__
    assert fxcut.InductorPartitioner is InductorPartitioner
    with pytest.raises(AttributeError):
        fxcut.no_such_name  # noqa: B018
