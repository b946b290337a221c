"""Models whose training step torch's partitioner breaks, and what fxcut does instead.

Small models in plain torch, compiled whole (dynamo + AOT Autograd, no-op
compilers: eager kernels), one training step each, at
``activation_memory_budget`` b in (0, 0.3, 0.7, 1):

- batch norm, which reads running statistics the step updates: a
  ResNet-style block, a MobileNet-style inverted residual (depthwise
  convolution, batch norm, hardswish), a Conformer-style convolution
  module (depthwise conv1d, batch norm, SiLU, dropout);
- the same hazards where torch fails at b=1 too: batch norm inside
  ``torch.utils.checkpoint``, and a buffer read and then updated in place;
- a transformer MLP block (no batch norm, no random op) and dropout inside
  ``torch.utils.checkpoint`` (torch replays its RNG state), where torch is
  right: no warning.

Asserted for each: ``safe_budget=True`` (``fxcut.aot_backend(safe_budget=True)``)
and the plan (``fxcut.aot_backend(memory_budget=b)``) train to eager's loss,
gradients and running statistics; fxcut's default path makes torch's
decision (the same step, or the same error) and warns
(``fxcut.UnsafeRecomputeWarning``) exactly where torch's step fails or its
gradients differ from eager's.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch._dynamo.backends.common import aot_autograd
from torch._functorch import config as functorch_config
from torch._functorch.compilers import nop
from torch._functorch.partitioners import min_cut_rematerialization_partition as torch_min_cut
from torch.utils.checkpoint import checkpoint

import fxcut
from fxcut.route import safety

BUDGETS = (0.0, 0.3, 0.7, 1.0)


class ResNetBlock(nn.Module):
    def __init__(self, c: int = 8) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.conv2, self.bn2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(h)) + x)


class MobileNetBlock(nn.Module):
    """An inverted residual: expand, depthwise, project, each with batch norm."""

    def __init__(self, c: int = 8, expand: int = 3) -> None:
        super().__init__()
        e = c * expand
        self.expand, self.bn1 = nn.Conv2d(c, e, 1, bias=False), nn.BatchNorm2d(e)
        self.depthwise, self.bn2 = nn.Conv2d(e, e, 3, padding=1, groups=e, bias=False), nn.BatchNorm2d(e)
        self.project, self.bn3 = nn.Conv2d(e, c, 1, bias=False), nn.BatchNorm2d(c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.hardswish(self.bn1(self.expand(x)))
        h = F.hardswish(self.bn2(self.depthwise(h)))
        return x + self.bn3(self.project(h))


class ConformerConvModule(nn.Module):
    """Conformer's convolution module: pointwise conv + GLU, depthwise
    conv1d, batch norm, SiLU, pointwise conv, dropout, residual."""

    def __init__(self, d: int = 16, kernel: int = 5) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.pointwise1 = nn.Conv1d(d, 2 * d, 1)
        self.depthwise = nn.Conv1d(d, d, kernel, padding=kernel // 2, groups=d)
        self.bn = nn.BatchNorm1d(d)
        self.pointwise2 = nn.Conv1d(d, d, 1)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(x).transpose(1, 2)
        h = F.glu(self.pointwise1(h), dim=1)
        h = F.silu(self.bn(self.depthwise(h)))
        h = self.dropout(self.pointwise2(h))
        return x + h.transpose(1, 2)


class CheckpointedBatchNorm(nn.Module):
    """Conv + batch norm inside ``torch.utils.checkpoint`` (the joint graph
    tags them MUST/PREFER_RECOMPUTE)."""

    def __init__(self, c: int = 8) -> None:
        super().__init__()
        self.conv, self.bn = nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return checkpoint(lambda y: F.relu(self.bn(self.conv(y))), x, use_reentrant=False) + x


class BufferUpdatedInPlace(nn.Module):
    """A buffer read by the forward, then updated in place (a running scale)."""

    def __init__(self, c: int = 8) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1)
        self.register_buffer("scale", torch.ones(c, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv(x)
        out = (h * self.scale.exp()).sin()
        self.scale.mul_(0.9).add_(0.1 * h.detach().mean((0, 2, 3)).view(-1, 1, 1))
        return out


class TransformerMLP(nn.Module):
    def __init__(self, d: int = 16) -> None:
        super().__init__()
        self.norm, self.fc1, self.fc2 = nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


class CheckpointedDropout(nn.Module):
    def __init__(self, d: int = 16) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        def block(y: torch.Tensor) -> torch.Tensor:
            return self.fc2(F.dropout(F.gelu(self.fc1(y)), 0.3, training=True))

        return x + checkpoint(block, x, use_reentrant=False)


class Case(NamedTuple):
    model: Callable[[], nn.Module]
    input_shape: tuple[int, ...]
    #: the budgets at which torch's own step fails or differs from eager
    #: (what the test finds, pinned: the README's figures)
    torch_wrong_at: tuple[float, ...]
    #: eager mode's running statistics are not a compiled step's: eager
    #: checkpointing runs the batch norm again in the backward (a second
    #: update); a compiled step traces it once
    same_buffers_as_eager: bool = True


CASES: dict[str, Case] = {
    "resnet_block": Case(ResNetBlock, (2, 8, 8, 8), (0.0, 0.3, 0.7)),
    "mobilenet_block": Case(MobileNetBlock, (2, 8, 8, 8), (0.0, 0.3, 0.7)),
    "conformer_conv": Case(ConformerConvModule, (2, 12, 16), (0.0, 0.3, 0.7)),
    "checkpointed_batch_norm": Case(CheckpointedBatchNorm, (2, 8, 8, 8), BUDGETS, same_buffers_as_eager=False),
    "buffer_updated_in_place": Case(BufferUpdatedInPlace, (2, 8, 8, 8), BUDGETS),
    "transformer_mlp": Case(TransformerMLP, (2, 12, 16), ()),
    "checkpointed_dropout": Case(CheckpointedDropout, (2, 12, 16), ()),
}


class Step(NamedTuple):
    loss: torch.Tensor
    grads: dict[str, torch.Tensor | None]
    buffers: dict[str, torch.Tensor]


def run(name: str, backend: Any = None, budget: float = 1.0) -> Step:
    """One training step of case ``name`` (built afresh from one seed,
    the global RNG seeded alike), compiled with ``backend`` (eager when
    None) under ``activation_memory_budget=budget``."""
    case = CASES[name]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = case.model()
        x = torch.randn(case.input_shape)
        weights = torch.linspace(-1, 1, x.numel()).view(x.shape)
        torch._dynamo.reset()
        try:
            fn = torch.compile(model, backend=backend, fullgraph=True) if backend is not None else model
            torch.manual_seed(1)
            with functorch_config.patch(activation_memory_budget=budget):
                loss = (fn(x) * weights).sum()
                loss.backward()
        finally:
            torch._dynamo.reset()
    return Step(loss.detach(), {k: p.grad for k, p in model.named_parameters()},
                {k: b.clone() for k, b in model.named_buffers()})


def same_step(a: Step, b: Step, *, buffers: bool = True) -> bool:
    try:
        torch.testing.assert_close(a.loss, b.loss, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(a.grads, b.grads, rtol=1e-4, atol=1e-5)
        if buffers:
            torch.testing.assert_close(a.buffers, b.buffers, rtol=1e-4, atol=1e-5)
    except AssertionError:
        return False
    return True


TORCH = aot_autograd(fw_compiler=nop, bw_compiler=nop, partition_fn=torch_min_cut)


def SAME_AOT_AS_TORCH(**kwargs: Any) -> Any:  # noqa: N802 - a backend, named as TORCH is
    """fxcut's backend running AOT Autograd as :data:`TORCH` does (its
    compilers, input mutations applied outside the graph), so that the
    partitioner alone differs: ``aot_backend()``'s own defaults are
    ``aot_eager``'s."""
    return fxcut.aot_backend(fw_compiler=nop, bw_compiler=nop, keep_inference_input_mutations=False, **kwargs)


def outcome(name: str, backend: Any, budget: float) -> Step | str:
    """The step, or the error's first line when the step fails."""
    try:
        return run(name, backend, budget)
    except Exception as e:  # noqa: BLE001 - torch's failing step is what is measured
        return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"


#: each test starts and ends with no UnsafeRecomputeWarning already given (conftest.py)
pytestmark = pytest.mark.usefixtures("fresh_unsafe_warnings")


@pytest.mark.fidelity
@pytest.mark.parametrize("name", CASES)
def test_safe_budget_and_the_plan_train_like_eager_at_every_budget(name: str) -> None:
    ref = run(name)
    buffers = CASES[name].same_buffers_as_eager
    for b in BUDGETS:
        with warnings.catch_warnings():
            warnings.simplefilter("error", fxcut.UnsafeRecomputeWarning)
            safe = run(name, fxcut.aot_backend(safe_budget=True), b)
        assert same_step(safe, ref, buffers=buffers), f"safe_budget=True at activation_memory_budget={b}"
        planned = run(name, fxcut.aot_backend(memory_budget=b))
        assert same_step(planned, ref, buffers=buffers), f"aot_backend(memory_budget={b})"


@pytest.mark.fidelity
@pytest.mark.parametrize("name", CASES)
def test_the_default_path_warns_exactly_where_torchs_step_fails(name: str) -> None:
    ref = run(name)
    wrong_at = []
    for b in BUDGETS:
        theirs = outcome(name, TORCH, b)
        safety.reset_warnings()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ours = outcome(name, SAME_AOT_AS_TORCH(), b)
        messages = [str(w.message) for w in caught if issubclass(w.category, fxcut.UnsafeRecomputeWarning)]
        # torch's decision: the same error, or the same step to the bit
        if isinstance(theirs, str) or isinstance(ours, str):
            assert ours == theirs, f"budget {b}: torch {theirs!r}, fxcut {ours!r}"
        else:
            torch.testing.assert_close(ours, theirs, rtol=0, atol=0)
        wrong = isinstance(theirs, str) or not same_step(theirs, ref, buffers=CASES[name].same_buffers_as_eager)
        assert bool(messages) == wrong, (f"activation_memory_budget={b}: torch's step "
                                         f"{theirs if isinstance(theirs, str) else 'ok'}, warnings {messages}")
        if wrong:
            wrong_at.append(b)
            assert all("safe_budget=True" in m for m in messages)
    assert tuple(wrong_at) == CASES[name].torch_wrong_at


def joint(name: str) -> tuple[torch.fx.GraphModule, dict[str, Any]]:
    """The joint graph AOT Autograd hands the partitioner for case
    ``name``, and the partitioner's keyword arguments."""
    from fxcut.torchrules.snapshot import copy_graph_module

    got: list[tuple[torch.fx.GraphModule, dict[str, Any]]] = []

    def keep(gm: torch.fx.GraphModule, joint_inputs: Any, *args: Any, **kwargs: Any) -> Any:
        got.append((copy_graph_module(gm), kwargs))
        return torch_min_cut(gm, joint_inputs, *args, **kwargs)

    outcome(name, aot_autograd(fw_compiler=nop, bw_compiler=nop, partition_fn=keep), 1.0)  # torch's step may fail
    return got[0]


@pytest.mark.parametrize("name", ["resnet_block", "checkpointed_batch_norm", "buffer_updated_in_place",
                                  "conformer_conv"])
def test_the_plans_roles_never_recompute_a_reader_of_mutated_state(name: str) -> None:
    """Batch norm (tagged to be recomputed or not), a reader of a buffer the
    step updates, and dropout are SAVE in the plan's roles; the inputs the
    step mutates are read from AOT Autograd's output descriptors."""
    from fxcut import _C
    from fxcut.route.decide import decide_plan
    from fxcut.route.lower import lower_plan
    from fxcut.route.plan import make_plan
    from fxcut.solve.hazards import MUTATED_STATE, RANDOM
    from fxcut.solve.roles import plan_roles
    from fxcut.tools.decisions import torch_now
    from fxcut.torchrules.hazards import mutated_inputs

    gm, kwargs = joint(name)
    plan = make_plan(gm, torch_now(), num_fwd_outputs=kwargs["num_fwd_outputs"],
                     static_lifetime_input_indices=kwargs.get("static_lifetime_input_indices"))
    decision = decide_plan(plan, lower_plan(plan)).decision
    arrays = decision.arrays
    hazards = plan.torch.unsafe(arrays)
    unsafe, mutated = hazards.bits, mutated_inputs(arrays)
    roles = plan_roles(decision, hazards, plan.torch.seeded(arrays))
    model = CASES[name].model()
    # one mutated input per buffer the model updates (running mean, var, count; the scale)
    assert sum(mutated) == len(list(model.buffers()))
    readers = [i for i, bits in enumerate(unsafe) if bits & MUTATED_STATE]
    assert readers, "no reader of mutated state found"
    for i in readers:
        assert roles[i] == _C.PLAN_ROLE_SAVE, arrays.nodes[i].name
    bn = torch.ops.aten._native_batch_norm_legit_functional.default
    assert {arrays.nodes[i].target for i in readers} >= ({bn} if "batch_norm" in name or "block" in name
                                                        or "conformer" in name else set())
    for i, bits in enumerate(unsafe):
        if bits & RANDOM:
            assert roles[i] == _C.PLAN_ROLE_SAVE, arrays.nodes[i].name
    assert any(bits & RANDOM for bits in unsafe) == (name == "conformer_conv")


def test_the_warning_names_the_batch_norm_and_the_running_statistics() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outcome("resnet_block", fxcut.aot_backend(), 0.0)
    messages = [str(w.message) for w in caught if issubclass(w.category, fxcut.UnsafeRecomputeWarning)]
    assert len(messages) == 1, messages  # once per op and reason, however many batch norms recompute
    assert "aten._native_batch_norm_legit_functional.default" in messages[0]
    assert "activation_memory_budget=0" in messages[0] and "version check" in messages[0]
    assert "primals_" in messages[0]  # the running statistic it reads


def test_without_aot_descriptors_the_running_statistics_are_still_found() -> None:
    """A joint graph from another tracer has no ``meta["desc"]``: the
    inputs a ``*_functional`` op reads and no backward op does (batch
    norm's running mean and variance) are taken as mutated."""
    from fxcut.route.lower import lower_plan
    from fxcut.route.plan import make_plan
    from fxcut.solve.hazards import MUTATED_STATE
    from fxcut.tools.decisions import torch_now
    from fxcut.torchrules.hazards import mutated_inputs

    gm, kwargs = joint("resnet_block")
    for node in gm.graph.nodes:
        node.meta.pop("desc", None)
    plan = make_plan(gm, torch_now(), num_fwd_outputs=kwargs["num_fwd_outputs"])
    arrays = lower_plan(plan)
    mutated = [arrays.nodes[i] for i, m in enumerate(mutated_inputs(arrays)) if m]
    bn = torch.ops.aten._native_batch_norm_legit_functional.default
    running = [n.args[k] for n in gm.graph.nodes if n.target is bn for k in (3, 4)]
    assert [n.name for n in mutated] == [n.name for n in running] and len(running) == 4
    readers = {arrays.nodes[i].target for i, bits in enumerate(plan.torch.unsafe(arrays).bits) if bits & MUTATED_STATE}
    assert readers == {bn}
