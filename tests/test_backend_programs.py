"""The memory models are the programs the eager-kernel backends run.

torch's ``aot_eager`` (and :func:`fxcut.aot_backend`) run the forward and
backward modules op by op through the boxed no-op compilers: each saved
value is freed after its last use in the backward -- the ``"unfused"``
model.  AOT Autograd with the unboxed no-op compilers, like DeepSpeed
DeepCompile's eager backend (``make_boxed_func(gm.forward)``), keeps the
backward's argument list alive through the call: every saved value is held
to the backward's end -- the ``"unfused_held"`` model.  Measured here with
the profiler's CPU allocation events against the model of the very
decision torch made; the figures agree to the loss's own bytes.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn as nn
from torch._dynamo.backends.common import aot_autograd
from torch._dynamo.backends.debugging import boxed_nop
from torch._functorch.compilers import nop
from torch._functorch.partitioners import min_cut_rematerialization_partition as torch_min_cut

import fxcut
from fxcut.solve.memory import MEMORY_MODELS
from fxcut.tools.decisions import lower_graph, simulate_saved
from fxcut.tools.measure import profile_step
from profiled import needs_profiler, recording_partition

#: what a step allocates beyond the modules' activations that the model
#: leaves out: the loss (one float) and its gradient's scalar
SCALARS = 16


class Chain(nn.Module):
    """Tanh layers: the backward reads each layer's saved output once, from
    the last layer down."""

    def __init__(self, layers: int = 6, width: int = 256) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return x.sum()


def _measured(compiler: Any, layers: int) -> tuple[int, dict[str, Any]]:
    """The measured peak of one step compiled with ``compiler`` on both
    sides and torch's partitioner, and the joint graph and saved values
    that partitioner chose."""
    seen: dict[str, Any] = {}

    torch.manual_seed(0)
    model = Chain(layers)
    x = torch.randn(512, 256)
    compiled = torch.compile(model, backend=aot_autograd(fw_compiler=compiler, bw_compiler=compiler,
                                                         partition_fn=recording_partition(seen)))
    compiled(x).backward()  # compiles: the second step is measured
    model.zero_grad(set_to_none=True)
    _, memory = profile_step(lambda: compiled(x))
    torch._dynamo.reset()
    return memory.peak_bytes, seen


@pytest.fixture
def no_cache():
    torch._dynamo.reset()
    with torch._functorch.config.patch(enable_autograd_cache=False):
        yield
    torch._dynamo.reset()


def _modelled(seen: dict[str, Any], model: str) -> int:
    joint = seen["joint"]
    by_name = {n.name: n for n in joint.graph.nodes}
    saved = [by_name[name] for name in seen["saved"]]
    return simulate_saved(lower_graph(joint.graph), saved, seen["num_fwd_outputs"], model=model).peak_bytes


@needs_profiler
@pytest.mark.parametrize("layers", [3, 6])
def test_each_eager_program_measures_as_its_model(no_cache, layers):
    freed, seen = _measured(boxed_nop, layers)
    held, seen_held = _measured(nop, layers)
    assert seen["saved"] == seen_held["saved"] and len(seen["saved"]) >= layers
    unfused, unfused_held = _modelled(seen, "unfused"), _modelled(seen, "unfused_held")
    assert 0 <= freed - unfused <= SCALARS
    assert 0 <= held - unfused_held <= SCALARS
    # the difference is real: the held program keeps what the other frees
    assert unfused_held - unfused >= 512 * 256 * 4  # at least one saved activation


def test_the_held_model_is_a_model_name():
    assert "unfused_held" in MEMORY_MODELS
    planner = fxcut.planned_partitioner(0.5, memory_model="unfused_held").planner
    assert planner.memory_model == "unfused_held" and planner.check is None
    with pytest.raises(ValueError, match="memory_model"):
        fxcut.planned_partitioner(0.5, memory_model="held")
    # the exact solver describes the held model too (tests/test_exact.py checks it against the C model)
    assert fxcut.planned_partitioner(0.5, memory_model="unfused_held", solver="exact").planner.solver == "exact"


@needs_profiler
def test_the_plan_on_the_held_model_is_measured_under_the_held_program(no_cache):
    """The plan made on the held model, run with the unboxed compilers: its
    measured peak is its modelled peak, and at b=0 below torch's decision
    at activation_memory_budget=0 run the same way."""
    planned = fxcut.planned_partitioner(0.0, memory_model="unfused_held")

    def run(partition_fn: Any, budget: float) -> int:
        torch.manual_seed(0)
        model = Chain(6)
        x = torch.randn(512, 256)
        with torch._functorch.config.patch(activation_memory_budget=budget):
            compiled = torch.compile(model, backend=aot_autograd(fw_compiler=nop, bw_compiler=nop,
                                                                 partition_fn=partition_fn))
            compiled(x).backward()
        model.zero_grad(set_to_none=True)
        _, memory = profile_step(lambda: compiled(x))
        torch._dynamo.reset()
        return memory.peak_bytes

    plan_peak = run(planned, 1.0)
    choice = planned.planner.last
    assert choice is not None and choice.memory_model == "unfused_held"
    assert 0 <= plan_peak - choice.peak_bytes <= SCALARS
    assert plan_peak <= run(torch_min_cut, 0.0)
