"""Capturing and training the zoo's models, for the tests and the benchmarks.

Development tooling on top of :mod:`fxcut.tools.capture` (which the ``fxcut``
command uses to trace a model): build a model of :mod:`fxcut.tools.models` and
capture it, capture and run a training step, or run one compiled with a
given partitioner or eagerly, to compare their losses and gradients.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn as nn
from torch._subclasses.fake_tensor import FakeTensorMode

from fxcut.tools.capture import (
    CaptureOptions,
    Grads,
    JointCapture,
    PartitionFn,
    _aot_backend,
    _capture,
    _compile_and_run,
    _compile_options,
    _run_step,
    capture,
    torch_min_cut_partition,
)
from fxcut.tools.models import LossFn, build_model


def capture_step(model: nn.Module, inputs: Sequence[Any], loss_fn: LossFn, *,
                 autocast_dtype: torch.dtype | None = None, checkpoint: bool = False, sac: bool = False,
                 dynamic: bool = False, delegate: PartitionFn = torch_min_cut_partition,
                 seed: int = 0) -> tuple[JointCapture, tuple[torch.Tensor, Grads]]:
    """:func:`capture` and run the backward too: the capture and :func:`train_step`'s result.

    The recorder only copies its arguments, so the returned step is exactly
    ``train_step(model, inputs, loss_fn, delegate, ..., seed=seed)``: one
    compilation serves both.
    """
    opts = CaptureOptions(autocast_dtype, checkpoint, sac, dynamic)
    return _capture(model, inputs, loss_fn, opts, delegate, seed=seed, backward=True)


def capture_model(name: str, *, autocast_dtype: torch.dtype | None = None, checkpoint: bool = False,
                  sac: bool = False, dynamic: bool = False, fake: bool = False,
                  delegate: PartitionFn = torch_min_cut_partition, **cfg: Any) -> JointCapture:
    """Build ``fxcut.tools.models.MODELS[name](**cfg)`` and :func:`capture` it.

    With ``fake=True`` the model is built under a fresh ``FakeTensorMode``,
    so no parameter is allocated whatever its size.
    """
    with FakeTensorMode() if fake else contextlib.nullcontext():
        model, make_inputs, loss_fn = build_model(name, **cfg)
        inputs = make_inputs()
    return capture(model, inputs, loss_fn, autocast_dtype=autocast_dtype, checkpoint=checkpoint,
                   sac=sac, dynamic=dynamic, fake=fake, delegate=delegate)


# --------------------------------------------------------------------------- training steps


def train_step(model: nn.Module, inputs: Sequence[Any], loss_fn: LossFn, partition_fn: PartitionFn, *,
               autocast_dtype: torch.dtype | None = None, checkpoint: bool = False, sac: bool = False,
               dynamic: bool = False, seed: int = 0) -> tuple[torch.Tensor, Grads]:
    """One forward+backward of ``loss_fn(model(*inputs), inputs)``, compiled with ``partition_fn``.

    The backend is ``aot_autograd`` with no-op compilers (CPU eager kernels).
    The global RNG is seeded with ``seed`` for the run and restored after.
    Returns ``(loss, {name: grad})`` for every parameter that requires grad
    (``None`` where it got none); the model's ``.grad`` fields are left cleared.
    """
    opts = CaptureOptions(autocast_dtype, checkpoint, sac, dynamic)
    return _compile_and_run(model, inputs, loss_fn, _aot_backend(partition_fn), opts, seed, backward=True)


def eager_step(model: nn.Module, inputs: Sequence[Any], loss_fn: LossFn, *,
               autocast_dtype: torch.dtype | None = None, checkpoint: bool = False, sac: bool = False,
               dynamic: bool = False, seed: int = 0) -> tuple[torch.Tensor, Grads]:
    """:func:`train_step` without compiling (``dynamic`` is accepted and ignored)."""
    opts = CaptureOptions(autocast_dtype, checkpoint, sac, dynamic)
    with _compile_options(model, opts):
        return _run_step(model, lambda *a: loss_fn(model(*a), a), inputs, seed, backward=True)


__all__ = ["capture_model", "capture_step", "eager_step", "train_step"]
