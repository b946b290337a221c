"""The ``fxcut`` command.

    fxcut partition --model llama --layers 4 --zero3     # fxcut vs torch, side by side
    fxcut partition --module pkg.mod:factory --input 8,128:float32
    fxcut partition --model gpt2 --plan-budget 0.5       # the memory plan against torch at the same b
    fxcut explain --model gpt2 VALUE                     # why VALUE was saved / recomputed
    fxcut explain --model gpt2 --list                    # every node and where it went
    fxcut bench [--quick] [--out DIR] [--docs DIR]       # a source checkout's benchmark (bench/)
    python -m fxcut [OPTIONS]                            # the main job (see DEFAULT_ARGS), with
                                                         # partition's options: python -m fxcut --real

Models are traced with fake tensors, so a model of billions of parameters is
traced without allocating it.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import inspect
import json
import logging
import math
import os
import re
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn

import torch

from .._numbers import check_number

#: ``python -m fxcut`` with no arguments: a Llama-style model under bf16
#: autocast, its parameters treated as ZeRO-3 parameters, the memory plan's
#: peak against torch's beside the exact-torch comparison.
DEFAULT_ARGS = ["partition", "--model", "llama", "--layers", "4", "--hidden", "1024", "--heads", "16",
                "--seq", "512", "--dtype", "bfloat16", "--zero3", "--peaks"]

#: --real-backend's choices (fxcut.tools.measure.MEASURE_BACKENDS, and
#: "both"; not imported here: the parser is built before torch's heavier
#: modules load).
MEASURE_BACKEND_CHOICES = ("aot", "inductor", "both")


def measured_backends(real_backend: str) -> tuple[str, ...]:
    """The backends --real-backend measures, in the order they print."""
    return ("aot", "inductor") if real_backend == "both" else (real_backend,)

DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
    "int64": torch.int64,
    "long": torch.int64,
    "int32": torch.int32,
}


class UsageError(Exception):
    """Bad command-line input; main() prints it on one line and exits 2."""


#: Size limits, checked before anything is built (a model past them would
#: run for minutes, overflow a size, or exhaust memory).
MAX_LAYERS = 256
MAX_DIM = 65536  # --hidden, --seq, --batch, --heads, and each --input dimension
MAX_UNROLLED_SEQ = 1024  # --seq of lstm: its recurrence is unrolled into the graph
#: Elements of the largest tensor a run may create: fake tensors (the
#: default) allocate nothing, --real allocates them.
MAX_FAKE_ELEMENTS = 2**40
MAX_REAL_ELEMENTS = 2**28


#: --dtype: CPU autocast's lower-precision dtypes (float32 means no autocast).
AUTOCAST_DTYPES = {"bfloat16": torch.bfloat16, "bf16": torch.bfloat16, "float16": torch.float16,
                   "fp16": torch.float16}


def _dtype(name: str | None) -> torch.dtype | None:
    """The autocast dtype of --dtype (None: no autocast)."""
    if name is None or name in ("none", "fp32", "float32"):
        return None
    try:
        return AUTOCAST_DTYPES[name]
    except KeyError:
        raise UsageError(f"unknown --dtype {name!r} (choose from none, float32, "
                         f"{', '.join(sorted(AUTOCAST_DTYPES))})") from None


def _parse_input_spec(spec: str) -> tuple[tuple[int, ...], torch.dtype]:
    """'8,128:float32' (or '8x128:float32'; the dtype defaults to float32)."""
    shape_text, _, dtype_text = spec.partition(":")
    parts = [p.strip() for p in re.split(r"[,x]", shape_text)]
    try:
        shape = tuple(int(p) for p in parts)
    except ValueError:
        raise UsageError(f"malformed --input {spec!r}: expected 'd0,d1,...:dtype', e.g. '8,128:float32'") from None
    if any(d <= 0 for d in shape):
        raise UsageError(f"malformed --input {spec!r}: dimensions must be positive integers")
    if any(d > MAX_DIM for d in shape):
        raise UsageError(f"--input {spec!r}: a dimension exceeds the limit of {MAX_DIM}")
    dtype = DTYPES.get(dtype_text or "float32")
    if dtype is None:
        raise UsageError(f"malformed --input {spec!r}: unknown dtype {dtype_text!r} "
                         f"(choose from {', '.join(sorted(DTYPES))})")
    return shape, dtype


def _model_config(args: argparse.Namespace) -> dict[str, Any]:
    cfg: dict[str, Any] = {}
    for key in ("layers", "seq", "batch", "hidden", "heads"):
        value = getattr(args, key, None)
        if value is not None:
            cfg[key] = value
    return cfg


def _capture(args: argparse.Namespace, built: tuple[Any, Any, Any] | None = None) -> Any:
    """Trace the model of ``args`` (``built``: the built-in model's
    ``(model, inputs, loss_fn)`` from :func:`_build_builtin`, built here when None)."""
    from . import capture as cap

    autocast = _dtype(args.dtype)
    if args.module:
        return _capture_user_module(args, autocast)
    model, inputs, loss_fn = built if built is not None else _build_builtin(args)
    return cap.capture(model, inputs, loss_fn, autocast_dtype=autocast, checkpoint=args.checkpoint,
                       fake=not args.real)


def _build_builtin(args: argparse.Namespace) -> tuple[Any, Any, Any]:
    """The built-in model of ``args``, checked: ``(model, inputs, loss_fn)``,
    with fake tensors unless ``--real``."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from .models import MODELS, BlockStack

    if args.input:
        raise UsageError("--input describes the inputs of --module; built-in models make their own")
    if args.model not in MODELS:
        raise UsageError(f"unknown model {args.model!r} (choose from {', '.join(sorted(MODELS))})")
    cfg = _model_config(args)
    accepted = inspect.signature(MODELS[args.model]).parameters
    unknown = [f"--{k}" for k in cfg if k not in accepted]
    if unknown:
        raise UsageError(f"model {args.model!r} does not take {', '.join(unknown)}")
    _check_model_sizes(args.model, cfg, accepted, real=args.real)
    with FakeTensorMode() if not args.real else contextlib.nullcontext():
        try:
            model, make_inputs, loss_fn = MODELS[args.model](**cfg)
        except ValueError as e:
            raise UsageError(f"model {args.model!r}: {e}") from None
        inputs = make_inputs()
    if args.checkpoint and not isinstance(model, BlockStack):
        raise UsageError(f"--checkpoint: model {args.model!r} is not made of blocks")
    return model, inputs, loss_fn


def _max_elements(real: bool) -> int:
    return MAX_REAL_ELEMENTS if real else MAX_FAKE_ELEMENTS


def _check_model_sizes(model: str, cfg: dict[str, Any], accepted: Any, *, real: bool) -> None:
    """UsageError unless the built-in model's sizes are within the limits:
    each option, then the largest tensors it implies (activations, weights,
    attention scores), counted with the model's defaults where not given."""
    if cfg.get("layers", 0) > MAX_LAYERS:
        raise UsageError(f"--layers {cfg['layers']} exceeds the limit of {MAX_LAYERS}")
    for key in ("hidden", "seq", "batch", "heads"):
        if cfg.get(key, 0) > MAX_DIM:
            raise UsageError(f"--{key} {cfg[key]} exceeds the limit of {MAX_DIM}")
    if model == "lstm" and cfg.get("seq", 0) > MAX_UNROLLED_SEQ:
        raise UsageError(f"--seq {cfg['seq']} exceeds lstm's limit of {MAX_UNROLLED_SEQ} "
                         "(its recurrence is unrolled into the graph)")

    def size(key: str) -> int:
        if key in cfg:
            return int(cfg[key])
        default = accepted[key].default if key in accepted else 1
        return default if isinstance(default, int) and default > 0 else 1

    batch, seq, hidden, heads = size("batch"), size("seq"), size("hidden"), size("heads")
    limit = _max_elements(real)
    for what, elements in (
        ("activations (batch x seq x 4 hidden)", batch * seq * 4 * hidden),
        ("weights (4 hidden x hidden)", 4 * hidden * hidden),
        ("attention scores (batch x heads x seq x seq)", batch * heads * seq * seq),
    ):
        if elements > limit:
            mode = "with --real" if real else "with fake tensors"
            raise UsageError(f"model {model!r}: its {what} would have {elements:,} elements, past the "
                             f"limit of {limit:,} {mode}; choose smaller sizes")


def _check_input_sizes(specs: list[tuple[tuple[int, ...], torch.dtype]], texts: list[str], *, real: bool) -> None:
    limit = _max_elements(real)
    for (shape, _), text in zip(specs, texts):
        elements = 1
        for d in shape:
            elements *= d
        if elements > limit:
            mode = "with --real" if real else "with fake tensors"
            raise UsageError(f"--input {text!r} has {elements:,} elements, past the limit of {limit:,} {mode}")


def _capture_user_module(args: argparse.Namespace, autocast: torch.dtype | None) -> Any:
    """--module: the user's factory's model on zero/random inputs of the
    --input shapes, traced; the working directory is on the import path
    (as ``python -m`` has it) while the user's code runs."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from . import capture as cap

    path, _, attr = args.module.partition(":")
    if not attr:
        raise UsageError(f"--module {args.module!r}: expected 'package.module:factory'")
    # Every check of the arguments before the user's code runs.
    if not args.input:
        raise UsageError("--module needs at least one --input 'shape:dtype'")
    specs = [_parse_input_spec(s) for s in args.input]
    _check_input_sizes(specs, args.input, real=args.real)
    if args.checkpoint:
        raise UsageError("--checkpoint works on built-in models only")
    with _cwd_on_path():
        factory = _import_factory(args.module, path, attr)
        fake_mode = FakeTensorMode() if not args.real else None
        model, inputs = _build_user_model(args, factory, specs, fake_mode)

        def loss_fn(out: Any, _inputs: Any) -> torch.Tensor:
            leaves = [t for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]
            return sum(t.float().sum() for t in leaves if t.is_floating_point())  # type: ignore[return-value]

        # Run it once untraced first: inputs the model does not accept fail
        # there with torch's own message, not dynamo's.
        with fake_mode if fake_mode is not None else contextlib.nullcontext(), torch.no_grad(), \
                _quiet_fake_tensors():
            try:
                model(*inputs)
            except (Exception, SystemExit) as e:
                raise UsageError(f"--module {args.module!r} does not run on inputs {', '.join(args.input)}: "
                                 f"{type(e).__name__}: {_first_line(e)}") from None
        try:
            return cap.capture(model, inputs, loss_fn, autocast_dtype=autocast, fake=not args.real)
        except (Exception, SystemExit) as e:
            raise UsageError(f"--module {args.module!r} could not be traced on inputs "
                             f"{', '.join(args.input)}: {type(e).__name__}: {_first_line(e)}") from None


@contextlib.contextmanager
def _cwd_on_path() -> Iterator[None]:
    """The working directory first on ``sys.path`` (where ``python -m``
    puts it; the ``fxcut`` script does not), for the user's own modules."""
    cwd = os.getcwd()
    added = cwd not in sys.path and "" not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        yield
    finally:
        if added and cwd in sys.path:
            sys.path.remove(cwd)


def _import_factory(spec: str, path: str, attr: str) -> Any:
    """The callable ``attr`` of module ``path`` (--module ``spec``)."""
    try:
        module = importlib.import_module(path)
    except (Exception, SystemExit) as e:  # the user's module may fail in any way while importing
        where = ""
        if isinstance(e, ModuleNotFoundError) and e.name is not None and path.startswith(e.name):
            where = f" (looked in the working directory {os.getcwd()} and on the Python path)"
        raise UsageError(f"--module {spec!r}: module {path!r} does not import: "
                         f"{type(e).__name__}: {_first_line(e)}{where}") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise UsageError(f"--module {spec!r}: module {path!r} has no callable {attr!r}")
    return factory


def _build_user_model(args: argparse.Namespace, factory: Any, specs: list[tuple[tuple[int, ...], torch.dtype]],
                      fake_mode: Any) -> tuple[torch.nn.Module, list[torch.Tensor]]:
    """The factory's model and the --input tensors (fake under ``fake_mode``)."""
    with fake_mode if fake_mode is not None else contextlib.nullcontext():
        try:
            model = factory()
        except (Exception, SystemExit) as e:
            raise UsageError(f"--module {args.module!r}: the factory failed: {type(e).__name__}: "
                             f"{_first_line(e)}") from None
        if not isinstance(model, torch.nn.Module):
            raise UsageError(f"--module {args.module!r}: the factory returned {type(model).__name__}, "
                             "not a torch.nn.Module")
        inputs = [
            torch.randn(shape, dtype=dtype) if dtype.is_floating_point else torch.zeros(shape, dtype=dtype)
            for shape, dtype in specs
        ]
    return model, inputs


@contextlib.contextmanager
def _quiet_fake_tensors() -> Iterator[None]:
    """Fake tensors log a traceback for every failing op; the error says it all."""
    logger = logging.getLogger("torch._subclasses.fake_tensor")
    disabled, logger.disabled = logger.disabled, True
    try:
        yield
    finally:
        logger.disabled = disabled


def _first_line(e: BaseException) -> str:
    if isinstance(e, SystemExit):
        return f"exit status {e.code!r}"
    text = str(e).strip()
    return text.splitlines()[0] if text else "(no message)"


def _builtin_to_measure(args: argparse.Namespace) -> tuple[Any, Any, Any]:
    """--peaks --real: the built-in model built once, so that the measured
    step and the traced joint graph are the same model."""
    if args.module:
        raise UsageError("--peaks --real measures built-in models only (--module: drop --real)")
    return _build_builtin(args)


def _timed_partition(captured: Any, budget: float, fn: Any, walk: bool) -> tuple[Any, Any, float, list[Any]]:
    """``fn`` on a fresh copy of the joint graph (``walk``: after the ZeRO-3
    walk tagged it), at ``budget``; the partition alone is timed."""
    from torch._functorch import config as functorch_config

    from ..zero3 import recompute_param_aliases

    gm = captured.fresh()
    tagged = recompute_param_aliases(gm.graph, captured.param_indices) if walk else []
    start = time.perf_counter()
    with functorch_config.patch(activation_memory_budget=budget):
        fw, bw = fn(gm, captured.joint_inputs, num_fwd_outputs=captured.num_fwd_outputs, **captured.partition_kwargs)
    return fw, bw, time.perf_counter() - start, tagged


def _zero3_summary(captured: Any, budget: float, fxcut_partition: Any, tagged: list[Any], saved: list[str],
                   saved_bytes: int) -> Any:
    """What the ZeRO-3 walk changed: fxcut's partition again without it,
    set against the one with it (``saved``, ``saved_bytes``)."""
    from collections import Counter

    from ..torchrules.ops import value_nbytes
    from .report import Zero3Summary, _op_name, summarize

    pfw, pbw, _, _ = _timed_partition(captured, budget, fxcut_partition, False)
    plain = summarize(pfw, pbw, captured.num_fwd_outputs)
    tagged_names = {n.name for n in tagged}
    nodes = {n.name: n for n in captured.gm.graph.nodes}
    aliases = [name for name in plain.saved if name in tagged_names]
    still_saved = [name for name in saved if name in tagged_names]
    return Zero3Summary(
        tagged=[n.name for n in tagged],
        tagged_ops=dict(Counter(_op_name(n) for n in tagged).most_common()),
        aliases_saved_without_walk=aliases,
        alias_bytes_saved_without_walk=sum(value_nbytes(nodes[a]) for a in aliases),
        aliases_saved_with_walk=still_saved,
        saved_bytes_without_walk=plain.saved_bytes,
        saved_bytes_with_walk=saved_bytes,
    )


def _comparison_extra(args: argparse.Namespace, captured: Any, plan: dict[str, Any], built: tuple[Any, Any, Any] | None,
                      real_backend: str) -> dict[str, Any]:
    """The report's entries beyond the two partitions: the model, the plan
    (``plan``: :func:`_plan_report`'s) and, with --peaks, the modelled and
    measured peaks."""
    extra: dict[str, Any] = {"model": args.module or args.model, "parameters": len(captured.param_indices), **plan}
    from ..route.guard import untested_reason

    skipped = untested_reason() if getattr(args, "peaks", False) else None
    if skipped is not None:
        extra["peaks_skipped"] = f"{skipped}, so the plan's peaks are not shown"
    elif getattr(args, "peaks", False):
        extra["peaks"] = {"model": model_peaks(captured, args.zero3),
                          "inductor_model": model_peaks(captured, args.zero3, "inductor")}
        if built is not None:
            with _quiet_native_stderr():  # the profiler's own lines (kineto writes them to file descriptor 2)
                extra["peaks"]["measured"] = {backend: measured_step_peaks(args, built, backend)
                                              for backend in measured_backends(real_backend)}
    return extra


@contextlib.contextmanager
def _quiet_native_stderr() -> Iterator[None]:
    """File descriptor 2 into a temporary file while the body runs: what
    native code prints there (torch's profiler: "profiler_start") is not the
    CLI's output.  Written back only when the body raises."""
    import tempfile

    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        except BaseException:
            os.dup2(saved, 2)
            sink.seek(0)
            sys.stderr.write(sink.read().decode(errors="replace"))
            raise
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def _plan_objective(args: argparse.Namespace) -> Any:
    """--plan-budget B: the plan's :class:`fxcut.planned.PeakPlanner` (None
    without it), every plan option checked first."""
    plan_budget = getattr(args, "plan_budget", None)
    solver = getattr(args, "plan_solver", "search")
    time_limit = getattr(args, "plan_time_limit", None)
    if plan_budget is None:
        if solver != "search":
            raise UsageError("--plan-solver needs --plan-budget")
        if time_limit is not None:
            raise UsageError("--plan-time-limit needs --plan-budget (and --plan-solver exact or auto)")
        return None
    _check_fraction("--plan-budget", plan_budget)
    if time_limit is not None and solver == "search":
        raise UsageError("--plan-time-limit limits the exact solver: add --plan-solver exact or auto")
    budget = getattr(args, "budget", None)
    if budget is not None and budget != plan_budget:
        raise UsageError(f"--budget {budget:g} with --plan-budget {plan_budget:g}: the plan is compared with torch "
                         f"at the same b ({plan_budget:g}) and at torch's default budget; drop --budget")
    from ..planned import DEFAULT_EXACT_TIME_LIMIT, PeakPlanner

    try:
        return PeakPlanner(plan_budget, solver=solver,
                           exact_time_limit=DEFAULT_EXACT_TIME_LIMIT if time_limit is None else time_limit)
    except ImportError:
        raise UsageError(f"--plan-solver {solver} needs HiGHS, which is not installed: "
                         f"pip install '{_extra('highspy')}'") from None


def _plan_report(routed: Any, objective: Any) -> dict[str, Any]:
    """The report's entries of a plan, read off its route (before any other
    partition runs): its budget, its certificate and its peak against
    torch's at the same b and at torch's default (:func:`fxcut.explain.plan_figures`)."""
    if objective is None:
        return {}
    from ..explain import plan_figures
    from .html import plan_certificate

    if routed is None or routed.choice is None:
        return {"plan_budget": objective.memory_budget, "plan": None, "plan_figures": None}
    return {"plan_budget": objective.memory_budget, "plan": plan_certificate(routed.choice),
            "plan_figures": plan_figures(routed).as_dict()}


def run_partition(args: argparse.Namespace, captured: Any = None) -> Any:
    """Trace (unless ``captured`` is given), then partition with fxcut and
    with torch on copies of the same joint graph; returns a
    :class:`fxcut.tools.report.Comparison`.  With --plan-budget B, fxcut's
    side is the memory plan at B and torch's its partitioner at the same B."""
    from torch._functorch import config as functorch_config
    from torch._functorch.partitioners import min_cut_rematerialization_partition as torch_partition

    from ..partition import partition
    from .report import Comparison, summarize

    _check_fraction("--budget", args.budget)
    objective = _plan_objective(args)
    routes: list[Any] = []

    def fxcut_partition(gm: Any, joint_inputs: Any, **kwargs: Any) -> Any:
        # The route behind the modules is kept: the HTML page draws it (no second plan).
        done = partition(gm, joint_inputs, objective=objective, **kwargs)
        routes[:] = [done.routed]
        return done.modules

    real_backend = getattr(args, "real_backend", "both")
    built = _builtin_to_measure(args) if getattr(args, "peaks", False) and args.real else None
    if captured is None:
        captured = _capture(args, built)
    budget = args.budget if args.budget is not None else functorch_config.activation_memory_budget
    if objective is not None:
        budget = objective.memory_budget  # torch at the same b (the plan itself starts from torch's default)

    # Each partitioner runs once untimed first: both pay one-time costs on
    # their first call (fxcut computes per-op facts on first sight).
    if getattr(args, "plan_solver", "search") == "search":  # the exact solver's time is its limit: no warm-up
        _timed_partition(captured, budget, fxcut_partition, args.zero3)
    fw, bw, seconds, tagged = _timed_partition(captured, budget, fxcut_partition, args.zero3)
    routed = routes[0]
    plan = _plan_report(routed, objective)
    ours = summarize(fw, bw, captured.num_fwd_outputs, seconds)
    theirs = same_saved = same_graphs = None
    if not args.no_torch:
        _timed_partition(captured, budget, torch_partition, args.zero3)
        tfw, tbw, tseconds, _ = _timed_partition(captured, budget, torch_partition, args.zero3)
        theirs = summarize(tfw, tbw, captured.num_fwd_outputs, tseconds)
        if objective is None:  # a plan is meant to differ from torch's decision
            same_saved = ours.saved == theirs.saved
            same_graphs = fw.code == tfw.code and bw.code == tbw.code
    zero3 = None
    if args.zero3:
        zero3 = _zero3_summary(captured, budget, fxcut_partition, tagged, ours.saved, ours.saved_bytes)
    extra = _comparison_extra(args, captured, plan, built, real_backend)
    return Comparison(fxcut=ours, torch=theirs, same_saved=same_saved, same_graphs=same_graphs, zero3=zero3,
                      joint_nodes=captured.num_nodes, extra=extra, routed=routed)


#: --peaks: the budgets at which the plan's peak is set against torch's.
PEAK_BUDGETS = (0.0, 1.0)


def model_peaks(captured: Any, zero3: bool, memory_model: str = "unfused") -> dict[str, dict[str, int]]:
    """The memory model's peak bytes of the partitions of ``captured``'s
    joint graph: ``"torch"``, torch's decision at
    ``activation_memory_budget=b``; ``"plan"``, ``fxcut.planned_partitioner(b)``'s;
    both after DeepCompile's walk with ``zero3``.  Keys: the budgets as text.
    ``memory_model="inductor"``: the inductor model's figures, the plan made
    on that model alone (no inductor check: the figures are the model's)."""
    from ..planned import planned_partitioner
    from ..zero3 import recompute_param_aliases

    out: dict[str, dict[str, int]] = {"torch": {}, "plan": {}}
    for b in PEAK_BUDGETS:
        partition = planned_partitioner(b, memory_model=memory_model, check=None)
        gm = captured.fresh()
        if zero3:
            recompute_param_aliases(gm.graph, captured.param_indices)
        partition(gm, captured.joint_inputs, num_fwd_outputs=captured.num_fwd_outputs, **captured.partition_kwargs)
        choice = partition.planner.last
        if choice is None:
            raise UsageError("--peaks: the plan did not run on this graph (fxcut handed it to torch's "
                             "partitioner; run with -v for the reason)")
        out["plan"][f"{b:g}"] = choice.peak_bytes
        out["torch"][f"{b:g}"] = choice.torch_points[b][0]
    return out


def measured_step_peaks(args: argparse.Namespace, built: tuple[Any, Any, Any], backend: str
                        ) -> dict[str, dict[str, int]]:
    """--peaks --real: one profiled training step of the built model per side
    and budget (:func:`fxcut.tools.measure.measured_peaks`): peak bytes."""
    from .capture import CaptureOptions
    from .measure import measured_peaks

    model, inputs, loss_fn = built
    options = CaptureOptions(autocast_dtype=_dtype(args.dtype), checkpoint=args.checkpoint)
    found = measured_peaks(model, inputs, loss_fn, budgets=PEAK_BUDGETS, backend=backend, zero3=args.zero3,
                           options=options)
    return {side: {f"{b:g}": m.peak_bytes for b, m in by_budget.items()} for side, by_budget in found.items()}


#: What each measured backend runs, for the printed heading.
MEASURED_BACKEND_TEXT = {
    "aot": "eager kernels: torch's aot_eager against fxcut.aot_backend (the FX modules run op by op, each saved "
           "value freed after its last use: the program the memory model describes)",
    "inductor": "torch.compile's inductor against fxcut.inductor_backend (fused kernels: the program the inductor "
                "memory model describes)",
}

#: The model block each measured backend is set against.
MODEL_OF_BACKEND = {"aot": "model", "inductor": "inductor_model"}


def model_gaps(model: dict[str, dict[str, int]], measured: dict[str, dict[str, int]]) -> tuple[float, float]:
    """The lowest and the highest signed relative gap between a model's
    figures and the measured step's ((model - measured) / measured) over
    both sides and budgets: below 0, the model under-counts."""
    gaps = [(model[side][b] - m) / m for side, by_b in measured.items() for b, m in by_b.items() if m]
    return (min(gaps), max(gaps)) if gaps else (0.0, 0.0)


def gaps_text(low: float, high: float) -> str:
    """How far a model is from its measurement, in words."""
    if abs(low) < 5e-4 and abs(high) < 5e-4:
        return "its model equal to it (within 0.05%)"
    if low == high:
        return f"its model {low:+.1%} off it"
    return f"its model {low:+.1%} to {high:+.1%} off it"


def print_peaks(peaks: dict[str, Any], out: Any = None) -> None:
    """--peaks: the plan's peak against torch's at budgets 0 and 1."""
    w = (out if out is not None else sys.stdout).write
    blocks = [("memory model (fxcut.solve.memory: the forward and backward modules run op by op, activations "
               "only)", peaks["model"])]
    if "inductor_model" in peaks:
        blocks.append(("inductor memory model (memory_model=\"inductor\": kernels as inductor fuses and frees "
                       "them, the plan on the model alone as fxcut.inductor_backend plans it; check_time_limit=20 "
                       "also asks inductor itself, docs/memory_model.md)", peaks["inductor_model"]))
    for backend, figures in peaks.get("measured", {}).items():
        gaps = gaps_text(*model_gaps(peaks[MODEL_OF_BACKEND[backend]], figures))
        blocks.append((f"measured: one training step on CPU, real tensors, backend {backend}: "
                       f"{MEASURED_BACKEND_TEXT[backend]}; torch profiler allocation events, bytes beyond the "
                       f"step's start (gradients included); {gaps}", figures))
    budgets = [f"{b:g}" for b in PEAK_BUDGETS]
    w("\nthe memory plan against torch: peak bytes (torch: activation_memory_budget=b; fxcut plan: "
      "fxcut.planned_partitioner(memory_budget=b))\n")
    for title, figures in blocks:
        w(f"{title}:\n")
        w(f"  {'':14s}" + "".join(f"{'budget ' + b:>16s}" for b in budgets) + "\n")
        for label, side in (("torch", "torch"), ("fxcut plan", "plan")):
            w(f"  {label:14s}" + "".join(f"{_mib(figures[side][b]):>16s}" for b in budgets) + "\n")
        w(f"  {'plan / torch':14s}" + "".join(
            f"{figures['plan'][b] / figures['torch'][b]:>16.3f}" if figures["torch"][b] else f"{'-':>16s}"
            for b in budgets) + "\n")


def _mib(n: int) -> str:
    return f"{n / 2**20:,.2f} MiB"


#: What b means to fxcut and to torch, said wherever the two are set side by side.
B_NOTE = ("fxcut's b bounds the peak (b=1: no higher than torch's default decision; b=0: the lowest peak the "
          "search finds); torch's activation_memory_budget bounds the bytes it saves: the same number means "
          "different things")


def print_comparison(cmp: Any, out: Any = None) -> None:
    w = (out if out is not None else sys.stdout).write
    w(f"model: {cmp.extra.get('model')}  joint graph: {cmp.joint_nodes} nodes (the output node included), "
      f"{cmp.extra.get('parameters')} parameters\n")
    if cmp.zero3 is not None:
        _print_zero3(cmp.zero3, w)
    if cmp.is_plan:
        b = cmp.extra["plan_budget"]
        w(f"\nfxcut: the memory plan at b={b:g} (fxcut.planned_partitioner(memory_budget={b:g}))"
          + (f"; torch: its partitioner at activation_memory_budget={b:g}, the same b" if cmp.torch else "") + "\n")
    rows = [("fxcut", cmp.fxcut)] + ([("torch", cmp.torch)] if cmp.torch else [])
    w(f"\n{'':8s}{'saved':>8s}{'activations':>16s}{'inputs':>14s}{'recomputed':>12s}"
      f"{'fw nodes':>10s}{'bw nodes':>10s}{'time':>12s}\n")
    for name, s in rows:
        w(f"{name:8s}{len(s.saved):8d}{_mib(s.saved_bytes - s.saved_input_bytes):>16s}"
          f"{_mib(s.saved_input_bytes):>14s}{len(s.recomputed):12d}"
          f"{s.fw_nodes:10d}{s.bw_nodes:10d}{s.seconds * 1e3:10.1f}ms\n")
    w("(saved: values the forward keeps for backward; inputs: parameters and other graph inputs among them)\n")
    if cmp.is_plan:
        _print_plan(cmp.extra, w)
    if cmp.fxcut.recomputed_ops:
        top = ", ".join(f"{op} x{c}" for op, c in list(cmp.fxcut.recomputed_ops.items())[:8])
        w(f"recomputed in backward: {top}\n")
    if cmp.torch is not None and not cmp.is_plan:
        verdict = "identical" if cmp.same_saved and cmp.same_graphs else "DIFFERENT"
        speed = f"; partition_fn {cmp.speedup:.2f}x torch's speed" if cmp.speedup is not None else ""
        w(f"fxcut vs torch: saved values and graphs {verdict}{speed}\n")


def _print_zero3(z: Any, w: Any) -> None:
    w(f"\nZeRO-3 walk: {len(z.tagged)} parameter aliases / casts tagged MUST_RECOMPUTE\n")
    for op, count in z.tagged_ops.items():
        w(f"  {count:5d}  {op}\n")
    w(f"  parameter aliases saved for backward: {len(z.aliases_saved_without_walk)} "
      f"({_mib(z.alias_bytes_saved_without_walk)}) without the walk, "
      f"{len(z.aliases_saved_with_walk)} with it: the forward no longer saves "
      f"{_mib(z.alias_bytes_saved_without_walk)} of parameter aliases\n")
    change = z.saved_bytes_with_walk - z.saved_bytes_without_walk
    w(f"  everything saved for backward: {_mib(z.saved_bytes_without_walk)} without the walk, "
      f"{_mib(z.saved_bytes_with_walk)} with it ({'+' if change >= 0 else '-'}{_mib(abs(change))}: "
      f"the backward recomputes the aliases from the parameters, which ZeRO-3 gathers again)\n")


def plan_line(figures: dict[str, Any]) -> str:
    """The plan's peak against torch's at the same b and at torch's default,
    in MiB (``figures``: :meth:`fxcut.explain.PlanFigures.as_dict`)."""
    from .report import mib

    plan, same, default = figures["plan"], figures["torch_same_budget"], figures["torch_default"]
    return (f"plan at b={plan['budget']:g}: peak {mib(plan['peak_bytes'])} vs torch at the same b "
            f"{mib(same['peak_bytes'])} and at torch's default budget ({default['budget']:g}) "
            f"{mib(default['peak_bytes'])}")


def _print_plan(extra: dict[str, Any], w: Any) -> None:
    """--plan-budget: the plan's modelled peak and recompute against torch's
    at the same b and at its default, what b means, the certificate."""
    from .html import certificate_text
    from .report import flops

    figures = extra.get("plan_figures")
    if figures is None:
        w("the plan did not run: torch's partitioner decided this graph (run with -v for the reason)\n")
        return
    plan, same, default = figures["plan"], figures["torch_same_budget"], figures["torch_default"]
    w(f"{plan_line(figures)} (the memory model's peaks, {figures['memory_model']}: the modules run op by op, "
      "activations only)\n")
    w(f"recompute: plan {flops(plan['recompute_flops'])} vs torch at the same b {flops(same['recompute_flops'])} "
      f"and at its default {flops(default['recompute_flops'])} (the memory model's FLOPs)\n")
    w(f"({B_NOTE})\n")
    certificate = extra.get("plan")
    if certificate is not None and certificate.get("solver") != "search":
        w(certificate_text(certificate) + "\n")


def write_html(args: argparse.Namespace, captured: Any, path: str, routed: Any) -> str:
    """--html: the page of fxcut's decision on the prepared joint graph (dead
    code removed, CSE), under the run's --budget: the route of the run's own
    fxcut partition (``routed``), drawn without deciding again.  With
    --plan-budget B the page draws the plan's decision, and its memory plot
    adds torch's decisions at the same B and at its default budget on the
    same graph (:func:`fxcut.explain.plan_figures`).  Returns the page's
    absolute path."""
    from ..explain import plan_figures
    from .html import plan_certificate, render_html, routed_decision

    if routed is None:
        raise UsageError("--html: torch's partitioner decided this graph (a fallback): no fxcut decision to draw")
    nfo = captured.num_fwd_outputs
    title = f"fxcut partition: {args.module or args.model}"
    if getattr(args, "plan_budget", None) is None:
        page = render_html(routed_decision(routed), title=title, num_fwd_outputs=nfo, joint_nodes=captured.num_nodes)
    else:
        figures = plan_figures(routed)
        b, b0 = figures.budget, figures.default_budget
        more = [("default", f"torch at its default budget ({b0:g})", figures.torch_default)] if b != b0 else []
        cert = plan_certificate(routed.choice) if routed.choice is not None and routed.choice.solver != "search" \
            else None
        page = render_html(routed_decision(routed), title=f"{title} (memory plan at b={b:g})", num_fwd_outputs=nfo,
                           baseline=figures.torch_same_budget, label=f"fxcut plan b={b:g}",
                           baseline_label=f"torch at the same b (activation_memory_budget={b:g})", more=more,
                           certificate=cert, note=B_NOTE + ".", joint_nodes=captured.num_nodes)
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(page)
    except OSError as e:
        raise UsageError(f"--html {path!r}: {e.strerror or e}") from None
    return os.path.abspath(path)


def check_html_target(path: str, *, force: bool) -> None:
    """--html: fail before the run, not after it, when the page cannot be
    written; an existing file is overwritten only with --force."""
    from .._paths import check_output_path

    try:
        check_output_path(path, "--html", overwrite=force)
    except (TypeError, ValueError, OSError) as e:
        raise UsageError(str(e)) from None


def run_explain(args: argparse.Namespace) -> Any:
    """``fxcut explain``: the account of one node (a dict), or with --list
    of every node (a list); with --plan-budget B, of the memory plan's
    decision at B, beside torch's at the same B and at its default."""
    from ..explain import UnknownNodeError, explain_plan, explain_values, plan_figures

    if (args.value is None) == (not args.list):
        raise UsageError("explain takes one node name, or --list to list the nodes" if args.list else
                         "explain needs a node name (or --list to list the nodes)")
    objective = _plan_objective(args)
    captured = _capture(args)
    gm = captured.fresh()
    if args.zero3:
        from ..zero3 import recompute_param_aliases

        recompute_param_aliases(gm.graph, captured.param_indices)
    names = None if args.list else [args.value]
    try:
        if objective is None:
            found = explain_values(gm, names, num_fwd_outputs=captured.num_fwd_outputs, **captured.partition_kwargs)
            figures = None
        else:
            routed = _plan_route(gm, captured, objective)
            figures = plan_figures(routed)
            found = explain_plan(routed, names, figures)
    except UnknownNodeError as e:
        raise UsageError(f"{e} (run the same command with --list in place of {args.value!r} to list the "
                         "nodes)") from None
    if args.list:
        return found
    result = found[0]
    if figures is not None:
        result["plan_figures"] = figures.as_dict()
        result["text"] += "\n  " + plan_line(result["plan_figures"]) + " (the memory model's peaks)"
    return result


def _plan_route(gm: Any, captured: Any, objective: Any) -> Any:
    """The route of the plan's partition of ``gm`` (explain --plan-budget)."""
    from ..partition import partition

    done = partition(gm, captured.joint_inputs, objective=objective, num_fwd_outputs=captured.num_fwd_outputs,
                     **captured.partition_kwargs)
    if done.routed is None or done.routed.choice is None:
        raise UsageError("explain --plan-budget: torch's partitioner decided this graph (a fallback): no plan to "
                         "explain (run with -v for the reason)")
    return done.routed


def explain_listing(accounts: list[dict[str, Any]]) -> str:
    """explain --list: one line per node: its name, op and where it went
    (with a plan: where torch puts it at the same b and at its default)."""
    plan = bool(accounts) and "torch_same_budget" in accounts[0]
    width = max((len(a["node"]) for a in accounts), default=4) + 2
    head = f"{'node':{width}s}{'op':40s}" + (
        f"{'plan b=' + format(accounts[0]['torch_same_budget']['budget'], 'g'):18s}"
        f"{'torch same b':18s}{'torch default':18s}" if plan else "where")
    lines = [head.rstrip()]
    for a in accounts:
        where = a["why"].split(":")[0]
        if plan:
            where = (f"{a['place']:18s}{a['torch_same_budget']['place']:18s}{a['torch_default']['place']:18s}"
                     .rstrip())
        lines.append(f"{a['node']:{width}s}{str(a['op'])[:38]:40s}{where}")
    return "\n".join(lines)


def _check_fraction(flag: str, value: float | None) -> None:
    """UsageError unless ``value`` (a parsed float: ``1e400`` is inf) is
    None or a number in [0, 1] (:func:`fxcut._numbers.check_number`)."""
    if value is None:
        return
    try:
        check_number(flag, value, 0.0, 1.0)
    except ValueError:
        raise UsageError(f"{flag} {value} must be a number between 0 and 1") from None


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{value} is not positive")
    return value


def _finite_float(text: str) -> float:
    """A number as written, finite (``1e400`` parses as inf: refused here,
    naming the text, rather than echoed as inf); its range is checked later."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{value} is not a positive finite number")
    return value


def models_help() -> str:
    """The built-in models, one a line, with what each is and the size
    options it takes (--help's epilog)."""
    from .models import MODEL_SUMMARIES, MODELS

    lines = ["built-in models (--model NAME):"]
    for name in sorted(MODELS):
        accepted = inspect.signature(MODELS[name]).parameters
        sizes = " ".join(f"--{k}" for k in ("layers", "hidden", "heads", "seq", "batch") if k in accepted)
        lines.append(f"  {name:8s} {MODEL_SUMMARIES.get(name, '')} ({sizes or 'no size options'})")
    return "\n".join(lines)


def _add_model_args(p: argparse.ArgumentParser) -> None:
    from .models import MODELS

    p.add_argument("--model", default="llama",
                   help=f"built-in model: {', '.join(sorted(MODELS))} (default: llama; listed below)")
    p.add_argument("--module", help="your own model: 'package.module:factory' (a callable returning nn.Module)")
    p.add_argument("--input", action="append", help="an input of --module as 'd0,d1,...:dtype' (repeatable)")
    p.add_argument("--layers", type=_positive_int)
    p.add_argument("--seq", type=_positive_int)
    p.add_argument("--batch", type=_positive_int)
    p.add_argument("--hidden", type=_positive_int)
    p.add_argument("--heads", type=_positive_int)
    p.add_argument("--dtype", default=None, help="autocast dtype, e.g. bfloat16 (default: none)")
    p.add_argument("--checkpoint", action="store_true", help="wrap each block in torch.utils.checkpoint")
    p.add_argument("--zero3", action="store_true", help="treat parameters as ZeRO-3 parameters (DeepCompile's walk)")
    p.add_argument("--real", action="store_true", help="trace with real tensors instead of fake ones")


class _Parser(argparse.ArgumentParser):
    """Bad arguments are a :class:`UsageError`: one line, exit status 2."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see '{self.prog} --help')")


def _add_verbose(p: argparse.ArgumentParser, default: Any) -> None:
    p.add_argument("-v", "--verbose", action="count", default=default, help="log at INFO (-v) or DEBUG (-vv)")


#: The benchmark ``fxcut bench`` runs: development tooling, in the source
#: checkout next to this package (``python/fxcut/tools/``), not in the wheel.
BENCH_SCRIPT = Path(__file__).resolve().parents[3] / "bench" / "partition_benchmark.py"

#: The pyproject extra that installs each optional module the CLI may need.
EXTRAS = {"highspy": "exact", "scipy": "bench", "networkx": "bench", "matplotlib": "bench", "transformers": "bench"}
#: What ``fxcut bench`` imports beyond fxcut's own dependencies (its extra: bench).
BENCH_MODULES = ("numpy", "scipy", "networkx", "matplotlib")


def _extra(module: str) -> str:
    """What to pip-install for ``module``: fxcut's extra that has it."""
    extra = EXTRAS.get(module.partition(".")[0])
    return f"fxcut[{extra}]" if extra else module.partition(".")[0]


def missing_module_line(what: str, module: str) -> str:
    """The one line for an optional module that is not installed."""
    return f"fxcut: error: {what} needs {module}, which is not installed: pip install '{_extra(module)}'"


def run_bench(argv: Sequence[str], script: Path = BENCH_SCRIPT) -> int:
    """``fxcut bench``: run the source checkout's benchmark (it needs the
    checkout's tests/ for torch's reference, and numpy, scipy, networkx and
    matplotlib: fxcut[bench]); a clear error where fxcut is installed
    without one, or a module of the extra is missing."""
    if not script.is_file():
        sys.stderr.write(
            f"fxcut: error: `fxcut bench` runs the benchmark of fxcut's source checkout ({script} is "
            "missing: this fxcut was installed from a wheel). Clone the repository, install it with "
            "`pip install -e '.[test]'` and run `fxcut bench` (or `python bench/bench_partition.py`) there.\n")
        return 2
    for name in BENCH_MODULES:
        if importlib.util.find_spec(name) is None:
            sys.stderr.write(missing_module_line("`fxcut bench`", name) + "\n")
            return 2
    spec = importlib.util.spec_from_file_location("partition_benchmark", script)
    assert spec is not None and spec.loader is not None  # a .py file always has a source loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file runs
    try:
        spec.loader.exec_module(module)
        status: int = module.main(list(argv), prog="fxcut bench")
    except ModuleNotFoundError as e:
        if e.name is None or e.name.partition(".")[0] not in EXTRAS:
            raise
        sys.stderr.write(missing_module_line("`fxcut bench`", e.name.partition(".")[0]) + "\n")
        return 2
    return status


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="fxcut", description="fxcut: AOT Autograd's min-cut partition decision, in C",
                     formatter_class=argparse.RawDescriptionHelpFormatter,
                     epilog=f"the main job: `python -m fxcut` (or `fxcut` with no command) runs\n  fxcut "
                            f"{' '.join(DEFAULT_ARGS)}\nand takes partition's options after it, e.g. "
                            f"`python -m fxcut --real` or `python -m fxcut --layers 2`.\n\n{models_help()}")
    _add_verbose(parser, 0)
    sub = parser.add_subparsers(dest="command")
    p = sub.add_parser("partition", help="partition a model with fxcut and torch, side by side",
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=models_help())
    _add_verbose(p, argparse.SUPPRESS)
    _add_model_args(p)
    _add_partition_args(p)
    e = sub.add_parser("explain", help="why a value was saved or recomputed",
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=models_help())
    _add_verbose(e, argparse.SUPPRESS)
    _add_model_args(e)
    e.add_argument("value", nargs="?", help="node name in the joint graph, e.g. addmm_2 (--list lists them)")
    e.add_argument("--list", action="store_true", help="list every node of the joint graph and where it went")
    e.add_argument("--plan-budget", type=_finite_float, default=None, metavar="B",
                   help="explain the memory plan's decision at B (fxcut.planned_partitioner(memory_budget=B)), "
                        "beside torch's at the same B and at its default")
    e.add_argument("--json", action="store_true")
    b = sub.add_parser("bench", add_help=False,
                       help="benchmark fxcut against torch on GPT joint graphs (fxcut bench --help)")
    b.add_argument("rest", nargs=argparse.REMAINDER)  # handled before parsing: see main()
    return parser


def _add_partition_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--budget", type=_finite_float, default=None,
                   help="torch's activation_memory_budget (default: config's)")
    p.add_argument("--plan-budget", type=_finite_float, default=None, metavar="B",
                   help="fxcut's side: fxcut.planned_partitioner(memory_budget=B), B on the modelled peak, against "
                        "torch at the same B and at its default budget")
    p.add_argument("--plan-solver", choices=("search", "exact", "auto"), default="search",
                   help="the plan's solver (exact/auto: the MILP, with a proven lower bound; needs fxcut[exact])")
    p.add_argument("--plan-time-limit", type=_positive_float, default=None, metavar="S",
                   help="seconds the exact plan solver may take (default 60; needs --plan-solver exact or auto)")
    p.add_argument("--no-torch", action="store_true", help="skip torch's partitioner")
    p.add_argument("--peaks", action="store_true",
                   help="also set the memory plan's peak against torch's at budgets 0 and 1: the memory model's "
                        "figures, and (with --real) one measured training step of each")
    p.add_argument("--real-backend", choices=MEASURE_BACKEND_CHOICES, default="both",
                   help="--peaks --real: measure under eager kernels (aot: torch's aot_eager, the program the "
                        "memory model describes), inductor (the inductor memory model's), or both (default)")
    p.add_argument("--json", action="store_true", help="print JSON for machines")
    p.add_argument("--html", metavar="FILE", help="also write an HTML page drawing fxcut's decision")
    p.add_argument("--force", action="store_true", help="overwrite an existing --html file")


#: fxcut bench's integer options: each value must be in [1, limit].
BENCH_INT_OPTIONS = {
    "--layers": MAX_LAYERS, "--phase-layers": MAX_LAYERS, "--reps": 1000, "--slow-reps": 1000,
    "--phase-reps": 1000, "--hidden": MAX_DIM, "--heads": MAX_DIM, "--seq": MAX_DIM, "--batch": MAX_DIM,
    "--vocab": 2**20,
}


def check_bench_args(argv: Sequence[str]) -> None:
    """UsageError for an integer option of ``fxcut bench`` that is not a
    positive integer within its limit (the benchmark itself would accept
    ``--layers -1`` and run for minutes)."""
    i = 0
    while i < len(argv):
        token = argv[i]
        option, eq, inline = token.partition("=")
        if option not in BENCH_INT_OPTIONS:
            i += 1
            continue
        if eq:
            values = [inline]
            i += 1
        else:
            j = i + 1
            # --layers takes several values; a negative number is a value too.
            while j < len(argv) and (not argv[j].startswith("-") or _is_int(argv[j])):
                j += 1
                if option != "--layers":
                    break
            values = list(argv[i + 1:j])
            i = j
        if not values:
            raise UsageError(f"fxcut bench: {option} needs a value")
        for text in values:
            if not _is_int(text) or not 1 <= int(text) <= BENCH_INT_OPTIONS[option]:
                raise UsageError(f"fxcut bench: {option} {text!r} must be an integer from 1 to "
                                 f"{BENCH_INT_OPTIONS[option]}")


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


def main_job_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` with the main job (:data:`DEFAULT_ARGS`) put in where no
    command is given: nothing, or only options (``python -m fxcut --real``:
    the main job with --real; a later option overrides the main job's)."""
    argv = list(argv)
    i = 0
    while i < len(argv) and re.fullmatch(r"-v+|--verbose", argv[i]):
        i += 1
    rest = argv[i:]
    if not rest or (rest[0].startswith("-") and rest[0] not in ("-h", "--help")):
        return argv[:i] + DEFAULT_ARGS + rest
    return argv


def main(argv: Sequence[str] | None = None) -> int:
    argv = main_job_argv(sys.argv[1:] if argv is None else argv)
    if argv[0] == "bench":
        # The benchmark has its own options (argparse cannot hand a
        # subcommand's unknown options through).
        try:
            check_bench_args(argv[1:])
        except UsageError as e:
            sys.stderr.write(f"fxcut: error: {e}\n")
            return 2
        return run_bench(argv[1:])
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except UsageError as e:
        sys.stderr.write(f"fxcut: error: {e}\n")
        return 2
    with _logging(args.verbose):
        return _run(parser, args)


@contextlib.contextmanager
def _logging(verbose: int) -> Iterator[None]:
    """-v: fxcut's log (INFO: one line per decision; -vv DEBUG: bans per
    rule) on stderr, for this command only."""
    if not verbose:
        yield
        return
    logger = logging.getLogger("fxcut")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG if verbose > 1 else logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def _run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    try:
        if args.command == "partition":
            return _run_partition(args)
        if args.command == "explain":
            result = run_explain(args)
            if args.json:
                json.dump(result, sys.stdout, indent=2)
                sys.stdout.write("\n")
            else:
                sys.stdout.write((explain_listing(result) if args.list else result["text"]) + "\n")
            return 0
        parser.print_help()
        return 2
    except UsageError as e:
        sys.stderr.write(f"fxcut: error: {e}\n")
        return 2
    except NotImplementedError as e:
        message = _first_line(e)
        sys.stderr.write(f"fxcut: not supported: {message.removeprefix('fxcut: ')}\n")
        return 2
    except ModuleNotFoundError as e:
        module = (e.name or "").partition(".")[0]
        if module not in EXTRAS:
            raise
        sys.stderr.write(missing_module_line(f"fxcut {args.command}", module) + "\n")
        return 2


def _run_partition(args: argparse.Namespace) -> int:
    if args.html is not None:
        check_html_target(args.html, force=args.force)
    captured = _capture(args) if args.html else None
    cmp = run_partition(args, captured)
    if args.json:
        json.dump(cmp.as_dict(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print_comparison(cmp)
        if "peaks" in cmp.extra:
            print_peaks(cmp.extra["peaks"])
        elif "peaks_skipped" in cmp.extra:
            print(f"--peaks: {cmp.extra['peaks_skipped']}")
    if args.html:
        where = write_html(args, captured, args.html, cmp.routed)
        # stdout holds the JSON with --json: the line goes to stderr then
        (sys.stderr if args.json else sys.stdout).write(f"fxcut: wrote the HTML page to {where}\n")
    return 0 if cmp.same_saved in (None, True) else 1


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
