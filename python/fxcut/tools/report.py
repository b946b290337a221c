"""What a partition decided, in terms a person can read: saved values and
their bytes, recomputed ops, and how two partitions compare."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

import torch.fx as fx

from ..torchrules.ops import value_nbytes


def mib(n: int) -> str:
    """Bytes in MiB, the one unit of the CLI and the HTML page: two
    decimals, three significant digits below 0.01 MiB (0 is "0.00 MiB")."""
    value = n / 2**20
    if n == 0 or abs(value) >= 0.01:
        return f"{value:,.2f} MiB"
    return f"{value:.3g} MiB"


def flops(n: int) -> str:
    """FLOPs in a readable unit (k, M, G, T)."""
    for unit, scale in (("TFLOP", 10**12), ("GFLOP", 10**9), ("MFLOP", 10**6), ("kFLOP", 10**3)):
        if abs(n) >= scale:
            return f"{n / scale:,.2f} {unit}"
    return f"{n} FLOP"


def _op_name(node: fx.Node) -> str:
    target = node.target
    packet = getattr(target, "overloadpacket", None)
    if packet is not None:
        return str(packet)
    return getattr(target, "__name__", str(target))


@dataclass
class PartitionSummary:
    """One partition: the saved values (forward outputs past the user's;
    ``saved_input_bytes`` of them are graph inputs such as parameters, the
    rest activations) and the ops computed in both forward and backward."""

    saved: list[str]
    saved_bytes: int
    saved_input_bytes: int
    recomputed: list[str]
    recomputed_ops: dict[str, int]
    fw_nodes: int
    bw_nodes: int
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarize(
    fw_module: fx.GraphModule, bw_module: fx.GraphModule, num_fwd_outputs: int, seconds: float = 0.0
) -> PartitionSummary:
    output = next(iter(reversed(fw_module.graph.nodes)))
    leaves = output.args[0] if isinstance(output.args[0], (tuple, list)) else (output.args[0],)
    saved_nodes = [n for n in leaves[num_fwd_outputs:] if isinstance(n, fx.Node)]
    fw_names = {n.name for n in fw_module.graph.nodes if n.op == "call_function"}
    recomputed = [
        n for n in bw_module.graph.nodes if n.op == "call_function" and n.name in fw_names
    ]
    return PartitionSummary(
        saved=[n.name for n in saved_nodes],
        saved_bytes=sum(value_nbytes(n) for n in saved_nodes),
        saved_input_bytes=sum(value_nbytes(n) for n in saved_nodes if n.op == "placeholder"),
        recomputed=[n.name for n in recomputed],
        recomputed_ops=dict(Counter(_op_name(n) for n in recomputed).most_common()),
        fw_nodes=len(fw_module.graph.nodes),
        bw_nodes=len(bw_module.graph.nodes),
        seconds=seconds,
    )


@dataclass
class Zero3Summary:
    """The ZeRO-3 walk's effect: which parameter aliases and casts were
    tagged MUST_RECOMPUTE, and what the forward no longer saves."""

    tagged: list[str]
    tagged_ops: dict[str, int]
    aliases_saved_without_walk: list[str]
    alias_bytes_saved_without_walk: int
    aliases_saved_with_walk: list[str]
    saved_bytes_without_walk: int
    saved_bytes_with_walk: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Comparison:
    fxcut: PartitionSummary
    torch: PartitionSummary | None
    same_saved: bool | None
    same_graphs: bool | None
    zero3: Zero3Summary | None = None
    joint_nodes: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    #: fxcut's route behind its modules (:class:`fxcut.partition.Routed`; None
    #: where torch decided): what the HTML page draws.  Not in :meth:`as_dict`.
    routed: Any = None

    @property
    def is_plan(self) -> bool:
        """fxcut's side is a memory plan (--plan-budget): meant to differ
        from torch's decision, and slower to make; never a verdict or a speed."""
        return self.extra.get("plan_budget") is not None

    @property
    def speedup(self) -> float | None:
        if self.torch is None or self.fxcut.seconds <= 0 or self.is_plan:
            return None
        return self.torch.seconds / self.fxcut.seconds

    def as_dict(self) -> dict[str, Any]:
        out = {
            "joint_nodes": self.joint_nodes,
            "fxcut": self.fxcut.as_dict(),
            "torch": self.torch.as_dict() if self.torch else None,
            "same_saved": self.same_saved,
            "same_graphs": self.same_graphs,
            "speedup": self.speedup,
            "zero3": self.zero3.as_dict() if self.zero3 else None,
        }
        out.update(self.extra)
        return out
