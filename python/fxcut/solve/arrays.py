"""The graph array fxcut's C core reads (``csrc/fxcut.h``), as Python holds it.

:class:`GraphArrays` is the one type every solver of :mod:`fxcut.solve`
takes: one row per node in graph order, int32 indices, flat arrays -- and
nothing of torch.  Lowering (:mod:`fxcut.torchrules.lower`) makes one from an
fx graph (a :class:`~fxcut.torchrules.lower.LoweredGraph`, which keeps the
fx nodes beside the arrays for the layers above); the solvers read only the
arrays, the side arrays lowering computed from torch's rules
(``force_save``, ``fuse_a``/``fuse_b``), and the node names for their
messages.  The codes of the ``kind`` and ``tag`` columns are here, with the
names they stand for.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import fxcut._C as _C

#: ``node.op`` -> the ``kind`` column's code.
KIND_OF_OP: dict[str, int] = {
    "placeholder": _C.KIND_PLACEHOLDER,
    "call_function": _C.KIND_CALL_FUNCTION,
    "get_attr": _C.KIND_GET_ATTR,
    "output": _C.KIND_OUTPUT,
    "call_module": _C.KIND_CALL_MODULE,
    "call_method": _C.KIND_CALL_METHOD,
}

#: The recompute policies the ``tag`` column codes, by name (torch's
#: ``CheckpointPolicy`` members; :mod:`fxcut.torchrules.lower` maps the enum).
POLICY_NAMES: tuple[str, ...] = ("MUST_SAVE", "PREFER_SAVE", "MUST_RECOMPUTE", "PREFER_RECOMPUTE",
                                 "MUST_CPU_OFFLOAD", "PREFER_CPU_OFFLOAD")
#: The core's tag (the ``tag`` array) -> the name of the policy it stands for.
TAG_NAMES: dict[int, str] = {getattr(_C, f"TAG_{name}"): name for name in POLICY_NAMES}


def _empty() -> array[int]:
    return array("i")


@dataclass
class GraphArrays:
    """The graph array of ``csrc/fxcut.h``.

    ``names``: each node's name, for messages (a lazy view where lowering
    made the arrays).  ``force_save``: nodes the cut must save whatever it
    costs (torch's rule for a value mutated in both forward and backward);
    ``fuse_a[k]``/``fuse_b[k]``: pairs the cut must keep on one side (a
    mutable higher-order op and an input it mutates).  Lowering computes
    both from torch's rules; a graph built by hand leaves them empty."""

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
    names: Sequence[str] = ()
    force_save: array[int] = field(default_factory=_empty)
    fuse_a: array[int] = field(default_factory=_empty)
    fuse_b: array[int] = field(default_factory=_empty)
    #: wall time the lowering took, for logs and benchmarks
    seconds: float = 0.0

    def __len__(self) -> int:
        return len(self.kind)

    def name(self, i: int) -> str:
        """Node ``i``'s name (``"node <i>"`` where the arrays carry none)."""
        return self.names[i] if i < len(self.names) else f"node {i}"

    def op(self, i: int) -> str:
        """Node ``i``'s fx op (``"call_function"``, ...), from its kind."""
        return next((op for op, code in KIND_OF_OP.items() if code == self.kind[i]), "?")

    def target(self, i: int) -> str:
        """What node ``i`` runs as fx prints it (``aten.relu.default``);
        lowering's arrays know it, arrays built by hand say ``"?"``."""
        return "?"

    def label(self, i: int) -> str:
        """Node ``i`` in a chain of an unsatisfiable cut: its name, op and
        target, its recompute tag, and why it cannot be saved (if it cannot)."""
        out = f"{self.name(i)} ({self.op(i)} {self.target(i)})"
        policy = TAG_NAMES.get(int(self.tag[i]))
        if policy is not None:
            out += f" [{policy}]"
        why = self.why_unsaveable(i)
        if why is not None:
            out += f" [{why}]"
        return out

    def handles(self, indices: Sequence[int]) -> list[object]:
        """What the caller knows nodes ``indices`` by (lowering's arrays:
        the fx nodes; here their names)."""
        return [self.name(i) for i in indices]

    def why_unsaveable(self, i: int) -> str | None:
        """Why node ``i``'s value can never be saved (infinite weight), or
        None when it can; lowering's arrays say it with the value's type."""
        bits = self.flags[i]
        if not bits & _C.F_NON_TENSOR or bits & (_C.F_SYM | _C.F_FREE_OBJECT):
            return None
        if bits & _C.F_VAL_IS_SEQ:
            return "its value is a sequence: cannot be saved"
        return "its value is not a tensor: cannot be saved"


#: A graph array type: solvers that hand the arrays back (a decision) keep the caller's type.
A = TypeVar("A", bound=GraphArrays)


__all__ = ["A", "GraphArrays", "KIND_OF_OP", "POLICY_NAMES", "TAG_NAMES"]
