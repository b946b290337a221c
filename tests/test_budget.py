"""The activation memory budget: fxcut's decisions equal torch's.

- Knapsack solvers against torch's own functions on random instances
  (hypothesis): dp, greedy and torch's sliding Hirschberg give identical
  choices and values, ilp the same optimum (and choice), fxcut's dp_lean the
  choice of dp in a fraction of its memory.
- The budget pass on every zoo model at budgets 0 .. 1: forward saved
  outputs and forward/backward code equal torch's partition (solver dp).
  The other solvers (greedy, ilp, dp_lean) only matter where the pass reaches
  the knapsack (torch reads the solver nowhere else): there fxcut's saved
  values equal torch's choose_saved_values_set under that solver, for every
  zoo model and budget that reaches it.
- Random joint graphs at random budgets and solvers; errors by name; the
  budget read from node meta and region annotations; one lowering for all
  cuts; gradients of a training step at a budget equal eager's;
  memory_pareto.
"""

from __future__ import annotations

import copy
import math
import random

import pytest
import torch
import torch.fx as fx
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from torch._functorch import config
from torch._functorch._activation_checkpointing import knapsack as tk
from torch._functorch.partitioners import min_cut_rematerialization_partition as torch_partition

import fxcut
import fxcut.torchrules.lower
import zoo
from fxcut.solve import knapsack
import fxcut.partition
from fxcut.tools.decisions import decide_with_budget, lower_graph
from fxcut.pareto import memory_pareto
from torch_reference import fxcut_prepared_arrays, torch_budget_decision, torch_prepared
from random_joint import random_joint

BUDGETS = (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0)
CASES = sorted(zoo.CASES)


# --------------------------------------------------------------------------- knapsack solvers


@st.composite
def instances(draw, max_items: int = 40):
    """Knapsack instances of the partitioner's shape: memories are sizes
    over the activation excess (many equal sizes: ties), runtimes flop
    counts (ints) or estimates (floats), a budget in [0, 1]."""
    n = draw(st.integers(0, max_items))
    tied = draw(st.booleans())
    if tied:
        sizes = st.sampled_from([0.0021, 0.0042, 0.0062, 0.0083, 0.05, 0.1, 0.12345])
        times = st.sampled_from([1, 2, 32768, 65536, 131072, 10**9])
    else:
        sizes = st.floats(1e-6, 0.6, allow_nan=False)
        times = st.one_of(st.integers(1, 10**12), st.floats(0.0, 1e7, allow_nan=False))
    memory = draw(st.lists(sizes, min_size=n, max_size=n))
    runtimes = draw(st.lists(times, min_size=n, max_size=n))
    budget = draw(st.one_of(st.sampled_from([0.0, 0.1, 0.25, 0.5, 0.75, 1.0]), st.floats(0.0, 1.0)))
    return memory, runtimes, budget


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances())
def test_knapsack_solvers_equal_torch(instance) -> None:
    memory, runtimes, budget = instance
    expected_dp = tk.dp_knapsack(memory, runtimes, budget)
    assert knapsack.dp(memory, runtimes, budget) == expected_dp
    assert knapsack.dp_lean(memory, runtimes, budget) == expected_dp
    assert knapsack.greedy(memory, runtimes, budget) == tk.greedy_knapsack(memory, runtimes, budget)
    assert knapsack.sliding_hirschberg(memory, runtimes, budget) == tk.dp_knapsack_sliding_hirschberg(
        memory, runtimes, budget)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances(max_items=25))
@example(([0.1, 1e-06], [1, 1], 0.1))  # HiGHS fails to solve this one: both sides must raise
def test_ilp_has_torchs_optimum(instance) -> None:
    memory, runtimes, budget = instance
    if not memory:
        return
    try:
        t_value, t_saved, t_recomputable = tk.ilp_knapsack(memory, runtimes, budget)
    except RuntimeError:
        with pytest.raises(RuntimeError, match="milp"):
            knapsack.ilp(memory, runtimes, budget)
        return
    value, saved, recomputable = knapsack.ilp(memory, runtimes, budget)
    assert value == pytest.approx(t_value, rel=1e-9)
    assert (saved, recomputable) == (t_saved, t_recomputable)
    # HiGHS keeps the bound only up to its feasibility tolerance (1e-6):
    # torch's ilp may save an item of memory 1e-6 at budget 0, and so do we.
    assert sum(memory[i] for i in saved) <= budget + 1e-6 * (1 + budget)


@pytest.mark.parametrize("seed", range(40))
def test_dp_lean_equals_dp_on_long_instances(seed: int) -> None:
    # Hundreds of items: several levels of the divide and conquer.
    rng = random.Random(seed)
    n = rng.randint(33, 700)
    if seed % 2:
        memory = [rng.choice([0.0083, 0.0062, 0.0042, 0.0021, 0.0]) for _ in range(n)]
        runtimes = [rng.choice([1, 32768, 65536, 131072]) for _ in range(n)]
    else:
        memory = sorted((rng.random() * rng.choice([1e-3, 1e-2, 5e-2]) for _ in range(n)), reverse=True)
        runtimes = [rng.random() * 1e6 for _ in range(n)]
    budget = rng.choice([0.1, 0.5, 0.9, rng.random()])
    assert knapsack.solve("dp_lean", memory, runtimes, budget)[:3] == knapsack.solve("dp", memory, runtimes, budget)[:3]


def test_dp_lean_memory_is_a_fiftieth_of_the_table() -> None:
    # The 24-layer GPT instance's shape: 146 items of four sizes, budget 0.5.
    rng = random.Random(0)
    memory = sorted((rng.choice([0.0083, 0.0062, 0.0042, 0.0021]) for _ in range(146)), reverse=True)
    runtimes = [rng.choice([32768, 65536, 131072]) for _ in range(146)]
    lean = knapsack.solve("dp_lean", memory, runtimes, 0.5)
    table = knapsack.solve("dp", memory, runtimes, 0.5)
    assert lean[:3] == table[:3]
    assert table.peak_bytes >= 147 * 5001 * 4  # torch's table, as torch allocates it
    assert lean.peak_bytes * 50 <= table.peak_bytes


def test_dp_float32_absorbs_a_small_free_item_as_torch_does() -> None:
    # A zero-memory item whose runtime vanishes in float32 next to a large
    # one is "not saved" by torch's backtracking (the row did not change).
    memory, runtimes = [0.3, 0.0], [2.0**25, 1.0]
    expected = tk.dp_knapsack(memory, runtimes, 0.5)
    assert expected[1] == [0] and expected[2] == [1]
    assert knapsack.dp(memory, runtimes, 0.5) == expected
    assert knapsack.dp_lean(memory, runtimes, 0.5) == expected


def test_dp_quantises_half_to_even_as_python_round() -> None:
    memory = [0.00005, 0.00015, 0.00025]  # 0.5, 1.5, 2.5 units (as doubles)
    for budget in (0.0, 0.0001, 0.00015, 0.0003):
        assert knapsack.dp(memory, [1, 2, 3], budget) == tk.dp_knapsack(memory, [1, 2, 3], budget)


def test_greedy_keeps_ties_in_index_order() -> None:
    memory, runtimes = [0.1, 0.2, 0.1, 0.4], [1.0, 2.0, 1.0, 4.0]
    assert knapsack.greedy(memory, runtimes, 0.35) == tk.greedy_knapsack(memory, runtimes, 0.35)
    assert knapsack.greedy(memory, runtimes, 0.35)[1] == [0, 1]


@pytest.mark.parametrize(
    "memory, runtimes, budget, solver, message",
    [
        ([0.1], [1.0], 0.5, "knap", "'knap'"),
        ([-0.1], [1.0], 0.5, "dp", "memory of item 0"),
        ([0.1], [float("nan")], 0.5, "dp_lean", "runtime of item 0"),
        ([0.1], [1.0], -1.0, "dp", "max_memory"),
        ([0.0], [1.0], 0.5, "greedy", "memory 0"),
        ([0.1, 0.2], [1.0], 0.5, "dp", "2 items"),
    ],
)
def test_knapsack_rejects_bad_input_by_name(memory, runtimes, budget, solver, message) -> None:
    with pytest.raises(ValueError, match=message):
        knapsack.solve(solver, memory, runtimes, budget)


# --------------------------------------------------------------------------- the zoo


def _saved(fw: fx.GraphModule, num_fwd_outputs: int) -> list[str]:
    output = next(iter(reversed(fw.graph.nodes)))
    return [n.name if isinstance(n, fx.Node) else repr(n) for n in output.args[0][num_fwd_outputs:]]


def _budget_config(budget: float, solver: str):
    return config.patch(activation_memory_budget=budget, activation_memory_budget_solver=solver,
                        activation_memory_budget_runtime_estimator="flops")


def _prepared(cap) -> fx.GraphModule:
    """torch's side: the joint graph after torch's own dead-code elimination and CSE."""
    return torch_prepared(cap.fresh())


def _decide(cap, budget: float, solver: str | None = None):
    """fxcut's side: the partitioner's planned preparation; the captured graph is only read."""
    graph = cap.gm.graph
    return decide_with_budget(graph, budget, num_fwd_outputs=cap.num_fwd_outputs, solver=solver,
                              arrays=fxcut_prepared_arrays(graph), **cap.partition_kwargs)


# The zoo cases that reach the knapsack at some budget.  The others (mlp,
# mlp_dynamic, mlp_frozen, moe, lstm) have no candidate: every node banned
# in the aggressive cut is an input, shares an input's storage or is not
# needed by the backward (checked by test_cases_without_knapsack...).
KNAPSACK_CASES = ["convnet", "gpt2", "gpt2_ckpt", "gpt2_dropout", "gpt2_dynamic", "gpt2_sdpa", "llama",
                  "llama_bf16", "llama_ckpt", "llama_sac", "resnet", "vit"]


@pytest.mark.parametrize("name", CASES)
def test_budget_partition_equals_torch(name: str) -> None:
    """Every budget of the grid, solver dp: saved outputs and code equal.
    Where the pass reaches the knapsack, the other solvers too: fxcut's
    dp_lean decides what its dp does (which is torch's, above); greedy and
    ilp decisions equal torch's choose_saved_values_set under the same
    solver (ilp at two budgets of the grid: HiGHS is the slow one)."""
    cap = zoo.capture(name)
    statics = cap.partition_kwargs.get("static_lifetime_input_indices")
    knapsack_budgets = []
    for budget in BUDGETS:
        with _budget_config(budget, "dp"):
            tfw, tbw = cap.partition(torch_partition)
            ffw, fbw = cap.partition(fxcut.min_cut_rematerialization_partition)
            with_dp = _decide(cap, budget)
        expected = _saved(tfw, cap.num_fwd_outputs)
        assert _saved(ffw, cap.num_fwd_outputs) == expected, budget
        assert ffw.code == tfw.code, budget
        assert fbw.code == tbw.code, budget
        if with_dp.stage != "knapsack":
            continue
        knapsack_budgets.append(budget)
        with _budget_config(budget, "dp"):
            lean = _decide(cap, budget, "dp_lean")
        assert lean.saved == with_dp.saved and lean.knapsack[:3] == with_dp.knapsack[:3], budget
        for solver in ("greedy", "ilp"):
            if solver == "ilp" and budget not in (0.25, 0.75):
                continue
            with _budget_config(budget, solver):
                want = torch_budget_decision(_prepared(cap), cap.num_fwd_outputs, budget, statics)
                got = _decide(cap, budget)
            assert got.stage == "knapsack"
            assert [n.name for n in got.arrays.nodes_at(got.saved)] == want, (solver, budget)
    assert bool(knapsack_budgets) == (name in KNAPSACK_CASES), knapsack_budgets


@pytest.mark.parametrize("name, budget", [("gpt2", 0.1), ("gpt2", 0.5), ("llama", 0.25), ("vit", 0.75)])
def test_training_step_at_budget_matches_eager(name: str, budget: float) -> None:
    with _budget_config(budget, "dp"):
        got = zoo.train(name, fxcut.min_cut_rematerialization_partition)
    zoo.assert_same_step(got, zoo.eager(name), **zoo.tolerances(name))


def test_resnet_step_under_a_budget_fails_as_with_torch() -> None:
    # Below budget 1 torch's passes un-ban training-mode batch norm, so the
    # backward recomputes it from the running-stat buffers, which the
    # forward has updated in place: autograd's version check fails.  Same
    # decision, same failure.
    def torch_fn(*args, **kwargs):  # not the capture's cached step
        return torch_partition(*args, **kwargs)

    for fn in (torch_fn, fxcut.min_cut_rematerialization_partition):
        with _budget_config(0.5, "dp"), pytest.raises(RuntimeError, match="modified by an inplace operation"):
            zoo.train("resnet", fn)


def test_budget_pass_lowers_the_graph_once(monkeypatch) -> None:
    calls = []
    real = fxcut.torchrules.lower.lower_for_partition
    # lowering's one home: the adapter, lower_prepared and the tests' torch_reference call it there
    monkeypatch.setattr(fxcut.torchrules.lower, "lower_for_partition",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    cap = zoo.capture("gpt2")
    with _budget_config(0.5, "dp"):
        d = decide_with_budget(cap.gm.graph, 0.5, num_fwd_outputs=cap.num_fwd_outputs,
                               arrays=fxcut_prepared_arrays(cap.gm.graph))
        assert d.stage == "knapsack" and d.n_cuts == 4
        assert len(calls) == 1
        cap.partition(fxcut.min_cut_rematerialization_partition)
    assert len(calls) == 2


# --------------------------------------------------------------------------- random graphs


@pytest.mark.parametrize("chunk", range(4))
def test_random_graph_budget_equals_torch(chunk: int) -> None:
    stages = []
    for seed in range(chunk * 60, (chunk + 1) * 60):
        rj = random_joint(seed)
        rng = random.Random(seed)
        budget = rng.choice([0.0, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0, rng.random()])
        solver = rng.choice(["dp", "greedy", "ilp", "dp_lean", "dp_knapsack_sliding_hirschberg"])
        torch_solver = "dp" if solver == "dp_lean" else solver
        with config.patch(activation_memory_budget_runtime_estimator="testing",
                          activation_memory_budget_solver=torch_solver):
            torch_error = ours_error = None
            try:
                expected = torch_budget_decision(copy.deepcopy(rj.module), rj.num_fwd_outputs, budget,
                                                 rj.static_lifetime_input_indices)
            except RuntimeError as e:
                torch_error = e
            try:
                graph = copy.deepcopy(rj.module).graph
                got = decide_with_budget(graph, budget, num_fwd_outputs=rj.num_fwd_outputs,
                                         static_lifetime_input_indices=rj.static_lifetime_input_indices,
                                         solver=solver, arrays=lower_graph(graph))
            except fxcut.InfiniteCutError as e:
                ours_error = e
        assert (torch_error is None) == (ours_error is None), (seed, torch_error, ours_error)
        if ours_error is not None:
            continue
        stages.append(got.stage)
        names = None if got.stage == "no_backward" else [n.name for n in got.arrays.nodes_at(got.saved)]
        assert names == expected, (seed, budget, solver, got.stage)
    assert "knapsack" in stages and "min_cut" in stages


# --------------------------------------------------------------------------- where the budget comes from


def test_budget_from_node_meta_equals_torch() -> None:
    cap = zoo.capture("gpt2")
    results = []
    for fn in (torch_partition, fxcut.min_cut_rematerialization_partition):
        gm = cap.fresh()
        next(iter(gm.graph.nodes)).meta["memory_budget"] = 0.25
        with _budget_config(1.0, "dp"):
            results.append(fn(gm, cap.joint_inputs, num_fwd_outputs=cap.num_fwd_outputs, **cap.partition_kwargs))
    (tfw, _), (ffw, _) = results
    assert ffw.code == tfw.code
    plain, _ = cap.partition(fxcut.min_cut_rematerialization_partition)
    assert _saved(ffw, cap.num_fwd_outputs) != _saved(plain, cap.num_fwd_outputs)


def _annotate(gm: fx.GraphModule, budget_of) -> None:
    try:
        from torch.fx.traceback import MEMORY_BUDGET_ANNOTATION_KEY
    except ImportError:  # torch 2.12: no region budgets, the annotation is ignored
        MEMORY_BUDGET_ANNOTATION_KEY = "_region_activation_memory_budget"

    for k, node in enumerate(gm.graph.nodes):
        b = budget_of(k, node)
        if b is not None:
            node.meta.setdefault("custom", {})[MEMORY_BUDGET_ANNOTATION_KEY] = b


#: the phrases of torch's region-budget errors that fxcut's repeat
_REGION_PHRASES = ("conflicting budgets within a single joint graph", "must cover the entire forward")


@pytest.mark.parametrize("case", ["whole", "conflicting", "partial"])
def test_region_budget_annotation_as_torch(case: str) -> None:
    cap = zoo.capture("gpt2")
    budget_of = {
        "whole": lambda k, n: 0.25,
        "conflicting": lambda k, n: 0.25 if k % 2 else 0.5,
        "partial": lambda k, n: 0.25 if k % 3 else None,
    }[case]
    outcomes = []
    for fn in (torch_partition, fxcut.min_cut_rematerialization_partition):
        gm = cap.fresh()
        _annotate(gm, budget_of)
        try:
            with _budget_config(1.0, "dp"):
                fw, _ = fn(gm, cap.joint_inputs, num_fwd_outputs=cap.num_fwd_outputs, **cap.partition_kwargs)
            outcomes.append(fw.code)
        except RuntimeError as e:  # fxcut's is a RegionBudgetError, a RuntimeError: the same to a caller
            # with torch's key phrases (code matching torch's message matches fxcut's; the rest is worded apart)
            outcomes.append((RuntimeError, [p in str(e) for p in _REGION_PHRASES]))
    assert outcomes[0] == outcomes[1]
    if fxcut.torchrules.versions.rules_or_nearest().region_memory_budgets:
        assert (case == "whole") == isinstance(outcomes[0], str)
    else:
        assert isinstance(outcomes[0], str)  # the annotation means nothing to this torch


@pytest.mark.parametrize(
    "patch, message",
    [
        ({"activation_memory_budget": 1.5}, "1.5"),
        ({"activation_memory_budget": -0.25}, "-0.25"),
        ({"activation_memory_budget": 0.5, "activation_memory_budget_solver": "knapsack9"}, "knapsack9"),
        ({"activation_memory_budget": 0.5, "activation_memory_budget_runtime_estimator": "sundial"}, "sundial"),
    ],
)
def test_bad_budget_solver_or_estimator_is_a_value_error_naming_it(patch: dict, message: str) -> None:
    cap = zoo.capture("mlp")
    gm = cap.fresh()
    before = gm.code
    with config.patch(**patch), pytest.raises(ValueError, match=message):
        fxcut.min_cut_rematerialization_partition(gm, cap.joint_inputs, num_fwd_outputs=cap.num_fwd_outputs,
                                                  **cap.partition_kwargs)
    assert gm.code == before


# --------------------------------------------------------------------------- the Pareto sweep


def test_memory_pareto(tmp_path) -> None:
    cap = zoo.capture("gpt2")
    gm = cap.fresh()
    before = gm.code
    png = tmp_path / "pareto.png"
    plot = str(png) if _has_matplotlib() else None
    with _budget_config(1.0, "dp"):
        points = memory_pareto(gm, cap.num_fwd_outputs, budgets=BUDGETS, plot=plot,
                               static_lifetime_input_indices=cap.partition_kwargs.get("static_lifetime_input_indices"))
    assert gm.code == before
    assert [p.budget for p in points] == list(BUDGETS)
    assert points[0].stage == "inputs" and points[-1].stage == "min_cut"
    # Budget 1 is the plain partition; budget 0 saves only the inputs.
    plain, _ = cap.partition(fxcut.min_cut_rematerialization_partition)
    nodes = {n.name: n for n in cap.gm.graph.nodes}
    plain_bytes = sum(_nbytes(nodes[name]) for name in _saved(plain, cap.num_fwd_outputs))
    primal_bytes = sum(_nbytes(p) for p in cap.primals())
    assert points[-1].saved_bytes == plain_bytes
    assert points[0].saved_bytes == primal_bytes
    assert points[0].recompute_runtime > points[-1].recompute_runtime
    assert all(math.isfinite(p.recompute_runtime) for p in points)
    if plot:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _nbytes(node: fx.Node) -> int:
    val = node.meta["val"]
    return val.numel() * val.dtype.itemsize if isinstance(val, torch.Tensor) else 1


def _has_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.parametrize("name", ["gpt2", "llama_sac"])
def test_memory_pareto_points_are_the_partitions_at_each_budget(name: str) -> None:
    """Each point is what torch's partitioner saves under that budget (issue
    16 item 3: the sweep reads the partition's plan -- its DCE/CSE with
    num_fwd_outputs, its options and solver)."""
    cap = zoo.capture(name)
    statics = cap.partition_kwargs.get("static_lifetime_input_indices")
    with _budget_config(1.0, "dp"):
        points = memory_pareto(cap.fresh(), cap.num_fwd_outputs, budgets=BUDGETS,
                               static_lifetime_input_indices=statics)
    nodes = {n.name: n for n in cap.gm.graph.nodes}
    for point in points:
        with _budget_config(point.budget, "dp"):
            tfw, _ = cap.partition(torch_partition)
        names = _saved(tfw, cap.num_fwd_outputs)
        assert point.saved_bytes == sum(_nbytes(nodes[n]) for n in names if n in nodes), point
