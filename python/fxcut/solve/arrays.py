"""The graph array fxcut's C core reads (``csrc/fxcut.h``), as Python holds it.

:class:`GraphArrays` is the one type every solver of :mod:`fxcut.solve`
takes: one row per fx node in graph order, int32 indices, flat arrays.  It
is made by the route's lowering (:mod:`fxcut.route.lower`); the codes of its
``kind`` and ``tag`` columns are here, with the fx names they stand for.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from typing import Any

import torch.fx as fx
from torch.utils.checkpoint import CheckpointPolicy

import fxcut._C as _C

KIND_OF_OP: dict[str, int] = {
    "placeholder": _C.KIND_PLACEHOLDER,
    "call_function": _C.KIND_CALL_FUNCTION,
    "get_attr": _C.KIND_GET_ATTR,
    "output": _C.KIND_OUTPUT,
    "call_module": _C.KIND_CALL_MODULE,
    "call_method": _C.KIND_CALL_METHOD,
}

TAG_OF_POLICY: dict[Any, int] = {policy: getattr(_C, f"TAG_{policy.name}") for policy in CheckpointPolicy}
#: The core's tag (the ``tag`` array) -> the name of torch's CheckpointPolicy it stands for.
TAG_NAMES: dict[int, str] = {tag: policy.name for policy, tag in TAG_OF_POLICY.items()}


@dataclass
class GraphArrays:
    """The graph array of ``csrc/fxcut.h``, plus the nodes it was made from."""

    nodes: list[fx.Node]
    index: dict[fx.Node, int]
    kind: array[int]
    flags: array[int]
    tag: array[int]
    ac_graph_id: array[int]
    nbytes: array[int]
    arg_ptr: array[int]
    arg_idx: array[int]
    in_ptr: array[int]
    in_idx: array[int]
    outputs: array[int]
    #: wall time the lowering took, for logs and benchmarks
    seconds: float = 0.0

    def __len__(self) -> int:
        return len(self.nodes)


__all__ = ["GraphArrays", "KIND_OF_OP", "TAG_NAMES", "TAG_OF_POLICY"]
