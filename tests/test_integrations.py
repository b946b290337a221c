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
from fxcut.planned import ASK_TIME_LIMIT as ASK  # the check asks inductor only when told
import fxcut.torchrules.zero3
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
    """The nodes each of fxcut's ZeRO-3 walks tagged during the test (the
    walk runs inside the partition's guard: in C where fxcut decides, in
    Python where torch does; both are recorded)."""
    tagged: list[list[fx.Node]] = []

    def spying(walk):
        def spy(graph, positions, no_copy_ops=None):
            nodes = walk(graph, positions, no_copy_ops)
            tagged.append(nodes)
            return nodes
        return spy

    for name in ("c_walk", "reference_walk"):
        monkeypatch.setattr(fxcut.torchrules.zero3, name, spying(getattr(fxcut.torchrules.zero3, name)))
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


def _assert_step_matches_eager(model: nn.Module, compiled, x: torch.Tensor) -> None:
    """A step of ``compiled`` (``model`` compiled; its output is the loss)
    on ``x``: its gradients equal eager's."""
    _, got = _step(model, compiled, [x], lambda out, _: out)
    _, want = _step(model, model, [x], lambda out, _: out)
    for k in want:
        torch.testing.assert_close(got[k], want[k], rtol=1e-4, atol=1e-5, msg=lambda m: f"{k}: {m}")


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


class _Chain(nn.Module):
    """Six tanh layers: the backward reads each layer's saved output once,
    from the last layer down, so a program that frees each saved value
    after its last use holds less at its peak than one that keeps them all."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(256, 256) for _ in range(6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return x.sum()


def _measured_peak(backend) -> tuple[int, torch.Tensor]:
    from fxcut.tools.measure import profile_step

    torch.manual_seed(0)
    model = _Chain()
    x = torch.randn(512, 256)
    compiled = torch.compile(model, backend=backend)
    compiled(x).backward()  # compiles: the second step is measured
    model.zero_grad(set_to_none=True)
    loss, memory = profile_step(lambda: compiled(x))
    torch._dynamo.reset()
    return memory.peak_bytes, loss


#: Under scripts/sanitize.sh (ASan preloaded) torch's profiler aborts the process when it stops.
from profiled import UNDER_ASAN  # noqa: E402


@pytest.mark.skipif(UNDER_ASAN, reason="torch's profiler aborts under an LD_PRELOADed ASan runtime; "
                    "this test runs in scripts/test.sh")
def test_aot_backend_runs_what_aot_eager_runs(fresh_compile):
    """fxcut.aot_backend() frees each saved value after its last use, as
    torch's aot_eager does: the same decision, the same measured peak, and
    below the program that keeps every saved value through the backward
    (AOT Autograd with the unboxed no-op compilers)."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.compilers import nop

    ours, loss = _measured_peak(fxcut.aot_backend())
    theirs, loss_t = _measured_peak("aot_eager")
    kept, _ = _measured_peak(aot_autograd(fw_compiler=nop, bw_compiler=nop,
                                          partition_fn=fxcut.min_cut_rematerialization_partition))
    assert ours == theirs
    torch.testing.assert_close(loss, loss_t)
    # the six saved activations, 512 x 256 floats each: freeing them as the
    # backward goes lowers the peak by at least one of them
    assert kept - ours >= 512 * 256 * 4


def test_aot_backend_keeps_inference_input_mutations(fresh_compile):
    """Without gradients, an input mutated by the function stays in the
    compiled graph (``keep_inference_input_mutations=True``, as aot_eager),
    and a user's AOT Autograd keyword still overrides it."""
    from torch._dynamo.backends.debugging import boxed_nop

    def graphs(backend_of):
        seen: list[str] = []

        def record(gm, example_inputs):
            seen.append(gm.code)
            return boxed_nop(gm, example_inputs)

        def f(x: torch.Tensor) -> torch.Tensor:
            x.add_(1)
            return x * 2

        with torch.no_grad():
            x = torch.zeros(4)
            out = torch.compile(f, backend=backend_of(record))(x)
        torch._dynamo.reset()
        assert torch.equal(x, torch.ones(4)) and torch.equal(out, torch.full((4,), 2.0))
        return seen

    from torch._dynamo.backends.debugging import aot_eager

    ours = graphs(lambda record: fxcut.aot_backend(fw_compiler=record))
    theirs = graphs(lambda record: lambda gm, inputs: aot_eager(gm, inputs, fw_compiler=record))
    off = graphs(lambda record: fxcut.aot_backend(fw_compiler=record, keep_inference_input_mutations=False))
    assert ours == theirs and len(ours) == 1
    assert "copy_" in ours[0]
    assert "copy_" not in off[0]


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


# --------------------------------------------------------------------------- dynamic shapes


class _Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(64, 128), nn.Linear(128, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.relu(self.a(x))).tanh().sum()


@pytest.fixture
def plan_inputs_seen(monkeypatch):
    """Every PlanInputs the route made during the test."""
    seen = []
    made = fxcut.route.decide.plan_inputs

    def spy(*args, **kwargs):
        inputs = made(*args, **kwargs)
        seen.append(inputs)
        return inputs

    monkeypatch.setattr(fxcut.route.decide, "plan_inputs", spy)
    return seen


def test_a_plan_under_inductor_keeps_dynamic_shapes_dynamic(fresh_compile, plan_inputs_seen):
    """inductor_backend(memory_budget=b) with dynamic=True compiles once for
    many batch sizes: the plan asks inductor at the traced sizes on modules
    of its own (an ask on the compile's ShapeEnv would specialize them: a
    recompile per size); gradients equal eager."""
    from torch._dynamo.testing import CompileCounterWithBackend

    torch.manual_seed(0)
    model = _Mlp()
    counter = CompileCounterWithBackend(fxcut.inductor_backend(memory_budget=0.5, check_time_limit=ASK))
    compiled = torch.compile(model, backend=counter, dynamic=True)
    for batch in (4, 8, 16):
        x = torch.randn(batch, 64)
        _assert_step_matches_eager(model, compiled, x)
    assert counter.frame_count == 1
    assert plan_inputs_seen and all(i.ask is not None and i.no_ask == "" for i in plan_inputs_seen)
    report = fxcut.last_plans()[-1].choice.check
    assert report is not None and report.torch_asked and not report.skipped and not report.failed, report


def test_a_plan_under_inductor_rests_on_the_model_unless_told(fresh_compile, plan_inputs_seen):
    """inductor_backend(memory_budget=b) plans on the inductor memory model
    alone: inductor is not asked (the report says why and how to ask), and
    the step's gradients equal eager's."""
    torch.manual_seed(0)
    model = _Mlp()
    x = torch.randn(8, 64)
    _assert_step_matches_eager(model, torch.compile(model, backend=fxcut.inductor_backend(memory_budget=0.0)), x)
    report = fxcut.last_plans()[-1].choice.check
    assert report is not None and not report.asked and not report.torch_asked, report
    assert "not asked" in report.skipped and "check_time_limit" in report.skipped, report.skipped


class _Attention(nn.Module):
    """A projection into causal SDPA: inductor lowers SDPA as a fallback
    kernel, which runs on fake tensors while the check asks."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(64, 192)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).view(x.shape[0], x.shape[1], 3, 4, 16).permute(2, 0, 3, 1, 4)
        return nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).sum()


def test_a_plan_under_inductor_asks_attention_with_dynamic_shapes(fresh_compile):
    """dynamic=True on a model with attention: the check lowers SDPA's
    fallback kernel on fake tensors of its own (not the compile's active
    fake mode), is asked, and compiles as often as stock inductor does over
    the same batch sizes (inductor's C++ code guards one size threshold of
    its own: ``need_use_acc_helper``)."""
    from torch._dynamo.testing import CompileCounterWithBackend

    batches = (8, 3, 5, 2)
    stock = CompileCounterWithBackend("inductor")
    stock_compiled = torch.compile(_Attention(), backend=stock, dynamic=True)
    for batch in batches:
        stock_compiled(torch.randn(batch, 16, 64)).backward()
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = _Attention()
    counter = CompileCounterWithBackend(fxcut.inductor_backend(memory_budget=0.0, check_time_limit=ASK))
    compiled = torch.compile(model, backend=counter, dynamic=True)
    for batch in batches:
        x = torch.randn(batch, 16, 64)
        _assert_step_matches_eager(model, compiled, x)
    assert counter.frame_count == stock.frame_count < len(batches)
    report = fxcut.last_plans()[-1].choice.check
    assert report is not None and report.torch_asked and not report.skipped and not report.failed, report


def test_a_plan_under_inductor_accepts_mark_dynamic(fresh_compile, plan_inputs_seen):
    """mark_dynamic on the batch dimension compiles (stock inductor does)
    and is asked about at its traced sizes, as a static graph is."""
    from torch._dynamo.testing import CompileCounterWithBackend

    torch.manual_seed(0)
    counter = CompileCounterWithBackend(fxcut.inductor_backend(memory_budget=0.5, check_time_limit=ASK))
    compiled = torch.compile(_Mlp(), backend=counter)
    x = torch.randn(8, 64)
    torch._dynamo.mark_dynamic(x, 0)
    compiled(x).backward()
    compiled(torch.randn(16, 64)).backward()
    assert counter.frame_count == 1
    assert plan_inputs_seen[-1].ask is not None and plan_inputs_seen[-1].no_ask == ""

    torch._dynamo.reset()
    plan_inputs_seen.clear()
    torch.compile(_Mlp(), backend=fxcut.inductor_backend(memory_budget=0.5, check_time_limit=ASK))(
        torch.randn(8, 64)).backward()
    assert plan_inputs_seen and plan_inputs_seen[-1].ask is not None and plan_inputs_seen[-1].no_ask == ""
