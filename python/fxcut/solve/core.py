"""The bridge between fxcut's Python layer and its C core.

Everything that turns a lowered graph and torch's config into a call of
``fxcut._C`` and the core's answer back into Python lives here, and only
here (tests/test_package_shape.py checks that no other module calls a
``_C`` function; :mod:`fxcut.solve.knapsack` and :mod:`fxcut.solve.maxflow` wrap their
own solver): the options (:class:`MinCutOptions`), the decision
(:class:`Decision`), the per-call arguments and the call itself with errors
naming nodes, and the three entry points: :func:`decide` (one cut),
:func:`budget_plan` (the budget pass's cuts and candidates) and
:func:`param_alias_walk` (DeepCompile's ZeRO-3 walk).  ``partition``,
``budget`` and ``zero3`` import it; it imports none of them.
"""

from __future__ import annotations

import time
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch
import torch.fx as fx
from torch.utils.checkpoint import CheckpointPolicy

import fxcut._C as _C
from ..torchrules.ops import mutated_inputs
from .arrays import GraphArrays
from ..torchrules.versions import Rules, rules_or_nearest

aten = torch.ops.aten

BAN_REASONS: dict[int, str] = {
    _C.BAN_PRIMAL: "primal input",
    _C.BAN_FWD_SEED: "forward RNG seed",
    _C.BAN_MUST_SAVE: "marked MUST_SAVE",
    _C.BAN_NOT_IN_ALLOWLIST: "not in recomputable allowlist",
    _C.BAN_RANDOM: "random op",
    _C.BAN_COMPUTE_INTENSIVE: "compute intensive op",
    _C.BAN_NON_BUILTIN: "non-builtin op",
    _C.BAN_MATERIALIZED_BACKWARD: "materialized in backward",
    _C.BAN_FAR_FROM_BACKWARD: "too far from backward",
    _C.BAN_REDUCTION: "reduction op",
    _C.BAN_USED_FAR_APART: "used far apart (fusible user after an unfusible use)",
    _C.BAN_LONG_FUSIBLE_CHAIN: "long fusible chain",
}


@dataclass
class MinCutOptions:
    """torch's MinCutOptions plus the config values the decision reads."""

    ban_if_used_far_apart: bool
    ban_if_long_fusible_chains: bool
    ban_if_materialized_backward: bool
    ban_if_not_in_allowlist: bool
    ban_if_reduction: bool
    recompute_views: bool
    treat_parameters_as_free_to_save: bool
    is_non_builtin_to_include: bool
    unsafe_allow_optimization_of_collectives: bool
    max_dist_from_bw: int

    @classmethod
    def from_config(cls, rules: Rules) -> MinCutOptions:
        """Read ``torch._functorch.config`` now, as torch does at call time,
        as the release of ``rules`` reads it."""
        config = _ConfigView(rules)
        opts = cls(
            ban_if_used_far_apart=bool(config.ban_recompute_used_far_apart),
            ban_if_long_fusible_chains=bool(config.ban_recompute_long_fusible_chains),
            ban_if_materialized_backward=bool(config.ban_recompute_materialized_backward),
            ban_if_not_in_allowlist=bool(config.ban_recompute_not_in_allowlist),
            ban_if_reduction=bool(config.ban_recompute_reductions),
            recompute_views=bool(config.recompute_views),
            treat_parameters_as_free_to_save=bool(config.treat_parameters_as_free_to_save),
            is_non_builtin_to_include=bool(config.is_non_builtin_to_include),
            unsafe_allow_optimization_of_collectives=bool(config.unsafe_allow_optimization_of_collectives),
            max_dist_from_bw=_max_dist_from_bw(config.max_dist_from_bw),
        )
        return opts.aggressive() if config.aggressive_recomputation else opts

    def aggressive(self) -> MinCutOptions:
        """These options with the bans that ``aggressive_recomputation``
        (and the memory budget's relaxed cuts) lift turned off.  The core
        owns that relaxation (``relax`` in csrc/budget.c, which its budget
        passes use too): the switches are the core's answer."""
        return replace(self, **_C.aggressive_options(self))


def _max_dist_from_bw(value: Any) -> int:
    """``config.max_dist_from_bw`` as the core's int.  torch compares node
    distances (ints) with it, so a finite float counts as its floor."""
    import math

    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(
            f"torch._functorch.config.max_dist_from_bw must be an int, got {type(value).__name__} {value!r}"
        )
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"torch._functorch.config.max_dist_from_bw must be a finite number, got {value!r}")
        value = math.floor(value)
    if not -(2**62) <= value <= 2**62:
        raise ValueError(f"torch._functorch.config.max_dist_from_bw = {value} is out of range")
    return int(value)


class _ConfigView:
    """``torch._functorch.config`` as the running release reads it
    (:meth:`fxcut.torchrules.versions.Rules.config`), by attribute."""

    def __init__(self, rules: Rules) -> None:
        self._rules = rules

    def __getattr__(self, name: str) -> Any:
        return self._rules.config(name)


@dataclass
class Decision:
    """What the C core decided for one joint graph, by node index (the
    arrays as the core typed them: ``tag`` int8, ``node_class`` and
    ``ban_reason`` uint8, ``dist_from_bw`` and ``weight`` int64)."""

    arrays: GraphArrays
    tag: memoryview
    node_class: memoryview
    ban_reason: memoryview
    dist_from_bw: memoryview
    weight: memoryview
    saved: list[int]
    n_required_bw: int
    cut_value: int
    network: tuple[memoryview, memoryview, memoryview] | None = None
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def saved_nodes(self) -> list[fx.Node]:
        nodes = self.arrays.nodes
        return [nodes[i] for i in self.saved]

    @classmethod
    def from_core(cls, arrays: GraphArrays, out: _C.Decision, seconds: dict[str, float] | None = None) -> Decision:
        """From the ``fxcut._C.Decision`` the core's decision entry points
        return (typed already: no casts here)."""
        return cls(
            arrays=arrays,
            tag=out.tag,
            node_class=out.node_class,
            ban_reason=out.ban_reason,
            dist_from_bw=out.dist_from_bw,
            weight=out.weight,
            saved=list(out.saved),
            n_required_bw=out.n_required_bw,
            cut_value=out.cut_value,
            network=out.network,
            seconds=dict(seconds or {}),
        )

    def ban_counts(self) -> dict[str, int]:
        """How many nodes each ban rule banned, in BAN_REASONS order (rules
        that banned nothing left out)."""
        counts = dict.fromkeys(BAN_REASONS, 0)
        for cls, reason in zip(self.node_class, self.ban_reason):
            if cls & _C.C_BANNED:
                counts[reason] = counts.get(reason, 0) + 1
        return {BAN_REASONS.get(r, f"rule {r}"): c for r, c in counts.items() if c}

    def banned(self, i: int) -> str | None:
        """Why node i is banned from recomputation, or None."""
        reason = self.ban_reason[i]
        return BAN_REASONS.get(reason) if self.node_class[i] & _C.C_BANNED else None


def _static_lifetime_mask(arrays: GraphArrays, indices: list[int]) -> bytes | None:
    if not indices:
        return None
    primals = [i for i, bits in enumerate(arrays.flags) if bits & _C.F_PRIMAL]
    mask = bytearray(len(arrays))
    for k in indices:
        if 0 <= k < len(primals):
            mask[primals[k]] = 1
    return bytes(mask)


def _bw_mutation_sources(arrays: GraphArrays) -> list[int]:
    """Sources of mutations applied to the same input in forward and
    backward: recomputing them would apply the mutation twice.  AOT Autograd
    emits these copy_ nodes only at the end of the joint graph.

    The copy's destination and source are read from the lowered positional
    args, not from ``node.args``: the lowering resolves CSE (a source that
    CSE merges with an equal node is lowered as that node)."""
    mutated_in_backward: set[int] = set()
    sources: list[int] = []
    index, arg_ptr, arg_idx = arrays.index, arrays.arg_ptr, arrays.arg_idx
    for node in reversed(arrays.nodes):
        if node.op == "output":
            continue
        if node.target is not aten.copy_.default:
            break
        tag = node.meta.get("partitioner_tag")
        if tag != "must_be_in_backward" and tag != "must_be_in_forward":
            continue
        i = index[node]
        start, end = arg_ptr[i], arg_ptr[i + 1]
        if end - start != 2:  # copy_(dst, src) of two nodes
            continue
        dst, src = arg_idx[start], arg_idx[start + 1]
        if tag == "must_be_in_backward":
            mutated_in_backward.add(dst)
        elif dst in mutated_in_backward:
            sources.append(src)
    return sources


def _fuse_pairs(arrays: GraphArrays) -> tuple[array[int], array[int]]:
    fuse_a, fuse_b = array("i"), array("i")
    for b, bits in enumerate(arrays.flags):
        if bits & _C.F_MUTABLE_HOP:
            for a in mutated_inputs(arrays.nodes[b]):
                fuse_a.append(arrays.index[a])
                fuse_b.append(b)
    return fuse_a, fuse_b


def _core_args(
    arrays: GraphArrays,
    num_fwd_outputs: int,
    static_lifetime_input_indices: list[int],
) -> dict[str, Any]:
    """The keyword arguments every decision entry point of the core takes
    besides the graph array, the options and its own: the forward output
    count, static-lifetime mask, forced saves, fuse pairs."""
    if not 0 <= num_fwd_outputs <= len(arrays.outputs):
        raise ValueError(
            f"num_fwd_outputs ({num_fwd_outputs}) must be between 0 and the "
            f"graph's {len(arrays.outputs)} outputs"
        )
    fuse_a, fuse_b = _fuse_pairs(arrays)
    return {
        "num_fwd_outputs": num_fwd_outputs,
        "static_lifetime": _static_lifetime_mask(arrays, list(static_lifetime_input_indices)),
        "force_save": array("i", _bw_mutation_sources(arrays)),
        "fuse_a": fuse_a,
        "fuse_b": fuse_b,
    }


def _call_core(fn: Callable[..., Any], arrays: GraphArrays, opts: MinCutOptions, **kwargs: Any) -> Any:
    """``fn(arrays, opts, **kwargs)`` with the core's errors naming nodes.
    The core's exception is re-raised itself, its ``node`` (and an
    InfiniteCutError's ``chain`` of node indices) kept; the message gains
    the node's name (an InfiniteCutError's: the whole chain, explained)."""
    try:
        return fn(arrays, opts, **kwargs)
    except _C.InfiniteCutError as e:
        _explain_conflict(e, arrays)
        raise
    except (RuntimeError, ValueError, IndexError, OverflowError, SystemError) as e:
        node = getattr(e, "node", -1)
        if isinstance(node, int) and 0 <= node < len(arrays):
            e.args = (f"{e} [node {node} is {arrays.nodes[node].name!r}]",)
        raise


def decide(
    arrays: GraphArrays,
    *,
    num_fwd_outputs: int,
    static_lifetime_input_indices: list[int] | None = None,
    options: MinCutOptions | None = None,
    dont_ban: set[fx.Node] | None = None,
    keep_network: int = _C.KEEP_NONE,
    dont_ban_mask: bytes | None = None,
) -> Decision:
    """Run the C decision over the lowered graph ``arrays`` (read only;
    nothing is written; one lowering serves several cuts).

    ``dont_ban`` (nodes) or ``dont_ban_mask`` (one byte per node): values the
    cut may not ban (the memory budget's un-banned candidates).
    ``keep_network``: ``_C.KEEP_NETWORK`` returns the flow network with the
    decision, ``_C.KEEP_BUILD_ONLY`` builds it without solving (``saved``
    empty); anything else but ``_C.KEEP_NONE`` is a ValueError.
    """
    if not isinstance(arrays, GraphArrays):
        raise TypeError(f"decide() takes the lowered graph (GraphArrays), got {type(arrays).__name__}")
    opts = options or MinCutOptions.from_config(rules_or_nearest())
    t1 = time.perf_counter()
    t0 = t1 - arrays.seconds
    args = _core_args(arrays, num_fwd_outputs, list(static_lifetime_input_indices or []))
    if dont_ban:
        mask = bytearray(dont_ban_mask or bytes(len(arrays)))
        for node in dont_ban:
            mask[arrays.index[node]] = 1
        dont_ban_mask = bytes(mask)
    out = _call_core(_C.partition_decide, arrays, opts, keep_network=keep_network, dont_ban=dont_ban_mask, **args)
    t2 = time.perf_counter()
    return Decision.from_core(arrays, out, {"lower": t1 - t0, "core": t2 - t1})


def budget_plan(
    arrays: GraphArrays,
    options: MinCutOptions,
    *,
    memory_budget: float,
    num_fwd_outputs: int,
    static_lifetime_input_indices: list[int],
    input_storage: bytes | None,
) -> _C.BudgetPlan:
    """The core's budget pass over ``arrays`` (read only): the cuts of
    steps 1-3 of :mod:`fxcut.solve.budget` and, when none fits the budget, the
    knapsack's candidates and their memories.  ``input_storage``: one byte
    per node, 1 where its value lives in a graph input's storage (only read
    for a budget strictly between 0 and 1)."""
    plan: _C.BudgetPlan = _call_core(_C.budget_plan, arrays, options, memory_budget=memory_budget,
                                     input_storage=input_storage,
                                     **_core_args(arrays, num_fwd_outputs, static_lifetime_input_indices))
    return plan


def param_alias_walk(arrays: GraphArrays, params: array[int]) -> bytes:
    """DeepCompile's ZeRO-3 walk in the core: one byte per node of
    ``arrays`` (a structural lowering), 1 where the node is an alias or a
    cast of one of the nodes ``params`` (indices, increasing), transitively."""
    marks: bytes = _C.param_alias_walk(arrays, params)
    return marks


def memory_simulate(
    arrays: GraphArrays,
    saved: Sequence[int],
    *,
    num_fwd_outputs: int,
    storage_of: array[int] | None = None,
    flops: array[int] | None = None,
    marks: bytes | None = None,
    timeline: bool = False,
    fusion: bytes | None = None,
    fused_cost: array[int] | None = None,
    iteration: array[int] | None = None,
    realize: tuple[int, int, int] | None = None,
) -> _C.MemoryResult:
    """The C memory model (``fxcut._C.memory_simulate``) over ``arrays`` for
    the decision that saves node indices ``saved``; ``fusion`` (with
    ``fused_cost``, ``iteration``, ``realize``) selects the inductor model.
    Errors name the node."""
    try:
        return _C.memory_simulate(arrays, num_fwd_outputs=num_fwd_outputs, saved=array("i", saved),
                                  storage_of=storage_of, flops=flops, marks=marks, timeline=timeline,
                                  fusion=fusion, fused_cost=fused_cost, iteration=iteration, realize=realize)
    except (ValueError, IndexError, OverflowError, SystemError, MemoryError) as e:
        node = getattr(e, "node", -1)
        if isinstance(node, int) and 0 <= node < len(arrays):
            e.args = (f"{e} [node {node} is {arrays.nodes[node].name!r}]",)
        raise


def plan_simulate(arrays: GraphArrays, **kwargs: Any) -> Any:
    """The planner's simulation of one decision in the core
    (``fxcut._C.plan_simulate``; keyword arguments as there)."""
    return _C.plan_simulate(arrays, **kwargs)


def plan_frontier(arrays: GraphArrays, **kwargs: Any) -> Any:
    """The planner's (peak, recompute) frontier search in the core
    (``fxcut._C.plan_frontier``; keyword arguments as there)."""
    return _C.plan_frontier(arrays, **kwargs)


def _explain_conflict(err: _C.InfiniteCutError, arrays: GraphArrays) -> None:
    """Rewrite the core's InfiniteCutError in place to name the chain of
    nodes that joins source and sink by infinite edges, with what pins each
    end; ``chain`` (node indices) and ``node`` stay as the core set them,
    ``nodes`` gains the fx nodes."""
    chain = [i for i in getattr(err, "chain", []) if isinstance(i, int) and 0 <= i < len(arrays)]
    parts = []
    for i in chain:
        node = arrays.nodes[i]
        policy = node.meta.get("recompute")
        label = f"{node.name} ({node.op} {node.target})"
        if isinstance(policy, CheckpointPolicy):
            label += f" [{policy.name}]"
        unsaveable = _why_unsaveable(arrays, i)
        if unsaveable:
            label += f" [{unsaveable}]"
        parts.append(label)
    message = (
        "fxcut: a value is needed in backward but can be neither saved nor recomputed "
        "(conflicting recompute tags or bans); the chain of nodes is: " + " -> ".join(parts)
    )
    err.args = (message,)
    err.nodes = [arrays.nodes[i] for i in chain]


def _why_unsaveable(arrays: GraphArrays, i: int) -> str | None:
    """Why node i's value can never be saved (infinite weight), as the
    partitioner sees its ``meta["val"]``; None when it can be."""
    bits = arrays.flags[i]
    if not bits & _C.F_NON_TENSOR or bits & (_C.F_SYM | _C.F_FREE_OBJECT):
        return None
    meta = arrays.nodes[i].meta
    if "val" not in meta:
        return "no meta['val']: cannot be saved"
    val = meta["val"]
    if isinstance(val, (list, tuple)):
        return f"its value is a {type(val).__name__}: cannot be saved"
    return f"meta['val'] is {type(val).__name__} {val!r:.40}, not a tensor: cannot be saved"
