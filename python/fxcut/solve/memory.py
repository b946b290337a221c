"""The memory model: peak activation bytes of the modules a decision produces.

The C core (``csrc/memory.c``, semantics stated in ``csrc/fxcut.h`` above
``fxcut_memory_options``) emulates torch's module extraction on the graph
array and walks the forward then the backward module.  Three models of how
the modules run, chosen by the backend that runs them:

- ``"unfused"``: op by op, as torch's ``aot_eager`` (AOT Autograd's boxed
  no-op compilers, eager kernels) and :func:`fxcut.aot_backend` run the FX
  modules: every value is allocated at its op and freed after its last use,
  a saved value too.
- ``"unfused_held"``: op by op, but the backward holds every saved value
  until it ends: a backward called with its arguments unboxed keeps them
  alive (AOT Autograd with ``torch._functorch.compilers.nop``, DeepSpeed
  DeepCompile's eager backend, which runs ``make_boxed_func(gm.forward)``).
- ``"inductor"``: as inductor runs them (``csrc/memory_fused.c``): pointwise
  and view chains inlined into the kernels that read them, reductions,
  extern kernels and outputs as buffers, in-place updates of dying buffers
  (the rules above ``fxcut_fusion_kind`` in ``csrc/fxcut.h``).  The per-node
  kinds come from inductor's own tables (:mod:`fxcut.torchrules.fusion`);
  :mod:`fxcut.torchrules.inductor` asks inductor itself, for validation.

What the core reads besides the graph array -- which values share a storage,
what running each node costs, what torch's module extraction knows of each
node, the inductor model's kinds -- comes from torch's side
(:mod:`fxcut.torchrules.facts`) as arrays; this module wraps the call
(:func:`simulate` -> :class:`MemoryEstimate`).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from . import core
from .arrays import GraphArrays


#: The memory models: how the backend runs the modules (module docstring).
MemoryModelName = Literal["unfused", "unfused_held", "inductor"]
MEMORY_MODELS: tuple[str, ...] = ("unfused", "unfused_held", "inductor")


@dataclass(frozen=True)
class InductorModel:
    """What the inductor model reads besides the graph array: per node its
    ``_C.FUSE_*`` kind (:func:`fxcut.torchrules.fusion.fusion_kinds`), the
    cost of a recomputed node inlined into its readers (None: 0), its
    kernel's iteration space (:func:`fxcut.torchrules.fusion.iteration_spaces`;
    None: no kernel fusion beyond inlining), and inductor's realization
    thresholds.  ``kernel_calls``: the kernels between two extern kernels
    run as one call (inductor's C++ backend), which allocates all their
    buffers before it and frees what they read last after it."""

    fusion: bytes
    fused_cost: array[int] | None
    realize: tuple[int, int, int]
    iteration: array[int] | None = None
    kernel_calls: bool = False

    def core_options(self) -> dict[str, Any]:
        """The keyword arguments of the C entry points that select this model."""
        return {"fusion": self.fusion, "fused_cost": self.fused_cost, "iteration": self.iteration,
                "realize": self.realize, "kernel_calls": self.kernel_calls}


def check_memory_model(name: object) -> str:
    if name not in MEMORY_MODELS:
        raise ValueError(f"memory_model must be one of {', '.join(map(repr, MEMORY_MODELS))}, got {name!r}")
    return str(name)


@dataclass(frozen=True)
class ModelInputs:
    """What the memory model reads of a graph besides its array, per node
    (:func:`fxcut.torchrules.facts.model_inputs` makes them): ``storage``,
    the earliest node whose value's storage each shares (itself when its
    own); ``flops``, what running it once costs (the recompute cost's
    unit); ``marks``, what torch's module extraction knows of it
    (``_C.X_*``); ``inductor``, the inductor model's inputs (None: an
    unfused model); ``hold_saved``: the backward holds its saved values to
    its end (``"unfused_held"``); ``workspace``: bytes each node's kernel
    holds inside itself while it runs (:mod:`fxcut.solve.kernels`; None:
    none)."""

    storage: array[int]
    flops: array[int]
    marks: bytes
    inductor: InductorModel | None = None
    hold_saved: bool = False
    workspace: array[int] | None = None

    def core_options(self) -> dict[str, Any]:
        """The keyword arguments of the C entry points for these inputs."""
        out: dict[str, Any] = {"storage_of": self.storage, "flops": self.flops, "marks": self.marks}
        out.update(self.model_options())
        return out

    def model_options(self) -> dict[str, Any]:
        """The keyword arguments that choose the model (its inductor
        inputs, its hold on saved values), for the C entry points."""
        out: dict[str, Any] = self.inductor.core_options() if self.inductor is not None else {}
        if self.hold_saved:
            out["hold_saved"] = True
        if self.workspace is not None:
            out["workspace"] = self.workspace
        return out


@dataclass(frozen=True)
class TimelineStep:
    node: str
    phase: str  # "forward" or "backward"
    live_bytes: int


@dataclass(frozen=True)
class MemoryEstimate:
    """What :func:`simulate` found for one decision (``recomputed``: the
    node indices the backward recomputes)."""

    peak_bytes: int
    fw_peak_bytes: int
    bw_peak_bytes: int
    saved_bytes: int
    recompute_flops: int
    recompute_bytes: int
    recomputed: list[int]
    peak_node: str | None
    peak_phase: str | None
    timeline: list[TimelineStep] | None


def simulate(arrays: GraphArrays, saved: Sequence[int], num_fwd_outputs: int, inputs: ModelInputs, *,
             timeline: bool = False) -> MemoryEstimate:
    """The memory model of the decision saving node indices ``saved`` of
    ``arrays``, under ``inputs`` (unfused, or inductor's where
    ``inputs.inductor`` is set: then the timeline's steps are kernels, a
    buffer's node, not ops)."""
    r = core.memory_simulate(arrays, saved, num_fwd_outputs=num_fwd_outputs, timeline=timeline,
                             **inputs.core_options())
    steps: list[TimelineStep] | None = None
    peak_node = peak_phase = None
    if r.schedule is not None and r.live_bytes is not None:
        steps = [TimelineStep(arrays.name(v), "forward" if k < r.n_fw_steps else "backward", int(b))
                 for k, (v, b) in enumerate(zip(r.schedule, r.live_bytes))]
        if r.peak_step >= 0:
            peak_node = steps[r.peak_step].node
            peak_phase = steps[r.peak_step].phase
    elif r.peak_step >= 0:
        peak_phase = "forward" if r.peak_step < r.n_fw_steps else "backward"
    return MemoryEstimate(
        peak_bytes=r.peak_bytes, fw_peak_bytes=r.fw_peak_bytes, bw_peak_bytes=r.bw_peak_bytes,
        saved_bytes=r.saved_bytes, recompute_flops=r.recompute_flops, recompute_bytes=r.recompute_bytes,
        recomputed=[i for i, m in enumerate(r.recomputed) if m],
        peak_node=peak_node, peak_phase=peak_phase, timeline=steps,
    )


__all__ = ["MEMORY_MODELS", "InductorModel", "MemoryEstimate", "MemoryModelName", "ModelInputs", "TimelineStep",
           "check_memory_model", "simulate"]
