"""What a user feels: a cold ``torch.compile`` training step, stock torch vs fxcut.

Two modes (``--modes``):

- ``inductor``: stock ``torch.compile`` (inductor on CPU, torch's min-cut
  partitioner) vs ``torch.compile(backend=fxcut.inductor_backend())``;
- ``aot-noop``: AOT Autograd with no-op compilers (eager kernels), torch's
  ``min_cut_rematerialization_partition`` as ``partition_fn`` vs
  ``fxcut.aot_backend()``: no code generation, so the partitioner is a larger
  share of the compile.

Each run is a fresh Python process with its own empty inductor cache
(``TORCHINDUCTOR_CACHE_DIR`` a new temporary folder, FX graph and AOT
autograd caches off), so every run compiles from scratch.  A run builds the
GPT of ``fxcut.tools.models`` (``--layers`` blocks), compiles it, and times the
first training step (forward, loss, backward: dynamo, AOT Autograd, the
partitioner, inductor's code generation and C++ compilation) and, inside
it, the partitioner call alone.  Rounds alternate which side goes first;
ratios are per round (stock / fxcut), medians reported.  ``--python`` runs
the same in other interpreters (other torch releases' venvs), this
checkout's ``python/`` first on their path.

    PYTHONPATH=python python bench/bench_compile.py --md docs/bench_compile.md --json docs/bench_compile.json
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODES = ("inductor", "aot-noop")


def _child(side: str, cfg: dict[str, Any], mode: str = "inductor") -> dict[str, Any]:
    import torch

    import fxcut
    from fxcut.tools.models import build_model

    torch.manual_seed(0)
    budget = cfg.pop("budget", None)
    check = {"check_time_limit": cfg.pop("check_time_limit")} if "check_time_limit" in cfg else {}
    built = build_model("gpt2", **cfg)
    model = built.model
    model.train()
    inputs = built.make_inputs()
    spent: list[float] = []
    kinds: list[str] = []

    def timed(fn: Any) -> Any:
        def wrapper(gm: Any, *args: Any, **kwargs: Any) -> Any:
            from torch.fx._lazy_graph_module import _LazyGraphModule, _use_lazy_graph_module_flag

            kinds.append(f"joint lazy={isinstance(gm, _LazyGraphModule)} flag={_use_lazy_graph_module_flag}")
            t = time.perf_counter()
            try:
                return fn(gm, *args, **kwargs)
            finally:
                spent.append(time.perf_counter() - t)
        return wrapper

    if mode == "aot-noop":
        if side == "stock":
            from torch._dynamo.backends.common import aot_autograd
            from torch._dynamo.backends.debugging import boxed_nop
            from torch._functorch.partitioners import min_cut_rematerialization_partition

            backend: Any = aot_autograd(fw_compiler=boxed_nop, bw_compiler=boxed_nop,
                                        keep_inference_input_mutations=True,
                                        partition_fn=timed(min_cut_rematerialization_partition))
        else:
            import fxcut.partition as fp
            from fxcut.integrations import torch_compile as tc

            if budget is None:
                # fxcut.aot_backend() looks the partition function up at each call.
                fp.min_cut_rematerialization_partition = timed(fp.min_cut_rematerialization_partition)  # type: ignore[assignment]
            else:
                plan_partition = tc._fxcut_partition
                tc._fxcut_partition = lambda *a, **k: timed(plan_partition(*a, **k))  # type: ignore[assignment]
            backend = fxcut.aot_backend(memory_budget=budget)
    elif side == "stock":
        import torch._inductor.compile_fx as cfx

        cfx.min_cut_rematerialization_partition = timed(cfx.min_cut_rematerialization_partition)
        backend = "inductor"
    else:
        from fxcut.integrations import torch_compile as tc

        tc.InductorPartitioner.__call__ = timed(tc.InductorPartitioner.__call__)  # type: ignore[method-assign]
        backend = fxcut.inductor_backend(memory_budget=budget, **check)
    compiled = torch.compile(model, backend=backend)
    stock_budget = 1.0 if budget is None or side != "stock" else budget
    t = time.perf_counter()
    with torch._functorch.config.patch(activation_memory_budget=stock_budget):
        loss = built.loss_fn(compiled(*inputs), inputs)
        loss.backward()
    total = time.perf_counter() - t
    return {"side": side, "mode": mode, "compile_s": total, "partition_s": sum(spent), "calls": len(spent),
            "kinds": sorted(set(kinds)), "loss": float(loss), "torch": torch.__version__}


def _run(side: str, cfg: dict[str, Any], mode: str = "inductor", python: str = sys.executable) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="fxcut-inductor-") as cache:
        env = dict(os.environ)
        env.update(TORCHINDUCTOR_CACHE_DIR=cache, TORCHINDUCTOR_FX_GRAPH_CACHE="0",
                   TORCHINDUCTOR_AUTOGRAD_CACHE="0", TRITON_CACHE_DIR=os.path.join(cache, "triton"))
        env["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, "python"), *filter(None, [env.get("PYTHONPATH")])])
        out = subprocess.run([python, os.path.abspath(__file__), "--child", side, "--mode", mode,
                              "--cfg", json.dumps(cfg)],
                             env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{side} {mode} run ({python}) failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])



def measure(cfg: dict[str, Any], mode: str, rounds: int, python: str = sys.executable) -> dict[str, Any]:
    """``rounds`` interleaved rounds of one mode in one interpreter: the runs and their medians."""
    runs = []
    for r in range(rounds):
        order = ("stock", "fxcut") if r % 2 == 0 else ("fxcut", "stock")
        pair = {side: _run(side, cfg, mode, python) for side in order}
        runs.append(pair)
        s, f = pair["stock"], pair["fxcut"]
        print(f"torch {s['torch']} {mode} round {r + 1}: stock {s['compile_s']:.1f} s (partition "
              f"{s['partition_s']:.2f} s), fxcut {f['compile_s']:.1f} s (partition {f['partition_s']:.2f} s), "
              f"ratio {s['compile_s'] / f['compile_s']:.3f}", file=sys.stderr, flush=True)

    def med(side: str, key: str) -> float:
        return statistics.median(r[side][key] for r in runs)

    def per_round(fn: Any) -> float:
        return statistics.median(fn(r) for r in runs)

    return {
        "mode": mode, "torch": runs[0]["stock"]["torch"], "python": python, "config": cfg, "rounds": runs,
        "stock_compile_s": med("stock", "compile_s"), "fxcut_compile_s": med("fxcut", "compile_s"),
        "stock_partition_s": med("stock", "partition_s"), "fxcut_partition_s": med("fxcut", "partition_s"),
        "compile_ratio": per_round(lambda r: r["stock"]["compile_s"] / r["fxcut"]["compile_s"]),
        "partition_ratio": per_round(lambda r: r["stock"]["partition_s"] / r["fxcut"]["partition_s"]),
        "compile_saved_s": per_round(lambda r: r["stock"]["compile_s"] - r["fxcut"]["compile_s"]),
        "stock_partition_share": per_round(lambda r: r["stock"]["partition_s"] / r["stock"]["compile_s"]),
        "fxcut_partition_share": per_round(lambda r: r["fxcut"]["partition_s"] / r["fxcut"]["compile_s"]),
        "partition_saving_share": per_round(
            lambda r: (r["stock"]["partition_s"] - r["fxcut"]["partition_s"]) / r["stock"]["compile_s"]),
        "joint_kinds": sorted({k for r in runs for side in r.values() for k in side["kinds"]}),
    }


MODE_TEXT = {
    "inductor": "inductor on CPU: stock `torch.compile(model)` vs `torch.compile(model, "
                "backend=fxcut.inductor_backend())`",
    "aot-noop": "eager kernels: torch's `aot_eager` (boxed no-op compilers, "
                "partition_fn=torch's min_cut_rematerialization_partition) vs `fxcut.aot_backend()`",
}


def _machine() -> str:
    import platform

    cpu = platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    return f"{cpu} ({os.cpu_count()} CPUs), python {platform.python_version()}"


def format_markdown(results: list[dict[str, Any]], command: str, seconds: float, note: str | None) -> str:
    cfg = results[0]["config"]
    lines = [
        f"Command: `{command}` ({seconds / 60:.1f} min for the whole run).",
        "",
        f"Model: the GPT of `fxcut.tools.models` ({cfg['layers']} layers, hidden {cfg['hidden']}, {cfg['heads']} "
        f"heads, seq {cfg['seq']}, batch {cfg['batch']}, vocab {cfg['vocab']}), float32 on CPU"
        + (f"; the plan: stock at `activation_memory_budget={cfg['budget']:g}` against fxcut's backend at "
           f"`memory_budget={cfg['budget']:g}`" + (f", `check_time_limit={cfg['check_time_limit']:g}`"
                                                    if cfg.get("check_time_limit") is not None else "")
           if cfg.get("budget") is not None else "") + ". Timed: the first "
        "training step (forward, loss, backward) from the first call: dynamo, AOT Autograd, the partitioner, "
        "and inductor's code generation and C++ compilation where used. Each run is a fresh process with a fresh "
        "cache (`TORCHINDUCTOR_CACHE_DIR` a new temporary folder, `TORCHINDUCTOR_FX_GRAPH_CACHE=0`, "
        "`TORCHINDUCTOR_AUTOGRAD_CACHE=0`); each round runs both sides, alternating which goes first; ratios "
        "and shares are medians of per-round values, times medians of the runs. The partitioner's time is "
        "measured inside the same runs (a wrapper around the partition function the compile calls). "
        f"Machine: {_machine()}, {time.strftime('%Y-%m-%d %H:%M')}.",
    ]
    if note:
        lines += ["", f"**{note}**"]
    lines += ["", "| torch | mode | rounds | stock compile | fxcut compile | compile stock / fxcut | "
              "compile stock - fxcut | stock partitioner (share of its compile) | fxcut partitioner (share) | "
              "partitioner stock / fxcut | partitioner saving, share of the stock compile |",
              "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        saving = r.get("partition_saving_share")
        lines.append(
            f"| {r['torch']} | {r['mode']} | {len(r['rounds'])} | {r['stock_compile_s']:.1f} s | "
            f"{r['fxcut_compile_s']:.1f} s | {r['compile_ratio']:.3f} | {r['compile_saved_s']:.2f} s | "
            f"{r['stock_partition_s']:.2f} s ({100 * r['stock_partition_share']:.1f}%) | "
            f"{r['fxcut_partition_s']:.2f} s ({100 * r['fxcut_partition_share']:.1f}%) | "
            f"{r['partition_ratio']:.2f} | " + (f"{100 * saving:.1f}% |" if saving is not None else "- |"))
    lines += ["", "The last column, (stock partitioner - fxcut partitioner) / stock compile per round, is the "
              "part of the cold compile that fxcut's partitioner removes as measured inside the runs; the "
              "end-to-end columns also carry the run-to-run noise of everything else the compile does."]
    lines += ["", "Modes:", ""] + [f"- `{m}`: {t}." for m, t in MODE_TEXT.items()]
    kinds = "; ".join(f"{r['mode']}: {', '.join(r['joint_kinds'])}" for r in results)
    lines += ["", f"The joint module as the partitioner got it (both sides; lazy: a `_LazyGraphModule`, flag: "
              f"`_use_lazy_graph_module`): {kinds}.", "",
              "Every run, per round:", "",
              "| torch | mode | round | stock compile | stock partitioner | fxcut compile | fxcut partitioner |",
              "|---|---|---:|---:|---:|---:|---:|"]
    for r in results:
        for i, pair in enumerate(r["rounds"], 1):
            s, f = pair["stock"], pair["fxcut"]
            lines.append(f"| {r['torch']} | {r['mode']} | {i} | {s['compile_s']:.2f} s | {s['partition_s']:.3f} s | "
                         f"{f['compile_s']:.2f} s | {f['partition_s']:.3f} s |")
    return "\n".join(lines) + "\n"


def format_readme(results: list[dict[str, Any]], note: str | None) -> str:
    cfg = results[0]["config"]
    parts = []
    for r in results:
        parts.append(f"torch {r['torch']}, {r['mode']}: {r['stock_compile_s']:.1f} s stock vs "
                     f"{r['fxcut_compile_s']:.1f} s with fxcut (stock / fxcut {r['compile_ratio']:.2f}); the "
                     f"partitioner {r['stock_partition_s']:.2f} s ({100 * r['stock_partition_share']:.1f}% of the "
                     f"compile) vs {r['fxcut_partition_s']:.2f} s ({100 * r['fxcut_partition_share']:.1f}%)")
    return (f"**What a user feels**: a cold `torch.compile` training step of a {cfg['layers']}-layer GPT (hidden "
            f"{cfg['hidden']}, seq {cfg['seq']}, batch {cfg['batch']}) on CPU, each run a fresh process with a "
            "fresh inductor cache, medians of interleaved rounds (`bench/bench_compile.py`"
            + (f"; {note}" if note else "") + "): " + "; ".join(parts)
            + ". Every run: [docs/bench_compile.md](docs/bench_compile.md).")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=1024)
    ap.add_argument("--budget", type=float, help="the plan: stock at activation_memory_budget=b against fxcut's "
                    "backends at memory_budget=b (default: the default path on both sides)")
    ap.add_argument("--check-time-limit", type=float, metavar="S",
                    help="with --budget: fxcut.inductor_backend's check_time_limit (a positive one asks inductor; "
                         "default: the backend's, 0: the plan on its memory model alone)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds per mode and interpreter")
    ap.add_argument("--aot-rounds", type=int, default=5, help="rounds of aot-noop (seconds each)")
    ap.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    ap.add_argument("--python", action="append", metavar="PATH",
                    help="an interpreter (another torch release's venv python) to run in; repeat for several "
                         "(default: this one)")
    ap.add_argument("--note", help="a line printed with the table (e.g. the machine was loaded)")
    ap.add_argument("--json", help="write the runs here")
    ap.add_argument("--from-json", metavar="FILE",
                    help="measure nothing: write --md / --readme from the runs a --json FILE holds (its command)")
    ap.add_argument("--md", help="write the Markdown report into its section of this file (e.g. docs/bench_compile.md)")
    ap.add_argument("--readme", help="write a summary paragraph into its section of this file (e.g. README.md)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--mode", default="inductor", help=argparse.SUPPRESS)
    ap.add_argument("--cfg", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        print(json.dumps(_child(a.child, json.loads(a.cfg), a.mode)))
        return 0
    cfg: dict[str, Any] = {"layers": a.layers, "hidden": a.hidden, "heads": a.heads, "seq": a.seq,
                           "batch": a.batch, "vocab": a.vocab}
    if a.budget is not None:
        cfg["budget"] = a.budget
    if a.check_time_limit is not None:
        if a.budget is None:
            ap.error("--check-time-limit applies to the plan: pass --budget too")
        cfg["check_time_limit"] = a.check_time_limit
    command = "PYTHONPATH=python python bench/bench_compile.py " + shlex.join(sys.argv[1:] if argv is None else argv)
    if a.from_json:
        with open(a.from_json) as f:
            saved = json.load(f)
        command, seconds, results = saved["command"], saved["seconds"], saved["results"]
        a.note = a.note or saved.get("note")
        for r in results:  # runs saved before this figure existed
            r.setdefault("partition_saving_share", statistics.median(
                (p["stock"]["partition_s"] - p["fxcut"]["partition_s"]) / p["stock"]["compile_s"] for p in r["rounds"]))
    else:
        start = time.perf_counter()
        results = []
        for python in a.python or [sys.executable]:
            for mode in a.modes:
                rounds = a.aot_rounds if mode == "aot-noop" else a.rounds
                results.append(measure(cfg, mode, rounds, python))
        seconds = time.perf_counter() - start
    for r in results:
        print(f"torch {r['torch']} {r['mode']}, medians of {len(r['rounds'])} interleaved rounds: stock "
              f"{r['stock_compile_s']:.1f} s (partitioner {r['stock_partition_s']:.2f} s, "
              f"{100 * r['stock_partition_share']:.1f}%), fxcut {r['fxcut_compile_s']:.1f} s (partitioner "
              f"{r['fxcut_partition_s']:.2f} s, {100 * r['fxcut_partition_share']:.1f}%); compile stock/fxcut "
              f"{r['compile_ratio']:.3f}, partitioner {r['partition_ratio']:.2f}")
    print(f"whole run: {seconds / 60:.1f} min")
    if a.json and not a.from_json:
        with open(a.json, "w") as f:
            json.dump({"command": command, "seconds": seconds, "note": a.note, "results": results}, f, indent=1)
    if a.md or a.readme:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from docs_sections import replace_section  # bench/, next to this script

        if a.md:
            replace_section(a.md, "bench_compile", format_markdown(results, command, seconds, a.note))
        if a.readme:
            replace_section(a.readme, "bench_compile", format_readme(results, a.note))
    return 0


if __name__ == "__main__":
    sys.exit(main())
