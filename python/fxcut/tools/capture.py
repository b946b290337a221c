"""Capture the joint forward+backward graph that AOT Autograd hands its partitioner.

:func:`capture` compiles ``loss_fn(model(*inputs), inputs)`` with
``torch.compile(backend=aot_autograd(..., partition_fn=recorder))``.  Dynamo
is in the loop on purpose: activation checkpointing and selective
checkpointing only reach the joint graph as ``meta["recompute"]`` /
``meta["ac_graph_id"]`` tags when dynamo traces ``torch.utils.checkpoint``.
The recorder keeps a private copy of everything the partitioner received,
then delegates (to torch's ``min_cut_rematerialization_partition`` by
default) so compilation completes.

Fake capture (``fake=True``): the model is built under a
``FakeTensorMode`` (the ``fxcut`` command does it), so its parameters are
fake tensors that claim ``device="cpu"`` but own no storage; compiling and
running the forward inside that mode gives exactly the joint graph of the
real CPU model -- CPU autocast included -- for any parameter count.  (A
model on the ``meta`` device is no substitute: CPU autocast does not apply to
meta tensors, and its joint graph comes out without a backward.)

Where dynamo's graph inputs land: AOT Autograd's primal placeholders are the
traced module's own parameters and buffers (none when dynamo lifts them,
which is the default), followed by dynamo's graph inputs in order.  So the
graph input ``k`` that is an ``nn.Parameter`` is primal ``offset + k``; the
recorder checks that every such placeholder has the parameter's shape.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx
import torch.nn as nn
import torch.utils.checkpoint
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.compilers import nop
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

from .models import BlockStack, LossFn
from ..torchrules.snapshot import copy_graph_module
from ..zero3 import ParamIndex, PartitionFn, primal_inputs

aten = torch.ops.aten


class CaptureError(RuntimeError):
    """The compiled model did not produce exactly one joint graph, or its inputs cannot be mapped."""


@dataclass(frozen=True)
class CaptureOptions:
    """How the model is compiled.

    - ``autocast_dtype``: run under ``torch.autocast("cpu", dtype=...)``.
    - ``checkpoint``: wrap each block in non-reentrant ``torch.utils.checkpoint``.
    - ``sac``: like ``checkpoint``, with :func:`sac_policy` (implies ``checkpoint``).
    - ``dynamic``: ``torch.compile(dynamic=True)``: symbolic input sizes.
    - ``fake``: the model's parameters are fake tensors (built under a ``FakeTensorMode``).
    - ``compiler``: ``"aot_eager"`` (AOT Autograd with no-op compilers) or
      ``"inductor"``: the joint graph inductor hands its partitioner (traced
      with inductor's decompositions, after its joint-graph passes); the
      compilation stops there, so no step runs and no kernel is built.
    """

    autocast_dtype: torch.dtype | None = None
    checkpoint: bool = False
    sac: bool = False
    dynamic: bool = False
    fake: bool = False
    compiler: str = "aot_eager"


def torch_min_cut_partition(*args: Any, **kwargs: Any) -> tuple[fx.GraphModule, fx.GraphModule]:
    """The installed torch's ``min_cut_rematerialization_partition``."""
    # torch's partitioner imports inductor (seconds): only when it partitions.
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    return min_cut_rematerialization_partition(*args, **kwargs)


_SAVED_BY_SAC = frozenset({aten.mm, aten.bmm, aten.addmm})


def sac_policy(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> torch.utils.checkpoint.CheckpointPolicy:
    """Selective checkpointing: save matmul outputs, prefer recomputing everything else."""
    if getattr(op, "overloadpacket", None) in _SAVED_BY_SAC:
        return torch.utils.checkpoint.CheckpointPolicy.MUST_SAVE
    return torch.utils.checkpoint.CheckpointPolicy.PREFER_RECOMPUTE


def sac_context_fn() -> tuple[contextlib.AbstractContextManager[None], contextlib.AbstractContextManager[None]]:
    """The forward's and the recomputation's contexts of :func:`sac_policy`."""
    contexts: tuple[contextlib.AbstractContextManager[None], contextlib.AbstractContextManager[None]] = (
        torch.utils.checkpoint.create_selective_checkpoint_contexts(sac_policy))  # type: ignore[no-untyped-call]
    return contexts


# --------------------------------------------------------------------------- copies


# --------------------------------------------------------------------------- the capture


@dataclass
class JointCapture:
    """What AOT Autograd handed the partitioner, kept pristine.

    ``gm`` is never given to a partitioner: call :meth:`fresh` for a copy that
    may be mutated, or :meth:`partition` to run a partitioner on one.
    """

    gm: fx.GraphModule
    joint_inputs: Any
    num_fwd_outputs: int
    partition_kwargs: dict[str, Any]
    param_indices: list[ParamIndex]
    param_names: list[str]
    options: CaptureOptions = field(default_factory=CaptureOptions)
    partition_args: tuple[Any, ...] = ()

    @property
    def graph(self) -> fx.Graph:
        return self.gm.graph

    @property
    def num_nodes(self) -> int:
        return len(self.gm.graph.nodes)

    def primals(self) -> list[fx.Node]:
        """The primal placeholders, in graph order."""
        n = len(self.joint_inputs[0])
        return [node for node in self.gm.graph.nodes if node.op == "placeholder"][:n]

    def tangents(self) -> list[fx.Node]:
        n = len(self.joint_inputs[0])
        return [node for node in self.gm.graph.nodes if node.op == "placeholder"][n:]

    def fresh(self) -> fx.GraphModule:
        """A copy of the joint graph module that a partitioner may mutate freely."""
        return copy_graph_module(self.gm)

    def partition(self, partition_fn: PartitionFn | None = None) -> tuple[fx.GraphModule, fx.GraphModule]:
        """Run ``partition_fn`` (torch's min-cut when None) on a fresh copy, as AOT Autograd calls it."""
        fn = partition_fn if partition_fn is not None else torch_min_cut_partition
        return fn(self.fresh(), self.joint_inputs, *self.partition_args,
                  num_fwd_outputs=self.num_fwd_outputs, **self.partition_kwargs)


def _compile_options(model: nn.Module, opts: CaptureOptions) -> contextlib.ExitStack:
    stack = contextlib.ExitStack()
    if opts.checkpoint or opts.sac:
        if not isinstance(model, BlockStack):
            raise TypeError(f"checkpoint/sac need a model made of blocks (fxcut.tools.models.BlockStack), "
                            f"got {type(model).__name__}")
        stack.enter_context(model.checkpointing(sac_context_fn if opts.sac else None))
    if opts.autocast_dtype is not None:
        stack.enter_context(torch.autocast("cpu", dtype=opts.autocast_dtype))
    return stack


def _fake_mode_of(model: nn.Module) -> FakeTensorMode | None:
    modes = {id(t.fake_mode): t.fake_mode for t in [*model.parameters(), *model.buffers()]
             if isinstance(t, FakeTensor)}
    if len(modes) > 1:
        raise CaptureError("the model's tensors belong to more than one FakeTensorMode")
    return next(iter(modes.values()), None)


def _param_indices(gm: fx.GraphModule, example_inputs: Sequence[Any],
                   names: dict[int, str], ds_ids: dict[int, int]) -> tuple[list[ParamIndex], list[str]]:
    indices: list[ParamIndex] = []
    found: list[str] = []
    for position, (name, t) in enumerate(primal_inputs(gm, example_inputs)):
        if not isinstance(t, nn.Parameter):
            continue
        if name is None and id(t) not in names:
            raise CaptureError(f"primal {position} is a parameter the model does not own")
        # The module's own parameters may be unknown to the model (ds_id -1).
        indices.append((position, ds_ids.get(id(t), -1), t.shape))
        found.append(names.get(id(t), name or ""))
    return indices, found


class PartitionRecorder:
    """A ``partition_fn`` that keeps a copy of its arguments, then delegates."""

    def __init__(self, delegate: PartitionFn = torch_min_cut_partition) -> None:
        self.delegate = delegate
        self.calls: list[dict[str, Any]] = []

    def __call__(self, joint_module: fx.GraphModule, joint_inputs: Any, *args: Any,
                 num_fwd_outputs: int, **kwargs: Any) -> tuple[fx.GraphModule, fx.GraphModule]:
        self.calls.append(dict(gm=copy_graph_module(joint_module), joint_inputs=joint_inputs,
                               args=args, num_fwd_outputs=num_fwd_outputs, kwargs=dict(kwargs)))
        return self.delegate(joint_module, joint_inputs, *args, num_fwd_outputs=num_fwd_outputs, **kwargs)


def _aot_backend(partition_fn: PartitionFn) -> Callable[..., Any]:
    def backend(gm: fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
        return aot_autograd(fw_compiler=nop, bw_compiler=nop, partition_fn=partition_fn)(gm, example_inputs)

    return backend


class _JointCaptured(Exception):
    """Raised by inductor's partitioner hook once the joint graph is copied:
    the compilation stops before any kernel is built."""


def _inductor_backend(recorder: PartitionRecorder) -> Callable[..., Any]:
    from torch._inductor.compile_fx import compile_fx
    from torch._inductor.custom_graph_pass import CustomPartitionerFn

    class RecordAndStop(CustomPartitionerFn):
        def __call__(self, gm: fx.GraphModule, joint_inputs: Sequence[object], **kwargs: Any
                     ) -> tuple[fx.GraphModule, fx.GraphModule]:
            num_fwd_outputs = kwargs.pop("num_fwd_outputs")
            recorder.calls.append(dict(gm=copy_graph_module(gm), joint_inputs=joint_inputs, args=(),
                                       num_fwd_outputs=num_fwd_outputs, kwargs=dict(kwargs)))
            raise _JointCaptured

        def uuid(self) -> Any:
            return None

    def backend(gm: fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
        return compile_fx(gm, example_inputs, config_patches={"custom_partitioner_fn": RecordAndStop(),
                                                              "force_disable_caches": True})

    return backend


def _stopped_by_capture(e: BaseException) -> bool:
    while e is not None:
        if isinstance(e, _JointCaptured):
            return True
        e = getattr(e, "inner_exception", None) or e.__cause__ or e.__context__  # type: ignore[assignment]
    return False


Grads = dict[str, torch.Tensor | None]


def _run_step(model: nn.Module, step: Callable[..., torch.Tensor], inputs: Sequence[Any], seed: int,
              backward: bool) -> tuple[torch.Tensor, Grads]:
    """``step(*inputs)`` (and its backward) with the global RNG seeded, then restored."""
    for p in model.parameters():
        p.grad = None
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        loss = step(*inputs)
        if backward:
            loss.backward()  # type: ignore[no-untyped-call]  # unannotated in torch
    grads: Grads = {}
    for name, p in model.named_parameters():
        if p.requires_grad:
            grads[name] = p.grad
            p.grad = None
    return loss.detach(), grads


def _compile_and_run(model: nn.Module, inputs: Sequence[Any], loss_fn: LossFn,
                     backend: Callable[..., Any], opts: CaptureOptions, seed: int,
                     backward: bool) -> tuple[torch.Tensor, Grads]:
    def step(*args: Any) -> torch.Tensor:
        return loss_fn(model(*args), args)

    # Dynamo's caches are keyed by code object, not backend: start clean, leave clean.
    # specialize_float: with dynamic=True dynamo first traces float constants
    # (eps, dropout p) as tensors, fails to keep them so and retraces with them
    # specialised; specialising up front gives the same graph in half the time.
    torch._dynamo.reset()
    try:
        with _compile_options(model, opts), torch._dynamo.config.patch(specialize_float=True):
            compiled = torch.compile(step, backend=backend, fullgraph=True, dynamic=opts.dynamic)
            return _run_step(model, compiled, inputs, seed, backward)
    finally:
        torch._dynamo.reset()


def _capture(model: nn.Module, inputs: Sequence[Any], loss_fn: LossFn, opts: CaptureOptions,
             delegate: PartitionFn, seed: int, backward: bool
             ) -> tuple[JointCapture, tuple[torch.Tensor, Grads]]:
    fake_mode = _fake_mode_of(model)
    if opts.fake and fake_mode is None:
        raise ValueError("fake=True needs a model whose parameters are fake tensors: "
                         "build it under a FakeTensorMode")
    if not opts.fake and fake_mode is not None:
        raise ValueError("the model's parameters are fake tensors: pass fake=True")

    if opts.compiler not in ("aot_eager", "inductor"):
        raise ValueError(f"compiler must be 'aot_eager' or 'inductor', got {opts.compiler!r}")
    if opts.compiler == "inductor" and backward:
        raise ValueError("an inductor capture stops at the partitioner: it runs no step")
    named = list(model.named_parameters())
    names = {id(p): name for name, p in named}
    ds_ids = {id(p): k for k, (_, p) in enumerate(named)}
    recorder = PartitionRecorder(delegate)
    inner_backend = _inductor_backend(recorder) if opts.compiler == "inductor" else _aot_backend(recorder)
    # per compiled dynamo graph: (param_indices, param_names, number of graph inputs, recorder calls)
    graphs: list[tuple[list[ParamIndex], list[str], int, list[dict[str, Any]]]] = []

    def backend(gm: fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
        first_call = len(recorder.calls)
        indices, found = _param_indices(gm, example_inputs, names, ds_ids)
        try:
            compiled = inner_backend(gm, example_inputs)
        except Exception as e:
            if not _stopped_by_capture(e):
                raise
            graphs.append((indices, found, len(primal_inputs(gm, example_inputs)), recorder.calls[first_call:]))
            raise
        # Dynamo may throw a graph away and retrace (with dynamic=True it first
        # tries unspecialised floats); only a graph whose compilation returned counts.
        graphs.append((indices, found, len(primal_inputs(gm, example_inputs)), recorder.calls[first_call:]))
        return compiled

    step_result: Any = None
    with fake_mode if fake_mode is not None else contextlib.nullcontext():
        if fake_mode is not None:
            inputs = [fake_mode.from_tensor(t)
                      if isinstance(t, torch.Tensor) and not isinstance(t, FakeTensor) else t
                      for t in inputs]
        try:
            step_result = _compile_and_run(model, inputs, loss_fn, backend, opts, seed, backward)
        except Exception as e:
            if not _stopped_by_capture(e):
                raise

    if len(graphs) != 1 or len(graphs[0][3]) != 1:
        raise CaptureError(f"expected one joint graph, got {len(graphs)} compiled dynamo graphs "
                           f"and {len(recorder.calls)} partitioner calls")
    indices, found, n_graph_inputs, (call,) = graphs[0]
    result = JointCapture(gm=call["gm"], joint_inputs=call["joint_inputs"],
                          num_fwd_outputs=call["num_fwd_outputs"], partition_kwargs=call["kwargs"],
                          param_indices=indices, param_names=found, options=opts,
                          partition_args=call["args"])
    _check_param_indices(result, n_graph_inputs)
    return result, step_result


def _check_param_indices(cap: JointCapture, n_graph_inputs: int) -> None:
    primals = cap.primals()
    if len(primals) != n_graph_inputs:
        raise CaptureError(f"the joint graph has {len(primals)} primal placeholders for "
                           f"{n_graph_inputs} graph inputs; cannot map parameters to primals")
    for (position, _, shape), name in zip(cap.param_indices, cap.param_names):
        val = primals[position].meta.get("val")
        if not isinstance(val, torch.Tensor) or tuple(val.shape) != tuple(shape):
            raise CaptureError(f"parameter {name} {tuple(shape)} maps to primal {position} "
                               f"({primals[position].name}) whose value is {val!r}")


def capture(model: nn.Module, inputs: Sequence[Any], loss_fn: LossFn, *,
            autocast_dtype: torch.dtype | None = None, checkpoint: bool = False, sac: bool = False,
            dynamic: bool = False, fake: bool = False,
            delegate: PartitionFn = torch_min_cut_partition, compiler: str = "aot_eager") -> JointCapture:
    """Compile ``loss_fn(model(*inputs), inputs)`` and return the joint graph it produced.

    Only the forward runs (the partition happens when the forward is
    compiled).  ``delegate`` is the partitioner that finishes the
    compilation.  ``ds_id`` of a parameter is its position in
    ``model.named_parameters()``.  With ``fake=True`` every parameter must be
    a fake tensor (build the model under a
    ``FakeTensorMode``); real tensor inputs are converted to that mode.
    ``compiler="inductor"``: the joint graph inductor partitions
    (:class:`CaptureOptions`).  Raises :class:`CaptureError` unless exactly
    one joint graph was made.
    """
    opts = CaptureOptions(autocast_dtype, checkpoint, sac, dynamic, fake, compiler)
    return _capture(model, inputs, loss_fn, opts, delegate, seed=0, backward=False)[0]


__all__ = [
    "CaptureError", "CaptureOptions", "Grads", "JointCapture", "ParamIndex", "PartitionFn",
    "PartitionRecorder", "capture", "copy_graph_module", "primal_inputs", "sac_context_fn", "sac_policy",
    "torch_min_cut_partition",
]
