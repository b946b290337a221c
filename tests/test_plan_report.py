"""What fxcut decided, where users look (issue 38, item 1): ``fxcut.last_plans()``,
``fxcut.partition_counts()`` by path, one INFO line per planned graph in human
units, and an ``fxcut_partition`` artifact in torch's structured trace
(``TORCH_TRACE``) for every graph fxcut partitions."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from torch._functorch import config as functorch_config

import fxcut
import zoo
from fxcut.route import guard, report
from fxcut.torchrules import trace, versions

PACKAGE = Path(fxcut.__file__).resolve().parent


@pytest.fixture(autouse=True)
def _fresh() -> Any:
    guard.reset_counts()
    report.reset_plans()
    yield
    guard.reset_counts()
    report.reset_plans()


def _plan(case: str, budget: float, **options: Any) -> Any:
    cap = zoo.capture(case)
    fn = fxcut.planned_partitioner(budget, **options)
    cap.partition(fn)
    return fn


def test_last_plans_reports_each_planned_graph_against_torch_at_b_and_at_its_default() -> None:
    fn = _plan("mlp", 0.5)
    half = _plan("mlp", 0.55)  # not a seed budget: torch's decision at b is made for the report
    plans = fxcut.last_plans()
    assert [type(p) for p in plans] == [fxcut.PlanReport] * 2
    first, second = plans
    assert second.graph > first.graph and first.compile_id is None  # no compile around a direct call
    choice = fn.planner.last
    assert first.choice is choice and first.budget == 0.5 and first.nodes == len(fn.planner.last_problem.arrays)
    assert (first.peak_bytes, first.recompute, first.saved) == (choice.peak_bytes, choice.recompute_flops,
                                                               len(choice.saved))
    assert (first.memory_model, first.cost) == ("unfused", "flops")
    # torch's own decisions on the plan's model: at b (a seed budget here) and at its default
    assert (first.torch_peak_bytes, first.torch_recompute) == choice.torch_points[0.5]
    assert (first.torch_default_peak_bytes, first.torch_default_recompute) == choice.torch_points[1.0]
    # at b=0.55: torch's decision at activation_memory_budget=0.55, simulated on the same model
    prob = half.planner.last_problem
    torch_saved = _torch_saved_at("mlp", 0.55, prob.arrays)
    assert (second.torch_peak_bytes, second.torch_recompute) == prob.model_point(torch_saved)
    data = json.loads(json.dumps(first.as_dict()))
    assert data["torch_at_budget"] == {"peak_bytes": first.torch_peak_bytes, "recompute": first.torch_recompute}
    assert data["check"] is None and data["exact"] is None and data["budget_bounds"] == "the modelled peak"


def _torch_saved_at(case: str, budget: float, arrays: Any) -> list[int]:
    """The node indices torch's own partitioner saves at ``budget``."""
    cap = zoo.capture(case)
    with functorch_config.patch(activation_memory_budget=budget):
        fw, _ = cap.partition(guard.torchs_own_min_cut())
    names = [str(a) for a in list(fw.graph.nodes)[-1].args[0][cap.num_fwd_outputs:]]
    index = {arrays.name(i): i for i in range(len(arrays))}
    return sorted(index[n] for n in names)


def test_the_exact_solvers_certificate_is_on_the_report() -> None:
    pytest.importorskip("highspy")
    _plan("mlp", 0.0, solver="exact", exact_time_limit=30.0)
    (got,) = fxcut.last_plans()
    exact = got.as_dict()["exact"]
    assert exact["proven_optimal"] and exact["gap"] == 0.0 and exact["lower_bound_bytes"] == got.peak_bytes
    assert "exact solver: peak >= " in got.summary() and "lowest peak proven" in got.summary()


def test_one_info_line_per_planned_graph_in_human_units(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="fxcut"):
        _plan("gpt2", 0.5, memory_model="inductor", check=None)
    lines = [r.getMessage() for r in caplog.records if r.name == "fxcut" and r.levelno == logging.INFO]
    assert len(lines) == 1, lines
    (line,) = lines
    assert line == str(fxcut.last_plans()[-1])
    assert line.startswith("plan: graph ") and "b=0.5 on the inductor model" in line
    assert re.search(r"peak [\d.]+ (B|KiB|MiB|GiB) against torch's [\d.]+ (B|KiB|MiB|GiB) at b=0\.5 and "
                     r"[\d.]+ (B|KiB|MiB|GiB) at its default", line), line
    assert re.search(r"recompute [\d.]+ (s|ms|us|ns) ", line), line  # the time model's unit, never picoseconds
    assert not re.search(r"\d{6,}", line) and " ps" not in line and "picked" not in line, line


def test_the_default_path_keeps_its_own_line_and_no_plan(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="fxcut"):
        zoo.capture("mlp").partition(fxcut.min_cut_rematerialization_partition)
    (record,) = [r for r in caplog.records if r.name == "fxcut" and r.levelno == logging.INFO]
    assert record.getMessage().startswith("decision: ")
    assert fxcut.last_plans() == []


class _SaveWhatTorchSaves:
    def choose_saved(self, plan: Any, decision: Any) -> list[int]:
        return list(decision.saved)


def test_partition_counts_say_which_path_made_each_graph() -> None:
    cap = zoo.capture("mlp")
    cap.partition(fxcut.min_cut_rematerialization_partition)
    cap.partition(lambda *a, **k: fxcut.min_cut_rematerialization_partition(*a, safe_budget=True, **k))
    cap.partition(fxcut.planned_partitioner(0.5))
    cap.partition(fxcut.planned_partitioner(1.0))
    cap.partition(lambda *a, **k: fxcut.min_cut_rematerialization_partition(
        *a, objective=_SaveWhatTorchSaves(), **k))
    assert fxcut.partition_counts() == {"fxcut": 1, "fxcut_safe_budget": 1, "fxcut_plan": 2, "fxcut_objective": 1}
    assert [p.budget for p in fxcut.last_plans()] == [0.5, 1.0]


def test_last_plans_is_bounded_and_records_concurrent_plans_once_each() -> None:
    assert report._plans.maxlen == report.MAX_PLANS
    cap = zoo.capture("mlp")
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(3):
                cap.partition(fxcut.planned_partitioner(0.5))
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    graphs = [p.graph for p in fxcut.last_plans()]
    assert len(graphs) == 12 and len(set(graphs)) == 12
    assert fxcut.partition_counts() == {"fxcut_plan": 12}


def test_a_report_that_fails_never_changes_the_partition(monkeypatch: pytest.MonkeyPatch,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    cap = zoo.capture("mlp")
    expected = cap.partition(fxcut.planned_partitioner(0.5))

    def broken(payload_fn: Any) -> bool:
        raise RuntimeError("no trace today")

    monkeypatch.setattr(trace, "artifact", broken)
    with caplog.at_level(logging.WARNING, logger="fxcut"):
        got = cap.partition(fxcut.planned_partitioner(0.5))
    assert (got[0].code, got[1].code) == (expected[0].code, expected[1].code)
    assert fxcut.partition_counts() == {"fxcut_plan": 2} and len(fxcut.last_plans()) == 2
    assert any("could not report graph" in r.getMessage() and "its partition stands" in r.getMessage()
               for r in caplog.records)


_TRACED = """
import torch, fxcut

def f(x, w):
    return (x @ w).sin().sum()

x = torch.rand(8, 8)
for backend in (fxcut.aot_backend(), fxcut.aot_backend(memory_budget=0.5)):
    torch._dynamo.reset()
    w = torch.rand(8, 8, requires_grad=True)
    torch.compile(f, backend=backend)(x, w).backward()
"""


def _artifacts(folder: Path) -> list[dict[str, Any]]:
    """The fxcut_partition artifacts' payloads in a TORCH_TRACE folder, in order."""
    found = []
    for log_file in sorted(folder.iterdir()):
        lines = log_file.read_text().splitlines()
        for k, line in enumerate(lines):
            if '"name": "fxcut_partition"' in line:
                assert '"encoding": "json"' in line and '"frame_compile_id": 0' in line, line
                found.append(json.loads(lines[k + 1].strip()))
    return found


def test_torch_trace_holds_fxcuts_decision_for_the_default_path_and_the_plan(tmp_path: Path) -> None:
    folder = tmp_path / "trace"
    env = {**os.environ, "TORCH_TRACE": str(folder),
           "PYTHONPATH": os.pathsep.join([str(PACKAGE.parent), os.environ.get("PYTHONPATH", "")])}
    subprocess.run([sys.executable, "-c", _TRACED], env=env, check=True, capture_output=True, timeout=300)
    default, plan = _artifacts(folder)
    assert default["path"] == "default" and plan["path"] == "plan"
    for got in (default, plan):
        assert got["compile_id"] == "0/0" and got["fxcut"] == fxcut.__version__ and got["stage"] == "min_cut"
        assert got["saved"] == len(got["saved_values"]) > 0 and got["saved_bytes"] > 0
    assert default["budget"] == 1.0 and default["budget_bounds"].startswith("saved bytes")
    assert default["saved_beyond_torch"] == [] and "plan" not in default
    assert plan["budget"] == 0.5 and plan["budget_bounds"] == "the modelled peak"
    assert plan["plan"]["budget"] == 0.5 and plan["plan"]["graph"] == plan["graph"] > default["graph"]
    assert set(plan["plan"]["torch_at_budget"]) == {"peak_bytes", "recompute"}
    assert plan["plan"]["saved"] == plan["saved"]


def test_a_graph_handed_to_torch_is_traced_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    written: list[dict[str, Any]] = []
    monkeypatch.setattr(trace, "artifact", lambda payload_fn: written.append(json.loads(payload_fn())) or True)
    monkeypatch.setattr(guard, "_warned", set())
    monkeypatch.delenv(versions.ALLOW_UNTESTED_ENV, raising=False)
    cap = zoo.capture("mlp")
    monkeypatch.setattr(versions, "installed_version", lambda: "9.9.0")
    with pytest.warns(fxcut.UntestedTorchWarning):
        cap.partition(fxcut.min_cut_rematerialization_partition)
    (got,) = written
    assert got["path"] == "torch" and got["counted_as"] == "torch_untested"
    assert fxcut.partition_counts() == {"torch_untested": 1}
