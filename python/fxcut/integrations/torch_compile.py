"""fxcut's partitioner behind ``torch.compile``, in one line.

    compiled = torch.compile(model, backend=fxcut.inductor_backend())
    compiled = torch.compile(model, backend=fxcut.aot_backend())          # eager kernels
    compiled = torch.compile(model, backend=fxcut.inductor_backend(zero3_params=model))

:func:`inductor_backend` needs no patching: inductor has a supported hook,
its ``custom_partitioner_fn`` config option, which it calls in place of
torch's ``min_cut_rematerialization_partition`` after its own joint-graph
passes.  The backend sets that option for the graphs it compiles and calls
inductor's ``compile_fx``; the option alone works as well:

    torch.compile(model, options={"custom_partitioner_fn": fxcut.InductorPartitioner()})

``zero3_params`` runs DeepCompile's ZeRO-3 parameter-alias walk
(:func:`fxcut.recompute_param_aliases`) on each joint graph before the cut,
as DeepCompile's backend does through :func:`fxcut.get_wrapped_partitioner`.
It may be

- ``None``: no walk;
- ``True``: every ``nn.Parameter`` among a graph's inputs;
- an ``nn.Module`` or an iterable of parameters: those, found by identity
  among a graph's inputs;
- an iterable of DeepCompile ``(arg_idx, ds_id, shape)`` triples: used as
  given for every graph (only sensible when the model compiles to one graph).

With inductor the walk runs after inductor's joint-graph passes, on the
graph the cut is made on; DeepCompile wraps inductor's whole partition
function, so its walk runs before those passes.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
import torch.fx as fx
import torch.nn as nn
from torch._dynamo.backends.common import aot_autograd
from torch._dynamo.backends.debugging import boxed_nop
from torch._inductor import config as inductor_config
from torch._inductor.compile_fx import compile_fx
from torch._inductor.custom_graph_pass import CustomPartitionerFn

import fxcut._C as _C
from .._numbers import check_number
from ..route.guard import verify_mode
from ..route.plan import safe_budget_mode
from ..zero3 import ParamIndex, get_wrapped_partitioner, primal_inputs

Backend = Callable[[fx.GraphModule, Sequence[Any]], Any]


def _is_param_index(entry: Any) -> bool:
    return isinstance(entry, (tuple, list)) and len(entry) == 3 and isinstance(entry[0], int)


def zero3_param_indices(gm: fx.GraphModule, example_inputs: Sequence[Any], zero3_params: Any) -> list[ParamIndex]:
    """DeepCompile's ``param_indices`` for one dynamo graph.

    ``ds_id`` is the parameter's own ``ds_id`` attribute where it has one
    (a DeepSpeed ZeRO-3 parameter), else its position; the shape is its
    ``ds_shape`` where it has one, else its shape.
    """
    if zero3_params is None or zero3_params is False:
        return []
    if isinstance(zero3_params, nn.Module):
        zero3_params = list(zero3_params.parameters())
    inputs = [t for _, t in primal_inputs(gm, example_inputs)]
    if zero3_params is True:
        wanted = None
    else:
        entries = list(zero3_params)
        if entries and all(_is_param_index(e) for e in entries):
            return [(int(e[0]), int(e[1]), e[2]) for e in entries]
        for k, e in enumerate(entries):
            if not isinstance(e, torch.Tensor):
                raise TypeError(f"zero3_params[{k}] is {type(e).__name__}: expected parameters, "
                                "a module, True, or (arg_idx, ds_id, shape) triples")
        wanted = {id(p) for p in entries}
    return [
        (pos, getattr(t, "ds_id", pos), getattr(t, "ds_shape", t.shape))
        for pos, t in enumerate(inputs)
        if isinstance(t, nn.Parameter) and (wanted is None or id(t) in wanted)
    ]


#: The package's tooling: never imported by the library (tests/test_package_shape.py), so it cannot
#: change a partition; everything else can.
TOOLING: tuple[str, ...] = ("tools", "__main__.py")


def decision_files(package: str | None = None) -> tuple[str, ...]:
    """The files whose code can change a decision or a plan, relative to
    the package (``package``: its folder; this package when None): every
    module of it but its tooling (:data:`TOOLING`) -- derived from the tree,
    not listed, so a module added to any layer is covered."""
    root = package or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in files:
            rel = os.path.relpath(os.path.join(folder, name), root)
            if name.endswith(".py") and rel.split(os.sep)[0] not in TOOLING:
                found.append(rel)
    return tuple(sorted(found))


def code_hash(package: str | None = None, extension: str | None = None) -> str:
    """A hash of the decision path's code (:func:`decision_files` and the C
    extension): part of inductor's cache key, so a cached graph is only
    reused when it was cut by this very code, and a change to the CLI or the
    tooling does not throw the cache away."""
    root = package or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    digest = hashlib.sha256()
    for rel in decision_files(root):
        with open(os.path.join(root, rel), "rb") as f:
            digest.update(rel.encode() + b"\0" + f.read() + b"\0")
    with open(extension or _C.__file__, "rb") as f:
        digest.update(f.read())
    return digest.hexdigest()


@functools.cache
def _code_hash() -> str:
    return code_hash()


class InductorPartitioner(CustomPartitionerFn):
    """fxcut's partitioner as inductor's ``custom_partitioner_fn``.

    ``param_indices``: DeepCompile's ``(arg_idx, ds_id, shape)`` triples;
    when not empty the ZeRO-3 walk runs before the cut.
    """

    def __init__(self, param_indices: Iterable[ParamIndex] = (), verify: Any = None,
                 memory_budget: float | None = None, safe_budget: bool | None = None,
                 memory_model: str = "inductor", check_time_limit: float | None = None) -> None:
        # Only plain data here: inductor pickles its config, this object
        # included, into its cache key.
        self.param_indices: list[ParamIndex] = [(int(e[0]), int(e[1]), e[2]) for e in param_indices]
        # "raise", "warn", "off" (explicitly off), or None (FXCUT_VERIFY decides)
        self.verify = (verify_mode(verify) or "off") if verify is not None else None
        # None: torch's decision; a number: fxcut.planned_partitioner's budget on the peak
        self.memory_budget = _check_plan_options(memory_budget, self.verify, safe_budget, memory_model)
        # True/False, or None (FXCUT_SAFE_BUDGET decides at call time)
        self.safe_budget = safe_budget
        # the plan's memory model: inductor compiles what this partitioner builds
        self.memory_model = memory_model
        # the plan's budget for asking inductor (None: fxcut.planned's default)
        self.check_time_limit = _check_check_time_limit(check_time_limit, self.memory_budget, memory_model)

    def __call__(self, gm: fx.GraphModule, joint_inputs: Sequence[object], **kwargs: Any
                 ) -> tuple[fx.GraphModule, fx.GraphModule]:
        partition = get_wrapped_partitioner(bool(self.param_indices), self.param_indices,
                                            _fxcut_partition(self.verify, self.memory_budget, self.safe_budget,
                                                             self.memory_model, self.check_time_limit))
        return partition(gm, joint_inputs, **kwargs)

    def uuid(self) -> Any:
        # verify mode re-decides with torch: a graph cached without it is
        # not a verified one; safe_budget changes the decision.
        # A plan never reads safe_budget (nor FXCUT_SAFE_BUDGET): it keeps unsafe values saved whatever it says.
        safe = None if self.memory_budget is not None else safe_budget_mode(self.safe_budget)
        return (_code_hash(), tuple(e[0] for e in self.param_indices), verify_mode(self.verify),
                safe, self.memory_model, self.memory_budget, self.check_time_limit)

    def __repr__(self) -> str:
        return (f"InductorPartitioner(param_indices={self.param_indices!r}, verify={self.verify!r}, "
                f"memory_budget={self.memory_budget!r}, safe_budget={self.safe_budget!r}, "
                f"memory_model={self.memory_model!r}, check_time_limit={self.check_time_limit!r})")


def _check_plan_options(memory_budget: Any, verify: Any, safe_budget: Any,
                        memory_model: Any = "unfused") -> float | None:
    """``memory_budget`` (None or a number in [0, 1]) as a float or None;
    ``safe_budget`` True, False or None; ``memory_model`` one of the memory
    models; verify mode is the default path's only, without a plan or
    ``safe_budget=True`` (each differs from torch's decision by design)."""
    from ..solve.memory import check_memory_model

    check_memory_model(memory_model)
    if safe_budget is not None:
        safe_budget_mode(safe_budget)  # ValueError naming safe_budget
    if verify not in (None, "off"):
        for name, value in (("memory_budget", memory_budget), ("safe_budget", safe_budget or None)):
            if value is not None:
                raise ValueError(f"verify compares with torch's decision: it applies to the default path only, "
                                 f"not with {name} (which differs from torch's decision by design)")
    return None if memory_budget is None else check_number("memory_budget", memory_budget, 0.0, 1.0)


def _check_check_time_limit(check_time_limit: Any, memory_budget: float | None,
                            memory_model: str = "inductor") -> float | None:
    """``check_time_limit`` as a float (seconds inductor's check may spend
    per graph), or None; a ValueError naming it when it is out of range,
    given without a ``memory_budget`` (it belongs to the plan), or given
    where the plan never asks inductor (an unfused ``memory_model``)."""
    if check_time_limit is None:
        return None
    if memory_budget is None:
        raise ValueError("check_time_limit applies to a plan: pass memory_budget too")
    from ..planned import MAX_TIME_LIMIT

    limit = check_number("check_time_limit", check_time_limit, 0.0, MAX_TIME_LIMIT)
    if memory_model != "inductor":
        raise ValueError(f"check_time_limit bounds the plan's questions to inductor, which a plan on "
                         f"memory_model={memory_model!r} never asks; drop check_time_limit (it applies to "
                         "memory_model='inductor')")
    return limit


def _fxcut_partition(verify: Any, memory_budget: float | None = None, safe_budget: bool | None = None,
                     memory_model: str = "unfused", check_time_limit: float | None = None) -> Any:
    """fxcut's public partition function, with ``verify`` and
    ``safe_budget`` when given (else ``FXCUT_VERIFY`` and
    ``FXCUT_SAFE_BUDGET`` decide at call time), or the planned partitioner
    on ``memory_model`` when ``memory_budget`` is given (a plan never
    recomputes what ``safe_budget`` keeps saved)."""
    from .. import partition

    if memory_budget is not None:
        from ..planned import planned_partitioner

        if check_time_limit is not None:
            return planned_partitioner(memory_budget, memory_model=memory_model, check_time_limit=check_time_limit)
        return planned_partitioner(memory_budget, memory_model=memory_model)
    given: dict[str, Any] = {k: v for k, v in (("verify", verify), ("safe_budget", safe_budget)) if v is not None}
    if not given:
        return None  # get_wrapped_partitioner's default: fxcut's partition
    return functools.partial(partition.min_cut_rematerialization_partition, **given)


def _check_inductor_options(options: dict[str, Any]) -> None:
    known = inductor_config.get_config_copy()
    unknown = [k for k in options if k.replace("-", "_") not in known]
    if unknown:
        raise TypeError(f"inductor_backend() got unknown keyword argument(s) {', '.join(map(repr, unknown))}: "
                        "neither fxcut's options (zero3_params, verify, memory_budget, safe_budget, memory_model, "
                        "check_time_limit) nor "
                        "inductor config options")
    if "custom_partitioner_fn" in options:
        raise ValueError("inductor_backend sets custom_partitioner_fn itself")


@functools.cache
def _aot_autograd_options() -> frozenset[str]:
    """The keyword arguments AOT Autograd's ``aot_module_simplified`` takes
    besides the module, its inputs and what :func:`aot_backend` sets."""
    from torch._functorch.aot_autograd import aot_module_simplified

    names = set(inspect.signature(aot_module_simplified).parameters)
    return frozenset(names - {"mod", "args", "fw_compiler", "bw_compiler", "partition_fn"})


def _check_aot_options(options: dict[str, Any]) -> None:
    if "partition_fn" in options:
        raise ValueError("aot_backend sets partition_fn itself")
    unknown = sorted(set(options) - _aot_autograd_options())
    if unknown:
        raise TypeError(f"aot_backend() got unknown keyword argument(s) {', '.join(map(repr, unknown))}: neither "
                        "fxcut's options (fw_compiler, bw_compiler, zero3_params, verify, memory_budget, "
                        "safe_budget, memory_model, check_time_limit) nor AOT Autograd's ("
                        + ", ".join(sorted(_aot_autograd_options())) + ")")


def inductor_backend(zero3_params: Any = None, verify: Any = None, memory_budget: float | None = None,
                     safe_budget: bool | None = None, memory_model: str = "inductor",
                     check_time_limit: float | None = None, **inductor_options: Any) -> Backend:
    """A ``torch.compile`` backend: inductor, with fxcut's partitioner.

    ``inductor_options`` are inductor config options, as ``torch.compile``'s
    ``options=`` takes them (e.g. ``max_autotune=True``); any other keyword
    is a TypeError here, not later inside ``torch.compile``.  See the module
    docstring for ``zero3_params``.  ``verify``: True/``"raise"`` or
    ``"warn"`` decides every graph with torch's partitioner too and compares
    (:mod:`fxcut.route.guard`); None leaves it to ``FXCUT_VERIFY``.
    ``memory_budget``: partition with :func:`fxcut.planned_partitioner`
    (the budget on the simulated peak) instead of torch's decision, on the
    inductor memory model (``memory_model``: what inductor runs; ``"unfused"``
    plans as if the modules ran op by op).  The plan rests on the inductor
    memory model alone by default; ``check_time_limit`` (seconds per graph,
    e.g. 20) opts in to asking inductor itself about its candidates
    (:class:`fxcut.planned.PeakPlanner`: lowering and code generation on
    fake tensors of its own, no guard added to the compile; where a
    budget's pick would rest on the model's figure, asking about the picks
    may take twice that again; None or 0: never asked); only with
    ``memory_budget`` on the inductor memory model (else a ValueError
    naming it).
    ``safe_budget``: keep saved what torch's decision would recompute
    although it draws random numbers or reads state the step mutates
    (:func:`fxcut.min_cut_rematerialization_partition`); None leaves it to
    ``FXCUT_SAFE_BUDGET``.
    """
    options = {k.replace("-", "_"): v for k, v in inductor_options.items()}
    _check_inductor_options(options)
    if verify is not None:
        verify = verify_mode(verify) or "off"
    memory_budget = _check_plan_options(memory_budget, verify, safe_budget, memory_model)
    check_time_limit = _check_check_time_limit(check_time_limit, memory_budget, memory_model)

    def fxcut_inductor(gm: fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
        partitioner = InductorPartitioner(zero3_param_indices(gm, example_inputs, zero3_params), verify,
                                          memory_budget, safe_budget, memory_model, check_time_limit)
        return compile_fx(gm, example_inputs, config_patches={**options, "custom_partitioner_fn": partitioner})

    return fxcut_inductor


def aot_backend(fw_compiler: Callable[..., Any] | None = None, bw_compiler: Callable[..., Any] | None = None,
                zero3_params: Any = None, verify: Any = None, memory_budget: float | None = None,
                safe_budget: bool | None = None, memory_model: str = "unfused", check_time_limit: float | None = None,
                **aot_kwargs: Any) -> Backend:
    """A ``torch.compile`` backend: AOT Autograd with fxcut's partitioner.

    With no compilers given it runs what torch's ``backend="aot_eager"``
    runs: eager kernels through torch's boxed no-op compiler, which frees
    each saved value in the backward after its last use (the program the
    memory model describes), and ``keep_inference_input_mutations=True``.
    ``fw_compiler`` / ``bw_compiler`` replace the compilers (``bw_compiler``
    defaults to ``fw_compiler``); ``aot_kwargs`` go to
    ``torch._dynamo.backends.common.aot_autograd`` (e.g. ``decompositions``,
    or ``keep_inference_input_mutations=False``; a keyword AOT Autograd does
    not take is a TypeError here, not later inside ``torch.compile``).  See the module docstring for
    ``zero3_params``; ``verify`` and ``safe_budget`` as for
    :func:`inductor_backend`; ``memory_budget`` as there, on the unfused
    memory model (the modules run op by op); pass
    ``memory_model="inductor"`` when the compilers given run inductor.
    ``check_time_limit``: as for :func:`inductor_backend`, with
    ``memory_model="inductor"`` only (an unfused plan never asks inductor:
    a ValueError naming it).
    """
    _check_aot_options(aot_kwargs)
    if verify is not None:
        verify = verify_mode(verify) or "off"
    memory_budget = _check_plan_options(memory_budget, verify, safe_budget, memory_model)
    check_time_limit = _check_check_time_limit(check_time_limit, memory_budget, memory_model)

    def fxcut_aot(gm: fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
        indices = zero3_param_indices(gm, example_inputs, zero3_params)
        fw = fw_compiler if fw_compiler is not None else boxed_nop
        bw = bw_compiler if bw_compiler is not None else fw
        partition_fn = get_wrapped_partitioner(bool(indices), indices,
                                               _fxcut_partition(verify, memory_budget, safe_budget, memory_model,
                                                                check_time_limit))
        options = {"keep_inference_input_mutations": True, **aot_kwargs}
        return aot_autograd(fw_compiler=fw, bw_compiler=bw, partition_fn=partition_fn, **options)(gm, example_inputs)

    return fxcut_aot


__all__ = ["InductorPartitioner", "aot_backend", "inductor_backend", "zero3_param_indices"]
