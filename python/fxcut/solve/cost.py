"""What recomputing a node costs in time: a roofline model per backend.

torch's budget (and the peak plan before it) prices a recomputed node by
its FLOPs, so a recomputed pointwise op costs nothing and a matmul costs
everything.  What a step's time tracks is different:

- an op that moves more bytes than the machine computes in the same time
  (pointwise ops, reductions, copies: memory-bound) costs the bytes it reads
  and writes over the memory bandwidth; a compute-bound op (matmul,
  convolution, attention) costs its FLOPs over the compute rate: the
  roofline, ``max(flops / F, bytes / B)``, plus a fixed cost per kernel
  launched (per op, run eagerly);
- under inductor a recomputed pointwise chain is inlined into the kernel
  that reads it (:mod:`fxcut.solve.memory`'s inductor model decides which):
  it launches nothing and writes nothing; it costs only its arithmetic
  (``elements / F``), while a recomputed value inductor makes a buffer is a
  kernel of its own and costs the roofline.

:func:`node_costs` gives both, per node, in picoseconds (int64, the unit
the C core sums): ``cost`` (run as an op or kernel of its own) and
``inlined`` (inlined into a reader).  The machine's rates are a
:class:`MachineModel`; :func:`machine_for` picks the default of the graph's
device.  The rates set the scale and the balance point (F / B FLOPs per
byte); rankings of decisions depend on that ratio and on the overheads, not
on the absolute figures.  The benchmark compares this model's step cost
with measured step times (``bench/inductor_memory.py --time``).
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass

import fxcut._C as _C
from .arrays import GraphArrays

#: picoseconds per second: costs are int64 picoseconds
_PS = 1e12


@dataclass(frozen=True)
class MachineModel:
    """The rates the roofline reads: FLOP/s, bytes/s of memory traffic, and
    the fixed seconds of one kernel (inductor) or one eager op (unfused)."""

    flops_per_s: float
    bytes_per_s: float
    kernel_overhead_s: float
    op_overhead_s: float

    def __post_init__(self) -> None:
        for name in ("flops_per_s", "bytes_per_s"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"MachineModel.{name} must be a positive number, got {value!r}")
        for name in ("kernel_overhead_s", "op_overhead_s"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not value >= 0:
                raise ValueError(f"MachineModel.{name} must be a number >= 0, got {value!r}")


#: A CPU core pair with AVX-512: ~100 GFLOP/s fp32 matmul, ~10 GB/s of
#: memory traffic per op, a few microseconds per kernel or eager op.
CPU = MachineModel(flops_per_s=1e11, bytes_per_s=1e10, kernel_overhead_s=2e-6, op_overhead_s=5e-6)
#: A datacenter GPU (H100-class): dense half-precision matmul ~400 TFLOP/s,
#: HBM ~2.5 TB/s, ~5 microseconds per launch.
GPU = MachineModel(flops_per_s=4e14, bytes_per_s=2.5e12, kernel_overhead_s=5e-6, op_overhead_s=8e-6)


def machine_for(device: str) -> MachineModel:
    """The default :class:`MachineModel` of a device type."""
    return CPU if device == "cpu" else GPU


def node_costs(arrays: GraphArrays, flops: array[int], storage: array[int], numel: array[int],
               machine: MachineModel, *, fused: bool) -> tuple[array[int], array[int]]:
    """Per node, (the cost of running it as a kernel or op of its own, the
    cost of running it inlined into a reader), int64 picoseconds.

    ``flops``: torch's flop counter per node (:func:`fxcut.torchrules.facts.node_flops`;
    at least 1 for an op it cannot count).  ``storage``: the earliest node
    sharing each node's storage (a node that shares an earlier node's
    storage -- a view -- moves no bytes and costs nothing).  ``numel``: the
    elements each node's value holds.  ``fused``: the backend fuses
    (inductor: a kernel's fixed cost) or runs op by op (an eager op's fixed
    cost).  Placeholders, get_attr, getitems and the output cost nothing."""
    n = len(arrays)
    cost = array("q", bytes(8 * n))
    inlined = array("q", bytes(8 * n))
    overhead = machine.kernel_overhead_s if fused else machine.op_overhead_s
    nbytes, kind, flags = arrays.nbytes, arrays.kind, arrays.flags
    call, getitem = _C.KIND_CALL_FUNCTION, _C.F_GETITEM
    for i in range(n):
        if kind[i] != call or flags[i] & getitem or storage[i] != i:
            continue
        elements = int(numel[i])
        work = max(int(flops[i]), elements)
        moved = max(0, int(nbytes[i]))
        for j in set(arrays.in_idx[arrays.in_ptr[i]:arrays.in_ptr[i + 1]]):
            moved += max(0, int(nbytes[j]))
        seconds = max(work / machine.flops_per_s, moved / machine.bytes_per_s) + overhead
        cost[i] = int(round(seconds * _PS))
        inlined[i] = int(round(elements / machine.flops_per_s * _PS))
    return cost, inlined


__all__ = ["CPU", "GPU", "MachineModel", "machine_for", "node_costs"]
