"""The memory model: peak activation bytes of the modules a decision produces.

The C core (``csrc/memory.c``, semantics stated in ``csrc/fxcut.h`` above
``fxcut_memory_options``) emulates torch's module extraction on the graph
array and walks the forward then the backward module.  Two models of how
the modules run, chosen by the backend that runs them:

- ``"unfused"``: op by op, as AOT Autograd's no-op compilers (eager
  kernels) run the FX modules: every value is allocated at its op and freed
  after its last use.
- ``"inductor"``: as inductor runs them (``csrc/memory_fused.c``): pointwise
  and view chains inlined into the kernels that read them, reductions,
  extern kernels and outputs as buffers, in-place updates of dying buffers
  (the rules above ``fxcut_fusion_kind`` in ``csrc/fxcut.h``).  The per-node
  kinds come from inductor's own tables (:mod:`fxcut.torchrules.fusion`);
  :mod:`fxcut.torchrules.inductor` asks inductor itself, for validation.

This module supplies what the core reads besides the graph array -- which
values share a storage (:func:`storage_of`), what running each node costs
(:func:`node_flops`), the inductor model's kinds (:func:`inductor_model`) --
and wraps the answer (:func:`simulate` -> :class:`MemoryEstimate`).
"""

from __future__ import annotations

import operator
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.fx as fx
from torch.multiprocessing.reductions import StorageWeakRef

import fxcut._C as _C
from . import core
from .budget import RuntimeEstimates
from .arrays import GraphArrays


def _ref(t: torch.Tensor) -> StorageWeakRef:
    return StorageWeakRef(t.untyped_storage())  # type: ignore[no-untyped-call]


def _storages(val: Any) -> list[StorageWeakRef] | None:
    """The storages a value holds: one for a tensor, one per tensor of a
    sequence; None for anything else (or a tensor without a storage)."""
    try:
        if isinstance(val, torch.Tensor):
            return [_ref(val)]
        if isinstance(val, (list, tuple)):
            return [_ref(x) for x in val if isinstance(x, torch.Tensor)]
    except (NotImplementedError, RuntimeError):  # sparse / nested / functional wrappers
        return None
    return None


def storage_of(arrays: GraphArrays) -> array[int]:
    """Per node, the earliest node whose value's storage it shares (``meta["val"]``
    storages compared, as torch's partitioner compares them), itself when its
    storage is its own.  A sequence (a multi-output op) shares a storage only
    when all its tensors live on one earlier storage (``split`` of a value);
    otherwise it owns, and its getitems own their tensors' storages."""
    owner: dict[StorageWeakRef, int] = {}
    out = array("i", range(len(arrays)))
    for i, node in enumerate(arrays.nodes):
        val = node.meta.get("val")
        refs = _storages(val)
        if not refs:
            continue
        if isinstance(val, torch.Tensor):
            j = owner.setdefault(refs[0], i)
            out[i] = j
            continue
        owners = {owner.get(r, -1) for r in refs}
        if len(owners) == 1 and -1 not in owners:
            out[i] = owners.pop()
    return out


def node_flops(arrays: GraphArrays, estimates: RuntimeEstimates | None = None) -> array[int]:
    """Per node, the cost torch's knapsack gives running it once under its
    ``"flops"`` estimator (``torch.utils.flop_counter``; at least 1 for an
    op, as torch counts it), through :class:`fxcut.solve.budget.RuntimeEstimates`
    (memoised per op signature); 0 for placeholders, get_attr, getitems, the
    output, and an op the estimator cannot replay on its fake values (its
    exception swallowed: torch's knapsack never asks those).  ``estimates``:
    a cache to share, used when its estimator is ``"flops"``."""
    est = estimates if estimates is not None and estimates.estimator == "flops" else RuntimeEstimates("flops")
    out = array("q", bytes(8 * len(arrays)))
    for i, node in enumerate(arrays.nodes):
        if node.op != "call_function" or node.target is operator.getitem:
            continue
        try:
            (value,) = est([node])
        except Exception:  # an op the flop counter cannot replay (torch's knapsack never asks it)
            value = 0
        out[i] = max(0, int(value))
    return out


def extraction_marks(arrays: GraphArrays) -> bytes:
    """Per node, what torch's module extraction knows beyond the graph array
    (``_C.X_*`` bits): ``X_MUST_FW`` for ``_must_be_in_forward`` (a mutable
    op not tagged for the backward, or ``partitioner_tag ==
    "must_be_in_forward"``), ``X_COPY`` for ``aten.copy_`` (which the
    backward's reordering emits early)."""
    from ..torchrules.extract import _placement

    must_fw, _ = _placement(arrays.nodes)
    copy_ = torch.ops.aten.copy_.default
    return bytes((_C.X_MUST_FW if must_fw[n] else 0) | (_C.X_COPY if n.target is copy_ else 0)
                 for n in arrays.nodes)


#: The memory models: how the backend runs the modules (module docstring).
MemoryModelName = Literal["unfused", "inductor"]
MEMORY_MODELS: tuple[str, ...] = ("unfused", "inductor")


@dataclass(frozen=True)
class InductorModel:
    """What the inductor model reads besides the graph array: per node its
    ``_C.FUSE_*`` kind (:func:`fxcut.torchrules.fusion.fusion_kinds`), the
    cost of a recomputed node inlined into its readers (None: 0), its
    kernel's iteration space (:func:`fxcut.torchrules.fusion.iteration_spaces`;
    None: no kernel fusion beyond inlining), and inductor's realization
    thresholds."""

    fusion: bytes
    fused_cost: array[int] | None
    realize: tuple[int, int, int]
    iteration: array[int] | None = None

    def core_options(self) -> dict[str, Any]:
        """The keyword arguments of the C entry points that select this model."""
        return {"fusion": self.fusion, "fused_cost": self.fused_cost, "iteration": self.iteration,
                "realize": self.realize}


def check_memory_model(name: object) -> str:
    if name not in MEMORY_MODELS:
        raise ValueError(f"memory_model must be one of {', '.join(map(repr, MEMORY_MODELS))}, got {name!r}")
    return str(name)


def graph_device(arrays: GraphArrays) -> str:
    """The device type of the graph's tensors ("cpu" when none says)."""
    for node in arrays.nodes:
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor):
            return val.device.type
    return "cpu"


def inductor_model(arrays: GraphArrays, fused_cost: array[int] | None = None) -> InductorModel:
    """The inductor model's inputs for ``arrays`` on the installed torch."""
    from ..torchrules.fusion import fusion_kinds, iteration_spaces, realize_thresholds

    device = graph_device(arrays)
    kinds = fusion_kinds(arrays.nodes, device)
    return InductorModel(kinds, fused_cost, realize_thresholds(device), iteration_spaces(arrays.nodes, kinds))


@dataclass(frozen=True)
class TimelineStep:
    node: str
    phase: str  # "forward" or "backward"
    live_bytes: int


@dataclass(frozen=True)
class MemoryEstimate:
    """What :func:`simulate` found for one decision."""

    peak_bytes: int
    fw_peak_bytes: int
    bw_peak_bytes: int
    saved_bytes: int
    recompute_flops: int
    recompute_bytes: int
    recomputed: list[fx.Node]
    peak_node: str | None
    peak_phase: str | None
    timeline: list[TimelineStep] | None


def simulate(graph_arrays: GraphArrays, saved: Sequence[int | fx.Node], num_fwd_outputs: int, *,
             storage: array[int] | None = None, flops: array[int] | None = None,
             marks: bytes | None = None, timeline: bool = False,
             model: MemoryModelName | InductorModel = "unfused") -> MemoryEstimate:
    """The memory model of the decision saving ``saved`` (node indices or
    nodes of ``graph_arrays``).  ``storage`` (:func:`storage_of`) and
    ``flops`` (:func:`node_flops`) and ``marks`` (:func:`extraction_marks`)
    are computed when not given; pass them to evaluate several decisions
    over one graph.  ``model``: ``"unfused"``, ``"inductor"``, or an
    :class:`InductorModel` made once for several calls.  Under the inductor
    model the timeline's steps are kernels (a buffer's node), not ops."""
    index = graph_arrays.index
    idx = []
    for x in saved:
        if isinstance(x, fx.Node):
            if x not in index:
                raise ValueError(f"saved node {x.name!r} is not a node of the graph array")
            idx.append(index[x])
        else:
            idx.append(x)
    if storage is None:
        storage = storage_of(graph_arrays)
    if flops is None:
        flops = node_flops(graph_arrays)
    if marks is None:
        marks = extraction_marks(graph_arrays)
    if isinstance(model, str):
        check_memory_model(model)
        fused = inductor_model(graph_arrays) if model == "inductor" else None
    else:
        fused = model
    r = core.memory_simulate(graph_arrays, idx, num_fwd_outputs=num_fwd_outputs, storage_of=storage,
                             flops=flops, marks=marks, timeline=timeline,
                             **(fused.core_options() if fused is not None else {}))
    nodes = graph_arrays.nodes
    steps: list[TimelineStep] | None = None
    peak_node = peak_phase = None
    if r.schedule is not None and r.live_bytes is not None:
        steps = [TimelineStep(nodes[v].name, "forward" if k < r.n_fw_steps else "backward", int(b))
                 for k, (v, b) in enumerate(zip(r.schedule, r.live_bytes))]
        if r.peak_step >= 0:
            peak_node = steps[r.peak_step].node
            peak_phase = steps[r.peak_step].phase
    elif r.peak_step >= 0:
        peak_phase = "forward" if r.peak_step < r.n_fw_steps else "backward"
    return MemoryEstimate(
        peak_bytes=r.peak_bytes, fw_peak_bytes=r.fw_peak_bytes, bw_peak_bytes=r.bw_peak_bytes,
        saved_bytes=r.saved_bytes, recompute_flops=r.recompute_flops, recompute_bytes=r.recompute_bytes,
        recomputed=[nodes[i] for i, m in enumerate(r.recomputed) if m],
        peak_node=peak_node, peak_phase=peak_phase, timeline=steps,
    )


__all__ = ["MEMORY_MODELS", "InductorModel", "MemoryEstimate", "MemoryModelName", "TimelineStep",
           "check_memory_model", "extraction_marks", "graph_device", "inductor_model", "node_flops", "simulate",
           "storage_of"]
