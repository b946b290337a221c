"""fxcut's drop-in ``min_cut_rematerialization_partition``.

The decision (tag passes, classification, bans, weights, the flow network,
the min-cut) runs in C over the graph array; the forward and backward modules
are then built by the installed torch's own machinery from the saved values,
so they are what torch would build.
"""

from __future__ import annotations

import logging
import time
from array import array
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx

from . import _C, prepare
from .lower import GraphArrays, lower_for_partition
from .ops import default_facts, mutated_inputs

log = logging.getLogger("fxcut")

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
    def from_config(cls) -> "MinCutOptions":
        """Read ``torch._functorch.config`` now, as torch does at call time."""
        from torch._functorch import config

        aggressive = bool(config.aggressive_recomputation)
        return cls(
            ban_if_used_far_apart=bool(config.ban_recompute_used_far_apart) and not aggressive,
            ban_if_long_fusible_chains=bool(config.ban_recompute_long_fusible_chains) and not aggressive,
            ban_if_materialized_backward=bool(config.ban_recompute_materialized_backward) and not aggressive,
            ban_if_not_in_allowlist=bool(config.ban_recompute_not_in_allowlist) and not aggressive,
            ban_if_reduction=bool(config.ban_recompute_reductions),
            recompute_views=bool(config.recompute_views),
            treat_parameters_as_free_to_save=bool(config.treat_parameters_as_free_to_save),
            is_non_builtin_to_include=bool(config.is_non_builtin_to_include),
            unsafe_allow_optimization_of_collectives=bool(config.unsafe_allow_optimization_of_collectives),
            max_dist_from_bw=int(config.max_dist_from_bw),
        )


@dataclass
class Decision:
    """What the C core decided for one joint graph, by node index."""

    arrays: GraphArrays
    tag: bytes
    node_class: bytes
    ban_reason: bytes
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
    def from_core(cls, arrays: GraphArrays, out: dict, seconds: dict[str, float] | None = None) -> "Decision":
        """From the dict the core's decision entry points return."""
        network = None
        if "net_tail" in out:
            network = (
                memoryview(out["net_tail"]).cast("i"),
                memoryview(out["net_head"]).cast("i"),
                memoryview(out["net_cap"]).cast("q"),
            )
        return cls(
            arrays=arrays,
            tag=out["tag"],
            node_class=out["node_class"],
            ban_reason=out["ban_reason"],
            dist_from_bw=memoryview(out["dist_from_bw"]).cast("q"),
            weight=memoryview(out["weight"]).cast("q"),
            saved=list(memoryview(out["saved"]).cast("i")),
            n_required_bw=out["n_required_bw"],
            cut_value=out["cut_value"],
            network=network,
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
    emits these copy_ nodes only at the end of the joint graph."""
    mutated_in_backward: set[fx.Node] = set()
    sources: list[int] = []
    for node in reversed(arrays.nodes):
        if node.op == "output":
            continue
        if node.target is not aten.copy_.default:
            break
        tag = node.meta.get("partitioner_tag")
        if tag == "must_be_in_backward":
            mutated_in_backward.add(node.args[0])  # type: ignore[arg-type]
        elif tag == "must_be_in_forward" and node.args[0] in mutated_in_backward:
            sources.append(arrays.index[node.args[1]])  # type: ignore[index]
    return sources


def _fuse_pairs(arrays: GraphArrays) -> tuple[array, array]:
    fuse_a, fuse_b = array("i"), array("i")
    for b, bits in enumerate(arrays.flags):
        if bits & _C.F_MUTABLE_HOP:
            for a in mutated_inputs(arrays.nodes[b]):
                fuse_a.append(arrays.index[a])
                fuse_b.append(b)
    return fuse_a, fuse_b


def lower_graph(graph: fx.Graph) -> GraphArrays:
    """The graph array of ``graph`` with the facts the decision reads."""
    return lower_for_partition(graph, default_facts(), impure_random=_impure_random())


def core_args(
    arrays: GraphArrays,
    num_fwd_outputs: int,
    opts: MinCutOptions,
    static_lifetime_input_indices: list[int],
    keep_network: int = 0,
) -> tuple[Any, ...]:
    """The arguments every decision entry point of the core takes besides
    the graph array and its per-call mask: options, static-lifetime mask,
    forced saves, fuse pairs."""
    if not 0 <= num_fwd_outputs <= len(arrays.outputs):
        raise ValueError(
            f"num_fwd_outputs ({num_fwd_outputs}) must be between 0 and the "
            f"graph's {len(arrays.outputs)} outputs"
        )
    option_values = (
        num_fwd_outputs,
        int(opts.ban_if_used_far_apart),
        int(opts.ban_if_long_fusible_chains),
        int(opts.ban_if_materialized_backward),
        int(opts.ban_if_not_in_allowlist),
        int(opts.ban_if_reduction),
        int(opts.recompute_views),
        int(opts.treat_parameters_as_free_to_save),
        int(opts.is_non_builtin_to_include),
        int(opts.unsafe_allow_optimization_of_collectives),
        int(opts.max_dist_from_bw),
        keep_network,
    )
    fuse_a, fuse_b = _fuse_pairs(arrays)
    return (
        option_values,
        _static_lifetime_mask(arrays, list(static_lifetime_input_indices)),
        array("i", _bw_mutation_sources(arrays)),
        fuse_a,
        fuse_b,
    )


def call_core(fn: Any, arrays: GraphArrays, args: tuple[Any, ...], mask: bytes | None, *extra: Any) -> dict:
    """``fn(arrays, options, static_lifetime, mask, force_save, fuse_a,
    fuse_b, *extra)`` with the core's errors naming nodes."""
    option_values, static_mask, force_save, fuse_a, fuse_b = args
    try:
        return fn(arrays, option_values, static_mask, mask, force_save, fuse_a, fuse_b, *extra)
    except _C.InfiniteCutError as e:
        raise _conflict_error(arrays, list(getattr(e, "chain", []))) from None
    except (RuntimeError, ValueError, IndexError, OverflowError) as e:
        node = getattr(e, "node", -1)
        if isinstance(node, int) and 0 <= node < len(arrays):
            raise type(e)(f"{e} [node {node} is {arrays.nodes[node].name!r}]") from None
        raise


def decide(
    graph: fx.Graph,
    *,
    num_fwd_outputs: int,
    static_lifetime_input_indices: list[int] | None = None,
    options: MinCutOptions | None = None,
    dont_ban: set[fx.Node] | None = None,
    keep_network: int = 0,
    arrays: GraphArrays | None = None,
    dont_ban_mask: bytes | None = None,
) -> Decision:
    """Run the C decision over ``graph`` (read only; nothing is written).

    ``arrays``: the graph's lowering, to reuse one across several cuts.
    ``dont_ban`` (nodes) or ``dont_ban_mask`` (one byte per node): values the
    cut may not ban (the memory budget's un-banned candidates).
    ``keep_network``: 1 returns the flow network with the decision, 2 builds
    it without solving (``saved`` empty).
    """
    opts = options or MinCutOptions.from_config()
    if arrays is None:
        arrays = lower_graph(graph)
    t1 = time.perf_counter()
    t0 = t1 - arrays.seconds
    args = core_args(arrays, num_fwd_outputs, opts, list(static_lifetime_input_indices or []), keep_network)
    if dont_ban:
        mask = bytearray(dont_ban_mask or bytes(len(arrays)))
        for node in dont_ban:
            mask[arrays.index[node]] = 1
        dont_ban_mask = bytes(mask)
    out = call_core(_C.partition_decide, arrays, args, dont_ban_mask)
    t2 = time.perf_counter()
    return Decision.from_core(arrays, out, {"lower": t1 - t0, "core": t2 - t1})


def _log_decision(decision: Decision, seconds: dict[str, float], *, budget: float, stage: str) -> None:
    """The one INFO line of a partition, and the bans per rule at DEBUG."""
    lower = decision.arrays.seconds
    core = sum(v for k, v in seconds.items() if k != "lower")
    log.info(
        "decision: %d nodes, %d needed by backward, %d saved, cut %d (lower %.1f ms, core %.1f ms)",
        len(decision.arrays), decision.n_required_bw, len(decision.saved), decision.cut_value,
        lower * 1e3, core * 1e3,
    )
    if log.isEnabledFor(logging.DEBUG):
        counts = decision.ban_counts()
        log.debug("bans: %s", ", ".join(f"{reason} {n}" for reason, n in counts.items()) or "none")
        if budget < 1:
            log.debug("budget %g decided by the %s pass", budget, stage)


def _conflict_error(arrays: GraphArrays, chain: list[int]) -> "_C.InfiniteCutError":
    """An InfiniteCutError naming the chain of nodes that joins source and
    sink by infinite edges, with what pins each end."""
    from torch.utils.checkpoint import CheckpointPolicy

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
    err = _C.InfiniteCutError(message)
    err.chain = [arrays.nodes[i].name for i in chain]  # type: ignore[attr-defined]
    err.nodes = [arrays.nodes[i] for i in chain]  # type: ignore[attr-defined]
    return err


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


def _impure_random() -> bool:
    # As torch's dead-code elimination decides it at call time.
    if torch._guards.TracingContext.try_get():
        import torch._inductor.config as inductor_config

        return bool(inductor_config.fallback_random)
    return True


def _resolve_budget(joint_module: fx.GraphModule) -> tuple[float, list[float], list[fx.Node]]:
    """The memory budget as torch resolves it, in increasing precedence:
    the config, the first float ``meta["memory_budget"]``, a region
    annotation.  Also the region values and unannotated nodes, for
    :func:`fxcut.budget.check_regions` once the forward is known."""
    from torch._functorch import config

    from .budget import legacy_budget, region_budgets

    budget = config.activation_memory_budget
    legacy = legacy_budget(joint_module.graph)
    if legacy is not None:
        budget = legacy
    regions, unannotated = region_budgets(joint_module)
    if regions:
        budget = regions[0]
    return budget, regions, unannotated


def _write_back_tags(decision: Decision) -> None:
    """Write the tags the passes changed, as torch's passes do in place."""
    from torch.utils.checkpoint import CheckpointPolicy

    before = decision.arrays.tag
    if before.tobytes() == decision.tag:
        return
    after = array("b", decision.tag)
    for i, (old, new) in enumerate(zip(before, after)):
        if old != new:
            decision.arrays.nodes[i].meta["recompute"] = CheckpointPolicy(new)


def min_cut_rematerialization_partition(
    joint_module: fx.GraphModule,
    _joint_inputs: Any,
    compiler: str = "inductor",
    *,
    num_fwd_outputs: int,
    static_lifetime_input_indices: list[int] | None = None,
    **kwargs: Any,
) -> tuple[fx.GraphModule, fx.GraphModule]:
    """Drop-in for torch's ``min_cut_rematerialization_partition``.

    Same signature and result; the decision of what to save is made by
    fxcut's C core and equals the installed torch's.  Reads
    ``torch._functorch.config`` at call time.
    """
    from torch._functorch import config
    from torch._functorch import partitioners as tp

    if not isinstance(joint_module, fx.GraphModule):
        raise TypeError(
            f"joint_module must be a torch.fx.GraphModule, got {type(joint_module).__name__}"
        )
    if isinstance(num_fwd_outputs, bool) or not isinstance(num_fwd_outputs, int):
        raise TypeError(f"num_fwd_outputs must be an int, got {num_fwd_outputs!r}")
    graph = joint_module.graph
    _check_unique_names(graph)
    from .budget import check_budget, check_regions, decide_with_budget

    facts = default_facts()
    impure_random = _impure_random()
    # Plan dead-code elimination and CSE, lower the graph as they will leave
    # it, and decide -- all before touching the user's graph, so a bad input
    # or an unsatisfiable decision leaves it exactly as it was.
    budget, regions, unannotated = _resolve_budget(joint_module)
    budget = check_budget(budget)
    prep = prepare.plan(graph, facts, cse=bool(config.cse), impure_random=impure_random)
    arrays = lower_for_partition(
        graph, facts, impure_random=impure_random, removed=prep.removed, replace=prep.replace
    )
    try:
        if regions:
            # torch checks the regions once the forward is classified and
            # before any cut: a budget-0 plan classifies without cutting.
            probe = decide_with_budget(graph, 0.0, num_fwd_outputs=num_fwd_outputs,
                                       static_lifetime_input_indices=static_lifetime_input_indices,
                                       arrays=arrays)
            if probe.stage != "no_backward":
                fw = probe.decision.node_class
                check_regions(
                    regions,
                    unannotated,
                    lambda n: n.graph is not graph
                    or (n in arrays.index and n.op == "call_function"
                        and bool(fw[arrays.index[n]] & _C.C_REQUIRED_FW)),
                )
        chosen = decide_with_budget(
            graph,
            budget,
            num_fwd_outputs=num_fwd_outputs,
            static_lifetime_input_indices=static_lifetime_input_indices,
            arrays=arrays,
        )
    except NotImplementedError as e:
        # A graph shape the C classification does not model (a forward
        # output that needs a backward value): torch decides it.
        log.info("%s; using torch's partitioner for this graph", e)
        return tp.min_cut_rematerialization_partition(
            joint_module,
            _joint_inputs,
            compiler,
            num_fwd_outputs=num_fwd_outputs,
            static_lifetime_input_indices=static_lifetime_input_indices,
        )
    try:
        prepare.apply(joint_module, prep, arrays.nodes)
    except prepare.PreparationMismatch:
        log.error("fxcut: DCE/CSE plan diverged from the graph; deciding again on the graph as it is")
        chosen = decide_with_budget(
            joint_module.graph,
            budget,
            num_fwd_outputs=num_fwd_outputs,
            static_lifetime_input_indices=static_lifetime_input_indices,
        )
    joint_graph = joint_module.graph
    if chosen.stage == "knapsack" and config.visualize_memory_budget_pareto:
        log.warning("fxcut: visualize_memory_budget_pareto is torch's SVG; fxcut.memory_pareto() "
                    "sweeps the budget and plots it")
    decision = chosen.decision
    arrays = decision.arrays
    tags = arrays.tag.tobytes()
    has_recomputable = any(t in (2, 3) for t in tags)
    has_recomputable_rng = has_recomputable and any(
        t in (2, 3)
        and hasattr(arrays.nodes[i].target, "tags")
        and torch.Tag.nondeterministic_seeded in arrays.nodes[i].target.tags  # type: ignore[union-attr]
        for i, t in enumerate(tags)
    )
    _write_back_tags(decision)
    static_indices = list(static_lifetime_input_indices or [])
    primals = [n for n in joint_graph.nodes if tp._is_primal(n)]
    from torch.utils._ordered_set import OrderedSet

    static_nodes = OrderedSet(p for i, p in enumerate(primals) if i in static_indices)

    if chosen.stage == "no_backward":
        return tp.default_partition(
            joint_module,
            _joint_inputs,
            num_fwd_outputs=num_fwd_outputs,
            static_lifetime_input_indices=static_indices,
            static_lifetime_input_nodes=static_nodes,
        )

    saved_values = chosen.saved_nodes
    _log_decision(decision, chosen.seconds, budget=chosen.budget, stage=chosen.stage)
    if getattr(config, "_sync_decision_cross_ranks", False):
        saved_values = tp._sync_decision_cross_ranks(joint_graph, saved_values)
    return _build_modules(
        joint_module, saved_values, num_fwd_outputs, static_nodes, has_recomputable, has_recomputable_rng
    )


def _check_unique_names(graph: fx.Graph) -> None:
    """Module extraction matches nodes by name; two nodes of one name would
    be silently confused (torch's lint catches this in its DCE)."""
    names: set[str] = set()
    for node in graph.nodes:
        if node.name in names:
            raise ValueError(f"node name {node.name!r} is used by two nodes of the graph")
        names.add(node.name)


def _build_modules(
    joint_module: fx.GraphModule,
    saved_values: list[fx.Node],
    num_fwd_outputs: int,
    static_nodes: Any,
    has_recomputable: bool,
    has_recomputable_rng: bool,
) -> tuple[fx.GraphModule, fx.GraphModule]:
    """torch's own module extraction from the saved values."""
    from torch._functorch import config
    from torch._functorch import partitioners as tp
    from torch.fx.experimental.proxy_tensor import is_sym_node

    saved_sym_nodes = [n for n in saved_values if is_sym_node(n) and not tp._is_assert_only_symbool(n)]
    saved_opaque_nodes = [n for n in saved_values if tp.is_opaque_node(n)]
    saved_values = [n for n in saved_values if not is_sym_node(n) and not tp.is_opaque_node(n)]
    fw_module, bw_module = tp._extract_fwd_bwd_modules(
        joint_module,
        saved_values,
        saved_sym_nodes=saved_sym_nodes,
        saved_opaque_nodes=saved_opaque_nodes,
        num_fwd_outputs=num_fwd_outputs,
        static_lifetime_input_nodes=static_nodes,
    )
    if has_recomputable and has_recomputable_rng:
        fw_module, bw_module = tp.functionalize_rng_ops(
            joint_module, fw_module, bw_module, len(saved_sym_nodes)
        )
    bw_module = tp.reordering_to_mimic_autograd_engine(bw_module)
    if config.enable_activation_offloading:
        from torch._functorch._activation_checkpointing.activation_offloading import (
            enable_activation_offloading,
        )

        enable_activation_offloading(fw_module, bw_module, num_fwd_outputs, static_nodes)
    fw_module = tp.raise_getitems(fw_module)
    bw_module = tp.raise_getitems(bw_module)
    fw_module = tp.thread_graphsafe_rng_from_hops(fw_module, is_backward=False)
    bw_module = tp.thread_graphsafe_rng_from_hops(bw_module, is_backward=True)
    return fw_module, bw_module
