"""The zoo: real joint graphs, captured once per process, that every fxcut test reuses.

Each :class:`ZooCase` names a model of :mod:`fxcut.tools.models`, its (tiny) config
and the capture options (autocast, checkpointing, SAC, dynamic shapes).

- ``capture(name)``: the :class:`fxcut.tools.capture.JointCapture` of the case,
  cached per process.  Never mutate ``capture(name).gm``; partition
  ``capture(name).fresh()`` (or call ``capture(name).partition(fn)``).
- ``train(name, partition_fn)``: one compiled forward+backward with
  ``partition_fn`` as AOT Autograd's partitioner, ``(loss, {param: grad})``.
  The capture itself is such a step with torch's
  ``min_cut_rematerialization_partition`` behind a recorder that only copies
  its arguments (:func:`fxcut.tools.capture.capture_step`), so ``train`` with
  torch's partitioner returns that step (cloned) instead of compiling again.
- ``eager(name)``: the same step in eager mode.

Every call builds the model afresh from the same seed and inputs, and seeds
the global RNG identically for the step, so ``train(name, fn)`` and
``eager(name)`` are directly comparable (``assert_same_step``).

Random cases (``case.random``, e.g. ``gpt2_dropout``): with AOT Autograd's
no-op compilers on CPU the compiled graph draws its dropout masks from the
global CPU generator in the same order as eager mode, and the installed
torch (2.13) gives bit-identical masks, so ``train`` matches ``eager`` there
too.  That is a property of eager kernels, not a promise: a backend with
its own RNG (inductor's philox) would not match.  A test that must not
depend on it compares two partitioners with each other instead:
``assert_same_step(train(name, fn_a), train(name, fn_b))`` -- both compiled
runs draw their masks in forward, in graph order, whatever the partition.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import torch

from torch._functorch.partitioners import min_cut_rematerialization_partition

from fxcut.tools.capture import CaptureOptions, Grads, JointCapture, PartitionFn, capture as capture_model
from fxcut.tools.capture import torch_min_cut_partition
from fxcut.tools.models import BuiltModel, build_model
from training import capture_step, eager_step, train_step

#: Features a case's joint graph is known to show (checked by tests/test_zoo.py).
BF16_PARAM_CASTS = "bf16_param_casts"
AC_GRAPH_ID = "ac_graph_id"
SAC_TAGS = "sac_tags"
RANDOM_OPS = "random_ops"
SYM_NODES = "sym_nodes"
ROUTING_OPS = "routing_ops"
BATCH_NORM = "batch_norm"
BUFFER_MUTATION = "buffer_mutation"
NONE_GRADS = "none_grads"
SDPA = "sdpa"
CONV = "conv"
TIED_WEIGHTS = "tied_weights"


@dataclass(frozen=True)
class ZooCase:
    name: str
    model: str
    cfg: dict[str, Any] = field(default_factory=dict)
    options: CaptureOptions = field(default_factory=CaptureOptions)
    features: frozenset[str] = frozenset()
    doc: str = ""

    @property
    def random(self) -> bool:
        return RANDOM_OPS in self.features

    def build(self) -> BuiltModel:
        return build_model(self.model, **self.cfg)

    def step_options(self) -> dict[str, Any]:
        o = self.options
        return dict(autocast_dtype=o.autocast_dtype, checkpoint=o.checkpoint, sac=o.sac, dynamic=o.dynamic)


def _case(name: str, model: str, doc: str, features: tuple[str, ...] = (), **kwargs: Any) -> ZooCase:
    option_names = {"autocast_dtype", "checkpoint", "sac", "dynamic"}
    options = CaptureOptions(**{k: v for k, v in kwargs.items() if k in option_names})
    cfg = {k: v for k, v in kwargs.items() if k not in option_names}
    return ZooCase(name, model, cfg, options, frozenset(features), doc)


CASES: dict[str, ZooCase] = {c.name: c for c in [
    _case("mlp", "mlp", "3 Linear+GELU layers"),
    _case("mlp_dynamic", "mlp", "mlp under dynamic=True: symbolic batch, SymInt placeholder",
          (SYM_NODES,), dynamic=True),
    _case("mlp_frozen", "mlp", "first block requires_grad=False: None gradient outputs",
          (NONE_GRADS,), frozen_layers=1),
    _case("gpt2", "gpt2", "GPT-2, matmul/softmax causal attention, LM head tied to wte",
          (TIED_WEIGHTS,)),
    _case("gpt2_dropout", "gpt2", "gpt2 with dropout 0.1 everywhere", (RANDOM_OPS,), dropout=0.1),
    _case("gpt2_ckpt", "gpt2", "gpt2, every block under torch.utils.checkpoint",
          (AC_GRAPH_ID,), checkpoint=True),
    _case("gpt2_sdpa", "gpt2", "gpt2 with F.scaled_dot_product_attention", (SDPA,), sdpa=True),
    _case("gpt2_dynamic", "gpt2", "1-layer SDPA gpt2 under dynamic=True: symbolic batch and seq, "
          "sym_size / SymInt arithmetic nodes", (SYM_NODES, SDPA), layers=1, sdpa=True, dynamic=True),
    _case("llama", "llama", "Llama: RMSNorm, rotary, GQA, SwiGLU, no bias"),
    _case("llama_bf16", "llama", "llama under CPU bf16 autocast: parameter casts",
          (BF16_PARAM_CASTS,), autocast_dtype=torch.bfloat16),
    _case("llama_ckpt", "llama", "llama, every block under torch.utils.checkpoint",
          (AC_GRAPH_ID,), checkpoint=True),
    _case("llama_sac", "llama", "llama, selective checkpointing: mm/bmm/addmm MUST_SAVE",
          (AC_GRAPH_ID, SAC_TAGS), sac=True),
    _case("vit", "vit", "ViT: conv patch embedding, class token, SDPA blocks", (SDPA, CONV)),
    _case("resnet", "resnet", "ResNet basic blocks, BatchNorm2d in training mode",
          (BATCH_NORM, BUFFER_MUTATION, CONV)),
    _case("convnet", "convnet", "conv/ReLU/maxpool x2, linear", (CONV,)),
    _case("lstm", "lstm", "LSTM cell math unrolled over 6 time steps"),
    _case("moe", "moe", "top-2 of 4 experts: topk, gather, index, index_add, scatter_add",
          (ROUTING_OPS,)),
]}


def _case_of(name: str) -> ZooCase:
    try:
        return CASES[name]
    except KeyError:
        raise KeyError(f"unknown zoo case {name!r}; known: {', '.join(CASES)}") from None


@functools.cache
def _captured_step(name: str) -> tuple[JointCapture, tuple[torch.Tensor, Grads]]:
    case = _case_of(name)
    model, make_inputs, loss_fn = case.build()
    return capture_step(model, make_inputs(), loss_fn, delegate=torch_min_cut_partition,
                        **case.step_options())


def capture(name: str) -> JointCapture:
    """The case's joint graph, captured once per process (do not mutate ``.gm``)."""
    return _captured_step(name)[0]


@functools.cache
def capture_inductor(name: str) -> JointCapture:
    """The case's joint graph as inductor partitions it (inductor's
    decompositions and joint-graph passes applied; no kernel built), cached
    per process (do not mutate ``.gm``)."""
    case = _case_of(name)
    model, make_inputs, loss_fn = case.build()
    return capture_model(model, make_inputs(), loss_fn, compiler="inductor", **case.step_options())


_TORCH_MIN_CUT = (torch_min_cut_partition, min_cut_rematerialization_partition)


def train(name: str, partition_fn: PartitionFn) -> tuple[torch.Tensor, Grads]:
    """One compiled training step of a freshly built model, partitioned by ``partition_fn``."""
    if any(partition_fn is fn for fn in _TORCH_MIN_CUT):
        loss, grads = _captured_step(name)[1]
        return loss.clone(), {k: None if g is None else g.clone() for k, g in grads.items()}
    case = _case_of(name)
    model, make_inputs, loss_fn = case.build()
    return train_step(model, make_inputs(), loss_fn, partition_fn, **case.step_options())


def eager(name: str) -> tuple[torch.Tensor, Grads]:
    """The same training step as :func:`train`, in eager mode."""
    case = _case_of(name)
    model, make_inputs, loss_fn = case.build()
    return eager_step(model, make_inputs(), loss_fn, **case.step_options())


def tolerances(name: str) -> dict[str, float]:
    """``rtol``/``atol`` for comparing two steps of the case."""
    if _case_of(name).options.autocast_dtype is not None:
        return dict(rtol=2e-2, atol=2e-2)
    return dict(rtol=1e-4, atol=1e-5)


def assert_same_step(a: tuple[torch.Tensor, Grads], b: tuple[torch.Tensor, Grads], *,
                     rtol: float = 1e-4, atol: float = 1e-5) -> None:
    """Equal losses and equal gradients (``None`` where the other is ``None``)."""
    (loss_a, grads_a), (loss_b, grads_b) = a, b
    torch.testing.assert_close(loss_a, loss_b, rtol=rtol, atol=atol)
    assert grads_a.keys() == grads_b.keys(), (sorted(grads_a), sorted(grads_b))
    for name, ga in grads_a.items():
        gb = grads_b[name]
        assert (ga is None) == (gb is None), f"{name}: {ga is None=} {gb is None=}"
        if ga is not None:
            torch.testing.assert_close(ga, gb, rtol=rtol, atol=atol, msg=lambda m: f"{name}: {m}")


__all__ = ["CASES", "ZooCase", "assert_same_step", "capture", "capture_inductor", "eager", "tolerances", "train"]
