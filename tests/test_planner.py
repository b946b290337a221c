"""fxcut.planned_partitioner and the C planner (csrc/plan.c).

- exact mode equals the optimum of a brute force over every decision, on
  random joint graphs, with an independent pure-Python simulator of the
  planner's own memory semantics, and with the memory model's simulator
  enumerated decision by decision;
- on zoo models: peak monotonic in the budget, b=1 dominates torch's
  default decision, one training step through a plan matches eager;
- region budgets that differ plan where torch raises;
- bad options raise ValueError naming the option; the default path is
  untouched (its fidelity tests live elsewhere and still pass).
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

import fxcut
from fxcut import _C
from fxcut.route import build
from fxcut.torchrules import build as torch_build
from fxcut.torchrules import extract
from fxcut.route.decide import decide_plan, plan_inputs
from fxcut.route.lower import lower_plan
from fxcut.route.plan import make_plan
from fxcut.planned import PeakPlanner
from fxcut.tools.decisions import torch_now
from fxcut.solve.planner import PlanProblem, pick, saved_mask

sys.path.insert(0, str(Path(__file__).parent))
import zoo  # noqa: E402
from random_joint import random_joint  # noqa: E402
from memory_reference import reference_peaks  # noqa: E402
from test_memory_model import _consistent_getitems  # noqa: E402
from torch.utils._ordered_set import OrderedSet  # noqa: E402
from training import eager_step, train_step  # noqa: E402

# --------------------------------------------------------------------------- helpers


def _problem(module: torch.fx.GraphModule, num_fwd_outputs: int, statics: Any = None,
             planner: PeakPlanner | None = None) -> tuple[PlanProblem, Any]:
    plan = make_plan(module, torch_now(), num_fwd_outputs=num_fwd_outputs, static_lifetime_input_indices=statics,
                     objective=_Keep())
    chosen = decide_plan(plan, lower_plan(plan))
    return _plan_problem(plan, chosen, planner), chosen


def _plan_problem(plan: Any, chosen: Any, planner: PeakPlanner | None = None) -> PlanProblem:
    """The search's problem ``planner`` (a default PeakPlanner when None)
    makes of ``plan``'s decision ``chosen``, its inputs made as the route makes them."""
    planner = planner or PeakPlanner()
    return planner.problem(plan_inputs(plan, planner, chosen, plan.torch.unsafe(chosen.arrays)))


class _Keep:
    """A chooser that keeps the default decision (to get the problem)."""

    def choose_saved(self, plan: Any, decision: Any) -> list[int]:
        return list(decision.saved)


def _free_reachable(prob: PlanProblem) -> list[int]:
    """FREE nodes the backward can reach (an independent walk)."""
    a = prob.arrays
    seen: set[int] = set()
    todo = [o for o in a.outputs[prob.num_fwd_outputs:] if o >= 0]
    while todo:
        x = todo.pop()
        if x in seen:
            continue
        seen.add(x)
        if prob.roles[x] in (_C.PLAN_ROLE_BACKWARD, _C.PLAN_ROLE_RECOMPUTE, _C.PLAN_ROLE_FREE):
            todo.extend(a.in_idx[a.in_ptr[x]:a.in_ptr[x + 1]])
    return sorted(i for i in seen if prob.roles[i] == _C.PLAN_ROLE_FREE)


def _brute_front(points: list[tuple[int, int]]) -> list[tuple[int, int]]:
    best: list[tuple[int, int]] = []
    for p, c in sorted(set(points)):
        if not best or c < best[-1][1]:
            best.append((p, c))
    return best


def _random_cases(count: int, max_free: int = 10) -> list[int]:
    seeds = []
    for seed in range(400):
        j = random_joint(seed, n_fw=12)
        try:
            prob, chosen = _problem(j.module, j.num_fwd_outputs, j.static_lifetime_input_indices)
        except Exception:
            continue
        if chosen.stage == "no_backward":
            continue
        k = len(_free_reachable(prob))
        if 3 <= k <= max_free:
            seeds.append(seed)
        if len(seeds) == count:
            break
    return seeds


RANDOM_SEEDS = _random_cases(12)
#: small enough to build torch's modules for every decision (at most 2^6)
ORACLE_SEEDS = _random_cases(4, max_free=6)


# --------------------------------------------------------------------------- exact mode


def _reference_point(plan: Any, prob: PlanProblem, mask: bytes) -> tuple[int, int]:
    """(peak, recompute flops) of the decision ``mask`` measured on the
    modules torch's own extraction builds for it (tests/memory_reference.py
    walks them), not by the C memory model: the saved set is the model's
    normalised one (which values the backward reads), everything else torch's."""
    a = prob.arrays
    saved = [a.nodes[i] for i in range(len(a)) if prob.simulate(mask).saved[i]]
    fw, bw = torch_build.torch_build_modules(plan.joint_module, extract.split_saved(saved), prob.num_fwd_outputs,
                                       OrderedSet(), False, False, plan.rules)
    fw_peak, bw_peak = reference_peaks(plan.joint_module, fw, bw)
    index = {node.name: i for i, node in enumerate(a.nodes)}
    dep = bytearray(len(a))  # tangent-dependent: the backward's own work, not recompute
    for i in range(len(a)):
        dep[i] = bool(a.kind[i] == _C.KIND_PLACEHOLDER and a.flags[i] & (_C.F_TANGENT | _C.F_BWD_SEED)) or any(
            dep[u] for u in a.in_idx[a.in_ptr[i]:a.in_ptr[i + 1]])
    flops = sum(prob.flops[index[n.name]] for n in bw.graph.nodes
                if n.op == "call_function" and n.name in index and not dep[index[n.name]])
    return max(fw_peak, bw_peak), flops


@pytest.mark.parametrize("seed", ORACLE_SEEDS)
def test_exact_mode_is_the_frontier_of_torchs_built_modules(seed: int) -> None:
    """Exact mode against an independent oracle: every decision over the
    free values, each measured on torch's own forward/backward modules."""
    j = random_joint(seed, n_fw=12)
    _consistent_getitems(j.module)
    plan = make_plan(j.module, torch_now(), num_fwd_outputs=j.num_fwd_outputs,
                     static_lifetime_input_indices=j.static_lifetime_input_indices, objective=_Keep())
    chosen = decide_plan(plan, lower_plan(plan))
    build.build(plan, chosen, list(chosen.saved), None)  # torch's DCE/CSE on the module, as the route does
    prob = _plan_problem(plan, chosen)
    free = _free_reachable(prob)
    points = []
    for bits in itertools.product((0, 1), repeat=len(free)):
        m = bytearray(len(prob.arrays))
        for i, b in zip(free, bits):
            m[i] = b
        points.append(_reference_point(plan, prob, bytes(m)))
    front = prob.frontier([], exact_max_free=16)
    assert front.exact and front.n_free == len(free)
    assert list(zip(front.peak_bytes, front.recompute_flops)) == _brute_front(points)


@pytest.mark.parametrize("seed", RANDOM_SEEDS[:6])
def test_exact_mode_is_the_brute_force_frontier_memory_model(seed: int) -> None:
    j = random_joint(seed, n_fw=12)
    prob, _ = _problem(j.module, j.num_fwd_outputs, j.static_lifetime_input_indices)
    free = _free_reachable(prob)
    points = []
    for bits in itertools.product((0, 1), repeat=len(free)):
        m = bytearray(len(prob.arrays))
        for i, b in zip(free, bits):
            m[i] = b
        s = prob.simulate(bytes(m))
        points.append((s.peak_bytes, s.recompute_flops))
    front = prob.frontier([], exact_max_free=16)
    assert front.exact
    assert list(zip(front.peak_bytes, front.recompute_flops)) == _brute_front(points)
    # the least cost under every limit: pick() is the brute-force optimum
    torch_peak = max(p for p, _ in points)
    for b in (0.0, 0.3, 0.7, 1.0):
        limit = front.peak_bytes[0] + b * (torch_peak - front.peak_bytes[0])
        best = min(c for p, c in points if p <= limit)
        assert front.recompute_flops[pick(front, b, torch_peak)] == best


# --------------------------------------------------------------------------- zoo models

ZOO = ["gpt2", "llama", "vit", "moe", "llama_bf16", "gpt2_ckpt"]


def _plan(name: str, budget: float, **options: Any) -> Any:
    # The default options: the search stops at its work budget (a count, the
    # same on every machine), the time limit is a safety net it never meets.
    cap = zoo.capture(name)
    fn = fxcut.planned_partitioner(budget, **options)
    fn(cap.fresh(), cap.joint_inputs, num_fwd_outputs=cap.num_fwd_outputs, **cap.partition_kwargs)
    assert not fn.planner.last.timed_out
    return fn.planner.last, fn.planner.last_frontier


@pytest.mark.parametrize("name", ZOO)
def test_peak_is_monotonic_and_b1_dominates_torch(name: str) -> None:
    plans = [_plan(name, b)[0] for b in (0.0, 0.3, 0.7, 1.0)]
    peaks = [p.peak_bytes for p in plans]
    assert peaks == sorted(peaks), peaks
    top = plans[-1]
    assert top.peak_bytes <= top.torch_peak_bytes
    assert top.recompute_flops <= top.torch_recompute_flops
    assert plans[0].peak_bytes == plans[0].lowest_peak_bytes <= top.torch_peak_bytes


def test_separate_calls_cut_short_by_the_work_budget_stay_monotonic() -> None:
    """A work budget that stops llama's search long before it would end
    (~1/15 of the evaluations it needs): separately made calls for four
    budgets stop at the same point (same evaluations, same frontier), so
    their peaks are ordered as the budgets, however loaded the machine."""
    runs = [_plan("llama", b, max_work=2_000_000) for b in (0.0, 0.3, 0.7, 1.0)]
    fronts = [f for _, f in runs]
    assert all(f.out_of_work and not f.timed_out for f in fronts)
    assert len({(f.n_evals, f.work, tuple(f.peak_bytes), tuple(f.recompute_flops)) for f in fronts}) == 1
    peaks = [c.peak_bytes for c, _ in runs]
    assert peaks == sorted(peaks) and peaks[0] < peaks[-1], peaks
    # the full default search reaches lower: the budget did cut it short
    assert _plan("llama", 0.0)[0].peak_bytes < peaks[0]


@pytest.mark.parametrize("name", list(zoo.CASES))
@pytest.mark.parametrize("budget", [0.0, 1.0])
def test_training_step_matches_eager(name: str, budget: float) -> None:
    case = zoo.CASES[name]
    model, make_inputs, loss_fn = case.build()
    loss, grads = train_step(model, make_inputs(), loss_fn, fxcut.planned_partitioner(budget),
                             **case.step_options())
    model, make_inputs, loss_fn = case.build()
    ref_loss, ref_grads = eager_step(model, make_inputs(), loss_fn, **case.step_options())
    torch.testing.assert_close(loss, ref_loss)
    assert grads.keys() == ref_grads.keys()
    for k in grads:
        if ref_grads[k] is None:
            assert grads[k] is None
        else:
            torch.testing.assert_close(grads[k], ref_grads[k], msg=k)


def test_plan_saves_what_torch_must_save_and_recomputes_what_it_must() -> None:
    cap = zoo.capture("llama_sac")
    prob, chosen = _problem(cap.fresh(), cap.num_fwd_outputs, cap.partition_kwargs.get(
        "static_lifetime_input_indices"))
    choice, _ = _plan("llama_sac", 0.0)
    sim = prob.simulate(saved_mask(len(prob.arrays), choice.saved))
    saved = set(i for i in range(len(prob.arrays)) if sim.saved[i])
    tag = chosen.decision.tag
    needed = set(_free_reachable(prob)) | saved
    for i in range(len(prob.arrays)):
        if tag[i] == _C.TAG_MUST_SAVE and prob.roles[i] == _C.PLAN_ROLE_SAVE and i in needed:
            assert i in saved
        if prob.roles[i] == _C.PLAN_ROLE_RECOMPUTE:
            assert i not in saved


# --------------------------------------------------------------------------- region budgets


def test_region_budgets_each_their_limit() -> None:
    import torch.fx.traceback as fx_traceback

    key = getattr(fx_traceback, "MEMORY_BUDGET_ANNOTATION_KEY", None)
    if key is None:
        pytest.skip("this torch has no region budgets (2.12)")
    cap = zoo.capture("gpt2")

    def annotated() -> torch.fx.GraphModule:
        gm = cap.fresh()
        ops = [n for n in gm.graph.nodes if n.op == "call_function"]
        for k, n in enumerate(ops):
            n.meta["custom"] = {key: 0.0 if k < len(ops) // 3 else 1.0}
        return gm

    with pytest.raises(RuntimeError, match="conflicting budgets"):
        fxcut.min_cut_rematerialization_partition(annotated(), cap.joint_inputs, num_fwd_outputs=cap.num_fwd_outputs,
                                                  **cap.partition_kwargs)
    fn = fxcut.planned_partitioner(1.0)
    fw, bw = fn(annotated(), cap.joint_inputs, num_fwd_outputs=cap.num_fwd_outputs, **cap.partition_kwargs)
    choice = fn.planner.last
    assert set(choice.regions) == {0.0, 1.0}
    # the budget-0 region lowered the peak below torch's; the budget-1 region kept it
    assert choice.peak_bytes == choice.regions[1.0] <= choice.regions[0.0] < choice.torch_peak_bytes
    assert fw.graph is not bw.graph


# --------------------------------------------------------------------------- bad options


@pytest.mark.parametrize("kwargs, name", [
    ({"memory_budget": 1.5}, "memory_budget"),
    ({"memory_budget": "0.5"}, "memory_budget"),
    ({"memory_budget": True}, "memory_budget"),
    ({"exact_max_candidates": -1}, "exact_max_candidates"),
    ({"exact_max_candidates": 2.5}, "exact_max_candidates"),
    ({"time_limit": 0}, "time_limit"),
    ({"seed_budgets": [2.0]}, "seed_budgets"),
])
def test_bad_options_raise_naming_them(kwargs: dict[str, Any], name: str) -> None:
    with pytest.raises(ValueError, match=name):
        fxcut.planned_partitioner(**kwargs)


def test_bad_core_input_names_it() -> None:
    cap = zoo.capture("mlp")
    prob, _ = _problem(cap.fresh(), cap.num_fwd_outputs)
    bad = bytearray(prob.roles)
    bad[-1] = 9
    with pytest.raises(ValueError, match=r"role\[%d\]" % (len(bad) - 1)):
        _C.plan_simulate(prob.arrays, num_fwd_outputs=prob.num_fwd_outputs, role=bytes(bad),
                         saved=bytes(len(bad)))
    with pytest.raises(ValueError, match="seeds"):
        _C.plan_frontier(prob.arrays, num_fwd_outputs=prob.num_fwd_outputs, role=prob.roles, seeds=b"\0")
    with pytest.raises(ValueError, match="time_limit"):
        _C.plan_frontier(prob.arrays, num_fwd_outputs=prob.num_fwd_outputs, role=prob.roles, time_limit=0.0)


def test_graph_left_untouched_on_error() -> None:
    cap = zoo.capture("gpt2")
    gm = cap.fresh()
    before = gm.code

    class Boom:
        def choose_saved(self, *a: Any, **k: Any) -> list[int]:
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        fxcut.min_cut_rematerialization_partition(gm, cap.joint_inputs, num_fwd_outputs=cap.num_fwd_outputs,
                                                  objective=Boom(), **cap.partition_kwargs)
    assert gm.code == before


# --------------------------------------------------------------------------- the integrations


@pytest.fixture
def fresh_compile() -> Any:
    torch._dynamo.reset()
    with torch._inductor.config.patch(fx_graph_cache=False), \
            torch._functorch.config.patch(enable_autograd_cache=False):
        yield
    torch._dynamo.reset()


def _compiled_matches_eager(backend: Any, name: str = "gpt2", **cfg: Any) -> None:
    from fxcut.tools.models import build_model

    model, make_inputs, loss_fn = build_model(name, **cfg)
    inputs = make_inputs()
    ref = loss_fn(model(*inputs), inputs)
    ref.backward()
    ref_grads = {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    compiled = torch.compile(model, backend=backend)
    loss = loss_fn(compiled(*inputs), inputs)
    loss.backward()
    torch.testing.assert_close(loss, ref, rtol=1e-4, atol=1e-5)
    for k, p in model.named_parameters():
        if k in ref_grads:
            torch.testing.assert_close(p.grad, ref_grads[k], rtol=1e-4, atol=1e-5, msg=k)


def test_aot_backend_memory_budget_plans(fresh_compile: Any, monkeypatch: Any) -> None:
    import fxcut.planned as plan_mod

    planned: list[float] = []
    plan = plan_mod.PeakPlanner.plan

    def spy(self: Any, *a: Any, **k: Any) -> Any:
        planned.append(self.memory_budget)
        return plan(self, *a, **k)

    monkeypatch.setattr(plan_mod.PeakPlanner, "plan", spy)
    _compiled_matches_eager(fxcut.aot_backend(memory_budget=0.3), layers=1)
    assert planned == [0.3]


def test_inductor_backend_memory_budget_option() -> None:
    from fxcut.integrations.torch_compile import InductorPartitioner

    p = InductorPartitioner([], None, 0.25)
    assert p.memory_budget == 0.25 and p.uuid()[-2:] == (0.25, None)
    with pytest.raises(ValueError, match="memory_budget"):
        fxcut.inductor_backend(memory_budget=2)
    with pytest.raises(ValueError, match="memory_budget"):
        fxcut.aot_backend(memory_budget="low")
    with pytest.raises(ValueError, match="verify"):
        fxcut.aot_backend(memory_budget=0.5, verify=True)


def test_cli_plan_budget(capsys: Any) -> None:
    from fxcut.tools import cli

    assert cli.main(["partition", "--model", "gpt2", "--layers", "1", "--plan-budget", "0", "--json"]) == 0
    import json

    out = json.loads(capsys.readouterr().out)
    assert out["extra"]["plan_budget"] == 0.0 if "extra" in out else True
    assert cli.main(["partition", "--model", "mlp", "--plan-budget", "3"]) == 2


def test_deepspeed_install_memory_budget() -> None:
    pytest.importorskip("deepspeed.compile.backend")
    import deepspeed.compile.backend as ds_backend

    import fxcut.integrations.deepspeed as fxds

    with pytest.raises(ValueError, match="memory_budget"):
        fxds.install(memory_budget=-1)
    assert not fxds.installed()
    fxds.install(memory_budget=0.5)
    try:
        fn = ds_backend.min_cut_rematerialization_partition
        assert fn.planner.memory_budget == 0.5  # type: ignore[attr-defined]
        fxds.install()  # back to torch's decision
        assert ds_backend.min_cut_rematerialization_partition is fxcut.min_cut_rematerialization_partition
    finally:
        fxds.uninstall()


def test_zero3_walk_values_are_recomputed_not_saved() -> None:
    from fxcut.zero3 import recompute_param_aliases

    cap = zoo.capture("llama_bf16")
    gm = cap.fresh()
    tagged = {n.name for n in recompute_param_aliases(gm.graph, cap.param_indices)}
    assert tagged
    fn = fxcut.planned_partitioner(0.5)
    fw, bw = fn(gm, cap.joint_inputs, num_fwd_outputs=cap.num_fwd_outputs, **cap.partition_kwargs)
    saved = {n.name for n in bw.graph.nodes if n.op == "placeholder"}
    assert not (saved & tagged)  # the walk's casts / aliases are recomputed in the backward
    assert {n.name for n in bw.graph.nodes if n.op == "call_function"} & tagged


def test_aot_backend_zero3_with_memory_budget_matches_eager(fresh_compile: Any) -> None:
    _compiled_matches_eager(fxcut.aot_backend(zero3_params=True, memory_budget=0.0), "llama", layers=1)
