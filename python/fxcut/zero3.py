"""DeepCompile's ZeRO-3 partitioner API, with the walk done in C.

Under ZeRO-3 a parameter is gathered just before use and freed after.  If the
forward saved a view or a cast of a gathered parameter for backward, the full
parameter would stay alive and ZeRO-3's memory saving would be lost.  So
before partitioning, every alias or cast of a parameter (transitively) is
tagged ``MUST_RECOMPUTE``; the min-cut partitioner then recomputes it in
backward from the re-gathered parameter.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch.fx as fx
from torch.utils.checkpoint import CheckpointPolicy

import fxcut._C as _C
from .solve.core import param_alias_walk
from .route.lower import lower_structure
from .torchrules.ops import TargetFacts, get_no_copy_ops, zero3_facts
from .torchrules.snapshot import ModuleSnapshot

#: (position among the primal inputs, ds_id, full unsharded shape)
ParamIndex = tuple[int, int, Any]
PartitionFn = Callable[..., tuple[fx.GraphModule, fx.GraphModule]]


def primal_inputs(gm: fx.GraphModule, example_inputs: Sequence[Any]) -> list[tuple[str | None, Any]]:
    """What AOT Autograd's primal placeholders hold, in order, as (name,
    value): the traced module's own parameters and buffers (none when dynamo
    lifts them, its default), then dynamo's graph inputs (name None)."""
    own = [*gm.named_parameters(remove_duplicate=False), *gm.named_buffers(remove_duplicate=False)]
    return [*own, *((None, t) for t in example_inputs)]


def _param_positions(param_indices: Iterable[Any], n_primals: int) -> list[int]:
    positions: list[int] = []
    for k, entry in enumerate(param_indices):
        if not isinstance(entry, Sequence) or isinstance(entry, (str, bytes)) or len(entry) != 3:
            raise TypeError(
                f"param_indices[{k}] = {entry!r} is not an (arg_idx, ds_id, shape) triple"
            )
        position = entry[0]
        if not isinstance(position, int) or isinstance(position, bool):
            raise TypeError(
                f"param_indices[{k}]: arg_idx {position!r} is not an int"
            )
        if not 0 <= position < n_primals:
            raise IndexError(
                f"param_indices[{k}]: arg_idx {position} is outside the graph's "
                f"{n_primals} primal placeholders"
            )
        positions.append(position)
    return positions


def recompute_param_aliases(
    joint_graph: fx.Graph,
    param_indices: Iterable[ParamIndex],
    *,
    no_copy_ops: Iterable[Any] | None = None,
) -> list[fx.Node]:
    """Tag every alias or cast of a ZeRO-3 parameter ``MUST_RECOMPUTE``.

    ``param_indices`` holds ``(arg_idx, ds_id, shape)`` per parameter; only
    ``arg_idx`` is used, as an index into the primal placeholders in graph
    order.  A ``call_function`` node whose target is a no-copy op (see
    :func:`get_no_copy_ops`) or a cast (:func:`fxcut.is_cast_op`) and which
    has a positional, top-level argument that is a parameter or an already
    tagged node gets ``meta["recompute"] = CheckpointPolicy.MUST_RECOMPUTE``.
    Every node without ``meta["ac_graph_id"]`` gets 1.  No other meta is
    touched.  ``no_copy_ops`` replaces DeepCompile's no-copy set.

    Everything is validated before any meta is written: on error the graph is
    unchanged.  Returns the tagged nodes in graph order.
    """
    if not isinstance(joint_graph, fx.Graph):
        raise TypeError(
            f"joint_graph must be a torch.fx.Graph, got {type(joint_graph).__name__}"
        )
    facts = zero3_facts() if no_copy_ops is None else TargetFacts(frozenset(no_copy_ops))
    arrays = lower_structure(joint_graph, facts)
    primals = [i for i, bits in enumerate(arrays.flags) if bits & _C.F_PRIMAL]
    if not any(k == _C.KIND_PLACEHOLDER for k in arrays.kind):
        raise ValueError("joint_graph has no placeholders: it is not a joint graph")
    positions = _param_positions(param_indices, len(primals))
    params = array("i", sorted({primals[p] for p in positions}))
    for node in arrays.nodes:
        if not isinstance(node.meta, dict):
            raise TypeError(f"node {node.name!r}: meta is {type(node.meta).__name__}, not a dict")
    marks = param_alias_walk(arrays, params)

    must_recompute = CheckpointPolicy.MUST_RECOMPUTE
    tagged: list[fx.Node] = []
    for node, mark in zip(arrays.nodes, marks):
        node.meta.setdefault("ac_graph_id", 1)
        if mark:
            node.meta["recompute"] = must_recompute
            tagged.append(node)
    return tagged


def wrap_partitioner(
    inner: PartitionFn,
    *,
    z3_partition: bool,
    param_indices: Sequence[ParamIndex],
    frame_id: int = 0,
    frames_partitioned: set[int] | None = None,
    num_fwd_outputs_by_frame: dict[int, int] | None = None,
    walk: Callable[[fx.Graph, Sequence[ParamIndex]], Any] | None = None,
) -> PartitionFn:
    """The one ZeRO-3 partition wrapper (used by :func:`get_wrapped_partitioner`
    and by :mod:`fxcut.integrations.deepspeed`).

    The returned function records ``frame_id`` in ``frames_partitioned`` and
    its ``num_fwd_outputs`` in ``num_fwd_outputs_by_frame`` (each when
    given), runs ``walk`` (:func:`recompute_param_aliases` when None) when
    ``z3_partition`` is true, then calls ``inner`` with ``num_fwd_outputs``
    and every other keyword argument forwarded.  If the walk or ``inner``
    raises, the module is put back as it was before the walk.
    """
    run_walk = walk if walk is not None else recompute_param_aliases

    def partition_recomputing_zero3_aliases(
        joint_module: fx.GraphModule,
        joint_inputs: Any,
        *,
        num_fwd_outputs: int,
        **kwargs: Any,
    ) -> tuple[fx.GraphModule, fx.GraphModule]:
        if frames_partitioned is not None:
            frames_partitioned.add(frame_id)
        if num_fwd_outputs_by_frame is not None:
            num_fwd_outputs_by_frame[frame_id] = num_fwd_outputs
        if not z3_partition:
            return inner(joint_module, joint_inputs, num_fwd_outputs=num_fwd_outputs, **kwargs)
        if not isinstance(joint_module, fx.GraphModule):
            raise TypeError(
                f"joint_module must be a torch.fx.GraphModule, got {type(joint_module).__name__}"
            )
        snapshot = ModuleSnapshot(joint_module)
        try:
            run_walk(joint_module.graph, param_indices)
            return inner(joint_module, joint_inputs, num_fwd_outputs=num_fwd_outputs, **kwargs)
        except BaseException:
            snapshot.restore()
            raise

    return partition_recomputing_zero3_aliases


def get_wrapped_partitioner(
    z3_partition: bool,
    param_indices: Sequence[ParamIndex],
    partition_fn: PartitionFn | None = None,
    frame_id: int = 0,
    frames_partitioned: set[int] | None = None,
) -> PartitionFn:
    """DeepCompile's partition_fn wrapper.

    The returned function records ``frame_id`` in ``frames_partitioned``,
    runs :func:`recompute_param_aliases` when ``z3_partition`` is true, then
    calls ``partition_fn`` (fxcut's min-cut partitioner when None) with
    ``num_fwd_outputs`` and every other keyword argument forwarded.  On an
    error the module is left as it was (the walk's tags removed).
    """
    if partition_fn is None:
        from .partition import min_cut_rematerialization_partition

        partition_fn = min_cut_rematerialization_partition
    return wrap_partitioner(
        partition_fn,
        z3_partition=z3_partition,
        param_indices=param_indices,
        frame_id=frame_id,
        frames_partitioned=frames_partitioned,
    )


__all__ = ["recompute_param_aliases", "get_wrapped_partitioner", "get_no_copy_ops", "wrap_partitioner"]
