"""Which ops allocate inside themselves, and the call's variant and sizes.

:data:`FAMILIES` names the ops the kernel table measures
(:mod:`fxcut.solve.kernels`), and for each how a call is classified (its
*variant*: layout, convolution kind, kernel size, stride) and which tensor
sizes the fit reads (its *features*, bytes).  The same functions classify a
call of real tensors (the measuring script, :mod:`fxcut.tools.kernel_table`)
and an fx node's fake values (:func:`workspace`, what the memory model reads).
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx

from ..solve.kernels import KernelTable, shipped_table
from .lower import LoweredGraph
from .ops import tensor_nbytes

aten = torch.ops.aten


def _ints(xs: Sequence[Any]) -> list[int]:
    """Sizes or strides as ints, a symbolic one by its hint (never a guard
    on the user's shape environment)."""
    out = []
    for x in xs:
        if type(x) is not int:
            from torch.fx.experimental.symbolic_shapes import optimization_hint

            x = optimization_hint(x, fallback=4096)
        out.append(int(x))
    return out


def _dense_in(sizes: list[int], strides: list[int], order: Sequence[int]) -> bool:
    """Whether strides lay the dims out densely in ``order`` (innermost
    first); a dim of size 1 may have any stride, as torch checks it."""
    expected = 1
    for d in order:
        if sizes[d] != 1 and strides[d] != expected:
            return False
        expected *= sizes[d]
    return True


def layout(t: torch.Tensor) -> str:
    """``"channels_last"`` for a 4-d tensor in that layout (and not also
    contiguous), ``"contiguous"`` for a contiguous one, else ``"strided"``."""
    sizes, strides = _ints(t.shape), _ints(t.stride())
    if _dense_in(sizes, strides, range(len(sizes) - 1, -1, -1)):
        return "contiguous"
    if len(sizes) == 4 and _dense_in(sizes, strides, (1, 3, 2, 0)):
        return "channels_last"
    return "strided"


def nbytes(t: Any) -> int:
    return tensor_nbytes(t) if isinstance(t, torch.Tensor) else 0


def _conv_kind(groups: int, c_in: int) -> str:
    if groups > 1 and groups == c_in:
        return "depthwise"
    return "grouped" if groups > 1 else "dense"


def channel_class(channels: int) -> str:
    """``"c16"``, ``"c8"`` or ``"c1"``: the largest of 16, 8, 1 dividing
    ``channels`` (oneDNN blocks channels by 8 or 16 and treats the rest
    otherwise)."""
    return "c16" if channels % 16 == 0 else "c8" if channels % 8 == 0 else "c1"


def pixel_class(x: Any) -> str:
    """``"p4"``, ``"p16"`` or ``"p"``: a convolution input's pixels (per
    image and channel) at most 4, at most 16, or more -- oneDNN picks
    another algorithm for tiny images (a channels-last 3x3 depthwise
    backward holds 257 times its weight on a 2x2 input, 2x its weight on
    a 4x4 one padded to the same 2x2 output: the input decides)."""
    pixels = 1
    for d in _ints(x.shape[2:]) if isinstance(x, torch.Tensor) else ():
        pixels *= d
    return "p4" if pixels <= 4 else "p16" if pixels <= 16 else "p"


def _conv_variant(x: torch.Tensor, weight: torch.Tensor, stride: Sequence[int], transposed: bool,
                  groups: int) -> str:
    kernel = "x".join(str(k) for k in _ints(weight.shape[2:]))
    c_in = _ints(x.shape[1:2])[0]
    kind = _conv_kind(int(groups), c_in)
    return (f"{layout(x)}/{kind}/{channel_class(c_in)}/k{kernel}/s{max(_ints(stride))}/{pixel_class(x)}"
            + ("/transposed" if transposed else ""))


def blocked_nbytes(t: Any, dims: Sequence[int] = (0, 1)) -> int:
    """Bytes of a convolution tensor with ``dims`` (those of more than one
    element) rounded up to a multiple of 16: its size in oneDNN's blocked
    layout, which the reorders inside a convolution allocate."""
    if not isinstance(t, torch.Tensor):
        return 0
    sizes = _ints(t.shape)
    for d in dims:
        if d < len(sizes) and sizes[d] > 1:
            sizes[d] = -(-sizes[d] // 16) * 16
    n = 1
    for x in sizes:
        n *= x
    return n * t.element_size()


def _conv_forward(args: Sequence[Any], out: Any) -> tuple[str, tuple[int, ...]]:
    x, weight = args[0], args[1]
    variant = _conv_variant(x, weight, args[3], bool(args[6]), int(args[8]))
    return variant, (blocked_nbytes(x, (1,)), blocked_nbytes(weight), blocked_nbytes(out, (1,)))


def _conv_backward(args: Sequence[Any], out: Any) -> tuple[str, tuple[int, ...]]:
    grad, x, weight = args[0], args[1], args[2]
    variant = _conv_variant(x, weight, args[4], bool(args[7]), int(args[9]))
    return variant, (blocked_nbytes(grad, (1,)), blocked_nbytes(x, (1,)), blocked_nbytes(weight))


def _norm_input(position: int, train_at: int | None = None) -> Callable[[Sequence[Any], Any], tuple[str, tuple[int, ...]]]:
    """A norm's variant (layout; training or not) and sizes: its input's
    bytes and its per-channel (batch norm: dim 1) or per-row (layer norm:
    what it normalizes over) statistics' bytes."""
    def classify(args: Sequence[Any], out: Any) -> tuple[str, tuple[int, ...]]:
        x = args[position]
        variant = layout(x)
        sizes = _ints(x.shape)
        if train_at is not None:
            variant += "/train" if bool(args[train_at]) else "/eval"
            stats = sizes[1] if len(sizes) > 1 else 1
        else:
            stats = max(1, math.prod(sizes[:-1]))  # the rows: a mean and an rstd each
        return variant, (nbytes(x), stats * x.element_size())
    return classify


@dataclass(frozen=True)
class Family:
    """One op the table measures: ``classify(args, out) -> (variant,
    features)`` over the call's values (tensors or fake tensors)."""

    op: Any
    features: tuple[str, ...]
    classify: Callable[[Sequence[Any], Any], tuple[str, tuple[int, ...]]]

    @property
    def name(self) -> str:
        return str(self.op)

    def call(self, args: Sequence[Any], out: Any) -> tuple[str, tuple[int, ...]]:
        """The call's variant -- ``classify``'s, with the dtype of its first
        tensor appended where it is not float32 (a bf16 convolution's
        buffers are no half of a float32 one's) -- and its sizes."""
        variant, features = self.classify(args, out)
        first = next((a for a in args if isinstance(a, torch.Tensor)), None)
        if first is not None and first.dtype != torch.float32:
            variant += "/" + str(first.dtype).removeprefix("torch.")
        return variant, features


#: The ops the table measures (the largest allocations inside kernels found
#: on the real-model benchmark's eager programs, torch 2.13 on CPU).
FAMILIES: tuple[Family, ...] = (
    Family(aten.convolution.default, ("input", "weight", "output"), _conv_forward),
    Family(aten.convolution_backward.default, ("grad_output", "input", "weight"), _conv_backward),
    Family(aten.native_batch_norm.default, ("input", "statistics"), _norm_input(0, train_at=5)),
    Family(aten.native_batch_norm_backward.default, ("input", "statistics"), _norm_input(1, train_at=7)),
    Family(aten.native_layer_norm.default, ("input", "statistics"), _norm_input(0)),
    Family(aten.native_layer_norm_backward.default, ("input", "statistics"), _norm_input(1)),
)

_BY_OP: dict[Any, Family] = {f.op: f for f in FAMILIES}


def family_of(target: Any) -> Family | None:
    return _BY_OP.get(target)


def _value(a: Any) -> Any:
    if isinstance(a, fx.Node):
        return a.meta.get("val")
    if isinstance(a, (list, tuple)):
        return type(a)(_value(x) for x in a)
    return a


#: The ops inductor leaves to their aten kernels among :data:`FAMILIES` (it
#: decomposes the norms into its own kernels, which allocate nothing inside).
INDUCTOR_EXTERN: frozenset[Any] = frozenset({aten.convolution.default, aten.convolution_backward.default})


def node_workspace(node: fx.Node, table: KernelTable, channels_last: bool = False) -> int:
    """Bytes ``node``'s kernel holds inside itself (0 for an op, variant or
    value the table cannot price); ``channels_last``: as a call on
    channels-last copies of its inputs would (inductor's layout
    optimisation; 0 for a call that is not 4-d, which it leaves as is)."""
    family = family_of(node.target)
    if family is None:
        return 0
    try:
        args = [_value(a) for a in node.args]
        variant, features = family.call(args, node.meta.get("val"))
        if channels_last:
            if not (isinstance(args[0], torch.Tensor) and args[0].dim() == 4):
                return 0
            variant = "channels_last" + variant[variant.index("/"):]
    except (AttributeError, IndexError, TypeError, ValueError):  # a value without meta, a symbolic size
        return 0
    return table.bytes(family.name, variant, features)


def workspace(lowered: LoweredGraph, device: str, inductor: bool = False) -> array[int] | None:
    """Per node of ``lowered``, the bytes its kernel holds inside itself on
    ``device`` (the shipped table of the installed torch); ``inductor``: of
    the aten kernels inductor runs (:data:`INDUCTOR_EXTERN`) in its
    optimised layout (channels-last), which the inductor model counts only
    in a module where that layout is on (``_C.FUSE_LAYOUT``).  None where
    no table of the device exists or no node is priced."""
    table = shipped_table(torch.__version__, device)
    if table is None:
        return None
    out = array("q", (node_workspace(node, table, channels_last=inductor)
                      if not inductor or node.target in INDUCTOR_EXTERN else 0 for node in lowered.nodes))
    return out if any(out) else None


__all__ = ["FAMILIES", "INDUCTOR_EXTERN", "Family", "blocked_nbytes", "channel_class", "family_of", "layout", "nbytes", "node_workspace", "workspace"]
