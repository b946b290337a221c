"""fxcut.explain says what the partition actually did with each node."""

from __future__ import annotations

import pytest
import torch
from torch._functorch import config as functorch_config

import fxcut
import zoo
from fxcut.explain import UnknownNodeError, explain_value, explain_values
from placement import graph_state, partition_placement


@pytest.mark.parametrize("case", ["mlp", "gpt2", "gpt2_dropout", "llama_bf16", "llama_sac", "moe", "resnet",
                                  "mlp_dynamic"])
def test_explanation_agrees_with_the_partition_for_every_node(case):
    cap = zoo.capture(case)
    placement = partition_placement(cap)
    before = graph_state(cap.gm)
    explained = {r["node"]: r for r in explain_values(cap.gm, num_fwd_outputs=cap.num_fwd_outputs,
                                                      **cap.partition_kwargs)}
    assert graph_state(cap.gm) == before  # read only: no copy needed
    assert placement.keys() <= explained.keys()
    wrong = {name: (where, explained[name]["why"]) for name, where in placement.items()
             if not explained[name]["why"].startswith(where)}
    assert not wrong
    for name, where in placement.items():
        r = explained[name]
        assert r["saved"] == (where == "saved")
        assert r["in_backward"] == (where in ("recomputed", "computed in backward"))
        assert r["in_forward"] == (where in ("saved", "recomputed", "forward only"))


@pytest.mark.parametrize("case", ["gpt2", "llama_sac"])
@pytest.mark.parametrize("budget", [0.0, 0.3, 0.6])
def test_explanation_is_of_the_partition_under_a_memory_budget(case, budget):
    """explain reads the partition's plan: under a budget below 1 it accounts
    for the budget pass's decision (the knapsack's final cut, or the
    inputs at 0), not the plain min-cut (issue 16, item 3)."""
    cap = zoo.capture(case)
    with functorch_config.patch(activation_memory_budget=budget, activation_memory_budget_solver="dp"):
        placement = partition_placement(cap)
        explained = {r["node"]: r for r in explain_values(cap.gm, num_fwd_outputs=cap.num_fwd_outputs,
                                                          **cap.partition_kwargs)}
    saved = {name for name, where in placement.items() if where == "saved"}
    assert {name for name, r in explained.items() if r["saved"]} == saved
    wrong = {name: (where, explained[name]["why"]) for name, where in placement.items()
             if not explained[name]["why"].startswith(where)}
    assert not wrong
    assert {r["budget"] for r in explained.values()} == {budget}
    stages = {r["stage"] for r in explained.values()}
    assert len(stages) == 1 and stages <= {"inputs", "min_cut", "more_aggressive", "aggressive", "knapsack",
                                            "no_candidates"}


def test_tangent_derived_node_is_computed_in_backward():
    cap = zoo.capture("mlp")
    tangent = cap.tangents()[0]
    user = next(iter(tangent.users))
    r = explain_value(cap.fresh(), user.name, num_fwd_outputs=cap.num_fwd_outputs, **cap.partition_kwargs)
    assert r["why"].startswith("computed in backward: it depends on the incoming gradients")
    assert r["in_backward"] and not r["in_forward"] and not r["saved"]


def test_zero3_tagged_alias_says_it_is_recomputed_because_tagged():
    cap = zoo.capture("gpt2")
    gm = cap.fresh()
    tagged = fxcut.recompute_param_aliases(gm.graph, cap.param_indices)
    results = explain_values(gm, [n.name for n in tagged], num_fwd_outputs=cap.num_fwd_outputs,
                             **cap.partition_kwargs)
    assert any(r["why"] == "recomputed in backward: tagged MUST_RECOMPUTE" for r in results)
    assert all(r["tag"] == "MUST_RECOMPUTE" and not r["saved"] for r in results)


def test_unknown_and_removed_nodes_are_named():
    cap = zoo.capture("mlp")
    with pytest.raises(UnknownNodeError, match=r"no node named 'addmm_99'.*similar: addmm"):
        explain_value(cap.fresh(), "addmm_99", num_fwd_outputs=cap.num_fwd_outputs)
    with pytest.raises(LookupError, match="no node named 'nosuch'"):
        explain_value(cap.fresh(), "nosuch", num_fwd_outputs=cap.num_fwd_outputs)
    gm = cap.fresh()
    first = next(n for n in gm.graph.nodes if n.op == "placeholder")
    output = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    with gm.graph.inserting_before(output):
        dead = gm.graph.call_function(torch.ops.aten.neg.default, (first,))
    with pytest.raises(UnknownNodeError, match="dead code"):
        explain_value(gm, dead.name, num_fwd_outputs=cap.num_fwd_outputs)


@pytest.mark.parametrize("case, budget", [("gpt2", 1.0), ("llama", 0.5)])
def test_a_partitions_own_route_explains_as_a_fresh_plan_does(case, budget):
    """explain_routed reads the decision the partition carried out (no
    second plan): every account equals explain_values' on a fresh copy."""
    from fxcut.explain import explain_routed
    from fxcut.partition import partition

    cap = zoo.capture(case)
    with functorch_config.patch(activation_memory_budget=budget):
        done = partition(cap.fresh(), None, num_fwd_outputs=cap.num_fwd_outputs, **cap.partition_kwargs)
        fresh = explain_values(cap.fresh(), None, num_fwd_outputs=cap.num_fwd_outputs, **cap.partition_kwargs)
    assert done.routed is not None
    routed = explain_routed(done.routed)
    assert [a["node"] for a in routed] == [a["node"] for a in fresh]
    assert routed == fresh
    saved = [a["node"] for a in routed if a["saved"]]
    fw = done.modules[0]
    output = next(iter(reversed(fw.graph.nodes)))
    assert set(saved) == {n.name for n in output.args[0][cap.num_fwd_outputs:] if hasattr(n, "name")}
    with pytest.raises(UnknownNodeError, match="no node named 'nope'"):
        explain_routed(done.routed, ["nope"])


# --------------------------------------------------------------------------- a memory plan's choices (issue 38)


def _module_placement(fw, bw, num_fwd_outputs: int) -> dict[str, str]:
    """Each call_function node's place in the modules a partition built."""
    output = next(iter(reversed(fw.graph.nodes)))
    saved = {n.name for n in output.args[0][num_fwd_outputs:] if hasattr(n, "name")}
    fw_names = {n.name for n in fw.graph.nodes if n.op == "call_function"}
    bw_names = {n.name for n in bw.graph.nodes if n.op == "call_function"}
    out = dict.fromkeys(saved, "saved")
    for name in (fw_names | bw_names) - saved:
        out[name] = ("recomputed" if name in fw_names and name in bw_names
                     else "backward" if name in bw_names else "forward only")
    return out


def _planned(case: str, budget: float):
    from fxcut.partition import partition
    from fxcut.solve.peakplan import PeakPlanner

    cap = zoo.capture(case)
    done = partition(cap.fresh(), None, num_fwd_outputs=cap.num_fwd_outputs, objective=PeakPlanner(budget),
                     **cap.partition_kwargs)
    assert done.routed is not None and done.routed.choice is not None
    return cap, done


@pytest.mark.parametrize("case, budget", [("gpt2", 0.0), ("llama", 0.35)])
def test_plan_figures_set_the_plan_against_torch_at_the_same_b_and_its_default(case, budget):
    """Every figure is the memory model's of one side's saved values: the
    plan's (its modules'), torch's own partitioner's at b (any b, not only
    the plan's seed budgets) and at its default budget."""
    from fxcut.explain import plan_figures
    from fxcut.tools.decisions import simulate_saved
    from fxcut.tools.html import decide_prepared

    cap, done = _planned(case, budget)
    figures = plan_figures(done.routed)
    assert (figures.budget, figures.default_budget, figures.memory_model) == (budget, 1.0, "unfused")
    d = decide_prepared(cap.fresh(), num_fwd_outputs=cap.num_fwd_outputs, **cap.partition_kwargs)
    by_name = {n.name: n for n in d.arrays.nodes}

    def peak(names) -> int:
        return simulate_saved(d.arrays, [by_name[s] for s in names], cap.num_fwd_outputs).peak_bytes

    def saved_by(partition_fn, b: float) -> set[str]:
        with functorch_config.patch(activation_memory_budget=b):
            fw, bw = partition_fn(cap.fresh(), cap.joint_inputs, num_fwd_outputs=cap.num_fwd_outputs,
                                  **cap.partition_kwargs)
        return {k for k, v in _module_placement(fw, bw, cap.num_fwd_outputs).items() if v == "saved"}

    from torch._functorch.partitioners import min_cut_rematerialization_partition as torch_partition

    plan_saved = {k for k, v in _module_placement(*done.modules, cap.num_fwd_outputs).items() if v == "saved"}
    assert figures.plan.peak_bytes == peak(plan_saved) == done.routed.choice.peak_bytes
    at_b = saved_by(torch_partition, budget)
    assert {done.routed.decision.arrays.name(i) for i in figures.torch_saved} >= at_b
    assert figures.torch_same_budget.peak_bytes == peak(at_b)
    assert figures.torch_default.peak_bytes == peak(saved_by(torch_partition, 1.0))
    data = figures.as_dict()
    assert data["plan"]["peak_bytes"] == figures.plan.peak_bytes
    assert data["torch_same_budget"]["budget"] == budget and data["torch_default"]["budget"] == 1.0


def test_plan_figures_need_a_plan():
    from fxcut.explain import plan_figures
    from fxcut.partition import partition

    cap = zoo.capture("mlp")
    done = partition(cap.fresh(), None, num_fwd_outputs=cap.num_fwd_outputs, **cap.partition_kwargs)
    with pytest.raises(ValueError, match="made no memory plan"):
        plan_figures(done.routed)


def test_explain_plan_accounts_for_the_plans_modules():
    """Each account says where the plan's modules put the node, why in the
    plan's terms (never the minimum cut's), and where torch puts it at the
    same b and at its default."""
    from fxcut.explain import explain_plan

    cap, done = _planned("gpt2", 0.0)
    accounts = {a["node"]: a for a in explain_plan(done.routed)}
    placed = _module_placement(*done.modules, cap.num_fwd_outputs)
    assert placed.keys() <= accounts.keys()
    assert {k: accounts[k]["place"] for k in placed} == placed
    default = {r["node"]: r for r in explain_values(cap.fresh(), None, num_fwd_outputs=cap.num_fwd_outputs,
                                                    **cap.partition_kwargs)}
    for name, a in accounts.items():
        assert a["torch_default"]["why"] == default[name]["why"]
        if a["place"] in ("saved", "recomputed"):
            assert "minimum cut" not in a["why"] and a["why"].startswith(
                "saved" if a["place"] == "saved" else "recomputed in backward"), a
    moved = [a for a in accounts.values() if a["place"] == "recomputed" and a["torch_default"]["place"] == "saved"]
    assert moved and all("the plan's choice" in a["why"] or "must" in a["why"] for a in moved)
    with pytest.raises(UnknownNodeError, match="no node named 'nope'"):
        explain_plan(done.routed, ["nope"])
