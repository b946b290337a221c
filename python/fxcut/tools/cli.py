"""The ``fxcut`` command.

    fxcut partition --model llama --layers 4 --zero3     # fxcut vs torch, side by side
    fxcut partition --module pkg.mod:factory --input 8,128:float32
    fxcut explain --model gpt2 VALUE                     # why VALUE was saved / recomputed
    fxcut bench [--quick] [--out DIR] [--docs DIR]       # a source checkout's benchmark (bench/)
    python -m fxcut                                      # the main job (see DEFAULT_ARGS)

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

#: --real-backend's choices (fxcut.tools.measure.MEASURE_BACKENDS; not
#: imported here: the parser is built before torch's heavier modules load).
MEASURE_BACKEND_CHOICES = ("aot", "inductor")

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
    try:
        module = importlib.import_module(path)
    except (Exception, SystemExit) as e:  # the user's module may fail in any way while importing
        raise UsageError(f"--module {args.module!r}: module {path!r} does not import: "
                         f"{type(e).__name__}: {_first_line(e)}") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise UsageError(f"--module {args.module!r}: module {path!r} has no callable {attr!r}")
    fake_mode = FakeTensorMode() if not args.real else None
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

    def loss_fn(out: Any, _inputs: Any) -> torch.Tensor:
        leaves = [t for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]
        return sum(t.float().sum() for t in leaves if t.is_floating_point())  # type: ignore[return-value]

    # Run it once untraced first: inputs the model does not accept fail
    # there with torch's own message, not dynamo's.
    with fake_mode if fake_mode is not None else contextlib.nullcontext(), torch.no_grad(), _quiet_fake_tensors():
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


def run_partition(args: argparse.Namespace, captured: Any = None) -> Any:
    """Trace (unless ``captured`` is given), then partition with fxcut and
    with torch on copies of the same joint graph; returns a
    :class:`fxcut.tools.report.Comparison`."""
    from torch._functorch import config as functorch_config
    from torch._functorch.partitioners import min_cut_rematerialization_partition as torch_partition

    from ..partition import partition
    from ..torchrules.ops import value_nbytes
    from .report import Comparison, Zero3Summary, summarize
    from ..zero3 import recompute_param_aliases

    _check_fraction("--budget", args.budget)
    plan_budget = getattr(args, "plan_budget", None)
    objective = None
    if plan_budget is not None:
        _check_fraction("--plan-budget", plan_budget)
        from ..planned import PeakPlanner

        objective = PeakPlanner(plan_budget, solver=args.plan_solver, exact_time_limit=args.plan_time_limit)
    elif getattr(args, "plan_solver", "search") != "search":
        raise UsageError("--plan-solver needs --plan-budget")
    routes: list[Any] = []

    def fxcut_partition(gm: Any, joint_inputs: Any, **kwargs: Any) -> Any:
        # The route behind the modules is kept: the HTML page draws it (no second plan).
        done = partition(gm, joint_inputs, objective=objective, **kwargs)
        routes[:] = [done.routed]
        return done.modules

    peaks = getattr(args, "peaks", False)
    real_backend = getattr(args, "real_backend", "aot")
    built = None
    if peaks and args.real:
        if args.module:
            raise UsageError("--peaks --real measures built-in models only (--module: drop --real)")
        if real_backend == "inductor" and args.zero3:
            raise UsageError("--real-backend inductor does not take --zero3: torch's inductor backend has no "
                             "ZeRO-3 walk to measure against (use --real-backend aot)")
        built = _build_builtin(args)
    if captured is None:
        captured = _capture(args, built)
    budget = args.budget if args.budget is not None else functorch_config.activation_memory_budget

    def run(fn: Any, walk: bool) -> tuple[Any, Any, float, list[Any]]:
        gm = captured.fresh()
        tagged = recompute_param_aliases(gm.graph, captured.param_indices) if walk else []
        start = time.perf_counter()
        with functorch_config.patch(activation_memory_budget=budget):
            fw, bw = fn(gm, captured.joint_inputs, num_fwd_outputs=captured.num_fwd_outputs, **captured.partition_kwargs)
        return fw, bw, time.perf_counter() - start, tagged

    # Each partitioner runs once untimed first: both pay one-time costs on
    # their first call (fxcut computes per-op facts on first sight).
    if getattr(args, "plan_solver", "search") == "search":  # the exact solver's time is its limit: no warm-up
        run(fxcut_partition, args.zero3)
    fw, bw, seconds, tagged = run(fxcut_partition, args.zero3)
    routed = routes[0]
    certificate = None
    if objective is not None and objective.last is not None:
        from .html import plan_certificate

        certificate = plan_certificate(objective.last)
    ours = summarize(fw, bw, captured.num_fwd_outputs, seconds)
    theirs = same_saved = same_graphs = None
    if not args.no_torch:
        run(torch_partition, args.zero3)
        tfw, tbw, tseconds, _ = run(torch_partition, args.zero3)
        theirs = summarize(tfw, tbw, captured.num_fwd_outputs, tseconds)
        if plan_budget is None:  # a plan is meant to differ from torch's decision
            same_saved = ours.saved == theirs.saved
            same_graphs = fw.code == tfw.code and bw.code == tbw.code
    zero3 = None
    if args.zero3:
        pfw, pbw, _, _ = run(fxcut_partition, False)
        plain = summarize(pfw, pbw, captured.num_fwd_outputs)
        tagged_names = {n.name for n in tagged}
        nodes = {n.name: n for n in captured.gm.graph.nodes}
        aliases = [name for name in plain.saved if name in tagged_names]
        from collections import Counter

        from .report import _op_name

        still_saved = [name for name in ours.saved if name in tagged_names]
        zero3 = Zero3Summary(
            tagged=[n.name for n in tagged],
            tagged_ops=dict(Counter(_op_name(n) for n in tagged).most_common()),
            aliases_saved_without_walk=aliases,
            alias_bytes_saved_without_walk=sum(value_nbytes(nodes[a]) for a in aliases),
            aliases_saved_with_walk=still_saved,
            saved_bytes_without_walk=plain.saved_bytes,
            saved_bytes_with_walk=ours.saved_bytes,
        )
    extra: dict[str, Any] = {"model": args.module or args.model, "parameters": len(captured.param_indices)}
    if plan_budget is not None:
        extra["plan_budget"] = plan_budget
        extra["plan"] = certificate
    if peaks:
        extra["peaks"] = {"model": model_peaks(captured, args.zero3),
                          "inductor_model": model_peaks(captured, args.zero3, "inductor")}
        if built is not None:
            extra["peaks"]["measured"] = measured_step_peaks(args, built, real_backend)
            extra["peaks"]["measured_backend"] = real_backend
    return Comparison(
        fxcut=ours,
        torch=theirs,
        same_saved=same_saved,
        same_graphs=same_graphs,
        zero3=zero3,
        joint_nodes=captured.num_nodes,
        extra=extra,
        routed=routed,
    )


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


#: What each --real-backend runs, for the printed heading.
MEASURED_BACKEND_TEXT = {
    "aot": "AOT Autograd with no-op compilers (the FX modules run op by op: the program the memory model describes)",
    "inductor": "torch.compile's inductor backend (fused kernels: not the program the memory model describes)",
}


def print_peaks(peaks: dict[str, Any], out: Any = None) -> None:
    """--peaks: the plan's peak against torch's at budgets 0 and 1."""
    w = (out if out is not None else sys.stdout).write
    blocks = [("memory model (fxcut.solve.memory: the forward and backward modules run op by op, activations "
               "only)", peaks["model"])]
    if "inductor_model" in peaks:
        blocks.append(("inductor memory model (memory_model=\"inductor\": kernels as inductor fuses and frees "
                       "them, the plan on the model alone; fxcut.inductor_backend also asks inductor itself, "
                       "docs/memory_model.md)", peaks["inductor_model"]))
    if "measured" in peaks:
        backend = peaks["measured_backend"]
        blocks.append((f"measured: one training step on CPU, real tensors, backend {backend}: "
                       f"{MEASURED_BACKEND_TEXT[backend]}; torch profiler allocation events, bytes beyond the "
                       "step's start (gradients included)", peaks["measured"]))
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


def print_comparison(cmp: Any, out: Any = None) -> None:
    w = (out if out is not None else sys.stdout).write
    w(f"model: {cmp.extra.get('model')}  joint graph: {cmp.joint_nodes} nodes, "
      f"{cmp.extra.get('parameters')} parameters\n")
    if cmp.zero3 is not None:
        z = cmp.zero3
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
    rows = [("fxcut", cmp.fxcut)] + ([("torch", cmp.torch)] if cmp.torch else [])
    w(f"\n{'':8s}{'saved':>8s}{'activations':>16s}{'inputs':>14s}{'recomputed':>12s}"
      f"{'fw nodes':>10s}{'bw nodes':>10s}{'time':>12s}\n")
    for name, s in rows:
        w(f"{name:8s}{len(s.saved):8d}{_mib(s.saved_bytes - s.saved_input_bytes):>16s}"
          f"{_mib(s.saved_input_bytes):>14s}{len(s.recomputed):12d}"
          f"{s.fw_nodes:10d}{s.bw_nodes:10d}{s.seconds * 1e3:10.1f}ms\n")
    w("(saved: values the forward keeps for backward; inputs: parameters and other graph inputs among them)\n")
    if cmp.extra.get("plan") is not None:
        from .html import certificate_text

        w(certificate_text(cmp.extra["plan"]) + "\n")
    if cmp.fxcut.recomputed_ops:
        top = ", ".join(f"{op} x{c}" for op, c in list(cmp.fxcut.recomputed_ops.items())[:8])
        w(f"recomputed in backward: {top}\n")
    if cmp.torch is not None:
        verdict = "identical" if cmp.same_saved and cmp.same_graphs else "DIFFERENT"
        speed = f"; partition_fn {cmp.speedup:.2f}x torch's speed" if cmp.speedup is not None else ""
        w(f"fxcut vs torch: saved values and graphs {verdict}{speed}\n")


def write_html(args: argparse.Namespace, captured: Any, path: str, routed: Any) -> None:
    """--html: the page of fxcut's decision on the prepared joint graph (dead
    code removed, CSE), under the run's --budget: the route of the run's own
    fxcut partition (``routed``), drawn without deciding again.  With
    --plan-budget B the page draws the plan's decision, and its memory plot
    adds torch's decision at --budget on the same graph (the one the run
    compares)."""
    from torch._functorch import config as functorch_config

    from .html import decide_prepared, memory_timeline, render_html, routed_decision

    if routed is None:
        raise UsageError("--html: torch's partitioner decided this graph (a fallback): no fxcut decision to draw")
    nfo = captured.num_fwd_outputs
    title = f"fxcut partition: {args.module or args.model}"
    plan_budget = getattr(args, "plan_budget", None)
    if plan_budget is None:
        page = render_html(routed_decision(routed), title=title, num_fwd_outputs=nfo)
    else:
        gm = captured.fresh()
        if args.zero3:
            from ..zero3 import recompute_param_aliases

            recompute_param_aliases(gm.graph, captured.param_indices)
        budget = args.budget if args.budget is not None else functorch_config.activation_memory_budget
        with functorch_config.patch(activation_memory_budget=budget):
            torchs = decide_prepared(gm, num_fwd_outputs=nfo, **captured.partition_kwargs)
        from .html import plan_certificate

        planner = routed.plan.objective
        cert = plan_certificate(planner.last) if getattr(planner, "last", None) is not None else None
        page = render_html(routed_decision(routed), title=f"{title} (plan, memory budget {plan_budget:g})",
                           num_fwd_outputs=nfo, baseline=memory_timeline(torchs, nfo),
                           label=f"fxcut plan b={plan_budget:g}",
                           baseline_label=f"torch (activation_memory_budget={budget:g})", certificate=cert)
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(page)
    except OSError as e:
        raise UsageError(f"--html {path!r}: {e.strerror or e}") from None


def check_html_target(path: str, *, force: bool) -> None:
    """--html: fail before the run, not after it, when the page cannot be
    written; an existing file is overwritten only with --force."""
    from .._paths import check_output_path

    try:
        check_output_path(path, "--html", overwrite=force)
    except (TypeError, ValueError, OSError) as e:
        raise UsageError(str(e)) from None


def run_explain(args: argparse.Namespace) -> dict[str, Any]:
    from ..explain import UnknownNodeError, explain_value

    captured = _capture(args)
    gm = captured.fresh()
    if args.zero3:
        from ..zero3 import recompute_param_aliases

        recompute_param_aliases(gm.graph, captured.param_indices)
    try:
        return explain_value(gm, args.value, num_fwd_outputs=captured.num_fwd_outputs, **captured.partition_kwargs)
    except UnknownNodeError as e:
        raise UsageError(str(e)) from None


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


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{value} is not a positive finite number")
    return value


def _add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="llama", help="built-in model (default: llama)")
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


def run_bench(argv: Sequence[str], script: Path = BENCH_SCRIPT) -> int:
    """``fxcut bench``: run the source checkout's benchmark (it needs the
    checkout's tests/ for torch's reference, and numpy, scipy, networkx and
    matplotlib); a clear error where fxcut is installed without one."""
    if not script.is_file():
        sys.stderr.write(
            f"fxcut: error: `fxcut bench` runs the benchmark of fxcut's source checkout ({script} is "
            "missing: this fxcut was installed from a wheel). Clone the repository, install it with "
            "`pip install -e '.[test]'` and run `fxcut bench` (or `python bench/bench_partition.py`) there.\n")
        return 2
    spec = importlib.util.spec_from_file_location("partition_benchmark", script)
    assert spec is not None and spec.loader is not None  # a .py file always has a source loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    status: int = module.main(list(argv), prog="fxcut bench")
    return status


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="fxcut", description="fxcut: AOT Autograd's min-cut partition decision, in C")
    _add_verbose(parser, 0)
    sub = parser.add_subparsers(dest="command")
    p = sub.add_parser("partition", help="partition a model with fxcut and torch, side by side")
    _add_verbose(p, argparse.SUPPRESS)
    _add_model_args(p)
    p.add_argument("--budget", type=float, default=None, help="activation_memory_budget (default: config's)")
    p.add_argument("--plan-budget", type=float, default=None, metavar="B",
                   help="partition with fxcut.planned_partitioner(memory_budget=B): B on the simulated peak")
    p.add_argument("--plan-solver", choices=("search", "exact", "auto"), default="search",
                   help="the plan's solver (exact/auto: the MILP, with a proven lower bound; needs fxcut[exact])")
    p.add_argument("--plan-time-limit", type=_positive_float, default=60.0, metavar="S",
                   help="seconds the exact plan solver may take (default 60)")
    p.add_argument("--no-torch", action="store_true", help="skip torch's partitioner")
    p.add_argument("--peaks", action="store_true",
                   help="also set the memory plan's peak against torch's at budgets 0 and 1: the memory model's "
                        "figures, and (with --real) one measured training step of each")
    p.add_argument("--real-backend", choices=MEASURE_BACKEND_CHOICES, default="aot",
                   help="--peaks --real: measure under AOT Autograd's no-op compilers (aot, the program the "
                        "memory model describes; default) or inductor")
    p.add_argument("--json", action="store_true", help="print JSON for machines")
    p.add_argument("--html", metavar="FILE", help="also write an HTML page drawing fxcut's decision")
    p.add_argument("--force", action="store_true", help="overwrite an existing --html file")
    e = sub.add_parser("explain", help="why a value was saved or recomputed")
    _add_verbose(e, argparse.SUPPRESS)
    _add_model_args(e)
    e.add_argument("value", help="node name in the joint graph, e.g. addmm_3")
    e.add_argument("--json", action="store_true")
    b = sub.add_parser("bench", add_help=False,
                       help="benchmark fxcut against torch on GPT joint graphs (fxcut bench --help)")
    b.add_argument("rest", nargs=argparse.REMAINDER)  # handled before parsing: see main()
    return parser


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


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        argv = list(DEFAULT_ARGS)
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
            if args.html:
                write_html(args, captured, args.html, cmp.routed)
            return 0 if cmp.same_saved in (None, True) else 1
        if args.command == "explain":
            result = run_explain(args)
            if args.json:
                json.dump(result, sys.stdout, indent=2)
                sys.stdout.write("\n")
            else:
                sys.stdout.write(result["text"] + "\n")
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


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
