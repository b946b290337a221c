"""The real-model benchmark: stock torch.compile at activation_memory_budget=b vs fxcut's plan at memory_budget=b.

    PYTHONPATH=python:bench nice -n 5 python bench/realmodels/run.py --json bench/out/realmodels.json \\
        --md docs/plan.md [--models gpt2 llama ...] [--budgets 0 0.1 0.3 0.5 0.7 1] [--regime inductor]

For every model and budget b, one fresh process (:func:`realmodels.measure.measure`:
a fresh inductor cache) measures ``stock@b`` (``torch.compile``, inductor,
``activation_memory_budget=b``) and ``fxcut@b`` (``fxcut.inductor_backend(memory_budget=b)``):
the step's peak bytes, its time (interleaved rounds inside that process;
the ratio fxcut / stock is the median of per-round ratios), the gradients
against eager, the partition function's time and the planner's.  ``stock@1``
is torch's default (activation_memory_budget=1), the reference point; the
b=1 process also measures eager.  ``--regime unfused`` measures the same with
AOT Autograd's no-op compilers.

Results go to ``--json`` after every point (a rerun skips the points it
holds unless ``--redo``), so a stopped run resumes where it stopped; the
Markdown (``--md``: the section "Under inductor, measured" of that file,
between generated markers) is written from the JSON at the end, or alone
with ``--from-json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
for _p in (HERE.parent.parent / "python", HERE.parent):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from realmodels.measure import Backend, Measurement, measure  # noqa: E402
from realmodels.models import BUILDERS, available, split_name  # noqa: E402

BUDGETS = (0.0, 0.1, 0.3, 0.5, 0.7, 1.0)
SECTION = {"inductor": "realmodels_inductor", "unfused": "realmodels_unfused"}
TITLE = {"inductor": "Under inductor, measured", "unfused": "Eager kernels (torch's aot_eager vs fxcut.aot_backend), measured"}


def default_models() -> list[str]:
    return [n for n in BUILDERS if not n.startswith("plain_") and available(n)]


def point_key(model: str, budget: float, regime: str) -> str:
    return f"{model}|{regime}|{budget:g}"


def measure_point(model: str, budget: float, regime: str, *, steps: int, rounds: int, warmup: int,
                  timeout: float) -> dict[str, Any]:
    """One (model, b) point: stock and fxcut (and eager at b=1) in one fresh process."""
    backends = [Backend("stock", regime, budget), Backend("fxcut", regime, budget)]
    if budget == 1.0:
        backends.append(Backend("eager"))
    load_before = os.getloadavg()[0]
    t = time.perf_counter()
    found = measure(model, backends, steps=steps, rounds=rounds, warmup=warmup, timeout=timeout)
    return {"model": model, "budget": budget, "regime": regime, "seconds": time.perf_counter() - t,
            "load": [load_before, os.getloadavg()[0]], "measurements": [m.as_dict() for m in found],
            "step_ratio": step_ratio(found[0], found[1])}


def step_ratio(stock: Measurement, fxcut: Measurement) -> float | None:
    """Median of the per-round ratios fxcut / stock of the rounds' median step times."""
    pairs = list(zip(stock.round_step_s, fxcut.round_step_s))
    if not stock.ok or not fxcut.ok or not pairs:
        return None
    return statistics.median(f / s for s, f in pairs)


# --------------------------------------------------------------------------- the report


def _m(point: dict[str, Any], kind: str) -> Measurement | None:
    """The point's measurement of backend kind ``kind`` (stock, fxcut, eager)."""
    for d in point["measurements"]:
        if d["backend"].split("@")[0].split("-")[0] == kind:
            return Measurement.from_dict(d)
    return None


def _mib(n: int | None) -> str:
    return "-" if n is None else f"{n / 2**20:.2f}"


def _cell(m: Measurement | None) -> str:
    if m is None:
        return "-"
    if not m.ok:
        return f"{m.status.replace('_', ' ')}"
    return _mib(m.peak_bytes)


def _err(m: Measurement | None) -> str:
    if m is None or not m.ok or m.grad_max_rel_err is None:
        return "-"
    return f"{m.grad_max_rel_err:.0e}"


def _s(x: float | None, scale: float = 1.0, fmt: str = ".2f") -> str:
    return "-" if x is None else format(x * scale, fmt)


def model_error(m: Measurement) -> float | None:
    """The plan's modelled peak against the measured step, a fraction
    (negative: the model under the measurement); None where the step ran
    more than one graph (the graphs' peaks do not sum to the step's)."""
    if not m.model_peaks or m.partition_calls != 1 or not m.peak_bytes:
        return None
    return m.model_peaks[0]["plan"] / m.peak_bytes - 1


def summarize(points: list[dict[str, Any]], regime: str) -> dict[str, Any]:
    """The issue's targets, per model, from the measured points."""
    by_model: dict[str, dict[float, dict[str, Any]]] = {}
    for p in points:
        if p["regime"] == regime:
            by_model.setdefault(p["model"], {})[p["budget"]] = p
    out: dict[str, Any] = {}
    for model, pts in by_model.items():
        stock = {b: _m(p, "stock") for b, p in pts.items()}
        fx = {b: _m(p, "fxcut") for b, p in pts.items()}
        ok_fx = {b: m for b, m in fx.items() if m is not None and m.ok}
        ok_stock = {b: m for b, m in stock.items() if m is not None and m.ok}
        row: dict[str, Any] = {"budgets": sorted(pts)}
        s0, f0 = ok_stock.get(0.0), ok_fx.get(0.0)
        row["b0_gain"] = (1 - f0.peak_bytes / s0.peak_bytes) if s0 and f0 and s0.peak_bytes and f0.peak_bytes else None
        s1, f1 = ok_stock.get(1.0), ok_fx.get(1.0)
        row["b1_vs_default"] = (f1.peak_bytes / s1.peak_bytes) if s1 and f1 and s1.peak_bytes and f1.peak_bytes else None
        peaks = [ok_fx[b].peak_bytes for b in sorted(ok_fx)]
        row["monotonic"] = all(a is not None and b is not None and a <= b for a, b in zip(peaks, peaks[1:])) \
            if len(peaks) > 1 else None
        dominated = {}
        for b, s in ok_stock.items():
            dominated[b] = any(f.peak_bytes is not None and s.peak_bytes is not None and f.peak_bytes <= s.peak_bytes
                               and f.step_s is not None and s.step_s is not None and f.step_s <= 1.05 * s.step_s
                               for f in ok_fx.values())
        row["dominated"] = dominated
        errs = [m.grad_max_rel_err for m in list(ok_fx.values()) + list(ok_stock.values())
                if m.grad_max_rel_err is not None]
        row["max_grad_rel_err"] = max(errs) if errs else None
        row["model_error"] = {b: model_error(m) for b, m in ok_fx.items() if model_error(m) is not None}
        row["stock_failed"] = sorted(b for b, m in stock.items() if m is None or not m.ok)
        row["fxcut_failed"] = sorted(b for b, m in fx.items() if m is None or not m.ok)
        out[model] = row
    return out


def markdown(data: dict[str, Any], regime: str) -> str:
    points = [p for p in data["points"] if p["regime"] == regime]
    models = list(dict.fromkeys(p["model"] for p in points))
    loads = [x for p in points for x in p["load"]]
    lines = [
        "Measured by " + ", then ".join(f"`{c}`" for c in data.get("commands", [data["command"]]))
        + f" on {data['machine']}; torch {data['torch']}, "
        f"{data.get('threads', '?')} threads; 1-minute load average {min(loads, default=0):.1f} to "
        f"{max(loads, default=0):.1f} during the run (a shared machine); {len(points)} points, "
        f"{sum(p['seconds'] for p in points) / 60:.0f} min.",
        "",
        "Each point is a fresh process with an empty inductor cache. Peak: MiB the CPU allocator held at once "
        "during one training step (forward with the loss, backward) beyond what was live before it, from the "
        "torch profiler's allocation events; it includes the parameter gradients the step makes (the same on "
        "both sides), not the parameters or inputs. stock = `torch.compile(model)` with "
        "`torch._functorch.config.activation_memory_budget=b`; fxcut = `torch.compile(model, "
        "backend=fxcut.inductor_backend(memory_budget=b))`" if regime == "inductor" else
        "Each point is a fresh process. Peak: MiB the CPU allocator held at once during one training step "
        "beyond what was live before it (profiler allocation events; gradients included, parameters and "
        "inputs not). stock = torch's `aot_eager` (boxed no-op compilers, "
        "`min_cut_rematerialization_partition`) at `activation_memory_budget=b`; "
        "fxcut = `fxcut.aot_backend(memory_budget=b)`, which runs the same program",
        "(the plan's budget is on its modelled peak, torch's on saved bytes: the same b is not the same "
        "request on both sides). step fxcut/stock: median of per-round ratios of the two sides' median step "
        "times, rounds interleaved in one process. grads: the largest per-parameter max |compiled - eager| / "
        "max |eager| of either side. Partition: the partition function's seconds summed over the graphs "
        "(plan: the planner's part of fxcut's). The plan's memory model: its own figures for the graphs it "
        "planned (MiB, summed over graphs), the unfused program's" + (", which inductor does not run" if regime == "inductor" else ", the program measured here") + ". \"step failed\": the compiled step raised (at b < 1 torch's "
        "budget path recomputes batch norm and autograd's version check fails: issue 24).",
        "",
    ]
    summary = summarize(points, regime)
    lines += ["| model | b=0: peak fxcut vs stock | b=1: peak fxcut vs stock default | fxcut peak monotonic in b | "
              "stock points dominated (peak <=, step <= 1.05x) | worst grad rel. err | failed at b: stock / fxcut |",
              "|---|---:|---:|---|---|---:|---|"]
    for model in models:
        r = summary[model]
        gain = "-" if r["b0_gain"] is None else f"{-100 * r['b0_gain']:+.1f}%"
        b1 = "-" if r["b1_vs_default"] is None else f"{100 * (r['b1_vs_default'] - 1):+.2f}%"
        mono = "-" if r["monotonic"] is None else ("yes" if r["monotonic"] else "**no**")
        dom = r["dominated"]
        domtext = f"{sum(dom.values())}/{len(dom)}" + (
            "" if all(dom.values()) else " (not: " + ", ".join(f"{b:g}" for b, v in sorted(dom.items()) if not v) + ")")
        err = "-" if r["max_grad_rel_err"] is None else f"{r['max_grad_rel_err']:.0e}"
        failed = " / ".join(", ".join(f"{b:g}" for b in r[k]) or "none" for k in ("stock_failed", "fxcut_failed"))
        lines.append(f"| {model} | {gain} | {b1} | {mono} | {domtext} | {err} | {failed} |")
    with_b0 = [r for r in summary.values() if r["b0_gain"] is not None]
    with_b1 = [r for r in summary.values() if r["b1_vs_default"] is not None]
    met30 = sum(1 for r in with_b0 if r["b0_gain"] >= 0.30)
    errs = [e for r in summary.values() for e in r["model_error"].values()]
    tol = 0.05 if regime == "inductor" else 0.03
    lines += ["", f"Targets (issue 39): b=0 at least 30% below stock at b=0 on {met30} of {len(with_b0)} models "
              f"(target: half); the plan's model within {tol:.0%} of the measured step on "
              f"{sum(1 for e in errs if abs(e) <= tol)} of {len(errs)} points of one graph (target: 95%), under it "
              f"by more than 5% on {sum(1 for e in errs if e < -0.05)} (target: none); b=1 at or below stock's default on "
              f"{sum(1 for r in with_b1 if r['b1_vs_default'] <= 1.0)} of {len(with_b1)}; peak monotonic on "
              f"{sum(1 for r in summary.values() if r['monotonic'])} of {len(summary)}; every stock point dominated on "
              f"{sum(1 for r in summary.values() if r['dominated'] and all(r['dominated'].values()))} of "
              f"{len(summary)}.", ""]
    for model in models:
        pts = sorted((p for p in points if p["model"] == model), key=lambda p: p["budget"])
        eager = next((m for p in pts if (m := _m(p, "eager")) is not None), None)
        ref = next((m for p in pts if p["budget"] == 1.0 and (m := _m(p, "stock")) is not None and m.ok), None)
        head = f"### {model}"
        extra = []
        if eager is not None and eager.ok:
            extra.append(f"eager: peak {_mib(eager.peak_bytes)} MiB, step {_s(eager.step_s, 1e3, '.1f')} ms")
        if ref is not None:
            extra.append(f"torch's default (stock b=1): peak {_mib(ref.peak_bytes)} MiB, step "
                         f"{_s(ref.step_s, 1e3, '.1f')} ms; parameters {_mib(ref.param_bytes)} MiB, gradients "
                         f"{_mib(ref.grad_bytes)} MiB")
        lines += [head, ""] + (["; ".join(extra) + ".", ""] if extra else []) + [
                  "| b | stock peak | fxcut peak | fxcut / stock | plan's memory model: plan (vs measured) / torch default | "
                  "stock step ms | "
                  "fxcut step ms | step fxcut/stock | grads stock / fxcut | partition s stock / fxcut (plan) | "
                  "graphs |",
                  "|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---:|"]
        for p in pts:
            s, f = _m(p, "stock"), _m(p, "fxcut")
            ratio = "-"
            if s is not None and f is not None and s.ok and f.ok and s.peak_bytes:
                ratio = f"{(f.peak_bytes or 0) / s.peak_bytes:.3f}"
            modelled = "-"
            if f is not None and f.model_peaks:
                modelled = f"{_mib(sum(x['plan'] for x in f.model_peaks))} / {_mib(sum(x['torch'] for x in f.model_peaks))}"
                err = model_error(f)
                modelled += "" if err is None else f" ({100 * err:+.1f}%)"
            sr = p.get("step_ratio")
            part = (f"{_s(s.partition_s if s else None)} / {_s(f.partition_s if f else None)} "
                    f"({_s(f.plan_s if f else None)})")
            graphs = f.partition_calls if f is not None else "-"
            lines.append(f"| {p['budget']:g} | {_cell(s)} | {_cell(f)} | {ratio} | {modelled} | "
                         f"{_s(s.step_s if s and s.ok else None, 1e3, '.1f')} | "
                         f"{_s(f.step_s if f and f.ok else None, 1e3, '.1f')} | {_s(sr, 1, '.3f')} | "
                         f"{_err(s)} / {_err(f)} | {part} | {graphs} |")
        errors = {f"{m.backend}": m.error for p in pts for d in p["measurements"]
                  if not (m := Measurement.from_dict(d)).ok and m.error}
        if errors:
            lines += [""] + [f"- {k}: `{(v or '').splitlines()[0][:240]}`" for k, v in errors.items()]
        lines.append("")
    return "\n".join(lines)


def _machine() -> str:
    import platform

    cpu = platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    return f"{cpu} ({os.cpu_count()} CPUs), python {platform.python_version()}"


def load(path: Path | None) -> dict[str, Any]:
    if path is not None and path.is_file():
        data: dict[str, Any] = json.loads(path.read_text())
        return data
    return {"points": []}


def save(path: Path | None, data: dict[str, Any]) -> None:
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(path)


def publish(md_path: str, data: dict[str, Any], regime: str, note: str | None = None) -> None:
    sys.path.insert(0, str(HERE.parent))
    from docs_sections import replace_section  # bench/, next to this package

    head = f"## {TITLE[regime]}\n\n" + (f"{note}\n\n" if note else "")
    replace_section(md_path, SECTION[regime], head + markdown(data, regime))


def main(argv: list[str] | None = None) -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", help=f"default: every available one of {', '.join(BUILDERS)}; "
                    "a name may carry the variants :deep (>= 12 layers) and :bf16 (bf16 autocast), e.g. gpt2:deep:bf16")
    ap.add_argument("--budgets", nargs="+", type=float, default=list(BUDGETS))
    ap.add_argument("--regime", choices=("inductor", "unfused"), default="inductor")
    ap.add_argument("--steps", type=int, default=5, help="timed steps per round and side")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per point")
    ap.add_argument("--json", type=Path, help="results, written after every point; read to resume")
    ap.add_argument("--redo", action="store_true", help="measure points the --json file already holds again")
    ap.add_argument("--md", help="write the section into this Markdown file (e.g. docs/plan.md)")
    ap.add_argument("--from-json", action="store_true", help="measure nothing: write --md from --json")
    ap.add_argument("--note", help="a paragraph printed under the section's title (e.g. how the run was split)")
    a = ap.parse_args(argv)
    data = load(a.json)
    if not a.from_json:
        models = a.models or default_models()
        unknown = [m for m in models if split_name(m)[0] not in BUILDERS]
        if unknown:
            ap.error(f"unknown model(s) {', '.join(unknown)} (choose from {', '.join(BUILDERS)})")
        command = "PYTHONPATH=python:bench nice -n 5 python bench/realmodels/run.py " + shlex.join(
            sys.argv[1:] if argv is None else argv)
        # every run that added points to the file, in order (the first one's under "command")
        data["command"] = data.get("command") or command
        data["commands"] = [c for c in data.get("commands", [data["command"]]) if c != command] + [command]
        data.update(machine=_machine(), torch=torch.__version__, threads=torch.get_num_threads())
        done = {point_key(p["model"], p["budget"], p["regime"]) for p in data["points"]}
        for model in models:
            for b in a.budgets:
                key = point_key(model, b, a.regime)
                if key in done and not a.redo:
                    continue
                point = measure_point(model, b, a.regime, steps=a.steps, rounds=a.rounds, warmup=a.warmup,
                                      timeout=a.timeout)
                data["points"] = [p for p in data["points"] if point_key(p["model"], p["budget"], p["regime"]) != key]
                data["points"].append(point)
                save(a.json, data)
                for d in point["measurements"]:
                    from realmodels.measure import format_row

                    print(format_row(Measurement.from_dict(d)), flush=True)
                print(f"  {model} b={b:g}: {point['seconds']:.0f} s, step fxcut/stock {point['step_ratio']}, "
                      f"load {point['load']}", flush=True)
    if a.md:
        publish(a.md, data, a.regime, a.note)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
