"""DeepSpeed DeepCompile, with fxcut's ZeRO-3 walk and partitioner.

    import fxcut.integrations.deepspeed as fxcut_ds
    fxcut_ds.install()       # before deepspeed.initialize(...) / engine.compile()
    ...
    fxcut_ds.uninstall()

DeepCompile's code is left as it is; :func:`install` rebinds the module
attributes its backend looks up when it compiles a graph:

- ``deepspeed.compile.partitioner._recompute_param_aliases``: fxcut's walk
  (:func:`fxcut.recompute_param_aliases`);
- ``get_wrapped_partitioner`` in ``deepspeed.compile.partitioner``,
  ``.backend`` and ``.inductor`` (each imported the name): a wrapper that
  does what DeepCompile's does (records the frame in ``frames_partitioned``
  and its number of forward outputs for ``get_num_fwd_outputs``, runs the
  walk under ZeRO-3) and then cuts with fxcut;
- ``deepspeed.compile.backend.min_cut_rematerialization_partition``
  (DeepCompile's eager backend passes it): fxcut's partitioner.

With DeepCompile's inductor backend the wrapped function is inductor's own
``partition_fn``; it is called with ``partitioner_fn_override`` set to
fxcut's partitioner, so inductor's joint-graph passes still run first
(unless the user configured inductor's ``custom_partitioner_fn``, which is
then left in charge).

The no-copy set of the walk: DeepCompile's ``get_no_copy_ops`` builds
DeepSpeed's native extension, which needs CUDA; fxcut's
:func:`fxcut.get_no_copy_ops` is the same set without it.  Where
``deepspeed.compile.partitioner.get_no_copy_ops`` has been replaced (as
DeepSpeed's unit tests do), the walk uses the replacement.

Not thread-safe: install and uninstall while nothing compiles.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any

import torch.fx as fx

from .. import zero3
from ..partition import min_cut_rematerialization_partition as fxcut_partition
from ..zero3 import ParamIndex, PartitionFn

#: (module, attribute) pairs install() rebinds, and what they held before.
_saved: dict[tuple[str, str], Any] = {}


def _modules() -> dict[str, Any]:
    import deepspeed.compile.backend as backend
    import deepspeed.compile.inductor as inductor
    import deepspeed.compile.partitioner as partitioner

    return {"partitioner": partitioner, "backend": backend, "inductor": inductor}


def _no_copy_ops() -> Iterable[Any] | None:
    """DeepCompile's no-copy set where it was replaced, else None (fxcut's)."""
    import deepspeed.compile.partitioner as partitioner
    import deepspeed.compile.util as util

    current = getattr(partitioner, "get_no_copy_ops", None)
    if current is None or current is getattr(util, "get_no_copy_ops", None):
        return None
    ops: Iterable[Any] = current()
    return ops


def recompute_param_aliases(joint_graph: fx.Graph, param_indices: list[ParamIndex]) -> None:
    """DeepCompile's ``_recompute_param_aliases`` (returns None), by fxcut."""
    zero3.recompute_param_aliases(joint_graph, param_indices, no_copy_ops=_no_copy_ops())


def _fxcut_in_place_of(partition_fn: PartitionFn | None) -> PartitionFn:
    """The partition function to call for the one DeepCompile passed."""
    from torch._functorch import partitioners

    if partition_fn is None or partition_fn is partitioners.min_cut_rematerialization_partition:
        return fxcut_partition
    try:
        from torch._inductor import compile_fx
    except ImportError:  # pragma: no cover - torch without inductor
        return partition_fn
    if partition_fn is compile_fx.partition_fn:
        return functools.partial(_inductor_partition, partition_fn)
    return partition_fn


def _inductor_partition(inductor_partition_fn: PartitionFn, *args: Any, **kwargs: Any) -> Any:
    from torch._inductor import config

    if config.custom_partitioner_fn is None:
        kwargs["partitioner_fn_override"] = fxcut_partition
    return inductor_partition_fn(*args, **kwargs)


def get_wrapped_partitioner(
    z3_partition: bool,
    param_indices: list[ParamIndex],
    partition_fn: PartitionFn | None,
    frame_id: int,
    frames_partitioned: set[int],
) -> PartitionFn:
    """DeepCompile's ``get_wrapped_partitioner``, cutting with fxcut."""
    import deepspeed.compile.partitioner as partitioner

    inner = _fxcut_in_place_of(partition_fn)
    fwd_outputs = getattr(partitioner, "_num_fwd_outputs_by_frame", None)

    def partition_recomputing_zero3_aliases(
        joint_module: fx.GraphModule, joint_inputs: Any, *, num_fwd_outputs: int, **kwargs: Any
    ) -> tuple[fx.GraphModule, fx.GraphModule]:
        frames_partitioned.add(frame_id)
        if fwd_outputs is not None:
            fwd_outputs[frame_id] = num_fwd_outputs
        if z3_partition:
            recompute_param_aliases(joint_module.graph, param_indices)
        return inner(joint_module, joint_inputs, num_fwd_outputs=num_fwd_outputs, **kwargs)

    return partition_recomputing_zero3_aliases


def _replacements() -> dict[tuple[str, str], Callable[..., Any]]:
    return {
        ("partitioner", "_recompute_param_aliases"): recompute_param_aliases,
        ("partitioner", "get_wrapped_partitioner"): get_wrapped_partitioner,
        ("backend", "get_wrapped_partitioner"): get_wrapped_partitioner,
        ("inductor", "get_wrapped_partitioner"): get_wrapped_partitioner,
        ("backend", "min_cut_rematerialization_partition"): fxcut_partition,
    }


def installed() -> bool:
    return bool(_saved)


def install() -> None:
    """Make DeepCompile use fxcut (idempotent).  Raises ImportError when
    DeepSpeed's compile package does not import, AttributeError when it
    lacks a name this module replaces (an incompatible DeepSpeed)."""
    if _saved:
        return
    modules = _modules()
    replacements = _replacements()
    for mod_name, attr in replacements:
        if not hasattr(modules[mod_name], attr):
            raise AttributeError(
                f"deepspeed.compile.{mod_name} has no attribute {attr!r}: "
                "this DeepSpeed version is not supported by fxcut.integrations.deepspeed"
            )
    for (mod_name, attr), new in replacements.items():
        _saved[(mod_name, attr)] = getattr(modules[mod_name], attr)
        setattr(modules[mod_name], attr, new)


def uninstall() -> None:
    """Give DeepCompile its own functions back (a no-op when not installed)."""
    if not _saved:
        return
    modules = _modules()
    for (mod_name, attr), old in _saved.items():
        setattr(modules[mod_name], attr, old)
    _saved.clear()


__all__ = ["get_wrapped_partitioner", "install", "installed", "recompute_param_aliases", "uninstall"]
