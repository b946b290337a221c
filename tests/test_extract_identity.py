"""fxcut's own forward/backward graph building (fxcut.torchrules.extract) builds what
torch's passes build: the same code text, node names and order, arguments,
types, user lists, every meta entry (and which meta dicts are shared with
the joint graph), name tables, module class (lazy or not), attributes and
meta -- and leaves the joint module in the same state.

Each case partitions two fresh copies of a joint graph with fxcut: once with
fxcut's builder, once with it switched off (torch's passes:
``_extract_fwd_bwd_modules``, ``reordering_to_mimic_autograd_engine``,
``raise_getitems``, ...), and compares the results field by field
(tests/extract_identity.py).  Both with and without torch's lazy graph
modules, as a real compile runs the partitioner under them.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch._functorch import config
from torch.fx._lazy_graph_module import _LazyGraphModule, _use_lazy_graph_module

import fxcut
import zoo
from extract_identity import both, signature
from fxcut.torchrules.snapshot import copy_graph_module
from fxcut.torchrules.extract import torch_modeled
from fxcut.torchrules.versions import rules_or_nearest
from random_joint import random_joint

#: Whether fxcut's builder runs at all on this torch (elsewhere torch's passes
#: build the modules and the comparisons are trivially equal).
MODELED = torch_modeled(rules_or_nearest())

CASES = sorted(zoo.CASES)
LAZY = [False, True]


def _zoo_both(name: str, lazy: bool, walk: bool = False, **config_patch: Any) -> tuple[bool, bool]:
    cap = zoo.capture(name)

    def fresh():
        gm = cap.fresh()
        if walk:
            fxcut.recompute_param_aliases(gm.graph, cap.param_indices)
        return _LazyGraphModule.from_graphmodule(gm) if lazy else gm

    def part(gm):
        return fxcut.min_cut_rematerialization_partition(
            gm, cap.joint_inputs, *cap.partition_args, num_fwd_outputs=cap.num_fwd_outputs,
            **cap.partition_kwargs)

    with config.patch(**config_patch), _use_lazy_graph_module(lazy):
        return both(fresh, part)


@pytest.mark.parametrize("lazy", LAZY)
@pytest.mark.parametrize("name", CASES)
def test_zoo_modules_equal_torch_passes(name: str, lazy: bool) -> None:
    fast, built = _zoo_both(name, lazy)
    assert built
    # Every zoo graph but the RNG-recompute ones takes fxcut's builder.
    if not zoo.CASES[name].random:
        assert fast == MODELED, name


@pytest.mark.parametrize("budget", [0.0, 0.3, 0.7])
@pytest.mark.parametrize("name", ["gpt2", "llama_sac"])
def test_budgets(name: str, budget: float) -> None:
    fast, _ = _zoo_both(name, True, activation_memory_budget=budget)
    assert fast == MODELED


@pytest.mark.parametrize("name", ["gpt2", "gpt2_dynamic"])
def test_without_cse(name: str) -> None:
    assert _zoo_both(name, False, cse=False)[0] == MODELED


def test_dynamic_shapes_save_symbols() -> None:
    """The dynamic-shape case saves sym nodes: the forward returns them last
    and the backward takes them first, as torch's passes order them."""
    fast, _ = _zoo_both("gpt2_dynamic", True)
    assert fast == MODELED
    cap = zoo.capture("gpt2_dynamic")
    fw, bw = cap.partition(fxcut.min_cut_rematerialization_partition)
    from torch.fx.experimental.proxy_tensor import is_sym_node

    outs = next(iter(reversed(fw.graph.nodes))).args[0][cap.num_fwd_outputs:]
    assert any(is_sym_node(n) for n in outs)
    first = next(iter(bw.graph.nodes))
    assert is_sym_node(first)


def test_zero3_walk_tags() -> None:
    cap = zoo.capture("gpt2")
    if not cap.param_indices:
        pytest.fail("the gpt2 case has no parameter indices for the ZeRO-3 walk")
    assert _zoo_both("gpt2", True, walk=True)[0] == MODELED


def test_rng_ops_recomputed_fall_back_to_torch() -> None:
    """Recomputed RNG ops (functionalize_rng_ops) stay torch's: same result."""
    names = [n for n in CASES if zoo.CASES[n].random]
    assert names
    for name in names:
        fast, built = _zoo_both(name, True, activation_memory_budget=0.0)
        assert built


def test_activation_offloading() -> None:
    """Offloading is torch's pass: fxcut leaves these graphs to it, and the
    result equals torch's."""
    fast, built = _zoo_both("gpt2", False, enable_activation_offloading=True)
    assert built and not fast


def test_joint_left_as_torch_leaves_it_and_lazy_class_kept() -> None:
    cap = zoo.capture("gpt2")
    with _use_lazy_graph_module(True):
        gm = _LazyGraphModule.from_graphmodule(cap.fresh())
        fw, bw = fxcut.min_cut_rematerialization_partition(
            gm, cap.joint_inputs, *cap.partition_args, num_fwd_outputs=cap.num_fwd_outputs,
            **cap.partition_kwargs)
    # torch's passes return a lazy forward (never compiled yet) and a plain
    # backward (reordering builds a GraphModule).
    assert isinstance(fw, _LazyGraphModule) and not isinstance(bw, _LazyGraphModule)
    sig = signature(fw, gm)
    assert sig["class"][2]  # still pending a compile when returned


def _random_case(seed: int, lazy: bool) -> str:
    rj = random_joint(seed)

    def part(gm):
        return fxcut.min_cut_rematerialization_partition(
            gm, None, num_fwd_outputs=rj.num_fwd_outputs,
            static_lifetime_input_indices=rj.static_lifetime_input_indices)

    try:
        with _use_lazy_graph_module(lazy):
            fast, _ = both(lambda: copy_graph_module(rj.module), part)
    except fxcut.InfiniteCutError:
        return "conflict"
    assert fast == MODELED, seed
    return "ok"


def test_random_joint_graphs() -> None:
    """300 random joint graphs (tags, regions, RNG ops, multi-output ops,
    views, statics), half of them under lazy graph modules."""
    outcomes = [_random_case(seed, lazy=seed % 2 == 1) for seed in range(300)]
    assert outcomes.count("ok") >= 250, outcomes.count("ok")


def test_builder_catches_a_wrong_name_table() -> None:
    """The comparison is strong enough to see a builder that forgets the
    names torch's dead-code elimination leaves taken; on a torch whose
    passes the builder does not model, the builder is never run at all."""
    import fxcut.torchrules.extract as extract

    real = extract._extraction_graph
    calls = []

    def forgetful(sel, descs, flag_backward):
        calls.append(flag_backward)
        sel = extract._Selection(sel.inputs, [n for n in sel.copied if n in sel.kept], sel.kept, sel.outputs)
        return real(sel, descs, flag_backward)

    extract._extraction_graph = forgetful
    try:
        if MODELED:
            with pytest.raises(AssertionError, match="namespace"):
                _zoo_both("gpt2", True)
        else:
            assert _zoo_both("gpt2", True)[0] is False  # torch's passes built both modules
            assert calls == []
    finally:
        extract._extraction_graph = real
