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

install and uninstall are atomic (one lock): concurrent calls leave DeepCompile
either fully patched or fully its own, never patched for good.  Still, call
them while nothing compiles: a compile in progress may see either state.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch.fx as fx

from .. import zero3
from ..partition import min_cut_rematerialization_partition as fxcut_partition
from ..zero3 import ParamIndex, PartitionFn

#: (module, attribute) pairs install() rebinds, and what they held before.
_saved: dict[tuple[str, str], Any] = {}
#: Held by install() and uninstall() for their whole read-check-write.
_lock = threading.Lock()
#: install(memory_budget=b) / install(safe_budget=...): what DeepCompile cuts
#: with, per backend ("eager", "inductor"; empty: fxcut's default path).
_planned: dict[str, PartitionFn] = {}

#: The memory model of the program each DeepCompile backend runs.  Eager:
#: its compilers return ``make_boxed_func(gm.forward)``, whose argument list
#: lives through the call, so the backward holds every saved value to its
#: end ("unfused_held"; DeepCompile's ``free_activation`` option frees the
#: largest ones early on CUDA: the model then over-estimates).  Inductor:
#: inductor's compiled modules ("inductor").
DEEPCOMPILE_MEMORY_MODELS = {"eager": "unfused_held", "inductor": "inductor"}


def _partition(backend: str = "eager") -> PartitionFn:
    """What DeepCompile's ``backend`` ("eager" or "inductor") cuts with:
    fxcut's default path, or the plan (or ``safe_budget``) install() was given."""
    return _planned.get(backend, fxcut_partition)


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


def recompute_param_aliases(joint_graph: fx.Graph, param_indices: Sequence[ParamIndex]) -> None:
    """DeepCompile's ``_recompute_param_aliases`` (returns None), by fxcut."""
    zero3.recompute_param_aliases(joint_graph, param_indices, no_copy_ops=_no_copy_ops())


def _fxcut_in_place_of(partition_fn: PartitionFn | None) -> PartitionFn:
    """The partition function to call for the one DeepCompile passed."""
    from torch._functorch import partitioners

    if partition_fn is None or partition_fn is partitioners.min_cut_rematerialization_partition:
        return _partition("eager")
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
        kwargs["partitioner_fn_override"] = _partition("inductor")
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

    return zero3.wrap_partitioner(
        _fxcut_in_place_of(partition_fn),
        z3_partition=z3_partition,
        param_indices=param_indices,
        frame_id=frame_id,
        frames_partitioned=frames_partitioned,
        num_fwd_outputs_by_frame=getattr(partitioner, "_num_fwd_outputs_by_frame", None),
        no_copy_ops=_no_copy_ops,
    )


def _replacements() -> dict[tuple[str, str], Callable[..., Any]]:
    return {
        ("partitioner", "_recompute_param_aliases"): recompute_param_aliases,
        ("partitioner", "get_wrapped_partitioner"): get_wrapped_partitioner,
        ("backend", "get_wrapped_partitioner"): get_wrapped_partitioner,
        ("inductor", "get_wrapped_partitioner"): get_wrapped_partitioner,
        ("backend", "min_cut_rematerialization_partition"): _partition("eager"),
    }


def installed() -> bool:
    with _lock:
        return bool(_saved)


def install(memory_budget: float | None = None, *, safe_budget: bool | None = None) -> None:
    """Make DeepCompile use fxcut (idempotent, atomic).  Raises ImportError
    when DeepSpeed's compile package does not import, AttributeError when it
    lacks a name this module replaces (an incompatible DeepSpeed); then
    nothing is patched.  ``memory_budget``: cut with
    :func:`fxcut.planned_partitioner` (the budget on the simulated peak; under
    ZeRO-3 the plan recomputes what the walk requires plus what it chooses)
    instead of torch's decision, on the memory model of the program each
    DeepCompile backend runs (:data:`DEEPCOMPILE_MEMORY_MODELS`); None:
    torch's decision.  ``safe_budget``:
    as :func:`fxcut.min_cut_rematerialization_partition`'s (None:
    ``FXCUT_SAFE_BUDGET`` decides at partition time; a plan never recomputes
    what it keeps saved).  A bad value raises ValueError naming the option,
    before anything is patched.  A later install() sets both again."""
    from ..route.plan import safe_budget_mode

    if safe_budget is not None:
        safe_budget_mode(safe_budget)  # ValueError naming safe_budget, with a plan too (which ignores it)
    chosen: dict[str, PartitionFn] = {}
    if memory_budget is not None:
        from ..planned import planned_partitioner

        chosen = {backend: planned_partitioner(memory_budget, memory_model=model)  # ValueError naming memory_budget
                  for backend, model in DEEPCOMPILE_MEMORY_MODELS.items()}
    elif safe_budget is not None:
        chosen = dict.fromkeys(DEEPCOMPILE_MEMORY_MODELS, functools.partial(fxcut_partition, safe_budget=safe_budget))
    with _lock:
        _planned.clear()
        _planned.update(chosen)
        if _saved:  # installed: the budget is read at partition time, the backend's name rebound
            if ("backend", "min_cut_rematerialization_partition") in _saved:
                setattr(_modules()["backend"], "min_cut_rematerialization_partition", _partition("eager"))
            return
        modules = _modules()
        replacements = _replacements()
        for mod_name, attr in replacements:
            if not hasattr(modules[mod_name], attr):
                raise AttributeError(
                    f"deepspeed.compile.{mod_name} has no attribute {attr!r}: "
                    "this DeepSpeed version is not supported by fxcut.integrations.deepspeed"
                )
        originals = {key: getattr(modules[key[0]], key[1]) for key in replacements}
        for (mod_name, attr), new in replacements.items():
            setattr(modules[mod_name], attr, new)
        _saved.update(originals)


def uninstall() -> None:
    """Give DeepCompile its own functions back (a no-op when not installed)."""
    with _lock:
        if not _saved:
            return
        modules = _modules()
        for (mod_name, attr), old in _saved.items():
            setattr(modules[mod_name], attr, old)
        _saved.clear()
        _planned.clear()


__all__ = ["get_wrapped_partitioner", "install", "installed", "recompute_param_aliases", "uninstall"]
