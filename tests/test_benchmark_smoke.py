"""The benchmarks run end to end at a tiny size and report what they should:
bench/partition_benchmark.py, bench_releases.py, bench_compile.py, and the
real-model harness (bench/realmodels: a measured peak, gradients compared).

A smoke test of the benchmark's plumbing, not a measurement: no timing is
asserted, only the result's structure and that fxcut's saved values equal
torch's in the run (the benchmark checks that itself and raises otherwise).
"""

from __future__ import annotations

import json
import math
import statistics

import pytest
import torch

pytest.importorskip("networkx")
pytest.importorskip("scipy")

import os  # noqa: E402
import sys  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))
import partition_benchmark as benchmark  # noqa: E402

TINY = benchmark.ModelConfig(hidden=32, heads=2, seq=16, batch=2, vocab=64)


@pytest.fixture(scope="module")
def result() -> benchmark.BenchResult:
    lines: list[str] = []
    res = benchmark.run([1], reps=1, slow_reps=1, model=TINY, phase_layers=1, phase_reps=1,
                        progress=lines.append)
    assert lines, "progress was never called"
    return res


def test_every_contender_has_a_positive_median(result: benchmark.BenchResult) -> None:
    (row,) = result.sizes
    assert row.layers == 1
    assert set(row.seconds) == set(benchmark.CONTENDER_SETS["full"])
    for name, seconds in row.seconds.items():
        assert math.isfinite(seconds) and seconds > 0, name
        assert len(row.samples[name]) == 1, name
    assert set(row.ratios) == {f"{a}/{b}" for a, b in benchmark.RATIOS if "lazy" not in a + b}
    assert all(math.isfinite(v) and v > 0 for v in row.ratios.values())


def test_fxcut_saves_what_torch_saves(result: benchmark.BenchResult) -> None:
    (row,) = result.sizes
    assert row.saved_equal
    assert row.saved > 0


def test_network_and_memory_are_reported(result: benchmark.BenchResult) -> None:
    (row,) = result.sizes
    assert row.nodes >= row.nodes_prepared > 0
    assert row.vertices == 2 * row.nodes_prepared + 2
    assert row.edges > 0 and row.cut_value > 0
    assert row.memory["decision_fxcut"] > 0 and row.memory["decision_torch"] > 0
    assert 0 < row.scipy_scale <= 1


def test_phases_cover_the_whole_partition_fn(result: benchmark.BenchResult) -> None:
    ph = result.phases
    assert ph is not None and ph["layers"] == 1
    for side in ("fxcut", "torch"):
        parts = {k: v for k, v in ph[side].items() if k != "total"}
        assert math.isclose(sum(parts.values()), ph[side]["total"], rel_tol=1e-9)
    assert {"lowering", "decision (C core, budget passes)", "plan DCE + CSE (prepare.plan)"} <= set(ph["fxcut"])


def test_outputs_are_written(result: benchmark.BenchResult, tmp_path) -> None:
    paths = benchmark.write(result, str(tmp_path / "out"), command="smoke")
    data = json.loads(open(paths["json"]).read())
    assert data["command"] == "smoke"
    assert data["sizes"][0]["saved_equal"] is True
    assert "(a) fxcut" in open(paths["md"]).read()
    assert open(paths["png"], "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    # No 24-layer row: no targets to report against.
    assert result.targets == []


def test_fxcut_bench_command_writes_the_table_with_a_progress_bar(tmp_path, capsys) -> None:
    from fxcut.tools import cli

    assert cli.main(["bench", "--quick", "--out", str(tmp_path / "out"), "--docs", str(tmp_path / "docs")]) == 0
    out, err = capsys.readouterr()
    assert "[" in err and "#" in err and "/" in err  # the progress bar
    for ext in ("json", "md", "txt", "png"):
        assert (tmp_path / "out" / f"bench_partition.{ext}").stat().st_size > 0
    assert sorted(p.name for p in (tmp_path / "docs").iterdir()) == ["bench_partition.md", "bench_partition.png"]
    assert "fxcut bench --quick" in (tmp_path / "out" / "bench_partition.md").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["docs", "out"]  # nothing else, anywhere it runs


def test_fxcut_bench_writes_nothing_unless_told(tmp_path, monkeypatch, capsys) -> None:
    from fxcut.tools import cli

    monkeypatch.chdir(tmp_path)
    assert cli.main(["bench", "--quick"]) == 0
    out, _ = capsys.readouterr()
    assert out.startswith("GPT-2 style model") and "total" in out  # the report is printed
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- every release (bench_releases.py)

import bench_releases  # noqa: E402
import docs_sections  # noqa: E402


def test_a_contender_set_needs_the_decision_and_the_partition() -> None:
    with pytest.raises(ValueError, match="missing"):
        benchmark.run([1], model=TINY, contenders=("decision_fxcut",))


def test_targets_are_checked_at_24_and_48_layers_only() -> None:
    def row(layers: int, torch_s: float, fxcut_s: float) -> benchmark.SizeResult:
        return benchmark.SizeResult(layers=layers, nodes=1, nodes_prepared=1, vertices=4, edges=1, saved=1,
                                    saved_equal=True, cut_value=1,
                                    samples={"partition_torch": [torch_s, torch_s], "partition_fxcut": [fxcut_s, 1.0]})

    res = benchmark.BenchResult(model={}, reps=2, slow_reps=2, phases=None, environment={},
                                sizes=[row(12, 9.0, 1.0), row(24, 3.0, 1.0), row(48, 9.0, 1.0)])
    got = {(t["layers"], t["target"]): t for t in benchmark.targets(res)}
    assert set(got) == {(24, "whole partition_fn vs torch's"), (48, "whole partition_fn vs torch's")}
    assert got[(24, "whole partition_fn vs torch's")]["met"] is False  # 3x < 4x
    assert got[(48, "whole partition_fn vs torch's")]["met"] is True  # median of 9x and 9x
    assert got[(48, "whole partition_fn vs torch's")]["measured"] == 9.0


def test_docs_sections_replace_their_own_text_only(tmp_path) -> None:
    path = tmp_path / "doc.md"
    docs_sections.replace_section(str(path), "a", "first")
    path.write_text("# title\n\n" + path.read_text() + "\nhand-written\n")
    docs_sections.replace_section(str(path), "b", "other")
    docs_sections.replace_section(str(path), "a", "second $1 \\1")  # no regex expansion of the body
    text = path.read_text()
    assert text.startswith("# title\n") and "hand-written" in text and "first" not in text
    assert docs_sections.read_section(str(path), "a") == "second $1 \\1"
    assert docs_sections.read_section(str(path), "b") == "other"
    assert docs_sections.read_section(str(path), "c") is None


def test_bench_releases_command_end_to_end_in_this_venv(tmp_path, capsys) -> None:
    """The one command, on this interpreter only, at one small size (1 layer,
    one round; ~15 s): runs the benchmark in a child process and writes both
    generated sections."""
    readme = tmp_path / "README.md"
    readme.write_text("# fxcut\n\n" + "<!-- begin: releases (generated) -->\nold\n<!-- end: releases -->\n\nafter\n")
    assert bench_releases.main(["--releases", "current", "--layers", "1", "--reps", "1", "--docs", str(tmp_path),
                                "--readme", str(readme), "--json", str(tmp_path / "r.json"), "--note", "smoke"]) == 0
    data = json.loads((tmp_path / "r.json").read_text())
    (result,) = data["results"]
    import torch

    assert result["environment"]["torch"] == torch.__version__
    (row,) = result["sizes"]
    assert row["layers"] == 1 and row["saved_equal"] and row["memory"] == {}
    # The releases set: the decision, the whole partition_fn plain and lazy, their floors; no solver.
    assert set(row["samples"]) == set(benchmark.CONTENDER_SETS["releases"]) == set(result["contenders"])
    assert all(len(v) == 1 and v[0] > 0 for v in row["samples"].values())
    assert {"partition_torch_lazy/partition_fxcut_lazy", "partition_fxcut_lazy/floor_lazy",
            "partition_torch/partition_fxcut", "decision_torch/decision_fxcut"} <= set(row["ratios"])
    assert not any("solver" in k for k in row["ratios"])
    doc = (tmp_path / "bench_partition.md").read_text()
    assert f"### torch {torch.__version__}" in doc and "whole partition_fn, lazy: torch / fxcut" in doc
    assert "the >= 4x target is" in doc and "**smoke**" in doc
    text = readme.read_text()
    assert "old" not in text and text.endswith("after\n") and f"| {torch.__version__} |" in text
    assert "whole run:" in capsys.readouterr().out


# --------------------------------------------------------------------------- cold compile (bench_compile.py)

import bench_compile  # noqa: E402


def test_bench_compile_aot_noop_round_in_fresh_processes(tmp_path) -> None:
    """One aot-noop round (two fresh processes, a 1-layer GPT; ~20 s): both
    sides call their partitioner, compute the same loss, and the report and
    the README paragraph are written from the saved runs."""
    cfg = {"layers": 1, "hidden": 32, "heads": 2, "seq": 8, "batch": 2, "vocab": 64}
    r = bench_compile.measure(cfg, "aot-noop", 1)
    (pair,) = r["rounds"]
    import torch

    assert r["torch"] == torch.__version__ and r["mode"] == "aot-noop"
    for side in ("stock", "fxcut"):
        assert pair[side]["calls"] >= 1 and 0 < pair[side]["partition_s"] < pair[side]["compile_s"], side
    assert math.isclose(pair["stock"]["loss"], pair["fxcut"]["loss"], rel_tol=1e-5)
    saved = tmp_path / "runs.json"
    saved.write_text(json.dumps({"command": "cmd", "seconds": 1.0, "note": "smoke", "results": [r]}))
    md, readme = tmp_path / "bench_compile.md", tmp_path / "README.md"
    assert bench_compile.main(["--from-json", str(saved), "--md", str(md), "--readme", str(readme)]) == 0
    text = md.read_text()
    assert f"| {torch.__version__} | aot-noop | 1 |" in text and "Command: `cmd`" in text and "**smoke**" in text
    assert "aot-noop" in readme.read_text() and "docs/bench_compile.md" in readme.read_text()


# --------------------------------------------------------------------------- the real-model harness (bench/realmodels)

from realmodels import measure as realmeasure  # noqa: E402
from realmodels import models as realmodels  # noqa: E402
from realmodels import run as realrun  # noqa: E402


def test_model_variants_deepen_and_cast() -> None:
    small, deep = realmodels.build("plain_mlp"), realmodels.build("plain_mlp:deep")
    assert len(small.model.inner.blocks) == 2 and len(deep.model.inner.blocks) == 12
    assert small.autocast is None and realmodels.build("plain_mlp:bf16").autocast is torch.bfloat16
    assert realmodels.build("plain_mlp:deep:bf16").name == "plain_mlp:deep:bf16"
    with pytest.raises(ValueError, match="unknown model variant.*wide"):
        realmodels.build("plain_mlp:wide")
    # the loss runs outside autocast, the forward inside it: the step's loss is fp32, its activations bf16
    built = realmodels.build("plain_mlp:bf16")
    step = realmeasure.WithLoss(built)
    seen: list[torch.dtype] = []
    handle = built.model.inner.blocks[0][1].register_forward_hook(lambda m, i, o: seen.append(o.dtype))
    loss = step(**built.inputs)
    handle.remove()
    assert seen == [torch.bfloat16] and loss.dtype == torch.float32


@pytest.fixture(scope="module")
def inductor_point() -> list:
    """One real measurement, as the benchmark makes it: a fresh process with
    a fresh inductor cache, the torch-only MLP, stock and fxcut under inductor
    at budget 0, and eager (~1 min on a loaded 2-core machine)."""
    return realmeasure.measure("plain_mlp", ["stock@0", "fxcut@0", "eager"], warmup=1, steps=1, rounds=2,
                               timeout=600)


def test_harness_measures_a_peak_the_step_really_holds(inductor_point) -> None:
    for m in inductor_point:
        assert m.ok, (m.backend, m.status, m.error)
        # the gradients are allocated inside the step: a peak below them measured nothing
        assert m.grad_bytes == m.param_bytes == realmodels.build("plain_mlp").parameter_bytes() > 0
        assert m.peak_bytes >= m.grad_bytes, m
        assert m.allocations > 0
        assert 0 <= m.forward_peak_bytes <= m.peak_bytes and m.backward_peak_bytes <= m.peak_bytes
        assert m.after_forward_bytes <= m.forward_peak_bytes


def test_harness_compares_every_gradient_with_eager(inductor_point) -> None:
    n_params = len(list(realmodels.build("plain_mlp").model.parameters()))
    for m in inductor_point:
        assert m.grads_compared == n_params and m.grads_missing == []
        assert m.grad_max_rel_err is not None and m.grad_max_rel_err < 1e-4, m.backend
        assert math.isclose(m.loss, m.eager_loss, rel_tol=1e-5)
    eager = inductor_point[2]
    assert eager.grad_max_abs_err == 0.0  # eager against its own reference: the same computation


def test_harness_times_partitioners_and_steps_in_rounds(inductor_point) -> None:
    stock, fx, eager = inductor_point
    assert (stock.backend, fx.backend, eager.backend) == ("stock@0", "fxcut@0", "eager")
    for m in (stock, fx):
        assert m.partition_calls >= 1 and m.partition_s > 0 and m.compile_s > m.partition_s
    assert fx.plan_s is not None and 0 < fx.plan_s <= fx.partition_s
    assert len(fx.model_peaks) == fx.partition_calls and all(p["plan"] > 0 for p in fx.model_peaks)
    assert stock.plan_s is None and stock.model_peaks == []
    assert eager.partition_calls == 0
    for m in inductor_point:
        assert len(m.round_step_s) == 2 and all(s > 0 for s in m.round_step_s)
        assert m.step_s == statistics.median(m.round_step_s)
    assert realrun.step_ratio(stock, fx) == statistics.median(
        f / s for s, f in zip(stock.round_step_s, fx.round_step_s))


def test_benchmark_report_shows_the_measured_figures(inductor_point, tmp_path) -> None:
    point = {"model": "plain_mlp", "budget": 0.0, "regime": "inductor", "seconds": 1.0, "load": [1.0, 2.0],
             "measurements": [m.as_dict() for m in inductor_point],
             "step_ratio": realrun.step_ratio(inductor_point[0], inductor_point[1])}
    data = {"points": [point], "command": "cmd", "machine": "here", "torch": "t", "threads": 2}
    text = realrun.markdown(data, "inductor")
    stock, fx = inductor_point[0], inductor_point[1]
    row = next(line for line in text.splitlines() if line.startswith("| 0 |"))
    assert f"| {stock.peak_bytes / 2**20:.2f} | {fx.peak_bytes / 2**20:.2f} | {fx.peak_bytes / stock.peak_bytes:.3f} |" in row
    gain = 1 - fx.peak_bytes / stock.peak_bytes
    assert f"| plain_mlp | {-100 * gain:+.1f}% |" in text
    md = tmp_path / "plan.md"
    md.write_text("# plan\n\nhand-written\n")
    realrun.publish(str(md), data, "inductor")
    assert "hand-written" in md.read_text() and "## Under inductor, measured" in md.read_text()


def test_compare_grads_reports_the_worst_relative_error_and_missing_ones() -> None:
    want = {"a": torch.tensor([1.0, -4.0]), "b": torch.tensor([2.0]), "c": None, "d": torch.ones(2)}
    got = {"a": torch.tensor([1.0, -3.0]), "b": torch.tensor([2.0]), "c": None, "d": None}
    abs_err, rel_err, compared, missing = realmeasure.compare_grads(got, want)
    assert (abs_err, rel_err, compared, missing) == (1.0, 0.25, 2, ["d"])


def test_backend_specs_parse_and_bad_ones_name_the_problem() -> None:
    b = realmeasure.Backend.parse("fxcut-unfused@0.3")
    assert (b.kind, b.regime, b.budget, b.label) == ("fxcut", "unfused", 0.3, "fxcut-unfused@0.3")
    assert realmeasure.Backend.parse("stock").label == "stock" and realmeasure.Backend.parse("eager").budget is None
    for text, word in (("torch@0", "kind"), ("stock-fused@0", "regime"), ("stock@2", "budget"), ("stock@x", "budget"),
                       ("eager@0", "eager")):
        with pytest.raises(ValueError, match=word):
            realmeasure.Backend.parse(text)


def test_profile_step_counts_what_the_step_allocates() -> None:
    from fxcut.tools.measure import profile_step

    n = 1 << 16
    x = torch.randn(n, requires_grad=True)
    loss, mem = profile_step(lambda: (x * 3.0).exp().sum())
    # the forward keeps exp's output (4n bytes) for the backward; the backward makes x's gradient (4n)
    assert mem.after_forward_bytes >= 4 * n and mem.peak_bytes >= 8 * n
    assert mem.peak_bytes < 16 * n + 4096 and mem.allocations >= 3
    assert x.grad is not None and torch.allclose(x.grad, 3 * (x.detach() * 3).exp())


def test_a_failed_build_or_child_is_recorded_not_raised() -> None:
    assert [m.status for m in realmeasure.measure("no_such_model", ["eager"])] == ["build_failed"]
    crashed = realmeasure.measure("plain_mlp", ["eager", "stock@1"], python="/bin/false")
    assert [m.status for m in crashed] == ["crashed", "crashed"] and "exit status 1" in crashed[0].error



def test_a_failing_compile_is_recorded_and_the_other_backends_measured(monkeypatch) -> None:
    import fxcut

    def exploding_backend(**options):
        def backend(gm, example_inputs):
            raise RuntimeError("the backend exploded")
        return backend

    monkeypatch.setattr(fxcut, "aot_backend", exploding_backend)
    got = realmeasure.measure_in_process("plain_mlp", [realmeasure.Backend("fxcut", "unfused", 0.0),
                                                       realmeasure.Backend("stock", "unfused", 1.0)],
                                         warmup=0, steps=1, rounds=1)
    assert got[0].status == "compile_failed" and "the backend exploded" in got[0].error
    assert got[0].peak_bytes is None and got[0].step_s is None
    assert got[1].ok and got[1].peak_bytes >= got[1].grad_bytes > 0 and got[1].partition_calls == 1
    assert len(got[1].round_step_s) == 1


def test_stock_inductor_at_two_budgets_in_one_process_partitions_at_each() -> None:
    """Both are torch.compile(backend="inductor"): without a fresh dynamo
    the second reused the first's compiled frames and never partitioned
    (seen on gpt2:deep: stock@1 after stock@0 'fell back to eager')."""
    # no on-disk cache either (this process compiled the MLP before): the harness's children start without one
    with torch._functorch.config.patch(enable_autograd_cache=False), torch._inductor.config.patch(fx_graph_cache=False):
        got = realmeasure.measure_in_process("plain_mlp", [realmeasure.Backend("stock", "inductor", 0.0),
                                                           realmeasure.Backend("stock", "inductor", 1.0)],
                                             warmup=0, steps=1, rounds=1)
    assert [m.status for m in got] == ["ok", "ok"], [m.error for m in got]
    assert [m.partition_calls for m in got] == [1, 1]


def test_models_are_deterministic_and_torch_only_ones_need_no_extra() -> None:
    assert realmodels.available("plain_mlp") and realmodels.available("plain_convnet")
    assert len([n for n in realmodels.BUILDERS if not n.startswith("plain_")]) >= 12
    a, b = realmodels.build("plain_convnet"), realmodels.build("plain_convnet")
    for (na, pa), (nb, pb) in zip(a.model.named_parameters(), b.model.named_parameters()):
        assert na == nb and torch.equal(pa, pb)
    assert all(torch.equal(a.inputs[k], b.inputs[k]) for k in a.inputs)
    with pytest.raises(ValueError, match="unknown model"):
        realmodels.build("nope")


# --------------------------------------------------------------------------- the inductor benchmark's counting


def _row(backend: str, peak: int, steps: list[float]) -> dict[str, object]:
    return {"backend": backend, "status": "ok", "peak_bytes": peak, "round_step_s": steps}


def test_inductor_benchmark_counts_a_stock_point_dominated_across_budgets() -> None:
    """bench/inductor_memory.py: a stock point the plan at the same b does not
    dominate is measured against the plan at the largest other b whose peak
    is at or below stock's (``--cross``), and counted dominated only when that
    plan's step, in the same process, is within 1.05x of stock's."""
    import inductor_memory as im

    by = {r["backend"]: r for r in [
        _row("stock@0", 300, [1.0] * 3), _row("fxcut@0", 240, [1.13] * 3),  # lower, 13% slower: not dominated
        _row("stock@0.5", 270, [1.0] * 3), _row("fxcut@0.5", 270, [1.0] * 3),
        _row("stock@1", 280, [1.0] * 3), _row("fxcut@1", 270, [0.99] * 3)]}
    # stock@0 (300): plans at 0.5 and 1 are both at or below it; the largest b is taken
    assert im.cross_pairs(by) == [(0.0, 1.0)]
    fast = {im._cross_key(0.0, 1.0): [_row("stock@0", 300, [1.0, 1.0, 1.0]), _row("fxcut@1", 270, [0.9, 1.2, 0.95])]}
    slow = {im._cross_key(0.0, 1.0): [_row("stock@0", 300, [1.0, 1.0, 1.0]), _row("fxcut@1", 270, [1.1, 1.2, 0.9])]}
    higher = {im._cross_key(0.0, 1.0): [_row("stock@0", 260, [1.0] * 3), _row("fxcut@1", 270, [0.9] * 3)]}
    assert im._cross_dominated(fast, 0.0) == 1.0  # median of per-round ratios 0.95
    assert im._cross_dominated(slow, 0.0) is None  # median 1.1
    assert im._cross_dominated(higher, 0.0) is None  # that process measured the plan above stock
    assert im._cross_dominated(fast, 0.5) is None  # another stock point


def test_a_step_of_several_graphs_peaks_as_they_run_not_as_their_sum() -> None:
    """bench/inductor_memory.py's step_peak: graph 1's saved bytes are held
    while graph 2 runs forward and backward; graph 2's gradients are held
    while graph 1 runs backward; one graph is the larger of its peaks."""
    import inductor_memory as im

    assert im.step_peak([(10, 20, 5)], [3]) == 20
    # forwards: 10, then 5 + 8; backwards: graph 2 with graph 1's 5 saved: 35; graph 1 with graph 2's 2 B of
    # gradients: 22
    assert im.step_peak([(10, 20, 5), (8, 30, 4)], [3, 2]) == 35
    # graph 1's backward peaks highest once graph 2's gradients are large
    assert im.step_peak([(10, 20, 5), (8, 12, 4)], [3, 9]) == 29
    # a forward can be the peak: graph 2's forward over graph 1's saved bytes
    assert im.step_peak([(10, 12, 9), (20, 6, 1)], [1, 1]) == 29
    assert im.step_peak([(10, 20, 5), (8, 30, 4)], [3, 2]) < 20 + 30


def test_exact_bound_benchmark_sets_the_step_bound_against_every_measured_peak() -> None:
    """bench/exact_bound.py: a step's bound is its largest graph bound; it is
    set against every measured peak of the model (this run's plan and the
    earlier rows, cross pairs included), and the gaps are over the bound."""
    import exact_bound as eb

    def graph(bound: int, plan: int) -> dict[str, object]:
        return {"nodes": 10, "search_peak": plan, "plan_peak": plan, "bound": bound, "gap": plan / bound - 1,
                "proven": False, "from_exact": False, "exact_s": 1.0, "plan_s": 1.0, "torch": {"0": 160, "1": 200}}

    measured = {"models": {"m": [_row("stock@0", 170, [1.0]), _row("stock@1", 210, [1.0]),
                                 {"backend": "stock@0.5", "status": "crashed"}]},
                "cross": {"m": {"stock@0|fxcut@1": [_row("fxcut@1", 140, [1.0])]}}}
    earlier = eb.measured_peaks(measured, "m")
    assert earlier == {"stock@0": 170, "stock@1": 210, "fxcut@1 (stock@0|fxcut@1)": 140}
    row = {"model": "m", "graphs": [graph(100, 120), graph(150, 155)],
           "measured": {"status": "ok", "peak_bytes": 180, "grad_max_rel_err": 0.0, "grads_compared": 3}}
    s = eb.summarise(row, earlier)
    assert s["bound"] == 150 and s["plan_model"] == 155  # two graphs: the largest bound, the largest peak
    assert s["measured_gap"] == pytest.approx(180 / 150 - 1) and s["model_gap"] == pytest.approx(155 / 150 - 1)
    assert s["decisions_measured"] == 4 and s["lowest_measured"] == 140
    assert s["bound_below_every_measured"] is False  # the cross pair's plan measured 140 < 150
    assert s["bound_below_torch_model"] is True  # 150 <= 160 + 160 and 200 + 200
    del earlier["fxcut@1 (stock@0|fxcut@1)"]
    assert eb.summarise(row, earlier)["bound_below_every_measured"] is True
    failed = eb.summarise({"model": "m", "graphs": [graph(100, 120)], "measured": {"status": "step_failed",
                                                                                   "error": "boom"}}, earlier)
    assert "bound" not in failed and failed["error"] == "boom"
    assert "step_failed: boom" in eb.markdown([failed, s], "cmd", "2.13.0", "x.json")
