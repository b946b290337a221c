"""fxcut: the forward/backward partition decision of AOT Autograd, in C.

- :func:`recompute_param_aliases`, :func:`get_wrapped_partitioner`,
  :func:`get_no_copy_ops`, :func:`is_cast_op`: DeepCompile's ZeRO-3 API.
- :func:`min_cut_rematerialization_partition`: a drop-in for torch's,
  activation memory budget included.
- :func:`memory_pareto`: the memory/recompute trade-off over a budget sweep.
"""

from ._version import __version__
from ._C import InfiniteCutError
from .budget import ParetoPoint, memory_pareto
from .lower import GraphArrays, LoweringError
from .ops import get_no_copy_ops, is_cast_op
from .partition import min_cut_rematerialization_partition
from .zero3 import get_wrapped_partitioner, recompute_param_aliases

__all__ = [
    "__version__",
    "GraphArrays",
    "InfiniteCutError",
    "LoweringError",
    "ParetoPoint",
    "get_no_copy_ops",
    "get_wrapped_partitioner",
    "is_cast_op",
    "memory_pareto",
    "min_cut_rematerialization_partition",
    "recompute_param_aliases",
]
