"""Exact minimum s-t cuts: a thin layer over the C solver ``fxcut._C.min_cut``.

The cut reported is the one networkx's ``minimum_cut`` reports: the sink side
is every vertex that can still reach the sink in the residual network of a
maximum flow (the smallest sink side of any minimum cut), so ties between
equal cuts resolve exactly as they do in torch's partitioner.  A vertex that
no edge touches cannot reach the sink, so it is on the source side (unless
it is the sink).  Capacities are non-negative integers of at most 63 bits, or
infinite; the cut value is an exact Python int, however large.
"""

from __future__ import annotations

import array
import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, Literal, Union, overload

if TYPE_CHECKING:
    from typing_extensions import Buffer  # collections.abc.Buffer from Python 3.12

import fxcut._C as _C

__all__ = ["INFINITE", "ALGORITHMS", "minimum_cut", "minimum_cut_arrays"]

#: The capacity that means "infinite" in the int64 ``cap`` array.
INFINITE = _C.CAP_INF

#: Algorithm names and the codes the C core takes.
ALGORITHMS = {"default": _C.MAXFLOW_DEFAULT, "push_relabel": _C.MAXFLOW_PUSH_RELABEL, "dinic": _C.MAXFLOW_DINIC}

Capacity = Union[int, float, None]
"""An edge capacity: an int >= 0, or ``math.inf`` / ``None`` / ``INFINITE``."""


def _algorithm_code(algorithm: str) -> int:
    try:
        return ALGORITHMS[algorithm]
    except KeyError:
        raise ValueError(f"algorithm must be one of {sorted(ALGORITHMS)}, got {algorithm!r}") from None


def _capacity_code(cap: Capacity) -> int:
    if cap is None or cap == math.inf:
        return INFINITE
    if isinstance(cap, float):
        if not cap.is_integer():
            raise ValueError(f"capacity {cap!r} is not an integer")
        cap = int(cap)
    return cap


@overload
def minimum_cut_arrays(
    n_vertices: int, tail: Buffer, head: Buffer, cap: Buffer, source: int, sink: int,
    *, algorithm: str = ..., as_mask: Literal[False] = ...,
) -> tuple[int, set[int]]: ...
@overload
def minimum_cut_arrays(
    n_vertices: int, tail: Buffer, head: Buffer, cap: Buffer, source: int, sink: int,
    *, algorithm: str = ..., as_mask: Literal[True],
) -> tuple[int, bytes]: ...
def minimum_cut_arrays(
    n_vertices: int,
    tail: Buffer,
    head: Buffer,
    cap: Buffer,
    source: int,
    sink: int,
    *,
    algorithm: str = "push_relabel",
    as_mask: bool = False,
) -> tuple[int, set[int] | bytes]:
    """Minimum cut of the network given as arrays.

    ``tail``, ``head``: int32 buffers (numpy ``int32``, ``array.array('i')``);
    ``cap``: int64 buffer, ``INFINITE`` (-1) for an infinite capacity.  Edge
    ``e`` runs ``tail[e] -> head[e]``; parallel edges add up, self-loops and
    zero capacities carry nothing.

    Returns ``(cut_value, sink_side)``: the sink side as a set of vertices,
    or with ``as_mask=True`` as ``bytes`` with one 0/1 byte per vertex.

    Raises :class:`fxcut.InfiniteCutError` when source and sink are joined by
    infinite edges only, ``IndexError`` for a vertex out of range and
    ``ValueError`` for other malformed input.
    """
    value, mask = _C.min_cut(n_vertices, tail, head, cap, source, sink, _algorithm_code(algorithm))
    if as_mask:
        return value, mask
    return value, {v for v, bit in enumerate(mask) if bit}


@overload
def minimum_cut(
    n_vertices: int, edges: Iterable[tuple[int, int, Capacity]], source: int, sink: int,
    *, algorithm: str = ..., as_mask: Literal[False] = ...,
) -> tuple[int, set[int]]: ...
@overload
def minimum_cut(
    n_vertices: int, edges: Iterable[tuple[int, int, Capacity]], source: int, sink: int,
    *, algorithm: str = ..., as_mask: Literal[True],
) -> tuple[int, bytes]: ...
def minimum_cut(
    n_vertices: int,
    edges: Iterable[tuple[int, int, Capacity]],
    source: int,
    sink: int,
    *,
    algorithm: str = "push_relabel",
    as_mask: bool = False,
) -> tuple[int, set[int] | bytes]:
    """Minimum cut of the network with vertices ``0 .. n_vertices-1`` and the
    edges ``(tail, head, capacity)``; an infinite capacity is ``math.inf``,
    ``None`` or ``INFINITE``.  Otherwise as :func:`minimum_cut_arrays`.
    """
    tail = array.array("i")
    head = array.array("i")
    cap = array.array("q")
    for u, v, c in edges:
        tail.append(u)
        head.append(v)
        cap.append(_capacity_code(c))
    if as_mask:
        return minimum_cut_arrays(n_vertices, tail, head, cap, source, sink, algorithm=algorithm, as_mask=True)
    return minimum_cut_arrays(n_vertices, tail, head, cap, source, sink, algorithm=algorithm)
