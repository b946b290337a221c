"""The per-release rules table (fxcut.torchrules.versions), the fallback to torch's
partitioner on an untested torch or an unmodelled graph, and the rules
themselves pinned on small graphs."""

from __future__ import annotations

import operator
import warnings

import pytest
import torch
import torch.fx as fx
from torch._functorch import config as functorch_config

import fxcut
import fxcut.solve.core
import fxcut.solve.arrays
import fxcut.partition
import fxcut.torchrules.features
import fxcut.torchrules.lower
import fxcut.torchrules.snapshot
import zoo
from fxcut.route import guard
from fxcut.torchrules import versions
from fxcut.torchrules.features import unmodelled_feature
from fxcut.torchrules.ops import default_facts, is_rng_node
from fxcut.torchrules.prepare import plan_cse

aten = torch.ops.aten


def _saved(fw: fx.GraphModule, num_fwd_outputs: int) -> list[str]:
    output = next(iter(reversed(fw.graph.nodes)))
    return [n.name for n in output.args[0][num_fwd_outputs:]]


@pytest.fixture
def fresh_guard(monkeypatch):
    """Forget which warnings this process gave and reset the counts."""
    monkeypatch.setattr(guard, "_warned", set())
    guard.reset_counts()
    monkeypatch.delenv(versions.ALLOW_UNTESTED_ENV, raising=False)
    monkeypatch.delenv(guard.VERIFY_ENV, raising=False)
    yield
    guard.reset_counts()


# --------------------------------------------------------------------------- the table


def test_running_torch_is_tested() -> None:
    rules = versions.current()
    assert rules is not None, torch.__version__
    major, minor, _ = versions.parse(torch.__version__)
    assert rules.release == f"{major}.{minor}"
    assert torch.__version__.split("+")[0] == rules.tested


def test_tested_range_bounds() -> None:
    assert versions.TESTED == ("2.12.1", "2.13.0", "2.14.1", "2.15.0")
    assert versions.rules_for("2.14.1+cu130").release == "2.14"
    assert versions.rules_for("2.13.0+cpu").release == "2.13"
    assert versions.rules_for("2.12.1").release == "2.12" and versions.rules_for("2.15.0").release == "2.15"
    # Only the exact tested releases: another patch release of a tested
    # minor (inside the old range or not) is untested.
    for untested in ("2.13.1", "2.14.0", "2.14.0+cu130", "2.12.2", "2.14.2"):
        assert versions.rules_for(untested) is None, untested
    for outside in ("2.12.0", "2.11.0", "2.15.1", "2.16.0", "3.0.0", "2.16.0.dev20260101", "2.15.0rc1", "junk"):
        assert versions.rules_for(outside) is None, outside
    assert versions.tested_range() == "tested: 2.12.1, 2.13.0, 2.14.1, 2.15.0"


def test_each_release_differs_from_the_previous_one() -> None:
    """The table is not four copies: each release changes something."""
    rows = list(versions.RELEASES.values())
    fields = [f for f in versions.Rules.__dataclass_fields__ if f not in ("release", "tested")]
    changed = {b.release: [f for f in fields if getattr(a, f) != getattr(b, f)] for a, b in zip(rows, rows[1:])}
    assert "no_return_ops_take_no_memory" in changed["2.13"] and "region_memory_budgets" in changed["2.13"]
    assert {"zero_dropout_sdpa_is_rng", "cse_keeps_backward_apart", "splits_control_deps"} <= set(changed["2.14"])


def test_config_missing_in_a_release_reads_as_its_behaviour() -> None:
    r212 = versions.RELEASES["2.12"]
    with functorch_config.patch(cse=False):
        assert r212.config("cse") is False  # present everywhere: the live value
    assert r212.config("unsafe_treat_script_objects_as_zero_size") is False
    with pytest.raises(AttributeError):
        versions.RELEASES["2.13"].config("no_such_option_anywhere")


def test_nearest_rules_for_an_untested_torch(monkeypatch) -> None:
    for fake, release in (("2.16.0", "2.15"), ("3.1.0", "2.15"), ("2.11.0", "2.12"), ("1.13.1", "2.12"),
                          ("2.14.0a0+gitabc", "2.14"), ("2.15.0rc1", "2.15"), ("2.12.0", "2.12"), ("junk", "2.15"),
                          ("2.13.1", "2.13"), ("2.14.0", "2.14")):
        monkeypatch.setattr(versions, "installed_version", lambda v=fake: v)
        assert versions.current() is None and versions.rules_or_nearest().release == release, fake


# --------------------------------------------------------------------------- who builds the modules


def test_each_release_names_its_module_builder() -> None:
    """The table says which code builds the forward and backward modules on
    which release (and refuses any other name)."""
    builders = {r.release: r.module_builder for r in versions.RELEASES.values()}
    # fxcut's builder on every release (the releases' differences in module
    # building are the fields flags_backward_nodes / marks_static_inputs)
    assert builders == {"2.12": versions.BUILDER_FXCUT, "2.13": versions.BUILDER_FXCUT,
                        "2.14": versions.BUILDER_FXCUT, "2.15": versions.BUILDER_FXCUT}
    import dataclasses

    with pytest.raises(ValueError, match="module_builder"):
        dataclasses.replace(versions.RELEASES["2.13"], module_builder="fxcut.somewhere_else")


def test_the_named_builder_builds_the_modules(monkeypatch) -> None:
    """On the running release, the builder its row names is the one that
    runs: torch's module extraction is called exactly when the row names
    torch's passes (the MLP's graph is one fxcut's builder models)."""
    from torch._functorch import partitioners as tp

    import fxcut.torchrules.extract

    calls: list[int] = []
    real = tp._extract_fwd_bwd_modules

    def spy(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    cap = zoo.capture("mlp")  # the capture itself partitions with torch's partitioner
    monkeypatch.setattr(tp, "_extract_fwd_bwd_modules", spy)
    guard.reset_counts()
    fw, bw = cap.partition(fxcut.min_cut_rematerialization_partition)
    assert guard.partition_counts() == {"fxcut": 1}
    named = versions.current().module_builder
    assert fxcut.torchrules.extract.torch_modeled(versions.rules_or_nearest()) == (named == versions.BUILDER_FXCUT)
    assert len(calls) == (0 if named == versions.BUILDER_FXCUT else 1)
    # The modules are torch's either way.
    calls.clear()
    tfw, tbw = cap.partition()
    assert calls and fw.code == tfw.code and bw.code == tbw.code
    guard.reset_counts()


def test_no_module_but_versions_compares_torch_versions() -> None:
    """Behaviour per release comes from the table: no other module of the
    package reads torch's version to decide anything."""
    import ast
    from pathlib import Path

    package = Path(fxcut.__file__).resolve().parent
    readers = []
    for path in package.rglob("*.py"):
        if path.name == "versions.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Compare):
                continue
            names = {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}
            names |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
            if names & {"__version__", "version_info", "TorchVersion", "installed_version"}:
                readers.append(f"{path.name}:{node.lineno}")
    assert readers == []


# --------------------------------------------------------------------------- snapshot's fx internals


def _joint_modules() -> list[fx.GraphModule]:
    from torch.fx._lazy_graph_module import _LazyGraphModule

    cap = zoo.capture("mlp")
    return [cap.fresh(), _LazyGraphModule.from_graphmodule(cap.fresh())]


def test_snapshots_fx_internals_exist_on_this_release() -> None:
    """The private torch.fx attributes fxcut.torchrules.snapshot relies on, as the
    running release's row names them, exist as snapshot expects: the graph's
    saved fields and rebuilt internals, every node's links and methods, a
    name table with instance state; and ``recompile`` writes no private
    module attribute the row does not name (snapshot would leave it
    changed)."""
    fxi = versions.current().fx_internals
    written: set[str] = set()
    for gm in _joint_modules():
        graph = gm.graph
        for name in (*fxi.graph_fields, *fxi.graph_internals):
            assert hasattr(graph, name), name
        assert vars(graph._graph_namespace), "the name table keeps its state in instance attributes"
        table = type(graph._find_nodes_lookup_table)()
        assert callable(table.insert)
        assert graph._root.op == "root" and graph._len == len(list(graph.nodes))
        for node in graph.nodes:
            for name in fxi.node_internals:
                assert hasattr(node, name), (node.op, name)
            assert node._erased is False and node._next._prev is node
        before = dict(gm.__dict__)
        gm.recompile()
        gm.code  # a lazy module generates its code here
        after = gm.__dict__
        changed = {k for k in after if k.startswith("_") and (k not in before or after[k] is not before[k])}
        assert changed <= set(fxi.module_fields), sorted(changed - set(fxi.module_fields))
        written |= changed
    assert {"_code", "_lineno_map"} <= written


def test_snapshot_reads_its_fields_from_the_table(monkeypatch) -> None:
    """A graph field the row names is saved and put back; the names are not
    hard-coded in snapshot (the adapter hands the row's fx internals to it)."""
    import dataclasses

    from fxcut.torchrules.adapter import TorchAdapter
    from fxcut.torchrules.snapshot import ModuleSnapshot

    rules = versions.rules_or_nearest()
    extra = dataclasses.replace(rules.fx_internals, graph_fields=(*rules.fx_internals.graph_fields, "_fxcut_probe"))
    adapter = TorchAdapter(dataclasses.replace(rules, fx_internals=extra))
    for take in (adapter.snapshot, lambda gm: ModuleSnapshot(gm, extra)):
        gm = _joint_modules()[0]
        gm.graph._fxcut_probe = "before"
        snap = take(gm)
        gm.graph._fxcut_probe = "after"
        snap.restore()
        assert gm.graph._fxcut_probe == "before"
    # Without the field in the row, the probe is not put back.
    gm = _joint_modules()[0]
    gm.graph._fxcut_probe = "before"
    snap = ModuleSnapshot(gm, rules.fx_internals)
    gm.graph._fxcut_probe = "after"
    snap.restore()
    assert gm.graph._fxcut_probe == "after"


# --------------------------------------------------------------------------- the fallback


def _mlp_both(fn):
    cap = zoo.capture("mlp")
    return cap, cap.partition(fn)


@pytest.mark.parametrize("fake", ["2.16.0", "2.11.0", "2.16.0.dev20260101+cu130", "2.13.1", "2.14.0"])
def test_untested_torch_uses_torchs_partitioner_with_one_warning(monkeypatch, fresh_guard, fake) -> None:
    monkeypatch.setattr(versions, "installed_version", lambda: fake)
    ran_fxcut = []
    monkeypatch.setattr(fxcut.partition, "route", lambda *a, **k: ran_fxcut.append(1))
    cap = zoo.capture("mlp")
    expected_fw, expected_bw = cap.partition()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fw, bw = cap.partition(fxcut.min_cut_rematerialization_partition)
        cap.partition(fxcut.min_cut_rematerialization_partition)
    untested = [w for w in caught if issubclass(w.category, fxcut.UntestedTorchWarning)]
    assert len(untested) == 1
    text = str(untested[0].message)
    assert fake in text and "2.12.1" in text and "2.15.0" in text and versions.ALLOW_UNTESTED_ENV in text
    assert ran_fxcut == []
    assert fw.code == expected_fw.code and bw.code == expected_bw.code
    assert fxcut.partition_counts() == {"torch_untested": 2}


@pytest.mark.parametrize("how", ["env", "argument"])
def test_opt_in_runs_fxcut_on_an_untested_torch(monkeypatch, fresh_guard, how) -> None:
    # a nightly of the installed release: untested, but its rules are known
    nightly = torch.__version__.split("+")[0] + ".dev20260101"
    monkeypatch.setattr(versions, "installed_version", lambda: nightly)
    assert versions.current() is None and versions.rules_or_nearest().tested == nightly.split(".dev")[0]
    real = fxcut.partition.route
    ran_fxcut = []

    def spy(*a, **k):
        ran_fxcut.append(1)
        return real(*a, **k)

    monkeypatch.setattr(fxcut.partition, "route", spy)
    cap = zoo.capture("mlp")
    if how == "env":
        monkeypatch.setenv(versions.ALLOW_UNTESTED_ENV, "1")
        fn = fxcut.min_cut_rematerialization_partition
    else:
        def fn(*a, **k):
            return fxcut.min_cut_rematerialization_partition(*a, allow_untested=True, **k)
    with warnings.catch_warnings():
        warnings.simplefilter("error", fxcut.UntestedTorchWarning)
        fw, bw = cap.partition(fn)
    tfw, tbw = cap.partition()
    assert ran_fxcut == [1]
    assert _saved(fw, cap.num_fwd_outputs) == _saved(tfw, cap.num_fwd_outputs)
    assert fxcut.partition_counts() == {"fxcut": 1}


def test_unmodelled_feature_falls_back_with_the_reason_once(monkeypatch, fresh_guard) -> None:
    reason = "node 'x' is a frobnicate op, which fxcut does not model"
    monkeypatch.setattr(fxcut.torchrules.features, "unmodelled_feature", lambda gm, rules: reason)
    monkeypatch.setattr(fxcut.partition, "route", lambda *a, **k: pytest.fail("fxcut ran"))
    cap = zoo.capture("mlp")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fw, _ = cap.partition(fxcut.min_cut_rematerialization_partition)
        cap.partition(fxcut.min_cut_rematerialization_partition)
    fallbacks = [w for w in caught if issubclass(w.category, fxcut.FallbackWarning)]
    assert len(fallbacks) == 1 and reason in str(fallbacks[0].message)
    assert fw.code == cap.partition()[0].code
    assert fxcut.partition_counts() == {"torch_unmodelled": 2}


def test_control_deps_is_unmodelled_where_torch_splits_it() -> None:
    from torch._inductor.fx_passes.control_dependencies import control_deps

    g = fx.Graph()
    x = g.placeholder("primals_1")
    g.call_function(control_deps, ((), None, x))
    g.output((x,))
    gm = fx.GraphModule(torch.nn.Module(), g)
    why = unmodelled_feature(gm, versions.RELEASES["2.14"])
    assert why is not None and "control_deps" in why and "'control_deps'" in why
    assert unmodelled_feature(gm, versions.RELEASES["2.13"]) is None


def test_2_15_graph_features_fxcut_leaves_to_torch() -> None:
    from torch.utils.checkpoint import CheckpointPolicy

    def graph_with(mark) -> fx.GraphModule:
        g = fx.Graph()
        x = g.placeholder("primals_1")
        y = g.call_function(aten.sin.default, (x,))
        mark(x, y)
        g.output((y,))
        return fx.GraphModule(torch.nn.Module(), g)

    epilogue = graph_with(lambda x, y: x.meta.__setitem__("aot_runtime_epilogue_input_mutation", True))
    device = graph_with(lambda x, y: y.meta.__setitem__("val", torch.device("cpu")))
    for gm, word in ((epilogue, "mutated after the forward"), (device, "torch.device")):
        why = unmodelled_feature(gm, versions.RELEASES["2.15"])
        assert why is not None and word in why
        assert unmodelled_feature(gm, versions.RELEASES["2.14"]) is None

    g = fx.Graph()
    x = g.placeholder("primals_1")
    eff = g.call_function(torch.ops.higher_order.with_effects, (x, aten.sin.default, x), name="eff")
    item = g.call_function(operator.getitem, (eff, 1))
    item.meta["val"] = torch.empty(2)
    g.output((item,))
    gm = fx.GraphModule(torch.nn.Module(), g)
    assert unmodelled_feature(gm, versions.RELEASES["2.15"]) is None
    eff.meta["recompute"] = CheckpointPolicy.MUST_RECOMPUTE
    assert "'eff'" in unmodelled_feature(gm, versions.RELEASES["2.15"])
    assert unmodelled_feature(gm, versions.RELEASES["2.14"]) is None


def test_partial_region_budget_coverage_is_allowed_only_when_configured() -> None:
    from fxcut.torchrules.budget import RegionBudgetError, check_regions

    g = fx.Graph()
    x = g.placeholder("x")
    op = g.call_function(aten.sin.default, (x,))
    rules = versions.current()
    with pytest.raises(RegionBudgetError, match="must cover the entire forward"):
        check_regions([0.5], [op], lambda n: True, rules)
    assert issubclass(RegionBudgetError, RuntimeError)  # what torch raises
    if "activation_memory_budget_require_full_coverage" not in rules.missing_config:
        with functorch_config.patch(activation_memory_budget_require_full_coverage=False):
            check_regions([0.5], [op], lambda n: True, rules)


# --------------------------------------------------------------------------- the rules, on small graphs


def _sdpa_node(dropout_p):
    g = fx.Graph()
    q = g.placeholder("q")
    node = g.call_function(aten._scaled_dot_product_flash_attention_for_cpu.default, (q, q, q, dropout_p))
    return node


def test_zero_dropout_sdpa_is_rng_only_before_2_14() -> None:
    zero, some = _sdpa_node(0.0), _sdpa_node(0.1)
    assert is_rng_node(zero, zero_dropout_sdpa_is_rng=True)
    assert not is_rng_node(zero, zero_dropout_sdpa_is_rng=False)
    assert is_rng_node(some, zero_dropout_sdpa_is_rng=False)
    g = fx.Graph()
    x = g.placeholder("x")
    drop = g.call_function(aten.native_dropout.default, (x, 0.0, True))
    add = g.call_function(aten.add.Tensor, (x, x))
    assert is_rng_node(drop, False)  # no dropout_p argument: always random
    assert not is_rng_node(add, True)


def _joint(build) -> tuple[fx.Graph, int]:
    """A joint graph: ``build(g, x, tangent)`` returns (forward outputs, backward outputs)."""
    g = fx.Graph()
    x = g.placeholder("primals_1")
    t = g.placeholder("tangents_1")
    fwd, bwd = build(g, x, t)
    # No meta["val"] on the ops: CSE would leave values that alias a graph
    # output alone, and these small graphs output the values they test.
    x.meta["val"] = t.meta["val"] = torch.empty(4)
    g.output((*fwd, *bwd))
    return g, len(fwd)


def _merged(graph: fx.Graph, release: str, num_fwd: int) -> set[tuple[str, str]]:
    replace, _ = plan_cse(list(graph.nodes), versions.RELEASES[release], num_fwd, default_facts())
    return {(a.name, b.name) for a, b in replace.items()}


def test_cse_keeps_backward_values_apart_from_2_14() -> None:
    def build(g, x, t):
        fwd_only = g.call_function(aten.sin.default, (x,), name="sin_fwd")
        for_bw = g.call_function(aten.sin.default, (x,), name="sin_bw")
        return [fwd_only], [g.call_function(aten.mul.Tensor, (for_bw, t))]

    graph, num_fwd = _joint(build)
    assert _merged(graph, "2.13", num_fwd) == {("sin_bw", "sin_fwd")}
    assert _merged(graph, "2.14", num_fwd) == set()


def test_cse_compares_floats_by_bits_from_2_14() -> None:
    def build(g, x, t):
        # two nan objects, as two traced float("nan") give: never equal as floats
        a = g.call_function(aten.add.Tensor, (x, float("nan")), name="add_nan_a")
        b = g.call_function(aten.add.Tensor, (x, float("nan")), name="add_nan_b")
        c = g.call_function(aten.mul.Tensor, (x, 0.0), name="mul_zero")
        d = g.call_function(aten.mul.Tensor, (x, -0.0), name="mul_negzero")
        return [a, b, c, d], []

    graph, num_fwd = _joint(build)
    assert _merged(graph, "2.13", num_fwd) == {("mul_negzero", "mul_zero")}
    assert _merged(graph, "2.14", num_fwd) == {("add_nan_b", "add_nan_a")}


def test_cse_keeps_streams_apart_from_2_14() -> None:
    def build(g, x, t):
        a = g.call_function(aten.cos.default, (x,), name="cos_s0")
        b = g.call_function(aten.cos.default, (x,), name="cos_s1")
        b.meta["custom"] = {"stream": 1}
        return [a, b], []

    graph, num_fwd = _joint(build)
    assert _merged(graph, "2.13", num_fwd) == {("cos_s1", "cos_s0")}
    assert _merged(graph, "2.14", num_fwd) == set()


def test_no_return_op_size_follows_the_release(monkeypatch) -> None:
    """Before 2.13 only _assert_scalar (and get_attr) count as zero-size when
    meta['val'] is missing; from 2.13 every op without returns does."""
    from fxcut import _C
    from fxcut.torchrules.lower import _ValueFacts

    g = fx.Graph()
    x = g.placeholder("x")
    node = g.call_function(aten._assert_async.default, (x,))
    import dataclasses

    assert not versions.RELEASES["2.12"].no_return_ops_take_no_memory
    assert versions.RELEASES["2.13"].no_return_ops_take_no_memory and versions.RELEASES["2.15"].no_return_ops_take_no_memory
    for free, expected in ((False, _C.SIZE_UNKNOWN), (True, 0)):
        rules = dataclasses.replace(versions.current(), no_return_ops_take_no_memory=free)
        _, nbytes = _ValueFacts(default_facts(), True, rules)(node, 0)
        assert nbytes == expected, free


def test_rules_match_the_installed_torch() -> None:
    """The running release's row says what its partitioner actually does."""
    from torch._functorch import compile_utils, partitioners

    rules = versions.current()
    assert hasattr(functorch_config, "unsafe_treat_script_objects_as_zero_size") == (
        "unsafe_treat_script_objects_as_zero_size" not in rules.missing_config)
    assert hasattr(partitioners, "is_rng_op") == (not rules.zero_dropout_sdpa_is_rng)
    import inspect

    assert ("extra_node_key" in inspect.signature(compile_utils.fx_graph_cse).parameters) == (
        rules.cse_keeps_backward_apart)
    import importlib

    assert importlib.import_module(rules.offloading_module).enable_activation_offloading
    src = inspect.getsource(partitioners)
    assert ("control_deps" in src) == rules.splits_control_deps
    assert ("_get_memory_budget_annotation" in src) == rules.region_memory_budgets
    assert hasattr(functorch_config, "activation_memory_budget_require_full_coverage") == (
        "activation_memory_budget_require_full_coverage" not in rules.missing_config)
    assert ("aot_runtime_epilogue_input_mutation" in src) == rules.epilogue_mutated_inputs_unsaveable
    assert ("mark_leaf_tensor_outputs" in src) == rules.effectful_leaves_only
    assert ("isinstance(val, torch.device)" in src) == rules.device_values_are_free
    # Module extraction binds the symbols before replacements too (2.14);
    # tests/test_duplicate_symbols.py has the graphs where that shows.
    assert hasattr(partitioners, "_free_symbols_without_replacements") == rules.binds_unreplaced_symbols
    # What module extraction writes into meta (fxcut.torchrules.extract reproduces it;
    # tests/test_extract_identity.py compares every meta entry).
    extraction = inspect.getsource(partitioners._extract_fwd_bwd_modules)
    assert ('meta["autograd_backward"] = True' in extraction) == rules.flags_backward_nodes
    assert ('meta["is_static_input"]' in extraction) == rules.marks_static_inputs
    assert rules.module_builder == versions.BUILDER_FXCUT
    assert ("return aggressive_recomputation_saved_values\n    memories_banned_nodes" in src.replace(
        "        # Nothing left for the knapsack to trade off, so this is the same cut the\n"
        "        # knapsack would return with an empty dont_ban.\n", "")) == rules.no_candidates_saves_aggressive_cut


def test_guard_is_the_public_entry() -> None:
    assert fxcut.min_cut_rematerialization_partition is fxcut.partition.min_cut_rematerialization_partition
    assert operator.attrgetter("__module__")(fxcut.min_cut_rematerialization_partition) == "fxcut.partition"


def test_partition_equals_torch_when_forward_and_backward_compute_the_same_value() -> None:
    """The forward computes cos(x) for an output the backward never needs;
    the backward of sin computes cos(x) again.  torch 2.13's CSE merges the
    two, 2.14's keeps them apart: fxcut follows the installed release."""
    from functorch.compile import aot_function, make_boxed_func
    from torch._functorch.partitioners import min_cut_rematerialization_partition as torch_partition

    from fxcut.torchrules.snapshot import copy_graph_module

    seen = []

    def record(gm, joint_inputs, **kwargs):
        seen.append((copy_graph_module(gm), joint_inputs, kwargs))
        return torch_partition(gm, joint_inputs, **kwargs)

    def nop(gm, _):
        return make_boxed_func(gm.forward)

    f = aot_function(lambda x: (x.sin(), (x.cos() * 2).detach()), fw_compiler=nop, partition_fn=record)
    f(torch.randn(4, requires_grad=True))
    gm, joint_inputs, kwargs = seen[0]
    assert sum(n.target is aten.cos.default for n in gm.graph.nodes) == 2
    tfw, tbw = torch_partition(copy_graph_module(gm), joint_inputs, **kwargs)
    ffw, fbw = fxcut.min_cut_rematerialization_partition(copy_graph_module(gm), joint_inputs, **kwargs)
    assert ffw.code == tfw.code and fbw.code == tbw.code
    merged = "cos_1" not in tbw.code  # the backward recomputes the forward's cos, merged by CSE
    assert merged == (not versions.current().cse_keeps_backward_apart)


def test_fxcut_failing_where_torch_would_not_falls_back(monkeypatch, fresh_guard) -> None:
    """The issue's 2.12 failure mode -- fxcut reading a config torch does not
    have -- must cost a warning, never the user's compile."""
    def broken(*args, **kwargs):
        raise AttributeError("torch._functorch.config.some_new_option does not exist")

    # the route lowers through the adapter (lower.lower_plan -> TorchAdapter.lower)
    monkeypatch.setattr(fxcut.torchrules.lower, "lower_for_partition", broken)
    monkeypatch.setattr(fxcut.torchrules.lower, "lower_prepared", broken)
    cap = zoo.capture("mlp")
    with pytest.warns(fxcut.FallbackWarning, match="some_new_option does not exist"):
        fw, bw = cap.partition(fxcut.min_cut_rematerialization_partition)
    tfw, tbw = cap.partition()
    assert fw.code == tfw.code and bw.code == tbw.code
    # lowering runs behind the adapter's gate: a failing copy of torch's
    # behaviour is counted as torch having changed
    assert fxcut.partition_counts() == {"torch_changed": 1}


def test_bad_input_still_raises_fxcuts_error(fresh_guard) -> None:
    cap = zoo.capture("mlp")
    with pytest.raises(ValueError, match="num_fwd_outputs"):
        fxcut.min_cut_rematerialization_partition(cap.fresh(), cap.joint_inputs, num_fwd_outputs=10**6)


def test_partial_region_budget_as_torch_under_the_coverage_config() -> None:
    """torch 2.15's activation_memory_budget_require_full_coverage=False lets
    a region annotation on part of the graph set the whole graph's budget;
    before 2.15 (no such option) partial coverage is an error, and before
    2.13 the annotation means nothing."""
    from torch._functorch.partitioners import min_cut_rematerialization_partition as torch_partition

    key = "_region_activation_memory_budget"
    cap = zoo.capture("gpt2")
    has_option = hasattr(functorch_config, "activation_memory_budget_require_full_coverage")
    patch = {"activation_memory_budget_require_full_coverage": False} if has_option else {}
    outcomes = []
    for fn in (torch_partition, fxcut.min_cut_rematerialization_partition):
        gm = cap.fresh()
        for k, node in enumerate(gm.graph.nodes):
            if k % 3:
                node.meta.setdefault("custom", {})[key] = 0.25
        try:
            with functorch_config.patch(activation_memory_budget=1.0, **patch):
                fw, _ = fn(gm, cap.joint_inputs, num_fwd_outputs=cap.num_fwd_outputs, **cap.partition_kwargs)
            outcomes.append(fw.code)
        except RuntimeError as e:  # fxcut's is a RegionBudgetError, a RuntimeError: the same to a caller
            # with torch's key phrase (code matching torch's message matches fxcut's; the rest is worded apart)
            outcomes.append(("RuntimeError", "must cover the entire forward" in str(e)))
    assert outcomes[0] == outcomes[1]
    rules = versions.current()
    partial_ok = has_option or not rules.region_memory_budgets
    assert isinstance(outcomes[0], str) == partial_ok
    if has_option:  # the 0.25 budget applied: fewer values saved than at 1.0
        plain, _ = cap.partition(fxcut.min_cut_rematerialization_partition)
        assert outcomes[0] != plain.code


# --------------------------------------------------------------------------- rules written once


@pytest.mark.parametrize("tag", [None, "is_backward", "is_forward", "must_be_in_forward", "must_be_in_backward"])
@pytest.mark.parametrize("target", [aten.add.Tensor, aten.add_.Tensor, operator.getitem])
def test_must_be_in_forward_and_backward_are_torchs(tag, target) -> None:
    """fxcut.torchrules.ops's one statement of the rule (tag_flags, the C
    rule; extract.py and lower.py both use it) against the running torch's
    own functions, node by node."""
    from torch._functorch import partitioners as tp

    from fxcut.torchrules.extract import placement_rules
    from fxcut.torchrules.ops import is_mutable_op, tag_flags

    graph = fx.Graph()
    x = graph.placeholder("x")
    node = graph.call_function(target, (x, x) if target is not operator.getitem else (x, 0))
    if tag is not None:
        node.meta["partitioner_tag"] = tag
    mutable = is_mutable_op(node.target)
    assert mutable == (target is aten.add_.Tensor)
    bits = tag_flags(tag, mutable)
    assert bool(bits & fxcut._C.F_MUST_BE_IN_FW) == tp._must_be_in_forward(node)
    assert bool(bits & fxcut._C.F_MUST_BE_IN_BW) == tp._must_be_in_backward(node)
    # Module extraction's placement follows the same rule.
    must_fw, must_bw = placement_rules([node])
    assert must_fw[node] == tp._must_be_in_forward(node) and must_bw[node] == tp._must_be_in_backward(node)
    # The lowering's bits follow the same rule.
    arrays = fxcut.torchrules.lower.lower_for_partition(graph, default_facts(), impure_random=True,
                                                        rules=versions.rules_or_nearest())
    assert bool(arrays.flags[1] & fxcut._C.F_MUST_BE_IN_BW) == tp._must_be_in_backward(node)
    assert bool(arrays.flags[1] & fxcut._C.F_MUST_BE_IN_FW) == tp._must_be_in_forward(node)


class _Tag(str):
    """A ``partitioner_tag`` that is a str subclass: torch compares tags with ``==``."""


#: the partitioner tags a node may carry ("absent": no key in meta): none, torch's four, and others
_TAGS = ["absent", None, "is_backward", "is_forward", "must_be_in_forward", "must_be_in_backward", "other",
         "", "Is_Backward", "must_be_in_forward ", _Tag("is_backward"), _Tag("must_be_in_forward"), 3]


def test_tag_flags_are_torchs_placement_rules_on_real_nodes() -> None:
    """``tag_flags`` (``_C.partitioner_tag_flags``: ``F_MUST_BE_IN_FW``,
    ``F_MUST_BE_IN_BW``, ``F_IS_BACKWARD_TAG``), module extraction's
    placement and the lowering's bits, against the running torch's
    ``_must_be_in_forward`` / ``_must_be_in_backward`` / ``_has_tag_is_backward``
    on the nodes of one graph: every tag of :data:`_TAGS` (none, torch's
    own, other values) on every kind of target -- mutable op overloads,
    functional ones, their packets, a higher-order op, a Python function,
    getitem -- so that both rules are seen true and false."""
    from torch._functorch import partitioners as tp

    from fxcut import _C
    from fxcut.torchrules.extract import placement_rules
    from fxcut.torchrules.facts import extraction_marks
    from fxcut.torchrules.ops import is_mutable_op, tag_flags

    graph = fx.Graph()
    x = graph.placeholder("primals_1")
    y = graph.placeholder("primals_2")
    for p in (x, y):
        p.meta["val"] = torch.empty(4, device="meta")
    calls = [
        (aten.add_.Tensor, (x, y)), (aten.copy_.default, (x, y)), (aten.mul_.Scalar, (x, 2.0)),
        (aten.add.Tensor, (x, y)), (aten.sin.default, (x,)), (aten.clone.default, (x,)),
        (aten.add_, (x, y)), (aten.add, (x, y)),            # packets: not OpOverloads, so not mutable to torch
        (operator.add, (x, y)),
    ]
    nodes = []
    for tag in _TAGS:
        for target, args in calls:
            node = graph.call_function(target, args)
            node.meta["val"] = torch.empty(4, device="meta")
            if tag != "absent":
                node.meta["partitioner_tag"] = tag
            nodes.append(node)
    graph.output((x,))

    must_fw, must_bw = placement_rules(nodes)
    arrays = fxcut.torchrules.lower.lower_for_partition(graph, default_facts(), impure_random=True,
                                                        rules=versions.rules_or_nearest())
    marks = extraction_marks(arrays)
    seen = set()
    for node in nodes:
        fw, bw, backward = tp._must_be_in_forward(node), tp._must_be_in_backward(node), tp._has_tag_is_backward(node)
        tag = node.meta.get("partitioner_tag", None)
        mutable = is_mutable_op(node.target)
        assert mutable == (isinstance(node.target, torch._ops.OpOverload) and node.target._schema.is_mutable)
        why = (node.name, node.target, tag)
        bits = tag_flags(tag, mutable)
        assert bits == _C.partitioner_tag_flags(tag, mutable), why
        assert (bool(bits & _C.F_MUST_BE_IN_FW), bool(bits & _C.F_MUST_BE_IN_BW)) == (fw, bw), why
        assert bool(bits & _C.F_IS_BACKWARD_TAG) == backward, why
        # module extraction's placement and the lowering's flags: the same rule, read off the node
        assert (must_fw[node], must_bw[node]) == (fw, bw), why
        flags = arrays.flags[arrays.index[node]]
        assert (bool(flags & _C.F_MUST_BE_IN_FW), bool(flags & _C.F_MUST_BE_IN_BW)) == (fw, bw), why
        assert bool(flags & _C.F_IS_BACKWARD_TAG) == backward, why
        assert bool(marks[arrays.index[node]] & _C.X_MUST_FW) == fw, why
        seen.add((mutable, fw, bw))
    # every case torch's rules tell apart was drawn: a mutation kept in the forward or sent to the
    # backward (never free), a functional op tagged either way or free; both rules are never true at once
    assert seen == {(True, True, False), (True, False, True), (False, True, False), (False, False, True),
                    (False, False, False)}, seen
    assert not any(fw and bw for _, fw, bw in seen)


def test_ban_relaxation_is_the_cores() -> None:
    """MinCutOptions.aggressive() is the core's relaxation (budget.c's
    ``relax``): the four bans torch's aggressive_recomputation lifts are off,
    every other switch is as given, for every combination of switches."""
    import dataclasses
    import itertools

    from fxcut.solve.core import MinCutOptions

    switches = [f.name for f in dataclasses.fields(MinCutOptions) if f.name != "max_dist_from_bw"]
    lifted = {"ban_if_used_far_apart", "ban_if_long_fusible_chains", "ban_if_materialized_backward",
              "ban_if_not_in_allowlist"}
    assert lifted <= set(switches)
    for values in itertools.product((False, True), repeat=len(switches)):
        opts = MinCutOptions(**dict(zip(switches, values)), max_dist_from_bw=7)
        relaxed = opts.aggressive()
        for name, value in zip(switches, values):
            assert getattr(relaxed, name) == (False if name in lifted else value), name
        assert relaxed.max_dist_from_bw == 7
    with pytest.raises(TypeError, match="options has no attribute .ban_if_used_far_apart."):
        fxcut._C.aggressive_options(object())


def test_each_rule_is_written_once() -> None:
    """The strings that name a rule's inputs appear in one module of the
    package each: the triton wrapper op (fxcut.torchrules.ops), inductor's
    fallback_random (fxcut.torchrules.ops), the checkpoint tag names
    (fxcut.solve.arrays, which reads no torch: torch's CheckpointPolicy
    names, checked against torch's enum here and mapped by
    fxcut.torchrules.lower).  The private-name table lists
    the names fxcut relies on, and decides nothing: its rows' names aside."""
    import ast
    from pathlib import Path

    package = Path(fxcut.__file__).resolve().parent
    listed = {row.name for row in versions.PRIVATE_NAMES}
    where: dict[str, set[str]] = {}
    for path in package.rglob("*.py"):
        tree = ast.parse(path.read_text())
        docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                      if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef)) and n.body
                      and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            text = None
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings \
                    and node.value not in listed:
                text = node.value
            elif isinstance(node, ast.Attribute):
                text = node.attr
            for word in ("triton_kernel_wrapper_functional", "fallback_random", "PREFER_CPU_OFFLOAD"):
                if text is not None and word in text:
                    where.setdefault(word, set()).add(str(path.relative_to(package)))
    assert where.get("triton_kernel_wrapper_functional") == {"torchrules/ops.py"}
    assert where.get("fallback_random") == {"torchrules/ops.py"}
    assert where.get("PREFER_CPU_OFFLOAD") == {"solve/arrays.py"}  # the tag names' one copy
    assert set(fxcut.solve.arrays.TAG_NAMES.values()) == {p.name for p in torch.utils.checkpoint.CheckpointPolicy}
    # lowering maps every policy of torch's enum to the tag of that name
    assert {policy.name: tag for policy, tag in fxcut.torchrules.lower.TAG_OF_POLICY.items()} == {
        name: tag for tag, name in fxcut.solve.arrays.TAG_NAMES.items()}
