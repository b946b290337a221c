"""The torch boundary (issue 37): every copy of torch's behaviour behind the one gate, each hole simulated.

1. a DCE/CSE plan that diverges from the graph goes to torch (not re-decided by fxcut);
2. a patch release fxcut has not run its fidelity suite on is untested (torch decides);
3. the ZeRO-3 wrapper walks inside the partition's guard: torch's path runs DeepCompile's walk in Python;
4. an exception of any type inside a copy (the op facts, the hazards, the feature scan, the knapsack's
   NodeInfo, inductor's fusion tables) sends the graph to torch, where before it failed the compile;
5. (inductor's cache key: tests/test_package_shape.py)

and a compile looks the running torch's rules up once, on every path.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch.fx as fx
from torch._functorch import config as functorch_config
from torch.utils.checkpoint import CheckpointPolicy

import fxcut
import zoo
from fxcut.route import guard
from fxcut.torchrules import budget as torch_budget
from fxcut.torchrules import codegen, facts, features, gate, hazards, versions
from fxcut.torchrules import zero3 as torch_zero3
from test_compat_gate import assert_torchs_modules, fallback_warnings, joint_state

aten = torch.ops.aten
MUST_RECOMPUTE = CheckpointPolicy.MUST_RECOMPUTE


@pytest.fixture(autouse=True)
def fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    gate.reset()
    monkeypatch.setattr(codegen, "_self_check", codegen._SelfCheck())
    monkeypatch.setattr(guard, "_warned", set())
    monkeypatch.delenv(guard.VERIFY_ENV, raising=False)
    monkeypatch.delenv(versions.ALLOW_UNTESTED_ENV, raising=False)
    guard.reset_counts()
    yield
    gate.reset()
    guard.reset_counts()


def _raise(exc: type[BaseException]) -> Any:
    def raising(*args: Any, **kwargs: Any) -> Any:
        raise exc("simulated: torch 9.9 changed this")
    return raising


def _partition(gm: fx.GraphModule, cap: Any, fn: Any = None, **kwargs: Any) -> tuple[str, str]:
    fn = fn or fxcut.min_cut_rematerialization_partition
    fw, bw = fn(gm, cap.joint_inputs, num_fwd_outputs=cap.num_fwd_outputs, **{**cap.partition_kwargs, **kwargs})
    return fw.code, bw.code


def _torchs(gm: fx.GraphModule, cap: Any) -> tuple[str, str]:
    return _partition(gm, cap, guard.torchs_own_min_cut())


# --------------------------------------------------------------------------- 1. a diverged DCE/CSE plan


def _with_dead_code(gm: fx.GraphModule) -> fx.GraphModule:
    """``gm`` with a dead node after its first primal (dead-code elimination removes it)."""
    primal = next(n for n in gm.graph.nodes if n.op == "placeholder")
    with gm.graph.inserting_after(primal):
        dead = gm.graph.call_function(aten.neg.default, (primal,))
    dead.meta = {k: v for k, v in primal.meta.items() if k in ("val", "tensor_meta")}
    gm.recompile()
    return gm


def test_a_dce_cse_plan_that_diverges_from_the_graph_goes_to_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch's dead-code elimination leaves a node fxcut's plan removed
    (a torch whose pass changed): the graph after the plan is not the one
    lowered.  Before, fxcut decided again on the half-rewritten graph; now
    the graph is restored and torch's partitioner decides, one warning."""
    cap = zoo.capture("mlp")
    monkeypatch.setattr(fx.Graph, "eliminate_dead_code", lambda self, *a, **k: False)
    expected = _torchs(_with_dead_code(cap.fresh()), cap)
    gm = _with_dead_code(cap.fresh())
    with fallback_warnings() as caught:
        got = _partition(gm, cap)
    assert got == expected
    assert len(caught) == 1 and "dead-code elimination and CSE" in str(caught[0].message)
    assert "PreparationMismatch" in str(caught[0].message)
    assert fxcut.partition_counts() == {"torch_changed": 1}


def test_a_dce_cse_plan_that_holds_is_fxcuts(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same graph with torch's pass as it is: fxcut decides, as torch does."""
    cap = zoo.capture("mlp")
    expected = _torchs(_with_dead_code(cap.fresh()), cap)
    with fallback_warnings() as caught:
        assert _partition(_with_dead_code(cap.fresh()), cap) == expected
    assert caught == [] and fxcut.partition_counts() == {"fxcut": 1}


# --------------------------------------------------------------------------- 2. untested patch releases


def _other_patch(version: str) -> str:
    major, minor, patch = versions.parse(version)  # type: ignore[misc]
    return f"{major}.{minor}.{patch + 1}"


def test_a_patch_release_fxcut_is_not_tested_on_goes_to_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    tested = versions.current()
    assert tested is not None
    monkeypatch.setattr(versions, "installed_version", lambda: _other_patch(tested.tested))
    assert versions.current() is None
    cap = zoo.capture("mlp")
    with pytest.warns(fxcut.UntestedTorchWarning, match=r"is not a release fxcut is tested on .*2\.13\.0"):
        assert _partition(cap.fresh(), cap) == _torchs(cap.fresh(), cap)
    assert fxcut.partition_counts() == {"torch_untested": 1}
    # allowed anyway: fxcut decides with the rules of its major.minor release
    assert versions.rules_or_nearest() is tested
    assert _partition(cap.fresh(), cap, allow_untested=True) == _torchs(cap.fresh(), cap)
    assert fxcut.partition_counts() == {"torch_untested": 1, "fxcut": 1}


@pytest.mark.parametrize("tag", ["", "+cpu", "+cu130"])
def test_a_tested_release_with_a_local_build_tag_is_tested(monkeypatch: pytest.MonkeyPatch, tag: str) -> None:
    tested = versions.current()
    assert tested is not None
    monkeypatch.setattr(versions, "installed_version", lambda: tested.tested + tag)
    assert versions.current() is tested
    for release in versions.RELEASES.values():
        assert versions.rules_for(release.tested + tag) is release
        assert versions.rules_for(_other_patch(release.tested) + tag) is None


# --------------------------------------------------------------------------- 3. the ZeRO-3 walk in the guard


def _zero3_case() -> tuple[Any, list[tuple[int, int, Any]]]:
    cap = zoo.capture("llama_bf16")
    n_primals = len(fxcut.torchrules.adapter.primal_placeholders(cap.gm.graph))
    return cap, [(k, k, None) for k in range(n_primals)]


def _tags(gm: fx.GraphModule) -> dict[str, Any]:
    return {n.name: n.meta.get("recompute") for n in gm.graph.nodes}


def test_the_python_walk_tags_what_the_c_walk_tags() -> None:
    cap, params = _zero3_case()
    c_gm, py_gm = cap.fresh(), cap.fresh()
    positions = [p for p, _, _ in params]
    c_tagged = torch_zero3.c_walk(c_gm.graph, positions)
    py_tagged = torch_zero3.reference_walk(py_gm.graph, positions)
    assert [n.name for n in c_tagged] == [n.name for n in py_tagged]
    assert len(c_tagged) > 0
    assert _tags(c_gm) == _tags(py_gm)
    assert {n.name: n.meta.get("ac_graph_id") for n in c_gm.graph.nodes} == {
        n.name: n.meta.get("ac_graph_id") for n in py_gm.graph.nodes}


def _wrapped_result(cap: Any, params: Any) -> tuple[tuple[str, str], dict[str, Any]]:
    gm = cap.fresh()
    codes = _partition(gm, cap, fxcut.get_wrapped_partitioner(True, params))
    return codes, _tags(gm)


def test_a_gap_in_the_c_walk_sends_the_graph_to_torch_after_the_python_walk(monkeypatch: pytest.MonkeyPatch) -> None:
    """The walk's lowering fails (a torch whose nodes fxcut cannot read):
    before, the wrapper's walk ran outside the guard and the compile failed;
    now the guard restores the graph, DeepCompile's walk runs in Python and
    torch's partitioner cuts -- the same tags and modules as fxcut's path."""
    cap, params = _zero3_case()
    expected = _wrapped_result(cap, params)
    guard.reset_counts()  # the partition below alone is counted
    monkeypatch.setattr(torch_zero3, "lower_structure", _raise(RuntimeError))
    with fallback_warnings() as caught:
        got = _wrapped_result(cap, params)
    assert got == expected
    assert any(MUST_RECOMPUTE == t for t in got[1].values())
    assert len(caught) == 1 and "ZeRO-3 parameter-alias walk" in str(caught[0].message)
    assert fxcut.partition_counts() == {"torch_changed": 1}


def test_on_an_untested_torch_the_walk_runs_in_python_before_torchs_partitioner(
        monkeypatch: pytest.MonkeyPatch) -> None:
    cap, params = _zero3_case()
    expected = _wrapped_result(cap, params)
    walked = cap.fresh()  # the walk alone on the tested torch (in C), before the partition's DCE/CSE
    c_tagged = [n.name for n in fxcut.recompute_param_aliases(walked.graph, params)]
    guard.reset_counts()  # the partition below alone is counted
    calls: list[str] = []
    monkeypatch.setattr(torch_zero3, "c_walk", lambda *a, **k: calls.append("c") or [])
    tested = versions.current()
    assert tested is not None
    monkeypatch.setattr(versions, "installed_version", lambda: _other_patch(tested.tested))
    with pytest.warns(fxcut.UntestedTorchWarning):
        got = _wrapped_result(cap, params)
    assert got == expected and calls == []
    assert fxcut.partition_counts() == {"torch_untested": 1}
    # the walk alone (DeepSpeed's replacement for its own), on an untested torch: in Python too
    gm = cap.fresh()
    tagged = fxcut.recompute_param_aliases(gm.graph, params)
    assert calls == [] and tagged and [n.name for n in tagged] == c_tagged and _tags(gm) == _tags(walked)
    # and the partitions' tags: every node left after their dead-code elimination and CSE tagged alike
    assert expected[1].items() <= _tags(gm).items()


def test_bad_param_indices_are_the_users_error_inside_the_guard() -> None:
    cap, params = _zero3_case()
    gm = cap.fresh()
    before = joint_state(gm), _tags(gm)
    wrapped = fxcut.get_wrapped_partitioner(True, [*params, (len(params), 0, None)])
    with pytest.raises(IndexError, match=rf"param_indices\[{len(params)}\]"):
        wrapped(gm, cap.joint_inputs, num_fwd_outputs=cap.num_fwd_outputs)
    assert (joint_state(gm), _tags(gm)) == before
    assert fxcut.partition_counts() == {}


# --------------------------------------------------------------------------- 4. any exception inside a copy


_COPIES: dict[str, tuple[Any, str, type[BaseException], str]] = {
    # the op facts behind random draws and mutated inputs (every partition asks them): a TypeError
    "hazards": (hazards, "mutated_inputs", TypeError, "node facts"),
    # the scan for what fxcut does not model (every partition runs it): a ValueError
    "feature scan": (features, "unmodelled_feature", ValueError, "unmodelled-feature scan"),
}


@pytest.mark.parametrize("name", sorted(_COPIES))
def test_an_exception_of_any_type_inside_a_copy_sends_the_graph_to_torch(monkeypatch: pytest.MonkeyPatch,
                                                                        name: str) -> None:
    """Before, TypeError and ValueError (not in the guard's gaps) inside these
    copies failed the compile; now the gate turns them into a gap."""
    owner, attr, exc, copy_name = _COPIES[name]
    monkeypatch.setattr(owner, attr, _raise(exc))
    messages = assert_torchs_modules(("mlp", "gpt2"))
    assert len(messages) == 1 and f"the {copy_name}" in messages[0] and exc.__name__ in messages[0], messages
    assert fxcut.partition_counts() == {"torch_changed": 2}


def test_a_changed_knapsack_dispatch_sends_the_graph_to_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch's own knapsack dispatch (``dynamic_memory_budget_dp``): fxcut
    builds torch's NodeInfo for it; a NodeInfo that changed its fields (a
    TypeError in fxcut's call) sends the graph to torch, whose own call works."""
    cap = zoo.capture("gpt2")
    with functorch_config.patch(activation_memory_budget=0.3,
                                activation_memory_budget_solver="dynamic_memory_budget_dp"):
        expected = _torchs(cap.fresh(), cap)
        monkeypatch.setattr(torch_budget, "_torch_node_info", _raise(TypeError))
        with fallback_warnings() as caught:
            got = _partition(cap.fresh(), cap)
    assert got == expected
    assert len(caught) == 1 and "memory-budget rules" in str(caught[0].message), [str(w.message) for w in caught]
    assert fxcut.partition_counts() == {"torch_changed": 1}


def test_a_changed_fusion_table_sends_a_plan_to_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan on inductor's memory model reads inductor's own tables: a
    RuntimeError there gives torch's partition with one warning, not a
    failed compile."""
    cap = zoo.capture("mlp")
    expected = _torchs(cap.fresh(), cap)
    monkeypatch.setattr(facts, "fusion_kinds", _raise(RuntimeError))  # where the inductor model reads it
    fn = fxcut.planned_partitioner(0.0, memory_model="inductor", check=None)
    with fallback_warnings() as caught:
        got = _partition(cap.fresh(), cap, fn)
    assert got == expected
    assert len(caught) == 1 and "inductor's fusion tables" in str(caught[0].message)
    assert fxcut.partition_counts() == {"torch_changed": 1}


def test_a_bad_input_is_still_fxcuts_named_error_before_any_copy() -> None:
    cap = zoo.capture("mlp")
    gm = cap.fresh()
    before = joint_state(gm)
    with pytest.raises(TypeError, match=r"static_lifetime_input_indices\[0\] = 'x'"):
        fxcut.min_cut_rematerialization_partition(gm, cap.joint_inputs, num_fwd_outputs=cap.num_fwd_outputs,
                                                  static_lifetime_input_indices=["x"])
    with pytest.raises(ValueError, match="safe_budget must be True, False or None"):
        fxcut.planned_partitioner(0.5)(gm, cap.joint_inputs, num_fwd_outputs=cap.num_fwd_outputs,
                                       safe_budget="bogus")
    assert joint_state(gm) == before and fxcut.partition_counts() == {}


# --------------------------------------------------------------------------- one lookup per compile


@pytest.fixture
def lookups(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    running = versions.running

    def counted() -> tuple[versions.Rules, bool]:
        calls.append(1)
        return running()

    monkeypatch.setattr(versions, "running", counted)
    return calls


def test_a_partition_looks_the_rules_up_once(lookups: list[int]) -> None:
    cap = zoo.capture("gpt2")
    _partition(cap.fresh(), cap)
    assert len(lookups) == 1


def test_a_plan_on_inductors_model_looks_the_rules_up_once(lookups: list[int]) -> None:
    """Before, the inductor model's fusion kinds looked the rules up again."""
    cap = zoo.capture("gpt2")
    fn = fxcut.planned_partitioner(0.0, memory_model="inductor", check=None)
    _partition(cap.fresh(), cap, fn)
    assert len(lookups) == 1 and fn.planner.last is not None and fn.planner.last.memory_model == "inductor"


def test_the_zero3_wrapper_looks_the_rules_up_once(lookups: list[int]) -> None:
    """Before, the wrapper's snapshot looked them up and the partition again."""
    cap, params = _zero3_case()
    _partition(cap.fresh(), cap, fxcut.get_wrapped_partitioner(True, params))
    assert len(lookups) == 1


def test_deepcompiles_inductor_path_looks_the_rules_up_once(lookups: list[int]) -> None:
    """DeepCompile wrapping a partition function that is not fxcut's (here a
    plain function handing the graph to fxcut's, as inductor's partition_fn
    does with its override): the walk's lookup serves the partition."""
    cap, params = _zero3_case()

    def not_fxcuts(gm: fx.GraphModule, joint_inputs: Any, **kwargs: Any) -> Any:
        return fxcut.min_cut_rematerialization_partition(gm, joint_inputs, **kwargs)

    from fxcut.zero3 import wrap_partitioner

    wrapped = wrap_partitioner(not_fxcuts, z3_partition=True, param_indices=params)
    gm = cap.fresh()
    codes = _partition(gm, cap, wrapped)
    assert len(lookups) == 1
    assert (codes, _tags(gm)) == _wrapped_result(cap, params)


def test_a_torch_compile_through_fxcuts_backends_looks_the_rules_up_once_per_graph(lookups: list[int]) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    x = torch.randn(5, 8)
    for backend in (fxcut.aot_backend(), fxcut.aot_backend(zero3_params=model), fxcut.aot_backend(memory_budget=0.0)):
        torch._dynamo.reset()
        lookups.clear()
        torch.compile(copy.deepcopy(model), backend=backend)(x).sum().backward()
        assert len(lookups) == 1
