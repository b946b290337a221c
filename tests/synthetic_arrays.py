"""Synthetic transformer-like graph arrays of any size, built with numpy
(no fx), for the C core directly: ``_C.partition_decide(arrays, ...)``.

The joint graph of L layers, in graph order:

  placeholders  4 weights per layer (primals; the weights are static),
                the input x (primal), one tangent (the loss gradient);
  forward       per layer 13 nodes: norm, q = mm(norm, wq), view(q),
                k = mm(norm, wk), s = bmm(view, k), softmax, o = bmm(p, q),
                residual add, norm, mm(w1), gelu, mm(w2), residual add;
  backward      per layer (last layer first) 14 nodes that differentiate
                the forward ones: each reads the incoming gradient and the
                forward values its op needs (the activations the backward
                wants saved or recomputed), and emits the four weight
                gradients and the gradient of the layer's input;
  output        the final activation (the forward output) then every
                weight gradient and the input's gradient.

So n = 31 L + 3 nodes and about 2.1 edges (inputs) per node.  Flags are
those torch's partitioner would see: matmuls compute-intensive, pointwise
ops fusible and recomputable, the view a view; sizes are a few tensor
shapes' byte counts.  Every index array is int32, built by vectorised
offsets, so 10^7 nodes take seconds and no Python loop per node.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fxcut import _C
from fxcut.solve.core import MinCutOptions

F, B, W = 13, 14, 4  # forward / backward nodes and weights per layer

# Forward template: (flags, size class, inputs).  An input is ("f", j)
# (forward node j of this layer), ("w", j) (weight j), ("prev",) (the
# previous layer's output, or x for layer 0).
_FUSE = _C.F_FUSIBLE | _C.F_RECOMPUTABLE
_MM = _C.F_COMPUTE_INTENSIVE | _C.F_RECOMPUTABLE
_VIEW = _C.F_VIEW | _C.F_NO_COPY | _C.F_RECOMPUTABLE
FORWARD = [
    (_FUSE, 0, [("prev",)]),              # 0 norm
    (_MM, 0, [("f", 0), ("w", 0)]),       # 1 q
    (_VIEW, 0, [("f", 1)]),               # 2 view(q)
    (_MM, 0, [("f", 0), ("w", 1)]),       # 3 k
    (_MM, 1, [("f", 2), ("f", 3)]),       # 4 scores
    (_FUSE, 1, [("f", 4)]),               # 5 softmax
    (_MM, 0, [("f", 5), ("f", 1)]),       # 6 attention out
    (_FUSE, 0, [("prev",), ("f", 6)]),    # 7 residual
    (_FUSE, 0, [("f", 7)]),               # 8 norm
    (_MM, 2, [("f", 8), ("w", 2)]),       # 9 up
    (_FUSE, 2, [("f", 9)]),               # 10 gelu
    (_MM, 0, [("f", 10), ("w", 3)]),      # 11 down
    (_FUSE, 0, [("f", 7), ("f", 11)]),    # 12 residual: the layer's output
]
# Backward template: ("b", j) is backward node j of this layer, ("g",) the
# incoming gradient (the next layer's input gradient, or the tangent).
BACKWARD = [
    (_MM, 2, [("g",), ("w", 3)]),                 # 0 d gelu-out
    (_MM, 3, [("f", 10), ("g",)]),                # 1 d w2   (output)
    (_FUSE, 2, [("b", 0), ("f", 9)]),             # 2 gelu backward
    (_MM, 0, [("b", 2), ("w", 2)]),               # 3 d norm2-out
    (_MM, 3, [("f", 8), ("b", 2)]),               # 4 d w1   (output)
    (_FUSE, 0, [("b", 3), ("f", 7), ("g",)]),     # 5 d residual
    (_MM, 1, [("b", 5), ("f", 1)]),               # 6 d p
    (_FUSE, 1, [("b", 6), ("f", 5)]),             # 7 softmax backward
    (_MM, 0, [("b", 7), ("f", 3)]),               # 8 d q
    (_MM, 0, [("b", 7), ("f", 2)]),               # 9 d k
    (_FUSE, 0, [("b", 8), ("b", 9), ("w", 0)]),   # 10 d norm1-out
    (_MM, 3, [("f", 0), ("b", 8)]),               # 11 d wq  (output)
    (_MM, 3, [("f", 0), ("b", 9)]),               # 12 d wk  (output)
    (_FUSE, 0, [("b", 10), ("prev",), ("b", 5)]), # 13 d layer input
]
WEIGHT_GRADS = [11, 12, 4, 1]  # backward nodes giving d wq, d wk, d w1, d w2
SIZES = np.array([4 << 20, 16 << 20, 16 << 20, 4 << 20], dtype=np.int64)  # per size class


@dataclass
class SyntheticArrays:
    """Duck-typed GraphArrays (the attributes _C reads) plus the layout."""

    kind: np.ndarray
    flags: np.ndarray
    tag: np.ndarray
    ac_graph_id: np.ndarray
    nbytes: np.ndarray
    arg_ptr: np.ndarray
    arg_idx: np.ndarray
    in_ptr: np.ndarray
    in_idx: np.ndarray
    outputs: np.ndarray
    layers: int
    num_fwd_outputs: int = 1

    def __len__(self) -> int:
        return len(self.kind)

    @property
    def n_edges(self) -> int:
        return len(self.in_idx)

    def nbytes_total(self) -> int:
        return sum(int(getattr(self, f).nbytes) for f in
                   ("kind", "flags", "tag", "ac_graph_id", "nbytes", "arg_ptr", "arg_idx", "in_ptr", "in_idx",
                    "outputs"))


def layers_for(n_nodes: int) -> int:
    return max(1, (n_nodes - 3) // (F + B + W))


def build(layers: int) -> SyntheticArrays:
    L = layers
    n_place = W * L + 2
    fw0 = n_place                    # first forward node
    bw0 = fw0 + F * L                # first backward node
    out_node = bw0 + B * L
    n = out_node + 1
    layer = np.arange(L, dtype=np.int64)
    x, tangent = W * L, W * L + 1

    def fwd(j: int) -> np.ndarray:
        return fw0 + F * layer + j

    def bwd(j: int) -> np.ndarray:
        # Backward layers run last layer first.
        return bw0 + B * (L - 1 - layer) + j

    def weight(j: int) -> np.ndarray:
        return W * layer + j

    prev = np.where(layer == 0, x, fw0 + F * (layer - 1) + 12)
    grad_in = np.where(layer == L - 1, tangent, bw0 + B * (L - 2 - layer) + 13)

    def resolve(ref: tuple) -> np.ndarray:
        if ref[0] == "f":
            return fwd(ref[1])
        if ref[0] == "b":
            return bwd(ref[1])
        if ref[0] == "w":
            return weight(ref[1])
        if ref[0] == "prev":
            return prev
        return grad_in

    def section(template: list, order: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(flags, sizes, degrees, inputs) of one section, in graph order:
        the layers in `order`, each layer's nodes in template order."""
        cols = [np.stack([resolve(r) for r in inputs], axis=1) for _, _, inputs in template]
        idx = np.concatenate(cols, axis=1)[order].reshape(-1)
        deg = np.tile(np.array([len(t[2]) for t in template], dtype=np.int64), L)
        flags = np.tile(np.array([t[0] for t in template], dtype=np.uint32), L)
        sizes = np.tile(SIZES[[t[1] for t in template]], L)
        return flags, sizes, deg, idx

    f_flags, f_sizes, f_deg, f_idx = section(FORWARD, layer)
    b_flags, b_sizes, b_deg, b_idx = section(BACKWARD, layer[::-1])

    outputs = [fwd(12)[-1:]]
    grads = np.stack([bwd(j) for j in WEIGHT_GRADS], axis=1).reshape(-1)  # weight order
    outputs += [grads, bwd(13)[:1]]
    outputs_arr = np.concatenate(outputs).astype(np.int32)
    out_inputs = np.unique(outputs_arr).astype(np.int64)

    kind = np.full(n, _C.KIND_CALL_FUNCTION, dtype=np.uint8)
    kind[:n_place] = _C.KIND_PLACEHOLDER
    kind[out_node] = _C.KIND_OUTPUT
    flags = np.empty(n, dtype=np.uint32)
    flags[: W * L] = _C.F_PRIMAL
    flags[x] = _C.F_PRIMAL
    flags[tangent] = _C.F_TANGENT
    flags[fw0:bw0] = f_flags
    flags[bw0:out_node] = b_flags
    flags[out_node] = _C.F_NON_TENSOR
    nbytes = np.empty(n, dtype=np.int64)
    nbytes[: W * L] = 16 << 20
    nbytes[x] = nbytes[tangent] = 4 << 20
    nbytes[fw0:bw0] = f_sizes
    nbytes[bw0:out_node] = b_sizes
    nbytes[out_node] = _C.SIZE_UNKNOWN

    deg = np.zeros(n, dtype=np.int64)
    deg[fw0:bw0] = f_deg
    deg[bw0:out_node] = b_deg
    deg[out_node] = len(out_inputs)
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(deg, out=ptr[1:])
    if ptr[-1] > np.iinfo(np.int32).max:
        raise OverflowError(f"{ptr[-1]} edges do not fit int32 indices")
    in_idx = np.concatenate([f_idx, b_idx, out_inputs]).astype(np.int32)
    in_ptr = ptr.astype(np.int32)
    return SyntheticArrays(
        kind=kind,
        flags=flags,
        tag=np.full(n, _C.TAG_NONE, dtype=np.int8),
        ac_graph_id=np.zeros(n, dtype=np.int32),
        nbytes=nbytes,
        arg_ptr=in_ptr,
        arg_idx=in_idx,
        in_ptr=in_ptr,
        in_idx=in_idx,
        outputs=outputs_arr,
        layers=L,
    )


#: Every ban rule on but reductions; max_dist_from_bw 1000.
DEFAULT_OPTIONS = MinCutOptions(
    ban_if_used_far_apart=True,
    ban_if_long_fusible_chains=True,
    ban_if_materialized_backward=True,
    ban_if_not_in_allowlist=True,
    ban_if_reduction=False,
    recompute_views=False,
    treat_parameters_as_free_to_save=False,
    is_non_builtin_to_include=False,
    unsafe_allow_optimization_of_collectives=False,
    max_dist_from_bw=1000,
)


def decide(arrays: SyntheticArrays, keep_network: int = _C.KEEP_NONE) -> Any:
    """The C decision (an ``fxcut._C.Decision``) under DEFAULT_OPTIONS."""
    return _C.partition_decide(arrays, DEFAULT_OPTIONS, num_fwd_outputs=arrays.num_fwd_outputs,
                               keep_network=keep_network)
