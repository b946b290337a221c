"""What inductor makes of each op: the per-node kinds of the inductor memory model.

The inductor memory model (``csrc/memory_fused.c``, its rules stated in
``csrc/fxcut.h`` above ``fxcut_fusion_kind``) decides per module which values
become buffers.  What it needs to know of a node beyond the graph array is
its kind, read here from inductor's own tables on the installed torch:

- EXTERN: an op inductor runs as an extern or fallback kernel, whose inputs
  it realizes (``torch._inductor.lowering.needs_realized_inputs``: every
  fallback, ``mm``, ``bmm``, convolutions, pooling with indices, ...), the
  matmul and convolution lowerings that pick an extern kernel on CPU
  (``addmm``, ``baddbmm``, ...), and any op with no lowering (inductor falls
  back to the aten kernel).
- REDUCTION: an op whose lowering makes a reduction or scan (``sum``,
  ``amax``, ``var_mean``, ``cumsum``, ...), or always realizes its result
  (scatters, ``index_put``, random values): its own kernel, its output a
  buffer.
- CAT: ``cat``: realized; its inputs are written into it.
- POINTWISE: everything else: inlined into the kernels that read it unless
  the model realizes it.  HEAVY marks a pointwise op inductor refuses to
  recompute per reader on CPU (``exp``, ``log``, ``sigmoid``, ``tanh``, ...:
  ``StorageBox.should_realize_on_reuse``'s list, which differs by release;
  not ``erf``, so not an exact GELU).  COPIES_INPUTS marks a CPU
  convolution: inductor's layout optimisation hands it channels-last copies
  of its input and weight.  ABSORBED marks an ``mm`` whose one user is an
  ``add`` of a tensor of its dtype and an expandable shape: inductor's
  post-grad pass rewrites the pair into one ``addmm``, so the add becomes
  the EXTERN kernel (:func:`_absorbing_add`).  LAYOUT marks what turns
  inductor's layout optimisation on in a module (:func:`layout_optimisation`:
  a forward convolution on CPU): there the convolutions run channels-last
  and hold that layout's workspace (the kernel table's).

Which neighbouring kernels inductor fuses into one needs their iteration
spaces (:func:`iteration_spaces`): kernels over the same number of elements
that share a read fuse.

Views are not a kind: a value sharing its storage with an earlier one
(:func:`fxcut.torchrules.facts.storage_of`) is an alias of it in both models.
The realization thresholds are inductor's config values on the installed
release (:func:`realize_thresholds`).
"""

from __future__ import annotations

import functools
import operator
from array import array
from collections.abc import Iterable
from typing import Any

import torch
import torch.fx as fx

import fxcut._C as _C

from .versions import Rules

aten = torch.ops.aten

#: Reductions as inductor lowers them (each lowering builds a Reduction).
_REDUCTIONS = frozenset({
    aten.sum, aten.mean, aten.amax, aten.amin, aten.argmax, aten.argmin, aten.prod, aten.var, aten.var_mean,
    aten.std, aten.std_mean, aten.any, aten.all, aten.logsumexp, aten.max, aten.min, aten.nansum, aten.cumsum,
    aten.cumprod, aten.logcumsumexp, aten._log_softmax, aten._softmax, aten.native_layer_norm,
    aten.native_batch_norm, aten._native_batch_norm_legit, aten._native_batch_norm_legit_functional,
    aten._native_batch_norm_legit_no_training, aten.native_group_norm, aten.native_layer_norm_backward,
    aten.native_batch_norm_backward, aten.native_group_norm_backward, aten._log_softmax_backward_data,
    aten._softmax_backward_data, aten.nll_loss_forward, aten.nll_loss_backward, aten.norm, aten.linalg_vector_norm,
})
#: Pointwise-looking ops whose lowering realizes its result (lowering.py:
#: ``result.realize()`` / a Scatter buffer).
_ALWAYS_REALIZED = frozenset({
    aten.index_put, aten.index_put_, aten._unsafe_masked_index_put_accumulate, aten._unsafe_index_put,
    aten.scatter, aten.scatter_add, aten.scatter_reduce, aten.index_add, aten.index_reduce,
    aten.embedding_dense_backward, aten.masked_scatter, aten.rand, aten.randn, aten.randint, aten.rand_like,
    aten.randn_like, aten.bernoulli,
})
#: inductor's own random prims (registered when inductor is imported), realized too
_INDUCTOR_RANDOM = ("inductor_random", "inductor_randint")
#: Extern kernels inductor feeds with layout-converted copies on CPU.
_COPIES_INPUTS = frozenset({aten.convolution, aten.convolution_backward})
#: Ops whose lowering chooses an extern kernel (or a template) on CPU without
#: being listed in needs_realized_inputs.
_EXTERN_LOWERINGS = frozenset({aten.addmm, aten.baddbmm, aten._int_mm, aten.mm, aten.bmm, aten.convolution,
                               aten._scaled_mm, aten._addmm_activation})
#: The inductor ops an aten pointwise op lowers to, where one of them may be
#: heavy (:attr:`fxcut.torchrules.versions.Rules.cpu_heavy_ops`: a value
#: using one, read by two or more kernels, is a buffer on CPU).  ``erf``,
#: ``exp2`` and ``expm1`` are inductor ops of their own, none heavy; GELU
#: lowers to ``erf`` (``approximate="tanh"``: ``tanh``, :func:`_heavy`).
_LOWERS_TO: dict[Any, frozenset[str]] = {
    aten.exp: frozenset({"exp"}), aten.log: frozenset({"log"}), aten.log10: frozenset({"log10"}),
    aten.log1p: frozenset({"log1p"}), aten.log2: frozenset({"log2"}), aten.sigmoid: frozenset({"sigmoid"}),
    aten.tanh: frozenset({"tanh"}), aten.exp2: frozenset({"exp2"}), aten.expm1: frozenset({"expm1"}),
    aten.erf: frozenset({"erf"}), aten.silu: frozenset({"sigmoid"}), aten.softplus: frozenset({"exp", "log1p"}),
    aten.mish: frozenset({"tanh", "exp", "log1p"}), aten.logit: frozenset({"log"}),
}


def _heavy(node: fx.Node, heavy_ops: frozenset[str]) -> bool:
    """Whether ``node``'s lowering uses one of inductor's ``heavy_ops``."""
    packet = getattr(node.target, "overloadpacket", None)
    if packet is aten.gelu:
        approximate = node.kwargs.get("approximate", node.args[1] if len(node.args) > 1 else "none")
        return ("tanh" if approximate == "tanh" else "erf") in heavy_ops
    return not _LOWERS_TO.get(packet, frozenset()).isdisjoint(heavy_ops)


@functools.cache
def _inductor_tables() -> tuple[frozenset[Any], frozenset[Any], frozenset[Any]]:
    """(every op with a lowering, ops whose inputs are realized, ops whose
    result is always realized), from inductor."""
    from torch._inductor import inductor_prims, lowering  # noqa: F401  (registers inductor's prims)

    prims = torch.ops.prims
    randoms = {getattr(prims, name) for name in _INDUCTOR_RANDOM if hasattr(prims, name)}
    return frozenset(lowering.lowerings), frozenset(lowering.needs_realized_inputs), _ALWAYS_REALIZED | randoms


def op_kind(target: Any) -> int:
    """The ``_C.FUSE_*`` kind of a call_function target (no HEAVY bit)."""
    if target is operator.getitem:
        return _C.FUSE_POINTWISE  # an item: the model follows its producer
    packet = getattr(target, "overloadpacket", None)
    if packet is aten.cat:
        return _C.FUSE_CAT
    lowered, realized_inputs, always_realized = _inductor_tables()
    if packet in _REDUCTIONS or packet in always_realized:
        return _C.FUSE_REDUCTION
    if packet in _EXTERN_LOWERINGS or target in realized_inputs:
        return _C.FUSE_EXTERN
    if isinstance(target, torch._ops.OpOverload) and target not in lowered and packet not in lowered:
        return _C.FUSE_EXTERN  # no lowering: inductor runs the aten kernel
    if not isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return _C.FUSE_EXTERN  # a Python function or a higher-order op: not fused
    return _C.FUSE_POINTWISE


def _absorbing_add(mm: fx.Node) -> fx.Node | None:
    """The add inductor's post-grad ``addmm`` pattern folds ``mm`` into:
    its one user, ``aten.add.Tensor(mm, inp)`` or ``(inp, mm)``, with
    ``inp`` a tensor of the same dtype whose shape expands to the mm's
    (``torch/_inductor/fx_passes/post_grad.py``: ``addmm``,
    ``is_valid_addmm_fusion``; on CPU ``should_prefer_unfused_addmm`` never
    holds)."""
    if mm.target is not aten.mm.default or len(mm.users) != 1:
        return None
    (add,) = mm.users
    if add.op != "call_function" or add.target is not aten.add.Tensor or len(add.args) != 2 or add.kwargs:
        return None
    others = [a for a in add.args if a is not mm]
    if len(others) != 1 or not isinstance(others[0], fx.Node):
        return None
    inp, out = others[0].meta.get("val"), mm.meta.get("val")
    if not isinstance(inp, torch.Tensor) or not isinstance(out, torch.Tensor) or inp.dtype != out.dtype:
        return None
    try:
        from torch._prims_common import is_expandable_to

        return add if is_expandable_to(tuple(inp.shape), tuple(out.shape)) else None
    except (TypeError, RuntimeError):  # a symbolic shape it cannot decide
        return None


def layout_optimisation(device: str) -> str:
    """When inductor lays a module's convolutions out channels-last
    (``GraphLowering.decide_layout_opt`` of a training graph): ``"never"``
    (off in inductor's config, or no CPU with mkldnn: the GPU heuristics
    are not modelled), ``"always"`` (``force_layout_optimization``), else
    ``"convolution"``: in a module that holds a forward convolution."""
    from torch._inductor import config

    if device != "cpu" or not getattr(config, "layout_optimization", True):
        return "never"
    if getattr(config, "force_layout_optimization", False):
        return "always"
    mkldnn = torch.backends.mkldnn
    return "convolution" if mkldnn.enabled and mkldnn.is_available() else "never"  # type: ignore[no-untyped-call]


def _layout_bit(node: fx.Node, mode: str) -> int:
    if mode == "always" or (mode == "convolution" and node.target is aten.convolution.default):
        return _C.FUSE_LAYOUT
    return 0


def fusion_kinds(nodes: Iterable[fx.Node], rules: Rules, device: str = "cpu") -> bytes:
    """Per node, its ``_C.FUSE_*`` kind with ``_C.FUSE_HEAVY`` (``device``
    "cpu": its lowering uses one of ``rules``' heavy ops), ``_C.FUSE_ABSORBED`` and (``device`` "cpu")
    ``_C.FUSE_COPIES_INPUTS`` where they apply, and ``_C.FUSE_LAYOUT``
    (:func:`layout_optimisation`; placeholders, get_attr and the output:
    POINTWISE, unused)."""
    nodes = list(nodes)
    layout_mode = layout_optimisation(device)
    heavy_ops = rules.cpu_heavy_ops if device == "cpu" else frozenset()
    cache: dict[Any, int] = {}
    out = bytearray()
    absorbing: dict[fx.Node, fx.Node] = {}
    for node in nodes:
        if node.op == "call_function" and node.target is aten.mm.default:
            add = _absorbing_add(node)
            if add is not None:
                absorbing[node] = add
    absorbers = set(absorbing.values())
    for node in nodes:
        if node.op != "call_function":
            out.append(_C.FUSE_POINTWISE)
            continue
        target = node.target
        kind = cache.get(target)
        if kind is None:
            kind = op_kind(target)
            packet = getattr(target, "overloadpacket", None)
            if packet in _COPIES_INPUTS and device == "cpu":
                kind |= _C.FUSE_COPIES_INPUTS
            cache[target] = kind
        if _heavy(node, heavy_ops):
            kind |= _C.FUSE_HEAVY
        if node in absorbing:
            kind |= _C.FUSE_ABSORBED
        elif node in absorbers:
            kind = _C.FUSE_EXTERN
        out.append(kind | _layout_bit(node, layout_mode))
    return bytes(out)


def _elements(val: Any) -> int:
    if not isinstance(val, torch.Tensor):
        return 0
    from .ops import tensor_nbytes

    return tensor_nbytes(val) // max(1, val.dtype.itemsize)


def iteration_spaces(nodes: Iterable[fx.Node], kinds: bytes) -> array[int]:
    """Per node, the elements its kernel iterates over when inductor may
    fuse it with a neighbour: a pointwise op's output, a true reduction's
    input (a multi-output reduction: its first input); 0 for everything
    else (extern kernels, concatenations, always-realized ops, views)."""
    out = array("q", bytes(8 * len(kinds)))
    for i, node in enumerate(nodes):
        if node.op != "call_function" or node.target is operator.getitem:
            continue
        kind = kinds[i] & _C.FUSE_KIND_MASK
        packet = getattr(node.target, "overloadpacket", None)
        if kind == _C.FUSE_POINTWISE:
            out[i] = _elements(node.meta.get("val"))
        elif kind == _C.FUSE_REDUCTION and packet in _REDUCTIONS:
            first = next((a for a in node.args if isinstance(a, fx.Node)), None)
            out[i] = _elements(first.meta.get("val")) if first is not None else 0
    return out


def realize_thresholds(device: str = "cpu") -> tuple[int, int, int]:
    """Inductor's realization thresholds on the installed release:
    (reads of a value read twice, reads accumulated by any value, ops in
    one inlined expression) -- ``realize_reads_threshold``,
    ``realize_cpu_acc_reads_threshold`` (GPU: ``realize_acc_reads_threshold``'s
    default) and ``realize_cpu_opcount_threshold`` (GPU:
    ``realize_opcount_threshold``'s default)."""
    from torch._inductor import config

    def read(*names: str, default: int) -> int:
        for name in names:
            value = getattr(config, name, None)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
        return default

    reuse_reads = read("realize_reads_threshold", default=4)
    if device == "cpu":
        acc = read("realize_acc_reads_threshold", "realize_cpu_acc_reads_threshold", default=8)
        ops = read("realize_opcount_threshold", "realize_cpu_opcount_threshold", "_realize_opcount_threshold_default",
                   default=30)
    else:
        acc = read("realize_acc_reads_threshold", "_realize_acc_reads_threshold_default", default=8)
        ops = read("realize_opcount_threshold", "_realize_opcount_threshold_default", default=30)
    return reuse_reads, acc, ops


__all__ = ["fusion_kinds", "iteration_spaces", "layout_optimisation", "op_kind", "realize_thresholds"]
