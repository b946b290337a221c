"""The fxcut command: printed results equal the library's, bad input is one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import torch

import fxcut
import fxcut.tools.cli as cli
from fxcut.tools.report import summarize
from training import capture_model

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent


def _env() -> dict[str, str]:
    """The environment of a subprocess that imports this fxcut and tests/cli_models."""
    package_parent = str(Path(fxcut.__file__).resolve().parent.parent)
    paths = [package_parent, str(TESTS), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}


def _library(model: str, *, zero3: bool = False, dtype: torch.dtype | None = None, **cfg):
    """What the CLI should print: the same capture, partitioned by the library."""
    cap = capture_model(model, autocast_dtype=dtype, fake=True, **cfg)
    gm = cap.fresh()
    tagged = fxcut.recompute_param_aliases(gm.graph, cap.param_indices) if zero3 else []
    fw, bw = fxcut.min_cut_rematerialization_partition(gm, cap.joint_inputs, num_fwd_outputs=cap.num_fwd_outputs,
                                                       **cap.partition_kwargs)
    return cap, summarize(fw, bw, cap.num_fwd_outputs), tagged


def _row(out: str, name: str) -> list[str]:
    """The table row of ``name`` (fxcut / torch), split into fields."""
    rows = [line.split() for line in out.splitlines()
            if line.split()[:1] == [name] and len(line.split()) == 10 and line.split()[1].isdigit()]
    assert len(rows) == 1, out
    return rows[0]


def _assert_row_matches(row: list[str], summary) -> None:
    # name, saved, activation MiB, "MiB", input MiB, "MiB", recomputed, fw nodes, bw nodes, time
    assert int(row[1]) == len(summary.saved)
    activations = summary.saved_bytes - summary.saved_input_bytes
    assert row[2] == f"{activations / 2**20:,.2f}" and row[3] == "MiB"
    assert row[4] == f"{summary.saved_input_bytes / 2**20:,.2f}" and row[5] == "MiB"
    assert int(row[6]) == len(summary.recomputed)
    assert (int(row[7]), int(row[8])) == (summary.fw_nodes, summary.bw_nodes)


def _one_line_error(capsys, argv: list[str], *words: str) -> str:
    rc = cli.main(argv)
    err = capsys.readouterr().err.strip()
    assert rc == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("fxcut: "), err
    for word in words:
        assert word in err, err
    return err


# --------------------------------------------------------------------------- partition


def test_partition_mlp_prints_the_librarys_counts(capsys):
    assert cli.main(["partition", "--model", "mlp"]) == 0
    out = capsys.readouterr().out
    cap, summary, _ = _library("mlp")
    assert (f"joint graph: {cap.num_nodes} nodes (the output node included), {len(cap.param_indices)} parameters"
            in out)
    _assert_row_matches(_row(out, "fxcut"), summary)
    _assert_row_matches(_row(out, "torch"), summary)
    assert "saved values and graphs identical" in out


def test_partition_gpt2_zero3_bf16_prints_the_walk_and_the_librarys_counts(capsys):
    argv = ["partition", "--model", "gpt2", "--layers", "1", "--zero3", "--dtype", "bfloat16"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    cap, summary, tagged = _library("gpt2", zero3=True, dtype=torch.bfloat16, layers=1)
    assert tagged
    assert f"ZeRO-3 walk: {len(tagged)} parameter aliases / casts tagged MUST_RECOMPUTE" in out
    assert "aten._to_copy" in out  # the bf16 casts of parameters
    assert "without the walk, 0 with it" in out  # no alias saved once tagged
    _assert_row_matches(_row(out, "fxcut"), summary)


def test_partition_json_parses_and_matches_the_library(capsys):
    assert cli.main(["partition", "--model", "mlp", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    cap, summary, _ = _library("mlp")
    assert data["model"] == "mlp" and data["joint_nodes"] == cap.num_nodes
    assert data["parameters"] == len(cap.param_indices)
    assert data["fxcut"]["saved"] == summary.saved
    assert data["fxcut"]["saved_bytes"] == summary.saved_bytes
    assert data["fxcut"]["recomputed"] == summary.recomputed
    assert data["torch"]["saved"] == summary.saved
    assert data["same_saved"] is True and data["same_graphs"] is True
    assert data["zero3"] is None


def test_partition_json_zero3_without_torch(capsys):
    argv = ["partition", "--model", "mlp", "--zero3", "--no-torch", "--json"]
    assert cli.main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    _, summary, tagged = _library("mlp", zero3=True)
    assert data["torch"] is None and data["same_saved"] is None and data["speedup"] is None
    assert data["fxcut"]["saved"] == summary.saved
    assert data["zero3"]["tagged"] == [n.name for n in tagged]
    assert data["zero3"]["aliases_saved_with_walk"] == []


def test_python_dash_m_fxcut_runs_in_a_subprocess():
    proc = subprocess.run([sys.executable, "-m", "fxcut", "partition", "--model", "mlp", "--json"],
                          capture_output=True, text=True, env=_env(), cwd=TESTS, timeout=300)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    _, summary, _ = _library("mlp")
    assert data["fxcut"]["saved"] == summary.saved and data["same_saved"] is True


def test_subprocess_bad_input_exits_2_with_one_line():
    proc = subprocess.run([sys.executable, "-m", "fxcut", "partition", "--model", "nosuch"],
                          capture_output=True, text=True, env=_env(), cwd=TESTS, timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "fxcut: error: unknown model 'nosuch' (choose from convnet, gpt2, llama, lstm, mlp, moe, resnet, vit)"]


# --------------------------------------------------------------------------- --module


@pytest.mark.parametrize("spec", ["4,16:float32", "4x16"])
def test_module_factory_with_input_spec(capsys, spec):
    argv = ["partition", "--module", "cli_models:factory", "--input", spec, "--json"]
    assert cli.main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["model"] == "cli_models:factory" and data["parameters"] == 4
    assert data["same_saved"] is True and data["fxcut"]["saved"]
    assert data["fxcut"]["saved"] == data["torch"]["saved"]


@pytest.mark.parametrize("argv, words", [
    (["--module", "cli_models:factory", "--input", "4,x:float32"], ["malformed --input '4,x:float32'"]),
    (["--module", "cli_models:factory", "--input", "4,-16"], ["malformed --input", "positive"]),
    (["--module", "cli_models:factory", "--input", "4,,16"], ["malformed --input '4,,16'"]),
    (["--module", "cli_models:factory", "--input", "4,16", "--input", "2"], ["takes 2 positional arguments"]),
    (["--module", "cli_models:factory", "--input", "4,16:float99"], ["unknown dtype 'float99'"]),
    (["--module", "cli_models:factory"], ["--module needs at least one --input"]),
    (["--module", "no_such_package.models:build", "--input", "4,16"], ["does not import", "no_such_package"]),
    (["--module", "cli_models", "--input", "4,16"], ["expected 'package.module:factory'"]),
    (["--module", "cli_models:nope", "--input", "4,16"], ["no callable 'nope'"]),
    (["--module", "cli_models:failing_factory", "--input", "4,16"], ["the factory failed", "always fails"]),
    (["--module", "cli_models:not_a_module", "--input", "4,16"], ["returned int"]),
    (["--module", "cli_models:factory", "--input", "4,15"], ["does not run on inputs 4,15", "same reduction dim"]),
])
def test_bad_module_input_is_one_line(capsys, argv, words):
    _one_line_error(capsys, ["partition", *argv], *words)


def test_module_that_raises_while_importing_is_one_line(capsys, tmp_path, monkeypatch):
    (tmp_path / "broken_models.py").write_text("raise ImportError('needs a package that is missing')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    _one_line_error(capsys, ["partition", "--module", "broken_models:f", "--input", "4"],
                    "does not import", "needs a package that is missing")


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("argv, words", [
    (["partition", "--model", "nosuch"], ["unknown model 'nosuch'"]),
    (["partition", "--model", "mlp", "--dtype", "float99"], ["unknown --dtype 'float99'"]),
    (["partition", "--model", "mlp", "--dtype", "int64"], ["unknown --dtype 'int64'"]),
    (["partition", "--model", "mlp", "--seq", "4"], ["does not take --seq"]),
    (["partition", "--model", "gpt2", "--hidden", "30", "--heads", "4"], ["divisible"]),
    (["partition", "--model", "mlp", "--layers", "0"], ["--layers", "not positive"]),
    (["partition", "--model", "mlp", "--layers", "two"], ["--layers", "not an integer"]),
    (["partition", "--model", "mlp", "--input", "4,16"], ["--input"]),
    (["partition", "--model", "convnet", "--checkpoint"], ["--checkpoint", "convnet"]),
    (["partition", "--model", "mlp", "--budget", "1.5"], ["--budget 1.5"]),
    (["partition", "--bogus"], ["unrecognized arguments: --bogus"]),
    (["frobnicate"], ["invalid choice: 'frobnicate'"]),
    (["explain", "--model", "mlp"], ["explain needs a node name", "--list"]),
    (["explain", "--model", "mlp", "addmm", "--list"], ["one node name, or --list"]),
])
def test_bad_input_exits_2_with_one_line_naming_it(capsys, argv, words):
    _one_line_error(capsys, argv, *words)


def test_budget_partitions_like_torch(capsys):
    assert cli.main(["partition", "--model", "gpt2", "--layers", "1", "--budget", "0.5"]) == 0
    out = capsys.readouterr().out
    assert "saved values and graphs identical" in out


# --------------------------------------------------------------------------- explain


def test_explain_saved_node_says_saved(capsys):
    _, summary, _ = _library("mlp")
    node = next(name for name in summary.saved if not name.startswith("primals"))
    assert cli.main(["explain", "--model", "mlp", node]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith(f"{node} = ")
    assert out.splitlines()[1].strip().startswith("saved:")


def test_explain_tangent_derived_node_says_backward(capsys):
    cap, _, _ = _library("mlp")
    node = next(iter(cap.tangents()[0].users)).name
    assert cli.main(["explain", "--model", "mlp", node, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["node"] == node and data["in_backward"] and not data["in_forward"] and not data["saved"]
    assert data["why"].startswith("computed in backward")


def test_explain_unknown_node_is_one_line_pointing_to_the_list(capsys):
    _one_line_error(capsys, ["explain", "--model", "mlp", "addmm_99"], "no node named 'addmm_99'", "similar: addmm",
                    "--list in place of 'addmm_99' to list the nodes")


# --------------------------------------------------------------------------- the console script


def test_console_script_is_declared_and_resolves_to_main():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"fxcut": "fxcut.tools.cli:main"}
    module, _, attr = scripts["fxcut"].partition(":")
    assert getattr(__import__(module, fromlist=[attr]), attr) is cli.main


#: What torch prints (a UserWarning, at ``import torch``) where numpy is missing.
NUMPY_WARNING = "Failed to initialize NumPy"


def test_the_set_up_installs_numpy():
    """numpy is one of fxcut's own dependencies, so ``bash scripts/setup.sh``
    (an editable install of fxcut) installs it for the main job."""
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert any(d.split(";")[0].strip().lower().startswith("numpy") for d in deps), deps
    assert "pip install" in (ROOT / "scripts" / "setup.sh").read_text()


def test_the_main_job_takes_the_clis_flags_and_prints_no_noise(tmp_path):
    """``python -m fxcut`` with partition's options and nothing else (issue
    38): the main job (DEFAULT_ARGS), smaller, with --real -- one measured
    step of each side.  Neither torch's NumPy warning nor the profiler's
    own lines ("profiler_start") reach stderr.  The control run, with numpy
    hidden, shows the check looks for the warning torch does print."""
    small = ["--layers", "1", "--hidden", "64", "--heads", "4", "--seq", "16"]
    assert all(flag in cli.DEFAULT_ARGS for flag in small[::2])  # each overrides the main job's own
    proc = subprocess.run([sys.executable, "-m", "fxcut", *small, "--real"], capture_output=True, text=True,
                          env=_env(), timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "model: llama" in proc.stdout and "fxcut vs torch: saved values and graphs identical" in proc.stdout
    assert "ZeRO-3 walk" in proc.stdout  # the main job's --zero3
    assert "the memory plan against torch" in proc.stdout and "plan / torch" in proc.stdout
    assert "measured: one training step on CPU, real tensors" in proc.stdout  # --real with the main job's --peaks
    assert NUMPY_WARNING not in proc.stderr, proc.stderr
    assert "profiler_start" not in proc.stderr and "USDT" not in proc.stderr, proc.stderr
    assert proc.stderr.strip() == "", proc.stderr
    hidden = tmp_path / "hidden" / "numpy"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'numpy'\", name='numpy')\n")
    env = _env()
    env["PYTHONPATH"] = os.pathsep.join([str(hidden.parent), env["PYTHONPATH"]])
    control = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True, text=True, env=env,
                             timeout=300)
    assert NUMPY_WARNING in control.stderr, control.stderr


@pytest.mark.parametrize("argv, want", [
    ([], cli.DEFAULT_ARGS),
    (["--real"], [*cli.DEFAULT_ARGS, "--real"]),
    (["-v", "--real", "--layers", "2"], ["-v", *cli.DEFAULT_ARGS, "--real", "--layers", "2"]),
    (["-vv"], ["-vv", *cli.DEFAULT_ARGS]),
    (["partition", "--model", "mlp"], ["partition", "--model", "mlp"]),
    (["--help"], ["--help"]),
    (["explain", "--model", "gpt2", "addmm_2"], ["explain", "--model", "gpt2", "addmm_2"]),
])
def test_options_without_a_command_are_the_main_jobs(argv, want):
    assert cli.main_job_argv(argv) == want


def test_main_job_options_reach_partition(monkeypatch):
    """``fxcut --real --no-torch`` parses as the main job with both options
    (before issue 38: "unrecognized arguments: --real")."""
    seen = []
    monkeypatch.setattr(cli, "_run", lambda parser, args: seen.append(args) or 0)
    assert cli.main(["--real", "--no-torch", "--layers", "2"]) == 0
    (args,) = seen
    assert args.command == "partition" and args.model == "llama" and args.real and args.no_torch
    assert args.layers == 2 and args.zero3 and args.peaks and args.dtype == "bfloat16"


def test_help_lists_the_built_in_models(capsys):
    from fxcut.tools.models import MODEL_SUMMARIES, MODELS

    for argv in (["--help"], ["partition", "--help"], ["explain", "--help"]):
        with pytest.raises(SystemExit) as e:
            cli.main(argv)
        assert e.value.code == 0
        out = capsys.readouterr().out
        for name in MODELS:
            assert f"  {name} " in out and MODEL_SUMMARIES[name] in out, (argv, name)
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    assert "python -m fxcut --real" in out and " ".join(cli.DEFAULT_ARGS) in out


def test_installed_console_script_runs():
    script = Path(sys.executable).with_name("fxcut")
    if not script.exists():
        pytest.skip(f"fxcut is not installed as a console script next to {sys.executable}")
    proc = subprocess.run([str(script), "partition", "--model", "nosuch"], capture_output=True, text=True,
                          env=_env(), timeout=300)
    assert proc.returncode == 2 and "unknown model 'nosuch'" in proc.stderr


# --------------------------------------------------------------------------- issue 12, item 5


@pytest.mark.parametrize("argv, words", [
    (["partition", "--model", "gpt2", "--hidden", "1000000000"], ["--hidden 1000000000 exceeds the limit of 65536"]),
    (["partition", "--model", "gpt2", "--seq", "70000"], ["--seq 70000 exceeds the limit"]),
    (["partition", "--model", "gpt2", "--layers", "100000"], ["--layers 100000 exceeds the limit of 256"]),
    (["partition", "--model", "lstm", "--seq", "5000"], ["--seq 5000 exceeds lstm's limit of 1024"]),
    (["partition", "--model", "gpt2", "--seq", "65536", "--batch", "65536"],
     ["attention scores", "past the limit of 1,099,511,627,776 with fake tensors"]),
    (["partition", "--model", "gpt2", "--hidden", "16384", "--real"],
     ["weights", "past the limit of 268,435,456 with --real"]),
    (["partition", "--module", "cli_models:factory", "--input", "100000000,16"],
     ["--input '100000000,16': a dimension exceeds the limit of 65536"]),
    (["partition", "--module", "cli_models:factory", "--input", "60000,60000,60000"],
     ["--input '60000,60000,60000' has 216,000,000,000,000 elements"]),
    (["partition", "--module", "cli_models:factory", "--input", "20000,20000", "--real"],
     ["400,000,000 elements, past the limit of 268,435,456 with --real"]),
])
def test_huge_sizes_are_refused_up_front(capsys, monkeypatch, argv, words):
    import fxcut.tools.capture

    def no_capture(*args, **kwargs):
        raise AssertionError("traced a model past the size limits")

    monkeypatch.setattr(fxcut.tools.capture, "capture", no_capture)
    _one_line_error(capsys, argv, *words)


def test_module_raising_systemexit_while_importing_is_one_line(capsys, tmp_path, monkeypatch):
    (tmp_path / "exiting_models.py").write_text("raise SystemExit(3)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    _one_line_error(capsys, ["partition", "--module", "exiting_models:f", "--input", "4"],
                    "does not import", "SystemExit", "exit status 3")


def test_factory_raising_systemexit_is_one_line(capsys):
    _one_line_error(capsys, ["partition", "--module", "cli_models:exiting_factory", "--input", "4,16"],
                    "the factory failed", "SystemExit", "exit status 3")


@pytest.fixture
def no_capture(monkeypatch):
    """Fail the test if the CLI traces a model (its arguments should have failed first)."""
    def fail(*args, **kwargs):
        raise AssertionError("traced a model although --html cannot be written")

    monkeypatch.setattr(cli, "_capture", fail)


def test_html_empty_path_is_one_line(capsys, no_capture):
    _one_line_error(capsys, ["partition", "--model", "mlp", "--html", ""], "--html: the path is empty")


def test_html_in_a_missing_directory_fails_before_the_run(capsys, tmp_path, no_capture):
    target = tmp_path / "no" / "page.html"
    _one_line_error(capsys, ["partition", "--model", "mlp", "--html", str(target)], "--html", "does not exist")


def test_html_that_is_a_directory_fails_before_the_run(capsys, tmp_path, no_capture):
    _one_line_error(capsys, ["partition", "--model", "mlp", "--html", str(tmp_path)], "is a directory")


def test_html_over_an_existing_file_needs_force(capsys, tmp_path, monkeypatch):
    target = tmp_path / "page.html"
    target.write_text("keep me")
    with monkeypatch.context() as mp:
        mp.setattr(cli, "_capture", lambda *a, **k: (_ for _ in ()).throw(AssertionError("traced")))
        _one_line_error(capsys, ["partition", "--model", "mlp", "--html", str(target)],
                        "exists (pass --force to overwrite it)")
    assert target.read_text() == "keep me"
    assert cli.main(["partition", "--model", "mlp", "--no-torch", "--html", str(target), "--force"]) == 0
    assert target.read_text().startswith("<!DOCTYPE html>") or "<html" in target.read_text()


@pytest.mark.parametrize("argv, words", [
    (["bench", "--layers", "-1"], ["--layers '-1' must be an integer from 1 to 256"]),
    (["bench", "--layers", "1", "4", "-1"], ["--layers '-1'"]),
    (["bench", "--layers", "0"], ["--layers '0'"]),
    (["bench", "--layers", "100000"], ["--layers '100000'"]),
    (["bench", "--reps=0"], ["--reps '0'"]),
    (["bench", "--seq", "-5", "--quick"], ["--seq '-5'"]),
    (["bench", "--hidden", "x"], ["--hidden 'x'"]),
    (["bench", "--layers"], ["--layers needs a value"]),
])
def test_bench_arguments_are_checked_before_the_benchmark_runs(capsys, monkeypatch, argv, words):
    def ran(*args, **kwargs):
        raise AssertionError("the benchmark ran on bad arguments")

    monkeypatch.setattr(cli, "run_bench", ran)
    _one_line_error(capsys, argv, *words)


def test_bench_without_a_source_checkout_is_one_line_and_writes_nothing(capsys, tmp_path):
    # Installed from a wheel, the benchmark (development tooling) is not there.
    rc = cli.run_bench(["--quick"], script=tmp_path / "bench" / "partition_benchmark.py")
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert len(err.splitlines()) == 1 and err.startswith("fxcut: error: `fxcut bench`"), err
    assert "source checkout" in err and "partition_benchmark.py" in err
    assert list(tmp_path.iterdir()) == []


def test_bench_runs_the_checkouts_benchmark():
    assert cli.BENCH_SCRIPT.resolve() == (ROOT / "bench" / "partition_benchmark.py").resolve()
    assert cli.BENCH_SCRIPT.is_file()


# --------------------------------------------------------------------------- --peaks: the plan against torch (issue 23, item 6)


def _library_peaks(model: str, *, zero3: bool = False, dtype: torch.dtype | None = None, real: bool = False,
                   memory_model: str = "unfused", **cfg) -> dict[str, dict[str, int]]:
    """The memory model's peaks the CLI should print: the library's planner on the same capture."""
    cap = capture_model(model, autocast_dtype=dtype, fake=not real, **cfg)
    out: dict[str, dict[str, int]] = {"torch": {}, "plan": {}}
    for b in (0.0, 1.0):
        partition = fxcut.planned_partitioner(b, memory_model=memory_model, check=None)
        gm = cap.fresh()
        if zero3:
            fxcut.recompute_param_aliases(gm.graph, cap.param_indices)
        partition(gm, cap.joint_inputs, num_fwd_outputs=cap.num_fwd_outputs, **cap.partition_kwargs)
        out["plan"][f"{b:g}"] = partition.planner.last.peak_bytes
        out["torch"][f"{b:g}"] = partition.planner.last.torch_points[b][0]
    return out


def _peak_rows(out: str, block: str) -> dict[str, list[str]]:
    """The rows (torch, fxcut plan, plan / torch) of the --peaks block whose heading starts with ``block``."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(block))
    assert lines[start + 1].split() == ["budget", "0", "budget", "1"], lines[start + 1]
    rows = {}
    for line in lines[start + 2:start + 5]:
        label = line[:16].strip()
        rows[label] = line[16:].split()
    assert set(rows) == {"torch", "fxcut plan", "plan / torch"}, lines[start:start + 5]
    return rows


def _assert_peak_block(rows: dict[str, list[str]], figures: dict[str, dict[str, int]]) -> None:
    for label, side in (("torch", "torch"), ("fxcut plan", "plan")):
        assert rows[label] == [x for b in ("0", "1") for x in (f"{figures[side][b] / 2**20:,.2f}", "MiB")]
    assert rows["plan / torch"] == [f"{figures['plan'][b] / figures['torch'][b]:.3f}" for b in ("0", "1")]


def test_peaks_print_the_memory_models_figures_for_that_graph(capsys):
    argv = ["partition", "--model", "gpt2", "--layers", "1", "--hidden", "64", "--seq", "32", "--zero3", "--peaks"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    want = _library_peaks("gpt2", zero3=True, layers=1, hidden=64, seq=32)
    want_inductor = _library_peaks("gpt2", zero3=True, memory_model="inductor", layers=1, hidden=64, seq=32)
    _assert_peak_block(_peak_rows(out, "memory model"), want)
    _assert_peak_block(_peak_rows(out, "inductor memory model"), want_inductor)
    assert want_inductor != want  # two models, two sets of figures
    assert "measured" not in out  # fake tensors: nothing to measure
    assert cli.main(argv + ["--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["peaks"] == {"model": want, "inductor_model": want_inductor}  # to the byte
    # the model's own claim on this graph: the plan's budget-0 peak is the lowest it found, below torch's
    assert want["plan"]["0"] < want["torch"]["0"] and want["plan"]["1"] <= want["torch"]["1"]


def test_peaks_real_prints_one_measured_step_of_each_side(capsys):
    from fxcut.tools.capture import CaptureOptions
    from fxcut.tools.measure import measured_peaks
    from fxcut.tools.models import build_model

    argv = ["partition", "--model", "mlp", "--real", "--peaks", "--real-backend", "aot", "--json"]
    assert cli.main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    peaks = data["peaks"]
    assert set(peaks["measured"]) == {"aot"}
    assert peaks["model"] == _library_peaks("mlp", real=True)
    assert peaks["inductor_model"] == _library_peaks("mlp", real=True, memory_model="inductor")
    # CPU allocation is deterministic: the same model measured again by the library gives the same bytes
    built = build_model("mlp")
    again = measured_peaks(built.model, built.make_inputs(), built.loss_fn, options=CaptureOptions())
    measured = peaks["measured"]["aot"]
    assert measured == {side: {f"{b:g}": m.peak_bytes for b, m in d.items()} for side, d in again.items()}
    grads = sum(p.numel() * p.element_size() for p in built.model.parameters())
    for side in ("torch", "plan"):
        for b in ("0", "1"):
            assert measured[side][b] >= grads  # the step makes every gradient
    assert cli.main(argv[:-1]) == 0
    out = capsys.readouterr().out
    _assert_peak_block(_peak_rows(out, "memory model"), peaks["model"])
    _assert_peak_block(_peak_rows(out, "measured"), measured)
    low, high = cli.model_gaps(peaks["model"], measured)
    assert -0.03 <= low <= high <= 0.03  # eager kernels: the model is the measured program (docs/memory_model.md)
    assert (f"backend aot: eager kernels: torch's aot_eager against fxcut.aot_backend" in out
            and cli.gaps_text(low, high) in out)


def test_the_gap_between_a_model_and_its_measurement_is_signed() -> None:
    measured = {"torch": {"0": 100, "1": 200}, "plan": {"0": 50, "1": 200}}
    model = {"torch": {"0": 110, "1": 200}, "plan": {"0": 45, "1": 200}}
    assert cli.model_gaps(model, measured) == (-0.1, 0.1)
    assert cli.gaps_text(-0.1, 0.1) == "its model -10.0% to +10.0% off it"
    assert cli.gaps_text(0.05, 0.05) == "its model +5.0% off it"
    assert cli.gaps_text(0.0, 0.0001) == "its model equal to it (within 0.05%)"


def test_peaks_real_measures_both_backends_by_default_zero3_included(capsys):
    """The main job's --real: eager kernels and inductor, each beside its
    own model; under --zero3 both sides run DeepCompile's walk (torch's
    partitioner after it under inductor, as DeepCompile compiles)."""
    from fxcut.tools.models import build_model

    argv = ["partition", "--model", "gpt2", "--layers", "1", "--hidden", "64", "--seq", "32", "--real", "--peaks",
            "--zero3", "--json"]
    assert cli.main(argv) == 0
    peaks = json.loads(capsys.readouterr().out)["peaks"]
    assert list(peaks["measured"]) == ["aot", "inductor"]
    built = build_model("gpt2", layers=1, hidden=64, seq=32)
    grads = sum(p.numel() * p.element_size() for p in built.model.parameters())
    inductor = peaks["measured"]["inductor"]
    assert all(inductor[side][b] >= grads for side in ("torch", "plan") for b in ("0", "1"))
    assert inductor != peaks["measured"]["aot"]  # another program: fused kernels
    # the plan at b=1 is never above torch's default decision on the backend it runs under
    assert inductor["plan"]["1"] <= inductor["torch"]["1"]
    assert -0.03 <= min(cli.model_gaps(peaks["model"], peaks["measured"]["aot"]))
    assert max(cli.model_gaps(peaks["model"], peaks["measured"]["aot"])) <= 0.03
    low, high = cli.model_gaps(peaks["inductor_model"], inductor)
    assert -0.25 <= low <= high <= 0.25
    assert cli.main(argv[:-1]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("measured: ")]
    assert [line.split(", backend ")[1].split(":")[0] for line in lines] == ["aot", "inductor"]
    start = out.index("backend inductor:")
    _assert_peak_block(_peak_rows(out[start - len("measured: one training step on CPU, real tensors, "):], "measured"),
                       inductor)


def test_the_measured_inductor_side_of_zero3_is_torchs_partitioner_after_the_walk(monkeypatch):
    from torch.utils.checkpoint import CheckpointPolicy

    from fxcut.tools import measure
    from fxcut.tools.models import build_model

    calls: list[int] = []
    torch_partition = measure.torch_min_cut_partition

    def recording(gm, joint_inputs, **kwargs):
        calls.append(sum(n.meta.get("recompute") == CheckpointPolicy.MUST_RECOMPUTE for n in gm.graph.nodes))
        return torch_partition(gm, joint_inputs, **kwargs)

    monkeypatch.setattr(measure, "torch_min_cut_partition", recording)
    built = build_model("mlp")
    # no cache: a graph compiled before (the tests above) would skip the partitioner
    with torch._functorch.config.patch(enable_autograd_cache=False), torch._inductor.config.patch(fx_graph_cache=False):
        measure.measure_compiled_step(built.model, built.make_inputs(), built.loss_fn,
                                      measure._torch_backend("inductor", True))
    assert len(calls) == 1 and calls[0] > 0  # torch's partitioner ran once, on a graph the walk tagged


@pytest.mark.parametrize("argv, words", [
    (["--real-backend", "tvm"], ["--real-backend", "tvm"]),
])
def test_bad_peaks_options_are_one_line(capsys, argv, words):
    _one_line_error(capsys, ["partition", "--model", "mlp", "--real", "--peaks", *argv], *words)


# --------------------------------------------------------------------------- issue 38: the plan where users look


def _torch_saved(cap, budget: float) -> list[str]:
    """torch's own partitioner at ``activation_memory_budget=budget``: the saved names."""
    from torch._functorch import config as functorch_config
    from torch._functorch.partitioners import min_cut_rematerialization_partition as torch_partition

    with functorch_config.patch(activation_memory_budget=budget):
        fw, bw = torch_partition(cap.fresh(), cap.joint_inputs, num_fwd_outputs=cap.num_fwd_outputs,
                                 **cap.partition_kwargs)
    return summarize(fw, bw, cap.num_fwd_outputs).saved


def _model_peak(cap, names: list[str]) -> int:
    """The memory model's peak of the decision saving ``names``, asked of
    the model directly on the prepared graph (not through the CLI's plan)."""
    from fxcut.tools.decisions import simulate_saved
    from fxcut.tools.html import decide_prepared

    d = decide_prepared(cap.fresh(), num_fwd_outputs=cap.num_fwd_outputs, **cap.partition_kwargs)
    by_name = {n.name: n for n in d.arrays.nodes}
    return simulate_saved(d.arrays, [by_name[s] for s in names], cap.num_fwd_outputs).peak_bytes


def _mib_text(n: int) -> str:
    from fxcut.tools.report import mib

    return mib(n)


@pytest.fixture(scope="module")
def gpt2_plan_0():
    """``fxcut partition --model gpt2 --plan-budget 0``, as JSON and as text,
    and the independent figures: torch's own partitioner at b=0 and at its
    default budget, and the memory model's peak of each side's saved values."""
    import contextlib
    import io

    runs = {}
    for name, extra in (("json", ["--json"]), ("text", [])):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert cli.main(["partition", "--model", "gpt2", "--plan-budget", "0", *extra]) == 0
        runs[name] = out.getvalue()
    data = json.loads(runs["json"])
    cap = capture_model("gpt2", fake=True)
    at_0, at_default = _torch_saved(cap, 0.0), _torch_saved(cap, 1.0)
    peaks = {"plan": _model_peak(cap, data["fxcut"]["saved"]), "same": _model_peak(cap, at_0),
             "default": _model_peak(cap, at_default)}
    return data, runs["text"], at_0, peaks


def test_a_plan_is_set_against_torch_at_the_same_b_and_at_its_default(gpt2_plan_0):
    """The plan's peak is compared with torch's partitioner at the same b
    (activation_memory_budget=0) and at its default, every figure the memory
    model's peak of what that side saves; the torch row is torch at b=0."""
    data, _, at_0, peaks = gpt2_plan_0
    assert data["torch"]["saved"] == at_0  # torch's row: its partitioner at the same b
    figures = data["plan_figures"]
    assert figures["plan"]["budget"] == figures["torch_same_budget"]["budget"] == 0.0
    assert figures["torch_default"]["budget"] == 1.0
    assert figures["plan"]["peak_bytes"] == peaks["plan"]
    assert figures["torch_same_budget"]["peak_bytes"] == peaks["same"]
    assert figures["torch_default"]["peak_bytes"] == peaks["default"]
    assert peaks["plan"] < peaks["same"]  # gpt2 at b=0: the plan's peak is the lower
    # a plan is no verdict and no speed
    assert data["same_saved"] is None and data["same_graphs"] is None and data["speedup"] is None


def test_a_plan_reads_as_a_plan_in_one_unit(gpt2_plan_0):
    data, text, _, peaks = gpt2_plan_0
    assert "DIFFERENT" not in text and "identical" not in text and "torch's speed" not in text
    line = next(line for line in text.splitlines() if line.startswith("plan at b=0:"))
    assert line.startswith(f"plan at b=0: peak {_mib_text(peaks['plan'])} vs torch at the same b "
                           f"{_mib_text(peaks['same'])} and at torch's default budget (1) "
                           f"{_mib_text(peaks['default'])} (the memory model's peaks"), line
    assert "KiB" not in text and "GiB" not in text  # one unit: MiB
    assert "torch: its partitioner at activation_memory_budget=0, the same b" in text
    assert "fxcut's b bounds the peak" in text  # what b means to each


def test_a_plan_without_torch_or_peaks_still_shows_torchs_peaks(capsys, gpt2_plan_0):
    data, _, _, peaks = gpt2_plan_0
    assert cli.main(["partition", "--model", "gpt2", "--plan-budget", "0", "--no-torch"]) == 0
    out = capsys.readouterr().out
    assert f"vs torch at the same b {_mib_text(peaks['same'])}" in out
    assert "the memory plan against torch: peak bytes" not in out  # no --peaks block


def test_budget_with_a_plan_is_the_same_b_or_refused(capsys, gpt2_plan_0, monkeypatch):
    """--budget 0 --plan-budget 0 compares at the same b (fairly, as without
    --budget); a --budget other than the plan's is refused before tracing."""
    data, _, _, _ = gpt2_plan_0
    assert cli.main(["partition", "--model", "gpt2", "--plan-budget", "0", "--budget", "0", "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["torch"]["saved"] == data["torch"]["saved"]
    assert again["plan_figures"]["torch_same_budget"] == data["plan_figures"]["torch_same_budget"]
    monkeypatch.setattr(cli, "_capture", lambda *a, **k: (_ for _ in ()).throw(AssertionError("traced")))
    _one_line_error(capsys, ["partition", "--model", "gpt2", "--plan-budget", "0", "--budget", "0.5"],
                    "--budget 0.5 with --plan-budget 0", "same b")


@pytest.mark.parametrize("argv, words", [
    (["--plan-time-limit", "5"], ["--plan-time-limit needs --plan-budget"]),
    (["--plan-budget", "0", "--plan-time-limit", "5"], ["--plan-time-limit limits the exact solver"]),
    (["--plan-budget", "1e400"], ["--plan-budget", "'1e400' is not a finite number"]),
    (["--plan-budget", "nan"], ["--plan-budget", "'nan' is not a finite number"]),
    (["--budget=-inf"], ["--budget", "'-inf' is not a finite number"]),
    (["--plan-budget", "1.5"], ["--plan-budget 1.5 must be a number between 0 and 1"]),
    (["--plan-solver", "exact"], ["--plan-solver needs --plan-budget"]),
])
def test_bad_plan_options_are_one_line_before_tracing(capsys, no_capture, argv, words):
    err = _one_line_error(capsys, ["partition", "--model", "mlp", *argv], *words)
    assert "inf " not in err.replace("-inf'", "")  # never echoed as inf


def test_explain_plan_budget_rejects_a_bad_budget(capsys, no_capture):
    _one_line_error(capsys, ["explain", "--model", "mlp", "--plan-budget", "1e400", "addmm"], "'1e400'")


# --------------------------------------------------------------------------- issue 38: missing extras, --module, --html


def test_missing_highs_is_one_line_naming_the_extra(capsys, monkeypatch, no_capture):
    monkeypatch.setitem(sys.modules, "highspy", None)  # as if HiGHS were not installed
    for solver in ("exact", "auto"):
        _one_line_error(capsys, ["partition", "--model", "mlp", "--plan-budget", "0", "--plan-solver", solver],
                        f"--plan-solver {solver} needs HiGHS", "pip install 'fxcut[exact]'")


def test_bench_without_scipy_is_one_line_naming_the_extra(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "scipy", None)  # as if scipy were not installed
    _one_line_error(capsys, ["bench", "--quick"], "`fxcut bench` needs scipy", "pip install 'fxcut[bench]'")


def test_a_module_the_benchmark_imports_late_is_one_line_too(capsys, monkeypatch, tmp_path):
    script = tmp_path / "partition_benchmark.py"
    script.write_text("def main(argv, prog):\n    import transformers\n    return 0\n")
    monkeypatch.setitem(sys.modules, "transformers", None)
    assert cli.run_bench(["--quick"], script=script) == 2
    err = capsys.readouterr().err.strip()
    assert err == "fxcut: error: `fxcut bench` needs transformers, which is not installed: pip install 'fxcut[bench]'"


def test_a_missing_optional_module_anywhere_in_a_command_is_one_line(capsys, monkeypatch):
    def missing(*args, **kwargs):
        raise ModuleNotFoundError("No module named 'transformers'", name="transformers")

    monkeypatch.setattr(cli, "run_partition", missing)
    _one_line_error(capsys, ["partition", "--model", "mlp"], "needs transformers", "pip install 'fxcut[bench]'")


def test_module_from_the_working_directory(capsys, tmp_path, monkeypatch):
    """``fxcut partition --module mine:build`` in the directory holding
    mine.py: the working directory is on the import path while the user's
    code is imported (the console script does not put it there)."""
    name = "fxcut_cwd_models_issue38"
    (tmp_path / f"{name}.py").write_text("import torch.nn as nn\n\n\ndef build():\n"
                                         "    return nn.Sequential(nn.Linear(16, 8), nn.GELU(), nn.Linear(8, 4))\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    monkeypatch.delitem(sys.modules, name, raising=False)
    before = list(sys.path)
    assert cli.main(["partition", "--module", f"{name}:build", "--input", "4,16", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["model"] == f"{name}:build" and data["same_saved"] is True
    assert sys.path == before  # put back
    sys.modules.pop(name, None)
    err = _one_line_error(capsys, ["partition", "--module", "fxcut_no_such_module_x:build", "--input", "4,16"],
                          "does not import", "fxcut_no_such_module_x")
    assert f"looked in the working directory {tmp_path}" in err


def test_html_says_where_it_wrote_the_page(capsys, tmp_path):
    target = tmp_path / "page.html"
    assert cli.main(["partition", "--model", "mlp", "--no-torch", "--html", str(target)]) == 0
    out = capsys.readouterr().out
    assert f"fxcut: wrote the HTML page to {target.resolve()}\n" in out and target.is_file()
    # with --json stdout is the JSON alone: the line goes to stderr
    assert cli.main(["partition", "--model", "mlp", "--no-torch", "--json", "--html", str(target), "--force"]) == 0
    captured = capsys.readouterr()
    json.loads(captured.out)
    assert captured.err == f"fxcut: wrote the HTML page to {target.resolve()}\n"


# --------------------------------------------------------------------------- issue 38: explain


def test_the_readmes_explain_example_names_a_saved_value(capsys):
    """The README's ``fxcut explain --model M NODE`` ("why a value was
    saved") answers about a value that partition saves."""
    import re

    readme = (ROOT / "README.md").read_text()
    examples = re.findall(r"fxcut explain --model (\w+) (\w+)", readme)
    assert examples
    for model, node in examples:
        _, summary, _ = _library(model)
        assert node in summary.saved, (model, node, summary.saved)
        assert cli.main(["explain", "--model", model, node]) == 0
        assert capsys.readouterr().out.splitlines()[1].strip().startswith("saved:")


def test_explain_list_lists_every_node_where_it_went(capsys):
    from fxcut.explain import explain_values

    assert cli.main(["explain", "--model", "mlp", "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    cap, summary, _ = _library("mlp")
    want = explain_values(cap.fresh(), None, num_fwd_outputs=cap.num_fwd_outputs, **cap.partition_kwargs)
    rows = {line.split()[0]: line for line in lines[1:]}
    assert list(rows) == [a["node"] for a in want]
    assert {name for name, line in rows.items() if line.rstrip().endswith(" saved")} == set(summary.saved)
    assert cli.main(["explain", "--model", "mlp", "--list", "--json"]) == 0
    assert [a["node"] for a in json.loads(capsys.readouterr().out)] == list(rows)


def test_explain_plan_budget_explains_the_plans_choices(capsys):
    """explain --plan-budget 0: where the plan put each node (what the
    library's planned partitioner saves), beside where torch puts it at the
    same b and at its default (what torch's own partitioner saves)."""
    assert cli.main(["explain", "--model", "gpt2", "--plan-budget", "0", "--list", "--json"]) == 0
    accounts = json.loads(capsys.readouterr().out)
    cap = capture_model("gpt2", fake=True)
    planned = fxcut.planned_partitioner(0.0)
    fw, bw = planned(cap.fresh(), cap.joint_inputs, num_fwd_outputs=cap.num_fwd_outputs, **cap.partition_kwargs)
    assert not planned.planner.last.timed_out  # the search stopped at its work budget: the same plan each run
    saved = {a["node"] for a in accounts if a["place"] == "saved"}
    assert saved == set(summarize(fw, bw, cap.num_fwd_outputs).saved)
    assert {a["node"] for a in accounts if a["torch_same_budget"]["place"] == "saved"} == set(_torch_saved(cap, 0.0))
    assert {a["node"] for a in accounts if a["torch_default"]["place"] == "saved"} == set(_torch_saved(cap, 1.0))
    # a value the plan recomputes and torch (at its default) saves: the plan's reason, not the min cut's
    node = next(a for a in accounts if a["place"] == "recomputed" and a["torch_default"]["place"] == "saved")
    assert "the plan" in node["why"] and "minimum cut" not in node["why"]
    assert cli.main(["explain", "--model", "gpt2", "--plan-budget", "0", node["node"]]) == 0
    text = capsys.readouterr().out
    assert f"  the plan at b=0: {node['why']}" in text
    assert "  torch at the same b (0): " in text and "  torch at its default budget (1): saved" in text
    assert "plan at b=0: peak " in text and " MiB vs torch at the same b " in text


def test_the_main_jobs_peaks_on_an_untested_torch_say_why_and_exit_0(monkeypatch, capsys):
    """On a torch fxcut is not tested on, torch's partitioner decides every
    graph (as the README promises): --peaks says so in one line instead of
    failing the command."""
    from fxcut.torchrules import versions

    monkeypatch.setattr(versions, "installed_version", lambda: "2.99.0")
    monkeypatch.delenv(versions.ALLOW_UNTESTED_ENV, raising=False)
    assert cli.main(["partition", "--model", "mlp", "--peaks"]) == 0
    out = capsys.readouterr().out
    assert "--peaks: torch 2.99.0 is not a release fxcut is tested on" in out
    assert "the plan's peaks are not shown" in out
