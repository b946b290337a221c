"""The partition's Plan and its objective hook (issue 16, item 1)."""

from __future__ import annotations

from typing import Any

import pytest
from torch._functorch import config

import fxcut
import small_graphs
from fxcut.route import guard
from fxcut.torchrules import versions
from fxcut.route.plan import make_plan
from test_graph_untouched import State
import zoo
from torch._functorch.partitioners import min_cut_rematerialization_partition as torch_partition


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.delenv(guard.VERIFY_ENV, raising=False)
    guard.reset_counts()
    yield
    guard.reset_counts()


def _saved(fw: Any, num_fwd_outputs: int) -> list[str]:
    output = next(iter(reversed(fw.graph.nodes)))
    return [n.name for n in output.args[0][num_fwd_outputs:]]


def test_the_plan_reads_the_running_torchs_rules_and_config_once() -> None:
    gm = small_graphs.mm_relu_joint(dead=True, duplicate=True)
    before = State.of(gm)
    with config.patch(activation_memory_budget=0.4, activation_memory_budget_solver="greedy"):
        plan = make_plan(gm, fxcut.running_torch()[0], num_fwd_outputs=1, static_lifetime_input_indices=[1])
    before.assert_same(gm)  # planning writes nothing
    assert plan.rules is versions.rules_or_nearest()
    assert (plan.budget, plan.solver, plan.static_indices, plan.objective) == (0.4, "greedy", [1], None)
    assert {n.name for n in plan.prep.removed} >= {"neg_default"}  # DCE planned, not applied


class _SaveNamed:
    """Saves the named nodes instead of torch's choice."""

    def __init__(self, *names: str) -> None:
        self.names = names
        self.seen: list[list[int]] = []

    def choose_saved(self, plan: Any, decision: Any) -> list[int]:
        self.seen.append(list(decision.saved))
        nodes = decision.decision.arrays.nodes
        return [i for i, n in enumerate(nodes) if n.name in self.names]


def test_an_objective_chooses_the_saved_values() -> None:
    theirs, _ = fxcut.min_cut_rematerialization_partition(small_graphs.mm_relu_joint(), None, num_fwd_outputs=1)
    assert "relu_default" in _saved(theirs, 1)
    objective = _SaveNamed("primals_1", "mm_default")
    fw, bw = fxcut.min_cut_rematerialization_partition(small_graphs.mm_relu_joint(), None, num_fwd_outputs=1,
                                                       objective=objective)
    assert len(objective.seen) == 1 and objective.seen[0]  # asked once, given torch's choice
    assert _saved(fw, 1) == ["primals_1", "mm_default"]
    assert "relu" in bw.code  # the backward recomputes the relu from the saved mm
    assert fxcut.partition_counts() == {"fxcut": 1, "fxcut_objective": 1}  # one per graph, by path


@pytest.mark.parametrize("choice, message", [([99], "is not a node index"), (["mm_default"], "is not a node index"),
                                             ([2], "not computed by the forward")])
def test_a_bad_objective_choice_is_a_value_error_and_the_graph_is_left(choice: list[Any], message: str) -> None:
    class Bad:
        def choose_saved(self, plan: Any, decision: Any) -> list[Any]:
            return choice

    gm = small_graphs.mm_relu_joint(dead=True)
    before = State.of(gm)
    with pytest.raises(ValueError, match=message):
        fxcut.min_cut_rematerialization_partition(gm, None, num_fwd_outputs=1, objective=Bad())
    before.assert_same(gm)


def test_an_objective_without_choose_saved_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="choose_saved"):
        fxcut.min_cut_rematerialization_partition(small_graphs.mm_relu_joint(), None, num_fwd_outputs=1,
                                                  objective=object())


# --------------------------------------------------------------------------- the rules, looked up once


def _count_rule_lookups(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every lookup of the running torch's rules (``versions.rules_for`` is
    what ``current``, ``running`` and ``rules_or_nearest`` all ask), listed."""
    calls: list[str] = []
    real = versions.rules_for

    def counting(version: str) -> Any:
        calls.append(version)
        return real(version)

    monkeypatch.setattr(versions, "rules_for", counting)
    return calls


@pytest.mark.parametrize("budget", [1.0, 0.5, 0.0])
def test_a_partition_looks_the_rules_up_once(monkeypatch: pytest.MonkeyPatch, budget: float) -> None:
    """The guard looks the running torch's rules up; the plan carries them
    and nothing below it asks again -- at budget 1, through the knapsack
    (0.5) and at 0 -- and the result is still torch's."""
    cap = zoo.capture("gpt2")
    with config.patch(activation_memory_budget=budget):
        expected = torch_partition(cap.fresh(), None, num_fwd_outputs=cap.num_fwd_outputs, **cap.partition_kwargs)
        calls = _count_rule_lookups(monkeypatch)
        fw, bw = fxcut.min_cut_rematerialization_partition(cap.fresh(), None, num_fwd_outputs=cap.num_fwd_outputs,
                                                           **cap.partition_kwargs)
    assert len(calls) == 1, calls
    assert (fw.code, bw.code) == (expected[0].code, expected[1].code)


def test_a_planned_partition_looks_the_rules_up_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan's objective (the peak planner, with its seed budgets' budget
    passes) reads the plan's rules too."""
    cap = zoo.capture("mlp")
    fn = fxcut.planned_partitioner(0.5)
    calls = _count_rule_lookups(monkeypatch)
    fn(cap.fresh(), None, num_fwd_outputs=cap.num_fwd_outputs, **cap.partition_kwargs)
    assert len(calls) == 1, calls
    assert fn.planner.last is not None


def test_the_lookup_counter_sees_every_kind_of_lookup(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _count_rule_lookups(monkeypatch)
    versions.current()
    versions.rules_or_nearest()
    versions.running()
    assert len(calls) == 3
