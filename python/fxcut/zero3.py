"""DeepCompile's ZeRO-3 partitioner API, with the walk done in C.

Under ZeRO-3 a parameter is gathered just before use and freed after.  If the
forward saved a view or a cast of a gathered parameter for backward, the full
parameter would stay alive and ZeRO-3's memory saving would be lost.  So
before partitioning, every alias or cast of a parameter (transitively) is
tagged ``MUST_RECOMPUTE``; the min-cut partitioner then recomputes it in
backward from the re-gathered parameter.

The walk runs under the same guard as a partition (:mod:`fxcut.route.guard`):
in C where fxcut decides, in plain Python (DeepCompile's algorithm over the
fx nodes) where it does not -- an untested torch, a torch fxcut's copies do
not fit, a gap in fxcut's walk -- so ZeRO-3's promise holds whoever
partitions.  Wrapping fxcut's own partition function, the walk runs inside
that partition's guard: one lookup of the running torch, one snapshot, one
restore on failure.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch.fx as fx

from .route.guard import Zero3Walk, compile_scope, guarded_walk, walk_module
from .torchrules.adapter import get_no_copy_ops, primal_placeholders

#: (position among the primal inputs, ds_id, full unsharded shape)
ParamIndex = tuple[int, int, Any]
PartitionFn = Callable[..., tuple[fx.GraphModule, fx.GraphModule]]
#: The keyword fxcut's own partition functions take the walk by (inside their guard).
ZERO3_KEYWORD = "_zero3"


def primal_inputs(gm: fx.GraphModule, example_inputs: Sequence[Any]) -> list[tuple[str | None, Any]]:
    """What AOT Autograd's primal placeholders hold, in order, as (name,
    value): the traced module's own parameters and buffers (none when dynamo
    lifts them, its default), then dynamo's graph inputs (name None)."""
    own = [*gm.named_parameters(remove_duplicate=False), *gm.named_buffers(remove_duplicate=False)]
    return [*own, *((None, t) for t in example_inputs)]


def param_positions(param_indices: Iterable[Any], n_primals: int) -> list[int]:
    """Each ``(arg_idx, ds_id, shape)`` entry's ``arg_idx``, checked: a
    TypeError naming an entry that is not such a triple, an IndexError
    naming one outside the graph's ``n_primals`` primal placeholders."""
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


def _walk_request(joint_graph: fx.Graph, param_indices: Iterable[Any], no_copy_ops: Iterable[Any] | None
                  ) -> Zero3Walk:
    """The walk asked for, checked against the graph (nothing written)."""
    if not isinstance(joint_graph, fx.Graph):
        raise TypeError(
            f"joint_graph must be a torch.fx.Graph, got {type(joint_graph).__name__}"
        )
    if not any(node.op == "placeholder" for node in joint_graph.nodes):
        raise ValueError("joint_graph has no placeholders: it is not a joint graph")
    positions = param_positions(param_indices, len(primal_placeholders(joint_graph)))
    return Zero3Walk(positions, None if no_copy_ops is None else frozenset(no_copy_ops))


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
    return guarded_walk(joint_graph, _walk_request(joint_graph, param_indices, no_copy_ops))


def takes_zero3(fn: object) -> bool:
    """Whether ``fn`` is one of fxcut's own partition functions (or a
    ``functools.partial`` of one), which run the walk inside their guard."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    return bool(getattr(fn, "fxcut_takes_zero3", False))


def wrap_partitioner(
    inner: PartitionFn,
    *,
    z3_partition: bool,
    param_indices: Sequence[ParamIndex],
    frame_id: int = 0,
    frames_partitioned: set[int] | None = None,
    num_fwd_outputs_by_frame: dict[int, int] | None = None,
    no_copy_ops: Callable[[], Iterable[Any] | None] = lambda: None,
) -> PartitionFn:
    """The one ZeRO-3 partition wrapper (used by :func:`get_wrapped_partitioner`
    and by :mod:`fxcut.integrations.deepspeed`).

    The returned function records ``frame_id`` in ``frames_partitioned`` and
    its ``num_fwd_outputs`` in ``num_fwd_outputs_by_frame`` (each when
    given), runs the walk (:func:`recompute_param_aliases`'s, with
    ``no_copy_ops()``'s set) when ``z3_partition`` is true, then calls
    ``inner`` with ``num_fwd_outputs`` and every other keyword argument
    forwarded.  Where ``inner`` is fxcut's own partition function the walk
    runs inside its guard; otherwise under a guard of its own first.  If the
    walk or ``inner`` raises, the module is put back as it was before the
    walk.
    """

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
        walk = _walk_request(joint_module.graph, param_indices, no_copy_ops())
        if takes_zero3(inner):
            return inner(joint_module, joint_inputs, num_fwd_outputs=num_fwd_outputs, **{ZERO3_KEYWORD: walk},
                         **kwargs)
        return _walk_then(inner, walk, joint_module, joint_inputs, num_fwd_outputs, kwargs)

    return partition_recomputing_zero3_aliases


def _walk_then(inner: PartitionFn, walk: Zero3Walk, joint_module: fx.GraphModule, joint_inputs: Any,
               num_fwd_outputs: int, kwargs: dict[str, Any]) -> tuple[fx.GraphModule, fx.GraphModule]:
    """The walk under a guard of its own, then a partition function that is
    not fxcut's; both undone if either raises.  The running torch looked up
    for the walk serves fxcut's partitioner too where ``inner`` calls it
    (inductor's partition function with fxcut's as its override)."""
    torch, tested, snapshot = walk_module(joint_module, walk)
    try:
        with compile_scope(torch, tested):
            return inner(joint_module, joint_inputs, num_fwd_outputs=num_fwd_outputs, **kwargs)
    except BaseException:
        if snapshot is not None:
            snapshot.restore()
        raise


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


__all__ = ["ZERO3_KEYWORD", "get_no_copy_ops", "get_wrapped_partitioner", "param_positions",
           "recompute_param_aliases", "takes_zero3", "wrap_partitioner"]
