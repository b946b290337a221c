"""The route's last step: write the decision and build the forward and backward modules.

:func:`build` is the only step that writes to the user's joint graph: it
applies the plan's dead-code elimination and CSE (:mod:`fxcut.torchrules.prepare`),
writes back the recompute tags the core's tag passes changed (as torch's
passes do in place), and builds the two modules from the saved values --
with fxcut's own builder (:mod:`fxcut.torchrules.extract`) where the release's rules
say it models torch's extraction and the passes after it
(``Rules.module_builder``: fxcut's on every supported release), else with torch's own
passes.  A graph without a backward goes to torch's ``default_partition``.
The caller (the guard) restores the joint graph if this raises.
"""

from __future__ import annotations

import logging
from array import array
from typing import Any

import torch.fx as fx

import fxcut._C as _C
from ..torchrules import extract, prepare
from ..solve.budget import BudgetDecision
from ..solve.core import Decision
from ..torchrules.ops import is_rng_node
from .lower import lower_for_partition
from ..torchrules.versions import Rules
from .plan import Plan, offloading_pass

log = logging.getLogger("fxcut")

PartitionResult = tuple[fx.GraphModule, fx.GraphModule]


def build(plan: Plan, chosen: BudgetDecision, saved: list[int], joint_inputs: Any) -> PartitionResult:
    """Carry out ``chosen`` with the saved node indices ``saved`` (the
    decision's own, or the plan's objective's): DCE and CSE in place, the
    recompute tags, then the modules."""
    from torch._functorch import partitioners as tp
    from torch.utils._ordered_set import OrderedSet

    joint_module = plan.joint_module
    rules = plan.rules
    # As torch reads them: the tags on the graph, before the passes.
    tags = chosen.decision.arrays.tag.tobytes()
    recomputable = (_C.TAG_MUST_RECOMPUTE, _C.TAG_PREFER_RECOMPUTE)
    lowered = chosen.decision.arrays.nodes
    has_recomputable = any(t in recomputable for t in tags)
    has_recomputable_rng = has_recomputable and any(
        t in recomputable and is_rng_node(lowered[i], rules.zero_dropout_sdpa_is_rng)
        for i, t in enumerate(tags)
    )
    saved_values = [lowered[i] for i in saved]
    try:
        prepare.apply(joint_module, plan.prep, lowered)
    except prepare.PreparationMismatch:
        if plan.objective is not None or plan.safe_budget:  # a deviation from torch's decision is not re-derived
            raise
        log.error("fxcut: DCE/CSE plan diverged from the graph; deciding again on the graph as it is")
        chosen = plan.budget_pass(lower_for_partition(joint_module.graph, plan.facts, rules=plan.rules,
                                                      impure_random=plan.impure_random))
        saved_values = chosen.saved_nodes
    joint_graph = joint_module.graph
    if chosen.stage == "knapsack" and rules.config("visualize_memory_budget_pareto"):
        log.warning("fxcut: visualize_memory_budget_pareto is torch's SVG; fxcut.memory_pareto() "
                    "sweeps the budget and plots it")
    decision = chosen.decision
    _write_back_tags(decision)
    primals = [n for n in joint_graph.nodes if tp._is_primal(n)]  # type: ignore[attr-defined]
    static_set = set(plan.static_indices)
    static_nodes = OrderedSet(p for i, p in enumerate(primals) if i in static_set)

    if chosen.stage == "no_backward":
        return tp.default_partition(
            joint_module,
            joint_inputs,
            num_fwd_outputs=plan.num_fwd_outputs,
            static_lifetime_input_indices=plan.static_indices,
            static_lifetime_input_nodes=static_nodes,
        )

    _log_decision(decision, chosen.seconds, budget=chosen.budget, stage=chosen.stage)
    if rules.config("_sync_decision_cross_ranks"):
        saved_values = tp._sync_decision_cross_ranks(joint_graph, saved_values)
    return build_modules(plan, saved_values, static_nodes, has_recomputable, has_recomputable_rng)


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


def build_modules(plan: Plan, saved_values: list[fx.Node], static_nodes: Any, has_recomputable: bool,
                  has_recomputable_rng: bool) -> PartitionResult:
    """The forward and backward modules from the saved values: fxcut's own
    builder (:mod:`fxcut.torchrules.extract`, the modules torch's passes would build),
    or torch's passes for the graphs that builder leaves to them."""
    saved = extract.split_saved(saved_values)
    if not (has_recomputable and has_recomputable_rng):
        built = extract.build_modules(plan.joint_module, saved, plan.num_fwd_outputs, static_nodes, plan.rules,
                                      impure_random=plan.impure_random)
        if built is not None:
            return built
    return torch_build_modules(plan.joint_module, saved, plan.num_fwd_outputs, static_nodes, has_recomputable,
                               has_recomputable_rng, plan.rules)


def torch_build_modules(joint_module: fx.GraphModule, saved: extract.SavedValues, num_fwd_outputs: int,
                        static_nodes: Any, has_recomputable: bool, has_recomputable_rng: bool, rules: Rules
                        ) -> PartitionResult:
    """torch's own module extraction and the passes after it (the reference
    :mod:`fxcut.torchrules.extract` is tested against), as the release of
    ``rules`` runs them."""
    from torch._functorch import partitioners as tp

    fw_module, bw_module = tp._extract_fwd_bwd_modules(
        joint_module,
        saved.values,
        saved_sym_nodes=saved.sym,
        saved_opaque_nodes=saved.opaque,
        num_fwd_outputs=num_fwd_outputs,
        static_lifetime_input_nodes=static_nodes,
    )
    if has_recomputable and has_recomputable_rng:
        fw_module, bw_module = tp.functionalize_rng_ops(
            joint_module, fw_module, bw_module, len(saved.sym)
        )
    bw_module = tp.reordering_to_mimic_autograd_engine(bw_module)
    if rules.config("enable_activation_offloading"):
        offloading_pass(rules)(fw_module, bw_module, num_fwd_outputs, static_nodes)
    fw_module = tp.raise_getitems(fw_module)  # type: ignore[attr-defined]
    bw_module = tp.raise_getitems(bw_module)  # type: ignore[attr-defined]
    fw_module = tp.thread_graphsafe_rng_from_hops(fw_module, is_backward=False)
    bw_module = tp.thread_graphsafe_rng_from_hops(bw_module, is_backward=True)
    return fw_module, bw_module


__all__ = ["build", "build_modules", "torch_build_modules"]
