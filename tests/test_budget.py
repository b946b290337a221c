"""The activation memory budget: fxcut's decisions equal torch's.

- Knapsack solvers against torch's own functions on random instances
  (hypothesis): dp, greedy and torch's sliding Hirschberg give identical
  choices and values, ilp the same optimum (and choice), fxcut's dp_lean the
  choice of dp in a fraction of its memory.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch._functorch._activation_checkpointing import knapsack as tk

from fxcut import knapsack


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
def test_ilp_has_torchs_optimum(instance) -> None:
    memory, runtimes, budget = instance
    if not memory:
        return
    value, saved, recomputable = knapsack.ilp(memory, runtimes, budget)
    t_value, t_saved, t_recomputable = tk.ilp_knapsack(memory, runtimes, budget)
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
