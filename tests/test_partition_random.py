"""fxcut's decision equals torch's on random joint graphs, under every
config option the decision reads.

torch's own functions (tests/torch_reference.py) are the reference; the
graphs come from tests/random_joint.py.  A conflict (a value that can be
neither saved nor recomputed) must raise on both sides.
"""

from __future__ import annotations

import copy

import networkx as nx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch._functorch import config

import fxcut
from fxcut.tools.decisions import decide_graph, lower_graph
from random_joint import random_joint
from torch_reference import torch_decision

CONFIG_VARIANTS = [
    {},
    {"ban_recompute_not_in_allowlist": False},
    {"recompute_views": True},
    {"aggressive_recomputation": True},
    {"ban_recompute_reductions": False},
    {"treat_parameters_as_free_to_save": True},
    {"max_dist_from_bw": 3},
    {"ban_recompute_used_far_apart": False, "ban_recompute_long_fusible_chains": False},
    {"ban_recompute_materialized_backward": False},
    {"unsafe_allow_optimization_of_collectives": True},
]


def _check_same_decision(seed: int, n_fw: int | None = None) -> str:
    rj = random_joint(seed, n_fw)
    torch_error = ours_error = None
    try:
        expected = torch_decision(
            copy.deepcopy(rj.module), rj.num_fwd_outputs, rj.static_lifetime_input_indices
        )
    except RuntimeError as e:
        torch_error = e
    graph = copy.deepcopy(rj.module).graph
    try:
        got = decide_graph(
            lower_graph(graph),
            num_fwd_outputs=rj.num_fwd_outputs,
            static_lifetime_input_indices=rj.static_lifetime_input_indices,
            keep_network=fxcut._C.KEEP_NETWORK,
        )
    except fxcut.InfiniteCutError as e:
        ours_error = e
    assert (torch_error is None) == (ours_error is None), (seed, torch_error, ours_error)
    if ours_error is not None:
        # The chain names real nodes joined by infinite edges.
        assert ours_error.chain, seed
        return "conflict"
    names = [n.name for n in got.arrays.nodes_at(got.saved)]
    assert names == expected.saved, seed
    banned = {got.arrays.nodes[i].name for i in range(len(got.arrays)) if got.banned(i)}
    assert banned == expected.banned, seed
    fw = {got.arrays.nodes[i].name for i in range(len(got.arrays)) if got.node_class[i] & fxcut._C.C_REQUIRED_FW}
    assert fw == expected.required_fw, seed
    # The C solver's cut value is the max-flow networkx finds on the same network.
    tail, head, cap = got.network
    g = nx.DiGraph()
    for t, h, c in zip(tail, head, cap):
        g.add_edge(t, h, capacity=float("inf") if c < 0 else c)
    n = len(got.arrays)
    value, _ = nx.minimum_cut(g, 2 * n, 2 * n + 1)
    assert value == got.cut_value, seed
    return "ok"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1))
def test_random_graph_decision_equals_torch(seed: int) -> None:
    _check_same_decision(seed)


@pytest.mark.parametrize("variant", CONFIG_VARIANTS, ids=lambda v: ",".join(v) or "default")
def test_random_graph_decision_equals_torch_under_config(variant: dict) -> None:
    outcomes = []
    with config.patch(**variant):
        for seed in range(60):
            outcomes.append(_check_same_decision(seed))
    assert outcomes.count("ok") > 40  # most graphs have a finite cut


def test_large_random_graphs_with_long_chains_equal_torch() -> None:
    reasons = set()
    for seed in range(25):
        rj_outcome = _check_same_decision(1000 + seed, n_fw=250)
        reasons.add(rj_outcome)
    assert "ok" in reasons
