"""One training step of a real model, measured: peak memory, step time, gradients vs eager, planning time.

    PYTHONPATH=python:bench python bench/realmodels/measure.py --model gpt2 --backend stock@0 --backend fxcut@0
    PYTHONPATH=python:bench python bench/realmodels/measure.py --model llama --backend fxcut-unfused@0.5 --json out.json

Backends (:class:`Backend`, written ``KIND[-REGIME][@BUDGET]``):

- ``eager``: no compile (the reference every gradient is compared with);
- ``stock@b``: ``torch.compile(model)`` (inductor, torch's partitioner) with
  ``torch._functorch.config.activation_memory_budget = b`` (default 1);
- ``fxcut@b``: ``torch.compile(model, backend=fxcut.inductor_backend(memory_budget=b))`` (the plan on
  the inductor memory model);
  ``fxcut`` alone: ``fxcut.inductor_backend()``, fxcut's exact copy of torch's decision;
- ``stock-unfused@b`` / ``fxcut-unfused@b``: the same two with eager kernels:
  torch's ``aot_eager`` (AOT Autograd, the boxed no-op compilers, each saved
  value freed after its last use, with torch's min-cut) and
  ``fxcut.aot_backend(memory_budget=b)``, which runs the same: the forward and
  backward FX modules run op by op, the regime fxcut's unfused memory model
  describes;
- ``fxcut-asked@b``: ``fxcut.inductor_backend(memory_budget=b, check_time_limit=20)``,
  the plan under inductor that asks inductor about its candidates (``fxcut@b``
  plans on the memory model alone, the default since 2026-12-07).

What one measurement is (:func:`measure_in_process`):

1. The model is built from its config (``realmodels.models``), and its
   eager step's loss and gradients are the reference.
2. Each backend gets a deep copy of the freshly built model (same weights,
   same batch-norm statistics), compiled; the first call compiles (timed:
   ``compile_s``) and warm-up steps follow.
3. One step is profiled (``torch.profiler``, ``profile_memory=True``): every
   CPU allocation and free the step makes, in order.  **peak_bytes** is the
   highest running sum of those, i.e. the most bytes the step held at once
   beyond what was live when it started.  Live at the start: parameters,
   inputs, batch-norm buffers (all the same for every backend); gradients
   are set to ``None`` before the step, so the step's peak **includes** the
   parameter gradients it produces (``grad_bytes``: the same for every
   backend).  The model and its loss are compiled as one module
   (:class:`WithLoss`), so the loss's activations are the partitioner's too.
   Forward (``forward_peak_bytes``: the model's call with the loss) and
   backward (``backward_peak_bytes``)
   are told apart by ``record_function`` ranges; ``after_forward_bytes`` is
   what the forward left alive for the backward (saved activations,
   outputs).  CPU allocation is deterministic: the figure repeats exactly.
4. That step's gradients are compared with eager's: the largest absolute
   difference, and the largest of (max |difference| / max |eager gradient|)
   per parameter.
5. Step time: ``rounds`` rounds, each timing ``steps`` steps of every
   backend in turn (the order rotates each round); per backend the median
   step of each round (``round_step_s``) and the median of those
   (``step_s``).  Ratios between backends are taken per round by the caller.
6. Planning time: the partition function's wall time, summed over the
   graphs the compile made (``partition_s``); for a plan, the planner's own
   time (``plan_s``) and its memory model's figures (``model_peaks``).

:func:`measure` runs all of that in a fresh Python process with its own
empty inductor cache (``TORCHINDUCTOR_CACHE_DIR`` a new temporary folder, the
FX graph and AOT autograd caches off), so nothing compiled earlier is
reused, and records a crash or a time-out as such.  A backend whose compile
or step raises is recorded with its status (``compile_failed``,
``step_failed``) and the error's first lines; the others are still measured.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
for _p in (ROOT / "python", HERE.parent):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from realmodels.models import RealModel, build  # noqa: E402

KINDS = ("eager", "stock", "fxcut")
REGIMES = ("inductor", "unfused", "asked")


@dataclass(frozen=True)
class Backend:
    """How a model is run: ``kind`` eager / stock / fxcut, ``regime``
    inductor / unfused (AOT Autograd's no-op compilers), ``budget``: stock's
    ``activation_memory_budget`` (None: torch's config, 1.0) or fxcut's
    ``memory_budget`` (None: fxcut's exact copy of torch's decision)."""

    kind: str
    regime: str = "inductor"
    budget: float | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"backend kind {self.kind!r}: choose from {', '.join(KINDS)}")
        if self.regime not in REGIMES:
            raise ValueError(f"backend regime {self.regime!r}: choose from {', '.join(REGIMES)}")
        if self.budget is not None and not 0.0 <= self.budget <= 1.0:
            raise ValueError(f"backend budget {self.budget!r} must be in [0, 1]")
        if self.kind == "eager" and (self.budget is not None or self.regime != "inductor"):
            raise ValueError("the eager backend takes no regime and no budget")
        if self.regime == "asked" and (self.kind != "fxcut" or self.budget is None):
            raise ValueError("the asked regime is fxcut's plan's (fxcut-asked@b): stock's has nothing to ask")

    @property
    def label(self) -> str:
        if self.kind == "eager":
            return "eager"
        regime = "" if self.regime == "inductor" else f"-{self.regime}"
        budget = "" if self.budget is None else f"@{self.budget:g}"
        return f"{self.kind}{regime}{budget}"

    @classmethod
    def parse(cls, text: str) -> Backend:
        """``eager``, ``stock@0.5``, ``fxcut``, ``fxcut-unfused@0`` (see the module docstring)."""
        head, at, budget_text = text.partition("@")
        kind, _, regime = head.partition("-")
        try:
            budget = float(budget_text) if at else None
        except ValueError:
            raise ValueError(f"backend {text!r}: budget {budget_text!r} is not a number") from None
        return cls(kind, regime or "inductor", budget)


@dataclass
class Measurement:
    """One backend's measured step (module docstring).  Bytes are CPU
    allocator bytes; seconds are wall time on the measuring machine."""

    model: str
    backend: str
    status: str = "ok"  # ok | compile_failed | step_failed | build_failed | crashed | timeout
    error: str | None = None
    peak_bytes: int | None = None
    forward_peak_bytes: int | None = None
    backward_peak_bytes: int | None = None
    after_forward_bytes: int | None = None
    grad_bytes: int | None = None
    param_bytes: int | None = None
    allocations: int | None = None
    compile_s: float | None = None
    step_s: float | None = None
    round_step_s: list[float] = field(default_factory=list)
    partition_s: float | None = None
    partition_calls: int = 0
    plan_s: float | None = None
    model_peaks: list[dict[str, int]] = field(default_factory=list)
    loss: float | None = None
    eager_loss: float | None = None
    grad_max_abs_err: float | None = None
    grad_max_rel_err: float | None = None
    grads_compared: int = 0
    grads_missing: list[str] = field(default_factory=list)
    torch_version: str = field(default_factory=lambda: torch.__version__)
    threads: int = field(default_factory=torch.get_num_threads)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Measurement:
        return cls(**data)


# --------------------------------------------------------------------------- the partitioners, timed


@dataclass
class _Timings:
    partition: list[float] = field(default_factory=list)
    plans: list[tuple[float, int, int]] = field(default_factory=list)  # seconds, plan's peak, torch's peak


_TIMINGS: dict[str, _Timings] = {}
_CURRENT: list[str] = []  # the label of the backend being called (partitioners run inside its call)


def _record_partition(fn: Callable[..., Any]) -> Callable[..., Any]:
    def timed(*args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            if _CURRENT:
                _TIMINGS[_CURRENT[-1]].partition.append(time.perf_counter() - t)
    return timed


@contextlib.contextmanager
def _instrumented() -> Iterator[None]:
    """Wrap every partition function the backends call, for the duration:
    torch's min-cut as inductor calls it, fxcut's (plan or default) as both
    fxcut backends obtain it, and the planner's ``plan``."""
    import torch._inductor.compile_fx as cfx

    import fxcut.partition
    import fxcut.planned
    from fxcut.integrations import torch_compile as tc

    torch_min_cut = cfx.min_cut_rematerialization_partition
    choose = tc._fxcut_partition
    plan = fxcut.planned.PeakPlanner.plan

    def fxcut_partition(verify: Any, memory_budget: float | None = None, *model: Any) -> Any:
        fn = choose(verify, memory_budget, *model)  # model: the memory model the backend plans on
        return _record_partition(fn if fn is not None else fxcut.partition.min_cut_rematerialization_partition)

    def planned(self: Any, *args: Any, **kwargs: Any) -> Any:
        choice = plan(self, *args, **kwargs)
        if _CURRENT:
            _TIMINGS[_CURRENT[-1]].plans.append((choice.seconds, choice.peak_bytes, choice.torch_peak_bytes))
        return choice

    cfx.min_cut_rematerialization_partition = _record_partition(torch_min_cut)
    tc._fxcut_partition = fxcut_partition
    fxcut.planned.PeakPlanner.plan = planned  # type: ignore[method-assign]
    try:
        yield
    finally:
        cfx.min_cut_rematerialization_partition = torch_min_cut
        tc._fxcut_partition = choose
        fxcut.planned.PeakPlanner.plan = plan  # type: ignore[method-assign]


# --------------------------------------------------------------------------- compiling


def _compiled(backend: Backend, module: torch.nn.Module) -> tuple[Callable[..., Any], Callable[[], Any]]:
    """The callable for ``backend`` and the context each call must run in
    (stock's activation memory budget is read at compile time, which is the
    first call and, for the backward, its first run)."""
    import fxcut
    from torch._functorch import config as functorch_config

    if backend.kind == "eager":
        return module, contextlib.nullcontext
    if backend.kind == "stock":
        budget = 1.0 if backend.budget is None else backend.budget
        if backend.regime == "inductor":
            compiled = torch.compile(module, backend="inductor")
        else:
            from torch._dynamo.backends.common import aot_autograd
            from torch._dynamo.backends.debugging import boxed_nop
            from torch._functorch.partitioners import min_cut_rematerialization_partition

            compiled = torch.compile(module, backend=aot_autograd(
                fw_compiler=boxed_nop, bw_compiler=boxed_nop, keep_inference_input_mutations=True,
                partition_fn=_record_partition(min_cut_rematerialization_partition)))
        return compiled, lambda: functorch_config.patch(activation_memory_budget=budget)
    if backend.regime == "inductor":
        return torch.compile(module, backend=fxcut.inductor_backend(memory_budget=backend.budget)), contextlib.nullcontext
    if backend.regime == "asked":
        from fxcut.planned import ASK_TIME_LIMIT

        return torch.compile(module, backend=fxcut.inductor_backend(memory_budget=backend.budget,
                                                                    check_time_limit=ASK_TIME_LIMIT)), \
            contextlib.nullcontext
    return torch.compile(module, backend=fxcut.aot_backend(memory_budget=backend.budget)), contextlib.nullcontext


class WithLoss(torch.nn.Module):
    """The model and its loss as one module: what is compiled, so the loss's
    activations are the partitioner's to save or recompute too."""

    def __init__(self, built: RealModel) -> None:
        super().__init__()
        self.model = built.model
        self.loss_fn = built.loss_fn
        self.autocast = built.autocast

    def forward(self, **inputs: torch.Tensor) -> torch.Tensor:
        if self.autocast is None:
            return self.loss_fn(self.model(**inputs), inputs)
        with torch.autocast("cpu", dtype=self.autocast):
            out = self.model(**inputs)
        return self.loss_fn(out, inputs)


def _step(fn: Callable[..., Any], module: torch.nn.Module, built: RealModel) -> torch.Tensor:
    module.zero_grad(set_to_none=True)
    loss = fn(**built.inputs)
    loss.backward()
    return loss.detach()


def _grads(module: torch.nn.Module) -> dict[str, torch.Tensor | None]:
    return {n: (p.grad.detach().clone() if p.grad is not None else None) for n, p in module.named_parameters()}


def compare_grads(got: dict[str, torch.Tensor | None], want: dict[str, torch.Tensor | None]
                  ) -> tuple[float, float, int, list[str]]:
    """(max abs error, max per-parameter relative error, parameters compared,
    parameters with a gradient on one side only or of another shape)."""
    abs_err = rel_err = 0.0
    compared = 0
    missing = []
    for name in sorted(set(got) | set(want)):
        a, b = got.get(name), want.get(name)
        if a is None and b is None:
            continue
        if a is None or b is None or a.shape != b.shape:
            missing.append(name)
            continue
        diff = float((a.double() - b.double()).abs().max()) if a.numel() else 0.0
        scale = float(b.double().abs().max()) if b.numel() else 0.0
        abs_err = max(abs_err, diff)
        rel_err = max(rel_err, diff / scale if scale > 0 else (0.0 if diff == 0 else float("inf")))
        compared += 1
    return abs_err, rel_err, compared, missing


# --------------------------------------------------------------------------- the profiled step


def _profiled_step(fn: Callable[..., Any], module: torch.nn.Module, built: RealModel) -> tuple[torch.Tensor, dict[str, int]]:
    """One step under the profiler (:func:`fxcut.tools.measure.profile_step`):
    its loss and its memory figures, as :class:`Measurement` fields."""
    from fxcut.tools.measure import profile_step

    module.zero_grad(set_to_none=True)
    loss, memory = profile_step(lambda: fn(**built.inputs))
    return loss, asdict(memory)


def _first_lines(e: BaseException, n: int = 6) -> str:
    text = f"{type(e).__name__}: {e}".strip()
    lines = [line for line in text.splitlines() if line.strip()]
    return "\n".join(lines[:n])


def _failure_status(e: BaseException) -> str:
    """compile_failed for an error dynamo or a backend compiler raised, else
    step_failed (the compiled step itself failed, e.g. autograd's checks)."""
    from torch._dynamo.exc import TorchDynamoException

    return "compile_failed" if isinstance(e, TorchDynamoException) else "step_failed"


# --------------------------------------------------------------------------- one process


def measure_in_process(model: str, backends: Sequence[Backend], *, warmup: int = 2, steps: int = 5,
                       rounds: int = 3, built_fn: Callable[[str], RealModel] = build) -> list[Measurement]:
    """Measure ``backends`` on ``model`` in this process (module docstring).
    Call it in a fresh process (:func:`measure` does) for a fresh inductor
    cache; a build failure is recorded for every backend."""
    limits = torch._dynamo.config.patch(cache_size_limit=max(64, torch._dynamo.config.cache_size_limit),
                                         accumulated_cache_size_limit=max(
                                             512, torch._dynamo.config.accumulated_cache_size_limit))
    with _instrumented(), limits:
        return _measure_all(model, backends, warmup, steps, rounds, built_fn)


def _measure_all(model: str, backends: Sequence[Backend], warmup: int, steps: int, rounds: int,
                 built_fn: Callable[[str], RealModel]) -> list[Measurement]:
    try:
        built = built_fn(model)
        initial = WithLoss(built)
        reference = copy.deepcopy(initial)
        eager_loss = float(_step(reference, reference, built))
        eager_grads = _grads(reference)
        del reference
    except Exception as e:
        return [Measurement(model, b.label, "build_failed", _first_lines(e)) for b in backends]
    param_bytes = built.parameter_bytes()
    grad_bytes = sum(g.numel() * g.element_size() for g in eager_grads.values() if g is not None)
    results: dict[str, Measurement] = {}
    runners: dict[str, tuple[Callable[..., Any], torch.nn.Module, Callable[[], Any]]] = {}
    for backend in backends:
        label = backend.label
        m = results[label] = Measurement(model, label, param_bytes=param_bytes, grad_bytes=grad_bytes,
                                         eager_loss=eager_loss)
        _TIMINGS[label] = _Timings()
        module = copy.deepcopy(initial)
        # dynamo's frames compiled for an earlier backend are reused by a later one with the same backend
        # (stock@0, then stock@1: both "inductor"), which then never partitions at its own budget
        torch._dynamo.reset()
        _CURRENT.append(label)
        try:
            fn, context = _compiled(backend, module)
            t = time.perf_counter()
            with context():
                _step(fn, module, built)
                m.compile_s = time.perf_counter() - t
                for _ in range(warmup):
                    _step(fn, module, built)
                loss, memory = _profiled_step(fn, module, built)
        except Exception as e:
            m.status, m.error = _failure_status(e), _first_lines(e)
            if os.environ.get("REALBENCH_TRACEBACK"):
                traceback.print_exc()
            continue
        finally:
            _CURRENT.pop()
            timings = _TIMINGS[label]
            m.partition_calls = len(timings.partition)
            m.partition_s = sum(timings.partition) if timings.partition else None
            if timings.plans:
                m.plan_s = sum(s for s, _, _ in timings.plans)
                m.model_peaks = [{"plan": p, "torch": tp} for _, p, tp in timings.plans]
        m.loss = float(loss)
        for key, value in memory.items():
            setattr(m, key, value)
        m.grad_max_abs_err, m.grad_max_rel_err, m.grads_compared, m.grads_missing = compare_grads(
            _grads(module), eager_grads)
        if backend.kind != "eager" and m.partition_calls == 0:
            m.status, m.error = "step_failed", "no graph was partitioned: the compile fell back to eager"
            continue
        runners[label] = (fn, module, context)
    _time_rounds(runners, results, built, steps, rounds)
    return [results[b.label] for b in backends]


def _time_rounds(runners: dict[str, tuple[Callable[..., Any], torch.nn.Module, Callable[[], Any]]],
                 results: dict[str, Measurement], built: RealModel, steps: int, rounds: int) -> None:
    labels = list(runners)
    for r in range(rounds):
        shift = r % max(1, len(labels))
        for label in labels[shift:] + labels[:shift]:
            fn, module, context = runners[label]
            samples = []
            try:
                with context():
                    for _ in range(steps):
                        t = time.perf_counter()
                        _step(fn, module, built)
                        samples.append(time.perf_counter() - t)
            except Exception as e:
                results[label].status, results[label].error = "step_failed", _first_lines(e)
                runners.pop(label)
                labels.remove(label)
                continue
            results[label].round_step_s.append(statistics.median(samples))
    for label in runners:
        m = results[label]
        m.step_s = statistics.median(m.round_step_s) if m.round_step_s else None


# --------------------------------------------------------------------------- a fresh process per measurement


def fresh_cache_env(cache: str) -> dict[str, str]:
    """The environment of a child: an empty inductor cache of its own, the
    FX graph and AOT autograd caches off, this checkout's python/ and bench/ first."""
    env = dict(os.environ)
    env.update(TORCHINDUCTOR_CACHE_DIR=cache, TORCHINDUCTOR_FX_GRAPH_CACHE="0", TORCHINDUCTOR_AUTOGRAD_CACHE="0",
               TRITON_CACHE_DIR=os.path.join(cache, "triton"))
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "python"), str(HERE.parent),
                                         *filter(None, [env.get("PYTHONPATH")])])
    return env


def measure(model: str, backends: Sequence[Backend | str], *, warmup: int = 2, steps: int = 5, rounds: int = 3,
            timeout: float = 1800.0, python: str = sys.executable) -> list[Measurement]:
    """:func:`measure_in_process` in a fresh process with a fresh inductor
    cache.  A crash or a time-out of the child is recorded for every backend."""
    specs = [b if isinstance(b, Backend) else Backend.parse(b) for b in backends]
    request = {"model": model, "backends": [asdict(b) for b in specs], "warmup": warmup, "steps": steps,
               "rounds": rounds}
    with tempfile.TemporaryDirectory(prefix="realbench-inductor-") as cache:
        try:
            out = subprocess.run([python, str(Path(__file__).resolve()), "--child", json.dumps(request)],
                                 env=fresh_cache_env(cache), capture_output=True, text=True, timeout=timeout,
                                 check=False)
        except subprocess.TimeoutExpired:
            return [Measurement(model, b.label, "timeout", f"no result within {timeout:g} s") for b in specs]
    lines = out.stdout.strip().splitlines()
    if out.returncode != 0 or not lines:
        tail = "\n".join(out.stderr.strip().splitlines()[-8:])
        return [Measurement(model, b.label, "crashed", f"exit status {out.returncode}: {tail}") for b in specs]
    return [Measurement.from_dict(d) for d in json.loads(lines[-1])]


# --------------------------------------------------------------------------- the command line


def _mib(n: int | None) -> str:
    return "-" if n is None else f"{n / 2**20:.2f} MiB"


def format_row(m: Measurement) -> str:
    if not m.ok:
        return f"{m.model} {m.backend}: {m.status}: {(m.error or '').splitlines()[0] if m.error else ''}"
    step = f"{m.step_s * 1e3:.1f} ms" if m.step_s is not None else "-"
    part = f"{m.partition_s:.2f} s" if m.partition_s is not None else "-"
    return (f"{m.model} {m.backend}: peak {_mib(m.peak_bytes)} (fw {_mib(m.forward_peak_bytes)}, "
            f"after fw {_mib(m.after_forward_bytes)}, bw {_mib(m.backward_peak_bytes)}), step {step}, "
            f"compile {m.compile_s:.1f} s, partition {part} ({m.partition_calls} graphs), "
            f"grads rel err {m.grad_max_rel_err:.2e} ({m.grads_compared} compared)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", help="a model of realmodels.models")
    ap.add_argument("--backend", action="append", default=[],
                    help="KIND[-REGIME][@BUDGET]: eager, stock@0, fxcut@0.5, stock-unfused@1, fxcut (repeatable)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5, help="timed steps per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds before the child is stopped")
    ap.add_argument("--in-process", action="store_true", help="measure in this process (no fresh cache)")
    ap.add_argument("--json", help="write the measurements here")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        req = json.loads(a.child)
        found = measure_in_process(req["model"], [Backend(**b) for b in req["backends"]], warmup=req["warmup"],
                                   steps=req["steps"], rounds=req["rounds"])
        sys.stdout.flush()
        print("\n" + json.dumps([m.as_dict() for m in found]))
        return 0
    if not a.model or not a.backend:
        ap.error("--model and at least one --backend are needed")
    try:
        backends = [Backend.parse(b) for b in a.backend]
    except ValueError as e:
        ap.error(str(e))
    if a.in_process:
        found = measure_in_process(a.model, backends, warmup=a.warmup, steps=a.steps, rounds=a.rounds)
    else:
        found = measure(a.model, backends, warmup=a.warmup, steps=a.steps, rounds=a.rounds, timeout=a.timeout)
    for m in found:
        print(format_row(m))
    if a.json:
        Path(a.json).write_text(json.dumps([m.as_dict() for m in found], indent=1))
    return 0 if all(m.ok for m in found) else 1


if __name__ == "__main__":
    raise SystemExit(main())
