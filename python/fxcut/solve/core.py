"""The bridge between fxcut's Python layer and its C core's decision.

Everything that turns a graph array and the decision's options into a call
of ``fxcut._C`` and the core's answer back into Python lives here: the
options (:class:`MinCutOptions`: torch's, read from its config by
:mod:`fxcut.torchrules.options`), the decision (:class:`Decision`), the
per-call arguments and the call itself with errors naming nodes, and the
entry points: :func:`decide` (one cut), :func:`budget_plan` (the budget
pass's cuts and candidates), :func:`param_alias_walk` (DeepCompile's ZeRO-3
walk), :func:`memory_simulate` and the plan's :func:`plan_simulate` /
:func:`plan_frontier`.  Each C function has this module as its one Python
owner (:mod:`fxcut.solve.knapsack` and :mod:`fxcut.solve.maxflow` own their
solvers, :mod:`fxcut.torchrules` the node readers);
tests/test_package_shape.py checks it.
"""

from __future__ import annotations

import time
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Generic

import fxcut._C as _C
from .arrays import A, GraphArrays

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
    """torch's MinCutOptions plus the config values the decision reads
    (made from torch's config by :func:`fxcut.torchrules.options.min_cut_options`)."""

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

    def aggressive(self) -> MinCutOptions:
        """These options with the bans that ``aggressive_recomputation``
        (and the memory budget's relaxed cuts) lift turned off.  The core
        owns that relaxation (``relax`` in csrc/budget.c, which its budget
        passes use too): the switches are the core's answer."""
        return replace(self, **_C.aggressive_options(self))


@dataclass
class Decision(Generic[A]):
    """What the C core decided for one joint graph, by node index (the
    arrays as the core typed them: ``tag`` int8, ``node_class`` and
    ``ban_reason`` uint8, ``dist_from_bw`` and ``weight`` int64).
    ``arrays``: the graph array decided on, of the caller's type."""

    arrays: A
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

    @classmethod
    def from_core(cls, arrays: A, out: _C.Decision, seconds: dict[str, float] | None = None) -> Decision[A]:
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


def _core_args(
    arrays: GraphArrays,
    num_fwd_outputs: int,
    static_lifetime_input_indices: list[int],
) -> dict[str, Any]:
    """The keyword arguments every decision entry point of the core takes
    besides the graph array, the options and its own: the forward output
    count, static-lifetime mask, forced saves, fuse pairs (the last two
    lowering's, :class:`~fxcut.solve.arrays.GraphArrays`)."""
    if not 0 <= num_fwd_outputs <= len(arrays.outputs):
        raise ValueError(
            f"num_fwd_outputs ({num_fwd_outputs}) must be between 0 and the "
            f"graph's {len(arrays.outputs)} outputs"
        )
    return {
        "num_fwd_outputs": num_fwd_outputs,
        "static_lifetime": _static_lifetime_mask(arrays, list(static_lifetime_input_indices)),
        "force_save": arrays.force_save,
        "fuse_a": arrays.fuse_a,
        "fuse_b": arrays.fuse_b,
    }


def _name_node(e: BaseException, arrays: GraphArrays) -> None:
    """Add the node's name to a core error that carries a node index."""
    node = getattr(e, "node", -1)
    if isinstance(node, int) and 0 <= node < len(arrays):
        e.args = (f"{e} [node {node} is {arrays.name(node)!r}]",)


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
        _name_node(e, arrays)
        raise


def decide(
    arrays: A,
    *,
    num_fwd_outputs: int,
    options: MinCutOptions,
    static_lifetime_input_indices: Sequence[int] = (),
    keep_network: int = _C.KEEP_NONE,
    dont_ban_mask: bytes | None = None,
) -> Decision[A]:
    """Run the C decision over the lowered graph ``arrays`` (read only;
    nothing is written; one lowering serves several cuts) under ``options``.

    ``dont_ban_mask`` (one byte per node): values the cut may not ban (the
    memory budget's un-banned candidates).  ``keep_network``:
    ``_C.KEEP_NETWORK`` returns the flow network with the decision,
    ``_C.KEEP_BUILD_ONLY`` builds it without solving (``saved`` empty);
    anything else but ``_C.KEEP_NONE`` is a ValueError.
    """
    if not isinstance(arrays, GraphArrays):
        raise TypeError(f"decide() takes the lowered graph (GraphArrays), got {type(arrays).__name__}")
    t1 = time.perf_counter()
    t0 = t1 - arrays.seconds
    args = _core_args(arrays, num_fwd_outputs, list(static_lifetime_input_indices))
    out = _call_core(_C.partition_decide, arrays, options, keep_network=keep_network, dont_ban=dont_ban_mask,
                     **args)
    t2 = time.perf_counter()
    return Decision.from_core(arrays, out, {"lower": t1 - t0, "core": t2 - t1})


def budget_plan(
    arrays: GraphArrays,
    options: MinCutOptions,
    *,
    memory_budget: float,
    num_fwd_outputs: int,
    static_lifetime_input_indices: Sequence[int],
    input_storage: bytes | None,
) -> _C.BudgetPlan:
    """The core's budget pass over ``arrays`` (read only): the cuts of
    steps 1-3 of :mod:`fxcut.solve.budget` and, when none fits the budget, the
    knapsack's candidates and their memories.  ``input_storage``: one byte
    per node, 1 where its value lives in a graph input's storage (only read
    for a budget strictly between 0 and 1)."""
    plan: _C.BudgetPlan = _call_core(_C.budget_plan, arrays, options, memory_budget=memory_budget,
                                     input_storage=input_storage,
                                     **_core_args(arrays, num_fwd_outputs, list(static_lifetime_input_indices)))
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
    hold_saved: bool = False,
    workspace: array[int] | None = None,
    kernel_calls: bool = False,
) -> _C.MemoryResult:
    """The C memory model (``fxcut._C.memory_simulate``) over ``arrays`` for
    the decision that saves node indices ``saved``; ``fusion`` (with
    ``fused_cost``, ``iteration``, ``realize``) selects the inductor model;
    ``hold_saved``: the backward holds its saved values to its end;
    ``workspace``: bytes each node's kernel holds inside itself;
    ``kernel_calls``: the inductor model's kernels between two extern
    kernels run as one call (inductor's C++ backend).  Errors name the
    node."""
    try:
        return _C.memory_simulate(arrays, num_fwd_outputs=num_fwd_outputs, saved=array("i", saved),
                                  storage_of=storage_of, flops=flops, marks=marks, timeline=timeline,
                                  fusion=fusion, fused_cost=fused_cost, iteration=iteration, realize=realize,
                                  hold_saved=hold_saved, workspace=workspace, kernel_calls=kernel_calls)
    except (ValueError, IndexError, OverflowError, SystemError, MemoryError) as e:
        _name_node(e, arrays)
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
    end (:meth:`~fxcut.solve.arrays.GraphArrays.label`); ``chain`` (node
    indices) and ``node`` stay as the core set them, ``nodes`` gains what
    the caller knows the nodes by (:meth:`~fxcut.solve.arrays.GraphArrays.handles`)."""
    chain = [i for i in getattr(err, "chain", []) if isinstance(i, int) and 0 <= i < len(arrays)]
    message = (
        "fxcut: a value is needed in backward but can be neither saved nor recomputed "
        "(conflicting recompute tags or bans); the chain of nodes is: "
        + " -> ".join(arrays.label(i) for i in chain)
    )
    err.args = (message,)
    err.nodes = arrays.handles(chain)
