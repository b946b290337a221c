"""DeepCompile's ZeRO-3 parameter-alias walk over an fx graph: in C, and in plain Python.

Every ``call_function`` node whose target is a no-copy op (DeepCompile's
set: :func:`fxcut.torchrules.ops.get_no_copy_ops`) or a cast
(:func:`fxcut.torchrules.ops.is_cast_op`), and which has a positional,
top-level argument that is a parameter or an already tagged node, is tagged
``MUST_RECOMPUTE``; every node without ``meta["ac_graph_id"]`` gets 1.

:func:`c_walk` lowers the graph's structure and walks it in C
(:func:`fxcut.solve.core.param_alias_walk`); :func:`reference_walk` walks
the fx nodes themselves, for torch's own path: where fxcut does not run (an
untested torch) or its walk failed, DeepCompile's walk still runs before
torch's partitioner, so ZeRO-3's promise -- no alias of a gathered
parameter saved -- holds whoever partitions.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Sequence
from typing import Any

import torch.fx as fx
from torch.utils.checkpoint import CheckpointPolicy

import fxcut._C as _C
from ..solve.core import param_alias_walk
from .lower import lower_structure, placeholder_flags
from .ops import TargetFacts, is_cast_op, zero3_facts


def _facts(no_copy_ops: Iterable[Any] | None) -> TargetFacts:
    return zero3_facts() if no_copy_ops is None else TargetFacts(frozenset(no_copy_ops))


def _check_meta(graph: fx.Graph) -> None:
    for node in graph.nodes:
        if not isinstance(node.meta, dict):
            raise TypeError(f"node {node.name!r}: meta is {type(node.meta).__name__}, not a dict")


def _tag(nodes: Iterable[fx.Node], marks: Iterable[int]) -> list[fx.Node]:
    """Write the walk's result: ``ac_graph_id`` 1 where absent, and
    ``MUST_RECOMPUTE`` on the marked nodes (returned, in graph order)."""
    must_recompute = CheckpointPolicy.MUST_RECOMPUTE
    tagged: list[fx.Node] = []
    for node, mark in zip(nodes, marks):
        node.meta.setdefault("ac_graph_id", 1)
        if mark:
            node.meta["recompute"] = must_recompute
            tagged.append(node)
    return tagged


def c_walk(graph: fx.Graph, positions: Sequence[int], no_copy_ops: Iterable[Any] | None = None) -> list[fx.Node]:
    """The walk in C over the graph's structure; ``positions``: the
    parameters' positions among the primal placeholders (checked by the
    caller).  Validated before any meta is written: on error the graph is
    unchanged."""
    arrays = lower_structure(graph, _facts(no_copy_ops))
    primals = [i for i, bits in enumerate(arrays.flags) if bits & _C.F_PRIMAL]
    params = array("i", sorted({primals[p] for p in positions}))
    _check_meta(graph)
    return _tag(arrays.nodes, param_alias_walk(arrays, params))


def reference_walk(graph: fx.Graph, positions: Sequence[int], no_copy_ops: Iterable[Any] | None = None
                   ) -> list[fx.Node]:
    """The same walk over the fx nodes, one pass in graph order."""
    facts = _facts(no_copy_ops)
    primals = [n for n in graph.nodes if n.op == "placeholder" and placeholder_flags(n) & _C.F_PRIMAL]
    marked: set[fx.Node] = {primals[p] for p in positions}
    _check_meta(graph)
    marks = []
    for node in graph.nodes:
        hit = node.op == "call_function" and bool(facts.flags(node.target) & _C.F_NO_COPY or is_cast_op(node)[0]) \
            and any(isinstance(a, fx.Node) and a in marked for a in node.args)
        if hit:
            marked.add(node)
        marks.append(hit)
    return _tag(graph.nodes, marks)


__all__ = ["c_walk", "reference_walk"]
