"""A training step's peak memory, measured on CPU from the torch profiler's allocation events.

:func:`profile_step` runs ``forward()`` (which returns the loss) and the
loss's backward under ``torch.profiler.profile(profile_memory=True)`` and
replays every CPU allocation and free in order: the running sum's maximum is
the most bytes the step held at once beyond what was live when it started
(parameters and inputs are not counted; gradients the step creates are).
CPU allocation is deterministic, so the figure repeats exactly.

:func:`measured_peaks` compiles a model's step once per (partitioner,
budget), runs it once to compile, then profiles a second step: what the
``fxcut partition --peaks --real`` command prints.  The bench harness
(``bench/realmodels``) uses :func:`profile_step` too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx
import torch.nn as nn
from torch._inductor.custom_graph_pass import CustomPartitionerFn

from .capture import CaptureOptions, _compile_options, torch_min_cut_partition
from .models import LossFn

_FORWARD, _BACKWARD = "fxcut.measure.forward", "fxcut.measure.backward"


@dataclass(frozen=True)
class StepMemory:
    """Bytes a profiled step held beyond its start: the peak over the whole
    step, within the forward (``forward()``: the model and its loss) and
    within the backward; what the forward left alive for the backward; how
    many allocations the step made."""

    peak_bytes: int
    forward_peak_bytes: int
    backward_peak_bytes: int
    after_forward_bytes: int
    allocations: int


def profile_events(prof: Any, op_names: tuple[str, ...] = ()) -> tuple[list[tuple[int, int]], dict[str, tuple[int, int]]]:
    """A memory profile's CPU allocation events, ``(time ns, signed bytes)``
    in time order, and the ``(start, end)`` ns of the ops named ``op_names``
    (the last of each name)."""
    from torch._C._profiler import _EventType

    events: list[tuple[int, int]] = []
    ranges: dict[str, tuple[int, int]] = {}
    stack = list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        node = stack.pop()
        if node.tag == _EventType.TorchOp and node.name in op_names:
            ranges[node.name] = (node.start_time_ns, node.end_time_ns)
        elif node.tag == _EventType.Allocation and node.extra_fields.device.type == "cpu":
            events.append((node.start_time_ns, int(node.extra_fields.alloc_size)))
        stack.extend(node.children)
    events.sort(key=lambda e: e[0])
    return events, ranges


def step_memory(prof: Any) -> StepMemory:
    """:class:`StepMemory` of a profile that :func:`profile_step` recorded."""
    events, ranges = profile_events(prof, (_FORWARD, _BACKWARD))
    if _FORWARD not in ranges or _BACKWARD not in ranges:
        raise RuntimeError("the profile has no forward or no backward range: not recorded by profile_step")
    fw_end = ranges[_FORWARD][1]
    bw_start = ranges[_BACKWARD][0]
    live = peak = fw_peak = bw_peak = 0
    after_forward: int | None = None
    for t, delta in events:
        if after_forward is None and t > fw_end:
            after_forward = live
        live += delta
        peak = max(peak, live)
        if t <= fw_end:
            fw_peak = max(fw_peak, live)
        elif t >= bw_start:
            bw_peak = max(bw_peak, live)
    return StepMemory(peak, fw_peak, bw_peak, live if after_forward is None else after_forward,
                      sum(1 for _, d in events if d > 0))


def profile_step(forward: Callable[[], torch.Tensor]) -> tuple[torch.Tensor, StepMemory]:
    """Run ``loss = forward()`` then ``loss.backward()`` under the profiler;
    the loss (detached) and the step's :class:`StepMemory`."""
    import gc

    from torch.profiler import ProfilerActivity, profile, record_function

    gc.collect()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        with record_function(_FORWARD):
            loss = forward()
        with record_function(_BACKWARD):
            loss.backward()  # type: ignore[no-untyped-call]  # unannotated in torch
    return loss.detach(), step_memory(prof)


# --------------------------------------------------------------------------- one model, several partitions

#: A measured step's backend: "aot" (torch's ``aot_eager``: AOT Autograd
#: with the boxed no-op compilers, the FX modules run op by op and each saved
#: value freed after its last use, the program fxcut's memory model
#: describes; fxcut's side :func:`fxcut.aot_backend`, which runs the same)
#: or "inductor" (torch.compile's default backend).
MEASURE_BACKENDS = ("aot", "inductor")


class TorchAfterWalk(CustomPartitionerFn):
    """DeepCompile's partitioner under inductor (its ``custom_partitioner_fn``):
    torch's after the ZeRO-3 walk over the parameters at ``indices``."""

    def __init__(self, indices: Sequence[Any]) -> None:
        # plain data: inductor pickles its config, this object included, into its cache key
        self.indices = [(int(e[0]), int(e[1]), e[2]) for e in indices]

    def __call__(self, gm: fx.GraphModule, joint_inputs: Sequence[object], **kwargs: Any) -> Any:
        from ..zero3 import get_wrapped_partitioner

        return get_wrapped_partitioner(True, self.indices, torch_min_cut_partition)(gm, joint_inputs, **kwargs)

    def uuid(self) -> Any:
        return ("fxcut.tools.measure.TorchAfterWalk", repr(self.indices))


def _torch_inductor(zero3: bool) -> Any:
    """torch.compile's inductor; with ``zero3``, DeepCompile's program under
    inductor (:class:`TorchAfterWalk` over every parameter)."""
    if not zero3:
        return "inductor"
    from torch._inductor.compile_fx import compile_fx

    from ..integrations.torch_compile import zero3_param_indices

    def torch_inductor(gm: fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
        indices = zero3_param_indices(gm, example_inputs, True)
        return compile_fx(gm, example_inputs, config_patches={"custom_partitioner_fn": TorchAfterWalk(indices)})

    return torch_inductor


def _torch_backend(backend: str, zero3: bool) -> Any:
    from torch._dynamo.backends.common import aot_autograd
    from torch._dynamo.backends.debugging import boxed_nop

    from ..integrations.torch_compile import zero3_param_indices
    from ..zero3 import get_wrapped_partitioner

    if backend == "inductor":
        return _torch_inductor(zero3)

    def torch_aot(gm: fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
        indices = zero3_param_indices(gm, example_inputs, True if zero3 else None)
        partition_fn = get_wrapped_partitioner(bool(indices), indices, torch_min_cut_partition)
        # torch's aot_eager, with DeepCompile's walk before the partition under --zero3
        return aot_autograd(fw_compiler=boxed_nop, bw_compiler=boxed_nop, partition_fn=partition_fn,
                            keep_inference_input_mutations=True)(gm, example_inputs)

    return torch_aot


def _fxcut_backend(backend: str, zero3: bool, budget: float) -> Any:
    from ..integrations.torch_compile import aot_backend, inductor_backend

    zero3_params = True if zero3 else None
    if backend == "inductor":
        return inductor_backend(zero3_params=zero3_params, memory_budget=budget)
    return aot_backend(zero3_params=zero3_params, memory_budget=budget)


@contextlib.contextmanager
def _clean_dynamo() -> Iterator[None]:
    torch._dynamo.reset()
    try:
        yield
    finally:
        torch._dynamo.reset()


def measure_compiled_step(model: nn.Module, inputs: Sequence[Any], loss_fn: LossFn, compile_backend: Any, *,
                          options: CaptureOptions = CaptureOptions(), memory_budget: float | None = None
                          ) -> StepMemory:
    """Compile ``loss_fn(model(*inputs), inputs)`` with ``compile_backend``
    (torch's ``activation_memory_budget`` patched to ``memory_budget`` when
    given), run one step to compile it, then profile a second one."""
    from torch._functorch import config as functorch_config

    def step(*args: Any) -> torch.Tensor:
        return loss_fn(model(*args), args)

    budget = contextlib.nullcontext() if memory_budget is None else functorch_config.patch(
        activation_memory_budget=memory_budget)
    with _clean_dynamo(), _compile_options(model, options), budget:
        compiled = torch.compile(step, backend=compile_backend, fullgraph=True)
        model.zero_grad(set_to_none=True)
        compiled(*inputs).backward()  # type: ignore[no-untyped-call]  # unannotated in torch
        model.zero_grad(set_to_none=True)
        _, memory = profile_step(lambda: compiled(*inputs))
        model.zero_grad(set_to_none=True)
    return memory


def measured_peaks(model: nn.Module, inputs: Sequence[Any], loss_fn: LossFn, *, budgets: Sequence[float] = (0.0, 1.0),
                   backend: str = "aot", zero3: bool = False, options: CaptureOptions = CaptureOptions()
                   ) -> dict[str, dict[float, StepMemory]]:
    """One profiled step per side and budget: ``"torch"``, torch's
    partitioner at ``activation_memory_budget=b``; ``"plan"``,
    ``fxcut.planned_partitioner(memory_budget=b)``; both under ``backend``
    (:data:`MEASURE_BACKENDS`) and, with ``zero3``, after DeepCompile's walk
    over every parameter."""
    if backend not in MEASURE_BACKENDS:
        raise ValueError(f"backend {backend!r}: choose from {', '.join(MEASURE_BACKENDS)}")
    out: dict[str, dict[float, StepMemory]] = {"torch": {}, "plan": {}}
    torch_backend = _torch_backend(backend, zero3)
    for b in budgets:
        out["torch"][b] = measure_compiled_step(model, inputs, loss_fn, torch_backend, options=options,
                                                memory_budget=b)
        out["plan"][b] = measure_compiled_step(model, inputs, loss_fn, _fxcut_backend(backend, zero3, b),
                                               options=options)
    return out


__all__ = ["MEASURE_BACKENDS", "StepMemory", "TorchAfterWalk", "measure_compiled_step", "measured_peaks", "profile_events",
           "profile_step", "step_memory"]
