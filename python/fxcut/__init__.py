"""fxcut: the forward/backward partition decision of AOT Autograd, in C.

- :func:`recompute_param_aliases`, :func:`get_wrapped_partitioner`,
  :func:`get_no_copy_ops`, :func:`is_cast_op`: DeepCompile's ZeRO-3 API.
- :func:`inductor_backend`, :func:`aot_backend`, :class:`InductorPartitioner`:
  ``torch.compile`` backends that partition with fxcut (imported on first use).
- :func:`min_cut_rematerialization_partition`: a drop-in for torch's,
  activation memory budget included.
- :func:`memory_pareto`: the memory/recompute trade-off over a budget sweep.
- :class:`Plan`, :func:`make_plan`, :class:`Objective`: one partition call
  planned (the running torch, options, budget, DCE/CSE, objective), as the
  partition, explain, the HTML page and the Pareto sweep read it;
  :func:`running_torch` looks the running torch up (a
  :class:`TorchAdapter`: the one door to everything fxcut asks of torch).
- :func:`planned_partitioner`, :class:`PeakPlanner`: a partition_fn whose
  budget is on the simulated peak of activation memory (:mod:`fxcut.planned`);
  :func:`last_plans` (:class:`PlanReport`): what the plan decided for each
  graph, whichever backend ran it (:mod:`fxcut.route.report`).
- :class:`PartitionMismatch`, :func:`partition_counts`, the fallback
  warnings: :mod:`fxcut.route.guard` (untested torch, verify mode).
- :class:`UnsafeRecomputeWarning`: torch's decision recomputes a random op
  or a reader of mutated state (``safe_budget=True`` keeps those saved):
  :mod:`fxcut.route.safety`.
"""

from typing import TYPE_CHECKING, Any

from ._version import __version__
from ._C import InfiniteCutError
from .route.guard import FallbackWarning, PartitionMismatch, UntestedTorchWarning, VerifyWarning, partition_counts
from .solve.arrays import GraphArrays
from .torchrules.adapter import LoweringError, TorchAdapter, get_no_copy_ops, is_cast_op, running_torch
from .pareto import ParetoPoint, memory_pareto
from .partition import min_cut_rematerialization_partition
from .route.plan import Objective, Plan, make_plan
from .route.report import PlanReport, last_plans
from .route.safety import UnsafeRecomputeWarning
from .planned import PeakPlanner, planned_partitioner
from .zero3 import get_wrapped_partitioner, recompute_param_aliases

if TYPE_CHECKING:  # their real types for type checkers; at run time see __getattr__
    from .integrations.torch_compile import InductorPartitioner, aot_backend, inductor_backend

__all__ = [
    "__version__",
    "GraphArrays",
    "InductorPartitioner",
    "InfiniteCutError",
    "LoweringError",
    "Objective",
    "Plan",
    "make_plan",
    "aot_backend",
    "ParetoPoint",
    "FallbackWarning",
    "PartitionMismatch",
    "UnsafeRecomputeWarning",
    "UntestedTorchWarning",
    "VerifyWarning",
    "partition_counts",
    "get_no_copy_ops",
    "get_wrapped_partitioner",
    "inductor_backend",
    "is_cast_op",
    "memory_pareto",
    "min_cut_rematerialization_partition",
    "PeakPlanner",
    "PlanReport",
    "last_plans",
    "planned_partitioner",
    "recompute_param_aliases",
    "running_torch",
    "TorchAdapter",
]

_LAZY = {"InductorPartitioner", "aot_backend", "inductor_backend"}


def __getattr__(name: str) -> Any:
    # The torch.compile integrations import inductor (seconds): only when asked
    # for, so ``import fxcut`` does not (tests/test_package_shape.py checks it).
    if name in _LAZY:
        from .integrations import torch_compile

        return getattr(torch_compile, name)
    raise AttributeError(f"module 'fxcut' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _LAZY)
