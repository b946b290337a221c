"""The guard around fxcut's partitioner: torch's own partitioner decides
wherever fxcut is not known to decide as it would, and verify mode proves,
graph by graph, that fxcut does.

Every call of :func:`fxcut.min_cut_rematerialization_partition` runs inside
one :class:`Guard` (``with Guard(call, ...) as g:`` wraps fxcut's route):

1. **Untested torch.**  On a torch that is not one of the exact releases
   fxcut is tested on (:data:`fxcut.torchrules.versions.TESTED`; a local
   build tag such as ``+cu130`` aside), the graph goes to torch's
   partitioner, with one :class:`UntestedTorchWarning` per process naming
   the version and the releases.  ``allow_untested=True`` or
   ``FXCUT_ALLOW_UNTESTED_TORCH=1`` runs fxcut anyway (with the rules of
   its major.minor release, or the nearest).
2. **A torch fxcut's copies do not fit** (the compatibility gate,
   :mod:`fxcut.torchrules.gate`: the private names and node slots of the
   versions table checked once per process), **a feature fxcut does not
   model** (:func:`fxcut.torchrules.features.unmodelled_feature`), or fxcut failing where torch would
   not (:data:`FXCUT_GAPS`, a copy of torch's behaviour failing --
   :class:`~fxcut.torchrules.gate.TorchChanged` -- among them; the graph is
   restored first): torch's partitioner, one :class:`FallbackWarning` per
   reason.
3. **Verify mode** (``verify=`` or ``FXCUT_VERIFY``; default plans only):
   torch's partitioner also decides, on a pristine copy of the joint graph,
   and the saved values, the generated forward and backward code and the
   tags torch writes (:data:`COMPARED_META`) are compared.  A difference
   raises :class:`PartitionMismatch` (``"raise"``, ``FXCUT_VERIFY=1``) with
   a readable diff -- which node, and the rule fxcut applied to it -- or,
   in ``"warn"`` mode (``FXCUT_VERIFY=warn``), warns with that diff and
   returns torch's modules.

Every hand-off is :func:`torch_partition`: torch's own partitioner as its
module defined it (captured when that module runs, so a name rebound later
-- to fxcut's function, a partial, a lambda, a wrapper -- is never called),
after DeepCompile's ZeRO-3 walk in plain Python where the call asks for
the walk, with the joint graph restored if torch's partitioner fails too.
A call's ZeRO-3 walk runs inside the guard: in C where fxcut decides, in
Python before torch's partitioner where torch does.
:func:`partition_counts` tells who made how many partitions in this process:
each graph is counted once.
"""

from __future__ import annotations

import contextlib
import contextvars
import difflib
import importlib
import importlib.abc
import importlib.machinery
import logging
import os
import sys
import threading
import types
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch.fx as fx

from .._warn import warn_user
from ..solve.account import accounts
from ..torchrules import gate, versions
from ..torchrules.adapter import ModuleSnapshot, TorchAdapter, reference_zero3_walk, running_torch
from ..torchrules.gate import BadInput, FallbackWarning, TorchChanged
from .decide import Decided

log = logging.getLogger("fxcut")

VERIFY_ENV = "FXCUT_VERIFY"

PartitionResult = tuple[fx.GraphModule, fx.GraphModule]


class UntestedTorchWarning(UserWarning):
    """fxcut is not tested on the running torch: torch's partitioner decides."""


class VerifyWarning(UserWarning):
    """Verify mode (warn-only) found fxcut deciding differently from torch."""


class PartitionMismatch(RuntimeError):
    """fxcut's partition differs from torch's on one joint graph.

    ``torch_saved`` / ``fxcut_saved``: the saved values (forward outputs past
    the user's) by node name, in order; ``nodes``: for each node saved by one
    side only, fxcut's account of it (:func:`fxcut.explain.explain_values`,
    with the ban rule or tag that decided it); ``diff``: the readable text.
    """

    def __init__(self, diff: str, torch_saved: list[str], fxcut_saved: list[str], nodes: list[dict[str, Any]]):
        super().__init__(diff)
        self.diff = diff
        self.torch_saved = torch_saved
        self.fxcut_saved = fxcut_saved
        self.nodes = nodes


_lock = threading.Lock()
_warned: set[str] = set()
_counts: Counter[str] = Counter()


def partition_counts() -> dict[str, int]:
    """Partitions made in this process, by who made them and how:
    ``fxcut`` (fxcut made torch's decision: the default path),
    ``fxcut_safe_budget`` (torch's decision with what it recomputes
    unsafely kept saved: ``safe_budget=True``), ``fxcut_plan`` (fxcut's
    peak plan, :func:`fxcut.planned_partitioner` and the backends'
    ``memory_budget``: :func:`fxcut.last_plans` has each), ``fxcut_objective``
    (a user's :class:`~fxcut.route.plan.Objective`), ``torch_untested``
    (untested torch), ``torch_unmodelled`` (a feature fxcut does not
    model), ``torch_changed`` (a copy of torch's behaviour that does not
    hold on the running torch or graph: the compatibility gate),
    ``verified`` (fxcut's, checked equal to torch's), ``mismatch`` (verify
    found a difference)."""
    with _lock:
        return dict(_counts)


def reset_counts() -> None:
    with _lock:
        _counts.clear()


def _count(key: str) -> None:
    with _lock:
        _counts[key] += 1


def _warn_once(key: str, message: str, category: type[Warning]) -> None:
    with _lock:
        if key in _warned:
            return
        _warned.add(key)
    warn_user(message, category)


def verify_mode(verify: Any = None) -> str | None:
    """``"raise"``, ``"warn"`` or None (off), from the argument, else from
    ``FXCUT_VERIFY`` (``1``/``raise``, ``warn``, ``0``/empty)."""
    value = verify if verify is not None else os.environ.get(VERIFY_ENV, "")
    if value is True:
        return "raise"
    if value is False:
        return None
    if isinstance(value, str):
        v = value.strip().lower()
        if v in ("", "0", "off", "false"):
            return None
        if v in ("1", "raise", "true", "on"):
            return "raise"
        if v == "warn":
            return "warn"
    source = "verify" if verify is not None else VERIFY_ENV
    raise ValueError(f"{source}={value!r}: expected True/False, 'raise' or 'warn' (or 1/0)")


def _warn_untested() -> None:
    version = versions.installed_version()
    _warn_once(
        "untested",
        f"fxcut: torch {version} is not a release fxcut is tested on ({versions.tested_range()}); "
        f"torch's own partitioner decides every graph.  Set {versions.ALLOW_UNTESTED_ENV}=1 "
        "(or allow_untested=True) to run fxcut anyway, ideally with FXCUT_VERIFY=1.",
        UntestedTorchWarning,
    )


def untested_reason(allow_untested: bool | None = None) -> str | None:
    """Why fxcut hands every graph to torch's partitioner in this process
    (an untested torch, not allowed), or None where fxcut decides."""
    if versions.running()[1] or _allow_untested(allow_untested):
        return None
    return (f"torch {versions.installed_version()} is not a release fxcut is tested on "
            f"({versions.tested_range()}): torch's own partitioner decides every graph")


def _allow_untested(allow_untested: bool | None) -> bool:
    if allow_untested is not None:
        return bool(allow_untested)
    return os.environ.get(versions.ALLOW_UNTESTED_ENV, "").strip().lower() in ("1", "true", "yes", "on")


# --------------------------------------------------------------------------- torch's own partitioner

_TORCH_MODULE = "torch._functorch.partitioners"
_TORCH_NAME = "min_cut_rematerialization_partition"
#: torch's own partitioner, captured when torch's partitioner module was
#: executed (or, when it already was, when fxcut was imported): before any
#: user code could rebind torch's name.
_captured: list[Callable[..., PartitionResult]] = []


def is_torchs_own(fn: object) -> bool:
    """``fn`` is the function torch's partitioner module defines -- not a
    ``functools.partial``, a lambda, or a wrapper (``functools.wraps``
    copies the names, not the code), whatever it wraps."""
    module = sys.modules.get(_TORCH_MODULE)
    code = getattr(fn, "__code__", None)
    return (
        isinstance(fn, types.FunctionType)
        and module is not None
        and code is not None
        and fn.__module__ == _TORCH_MODULE
        and fn.__qualname__ == _TORCH_NAME
        and code.co_name == _TORCH_NAME
        and os.path.realpath(code.co_filename) == os.path.realpath(str(getattr(module, "__file__", "")))
    )


def _capture(module: types.ModuleType) -> None:
    fn = getattr(module, _TORCH_NAME, None)
    if is_torchs_own(fn) and not _captured:
        _captured.append(fn)  # type: ignore[arg-type]


class _CaptureOnImport(importlib.abc.MetaPathFinder):
    """Captures torch's partitioner the moment its module has run.  torch's
    partitioner module imports inductor (seconds), so ``import fxcut`` does
    not import it; this finder only watches for it, then steps aside."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != _TORCH_MODULE:
            return None
        _uninstall(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        loader = getattr(spec, "loader", None)
        run = getattr(loader, "exec_module", None)
        if spec is None or run is None:
            return spec

        def exec_module(module: types.ModuleType) -> None:
            run(module)
            _capture(module)

        loader.exec_module = exec_module  # type: ignore[union-attr]  # this spec's own loader
        return spec


def _uninstall(finder: object) -> None:
    try:
        sys.meta_path.remove(finder)  # type: ignore[arg-type]
    except ValueError:
        pass


def _watch_for_torchs_partitioner() -> None:
    module = sys.modules.get(_TORCH_MODULE)
    if module is not None:
        _capture(module)
    else:
        sys.meta_path.insert(0, _CaptureOnImport())


_watch_for_torchs_partitioner()


def torchs_own_min_cut() -> Callable[..., PartitionResult]:
    """torch's ``min_cut_rematerialization_partition`` as torch defined it.

    The function captured when torch's partitioner module ran; failing that
    (a module loaded in an unusual way), the names torch binds it to, if
    they still hold torch's own function.  Anything that turns out to be
    fxcut's -- or any other wrapper -- is refused: a RuntimeError, never a
    call that would loop back into fxcut or verify fxcut against itself.
    """
    if not _captured:
        importlib.import_module(_TORCH_MODULE)  # runs the capture when it was not imported yet
    if _captured:
        return _captured[0]
    from torch._functorch import compilers, partitioners

    for fn in (getattr(partitioners, _TORCH_NAME, None), getattr(compilers, _TORCH_NAME, None)):
        if is_torchs_own(fn):
            _captured.append(fn)  # type: ignore[arg-type]
            return fn  # type: ignore[return-value]
    raise RuntimeError(
        "fxcut: torch's min_cut_rematerialization_partition has been replaced (by fxcut's, a partial or "
        "a wrapper) before fxcut could take torch's own, so fxcut cannot hand a graph to torch's "
        "partitioner; use fxcut.min_cut_rematerialization_partition as the partition_fn instead of "
        "rebinding torch's"
    )


def torch_partition(
    joint_module: fx.GraphModule,
    joint_inputs: Any,
    compiler: str = "inductor",
    *,
    num_fwd_outputs: int,
    static_lifetime_input_indices: list[int] | None = None,
    torch: TorchAdapter | None = None,
    zero3: Zero3Walk | None = None,
) -> PartitionResult:
    """The one hand-off to torch: torch's own partitioner
    (:func:`torchs_own_min_cut`) on ``joint_module``, after DeepCompile's
    ZeRO-3 walk where ``zero3`` asks for it (in plain Python: torch's own
    path), the module restored exactly as it was if either raises
    (``torch``: the call's adapter, for the snapshot; without one the
    graph is left as torch's partitioner leaves it)."""
    partition = torchs_own_min_cut()
    snapshot = None
    if isinstance(joint_module, fx.GraphModule) and torch is not None:
        try:
            snapshot = torch.snapshot(joint_module)
        except TorchChanged as e:  # torch's partitioner runs all the same, as it would without fxcut
            log.warning("fxcut: %s; torch's partitioner runs without fxcut's restore on failure", e)
    try:
        if zero3 is not None:
            reference_zero3_walk(joint_module.graph, zero3.positions, zero3.no_copy_ops)
        return partition(joint_module, joint_inputs, compiler, num_fwd_outputs=num_fwd_outputs,
                         static_lifetime_input_indices=static_lifetime_input_indices)
    except BaseException:
        if snapshot is not None:
            try:
                snapshot.restore()
            except TorchChanged as e:
                log.warning("fxcut: %s; the joint graph is left as torch's partitioner left it", e)
        raise


def note_fallback(reason: str, graphs: str = "this graph") -> None:
    """fxcut met a graph it does not model and hands it to torch: one
    warning per reason (the caller counts the graph).  ``graphs``: which
    graphs torch's partitioner decides for that reason."""
    log.info("fxcut: %s; using torch's partitioner for %s", reason, graphs)
    _warn_once(f"unmodelled: {reason}", f"fxcut: {reason}; torch's own partitioner decides {graphs}",
               FallbackWarning)


# --------------------------------------------------------------------------- the guard


#: What fxcut raising means a gap in fxcut (a torch it does not know, a graph
#: shape it does not model, a copy of torch's behaviour that failed), not a
#: bad input: torch's partitioner decides instead.  Bad inputs (TypeError,
#: ValueError, an unsatisfiable cut) still raise fxcut's own clear error.
FXCUT_GAPS: tuple[type[BaseException], ...] = (
    TorchChanged, AttributeError, ImportError, KeyError, IndexError, AssertionError, NotImplementedError,
)


@dataclass(frozen=True)
class Zero3Walk:
    """DeepCompile's ZeRO-3 walk as part of a partition call: the
    parameters' positions among the primal placeholders (checked by
    :func:`fxcut.zero3.param_positions`) and the no-copy set (None:
    DeepCompile's)."""

    positions: Sequence[int]
    no_copy_ops: Any = None


@dataclass
class Call:
    """One call of the public entry, as torch's partitioner takes it, and
    the ZeRO-3 walk that runs before the cut where one is asked for."""

    joint_module: fx.GraphModule
    joint_inputs: Any
    compiler: str
    num_fwd_outputs: int
    static_lifetime_input_indices: list[int] | None
    zero3: Zero3Walk | None = None

    def to_torch(self, joint_module: fx.GraphModule | None = None, torch: TorchAdapter | None = None
                 ) -> PartitionResult:
        return torch_partition(
            self.joint_module if joint_module is None else joint_module, self.joint_inputs, self.compiler,
            num_fwd_outputs=self.num_fwd_outputs, static_lifetime_input_indices=self.static_lifetime_input_indices,
            torch=torch, zero3=self.zero3,
        )


#: The running torch a compile already looked up (:func:`compile_scope`), for the calls it makes.
_scope: contextvars.ContextVar[tuple[TorchAdapter, bool] | None] = contextvars.ContextVar("fxcut_torch",
                                                                                          default=None)


def lookup_torch() -> tuple[TorchAdapter, bool]:
    """The running torch as this compile asks it, and whether it is tested:
    the one a caller of this compile looked up already (:func:`compile_scope`),
    else looked up now (:func:`fxcut.torchrules.adapter.running_torch`)."""
    scoped = _scope.get()
    return scoped if scoped is not None else running_torch()


@contextlib.contextmanager
def compile_scope(torch: TorchAdapter | None, tested: bool = True) -> Iterator[None]:
    """Within: fxcut's partitions use ``torch`` (None: they look it up),
    so one compile looks the running torch up once."""
    token = _scope.set(None if torch is None else (torch, tested))
    try:
        yield
    finally:
        _scope.reset(token)


def guarded_walk(graph: fx.Graph, walk: Zero3Walk) -> list[fx.Node]:
    """DeepCompile's ZeRO-3 walk (``walk``) over ``graph`` under the guard's
    rules: in C where fxcut decides, in plain Python where torch does (an
    untested torch, a torch fxcut's copies do not fit, a gap in the C walk:
    one warning each).  The tagged nodes, in graph order."""
    torch, tested = lookup_torch()
    return _walk(torch, tested, graph, walk)


def walk_module(module: fx.GraphModule, walk: Zero3Walk) -> tuple[TorchAdapter, bool, ModuleSnapshot | None]:
    """:func:`guarded_walk` over ``module``'s graph, a snapshot of the module
    taken first (None where it cannot be taken); with the running torch
    looked up for it and whether that torch is tested, for the partition
    that follows (:func:`compile_scope`)."""
    torch, tested = lookup_torch()
    snapshot = None
    try:
        snapshot = torch.snapshot(module)
    except TorchChanged as e:
        log.warning("fxcut: %s; the ZeRO-3 walk runs without fxcut's restore on failure", e)
    _walk(torch, tested, module.graph, walk)
    return torch, tested, snapshot


def _walk(torch: TorchAdapter, tested: bool, graph: fx.Graph, walk: Zero3Walk) -> list[fx.Node]:
    reason = None
    if not tested and not _allow_untested(None):
        _warn_untested()
    else:
        reason = gate.torch_problem(torch.rules)
        if reason is None:
            try:
                return torch.zero3_walk(graph, walk.positions, walk.no_copy_ops)
            except TorchChanged as e:
                reason = str(e)
    if reason is not None:
        log.info("fxcut: %s; DeepCompile's ZeRO-3 walk runs in Python", reason)
        _warn_once(f"walk: {reason}", f"fxcut: {reason}; DeepCompile's ZeRO-3 walk runs in Python instead "
                   "of fxcut's", FallbackWarning)
    return reference_zero3_walk(graph, walk.positions, walk.no_copy_ops)


class Guard:
    """The guard around one partition, used as ``with Guard(call, ...) as g:``.

    On entry it looks the running torch up once (``g.torch``, the call's
    :class:`~fxcut.torchrules.adapter.TorchAdapter`; or takes the one a
    caller already made for this compile) and decides who partitions: torch
    (an untested torch, a feature fxcut does not model, a torch fxcut's
    copies do not fit) or fxcut (``g.fxcut_decides``), running the call's
    ZeRO-3 walk in C under its snapshot where fxcut decides.  The body then
    runs fxcut's route and stores its modules in ``g.result``.  On exit it
    hands the graph to torch where torch decides or where fxcut failed for a
    gap of its own (:data:`FXCUT_GAPS`; the graph restored first; the walk,
    if the call has one, run again in plain Python before torch's
    partitioner), checks fxcut's result against torch's in verify mode
    (default plans only), and counts the graph once: ``fxcut``,
    ``verified``, ``mismatch``, ``torch_untested``, ``torch_unmodelled`` or
    ``torch_changed``.
    """

    def __init__(self, call: Call, *, verify: Any = None, allow_untested: bool | None = None,
                 default_plan: bool = True, torch: TorchAdapter | None = None, count_as: str = "fxcut") -> None:
        self.call = call
        self.mode = verify_mode(verify)
        if self.mode is not None and not default_plan:
            raise ValueError(
                "verify mode checks fxcut against torch's exact decision; a plan with an objective, "
                "or safe_budget=True (FXCUT_SAFE_BUDGET=1), decides differently on purpose, so verify "
                "applies to the default plan only (pass verify=False, or objective=None and "
                "safe_budget=False)"
            )
        self.allow_untested = allow_untested
        #: what a graph fxcut decides is counted as (:func:`partition_counts`): the call's path
        self.count_as = count_as
        self.result: PartitionResult | None = None
        #: the route's decision behind ``result`` (verify mode explains a mismatch with it)
        self.decided: Decided | None = None
        self.fxcut_decides = False
        #: the running torch as this call asks it (its rules: the nearest
        #: release's on an untested torch), looked up once on entry (or
        #: given): the plan takes it from here
        self.torch: TorchAdapter | None = torch
        self._outcome = ""
        self._reason = ""
        self._graphs = "this graph"  # the graphs torch decides for that reason
        self._snapshot: ModuleSnapshot | None = None
        self._pristine: fx.GraphModule | None = None

    @property
    def rules(self) -> versions.Rules | None:
        return None if self.torch is None else self.torch.rules

    @property
    def outcome(self) -> str:
        """Once exited: who partitioned the graph and why, as counted
        (``torch_changed`` ...; "" where fxcut's route made the modules)."""
        return self._outcome

    @property
    def reason(self) -> str:
        """Why torch's partitioner took the graph ("" where fxcut decided)."""
        return self._reason

    def __enter__(self) -> Guard:
        tested = True
        if self.torch is None:
            self.torch, tested = lookup_torch()
        if not tested and not _allow_untested(self.allow_untested):
            _warn_untested()
            self._outcome = "torch_untested"
            return self
        problem = gate.torch_problem(self.torch.rules)
        if problem is not None:
            self._outcome, self._reason, self._graphs = "torch_changed", problem, "every graph of this process"
            return self
        joint_module = self.call.joint_module
        if isinstance(joint_module, fx.GraphModule):
            try:
                self._take_graph(self.torch, joint_module)
            except TorchChanged as e:  # nothing written yet (or restored): torch's partitioner takes the graph
                self._outcome, self._reason = "torch_changed", str(e)
                return self
            if self._outcome:
                return self
        self.fxcut_decides = True
        return self

    def _take_graph(self, torch: TorchAdapter, joint_module: fx.GraphModule) -> None:
        """Where fxcut decides: the feature scan, the snapshot (and verify's
        pristine copy), then the ZeRO-3 walk in C."""
        reason = torch.unmodelled_feature(joint_module)
        if reason is not None:
            self._outcome, self._reason = "torch_unmodelled", reason
            return
        self._snapshot = torch.snapshot(joint_module)
        if self.mode is not None:
            self._pristine = torch.copy(joint_module)
        walk = self.call.zero3
        if walk is not None:
            try:
                torch.zero3_walk(joint_module.graph, walk.positions, walk.no_copy_ops)
            except BaseException as e:
                self._restore(e)
                raise

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: Any) -> bool:
        if kind is not None:
            if self._snapshot is not None:
                self._restore(error)
            if isinstance(error, BadInput) or not issubclass(kind, FXCUT_GAPS):
                return False  # a bad input, or torch's own error: fxcut's answer
            if isinstance(error, TorchChanged):
                self._outcome, self._reason = "torch_changed", str(error)
            else:
                reason = str(error) if isinstance(error, NotImplementedError) else (
                    f"fxcut failed on this graph ({kind.__name__}: {error})")
                self._outcome, self._reason = "torch_unmodelled", reason
        if self._outcome:  # torch decides this graph
            if self._reason:
                note_fallback(self._reason, self._graphs)
            _count(self._outcome)
            self.result = self.call.to_torch(torch=self.torch)
            return True
        if self._pristine is None:
            _count(self.count_as)
            return False
        self.result = self._verified(self._pristine)
        return False

    def _restore(self, error: BaseException | None) -> None:
        """The joint graph put back as it was before fxcut wrote to it; a
        restore that fails leaves a graph nobody can partition safely: an
        error naming both failures."""
        assert self._snapshot is not None
        try:
            self._snapshot.restore()
        except TorchChanged as e:
            raise RuntimeError(f"fxcut could not put the joint graph back as it was after "
                               f"{type(error).__name__}: {error} ({e})") from e

    def _verified(self, pristine: fx.GraphModule) -> PartitionResult:
        """fxcut's result (in ``self.result``) checked against torch's own
        partitioner on the pristine copy of the joint graph."""
        got = self.result
        assert got is not None
        assert self.torch is not None
        try:
            expected = self.call.to_torch(self.torch.copy(pristine), self.torch)
        except BaseException:
            if self._snapshot is not None:
                self._restore(None)  # as torch's error would leave it: fxcut's changes undone
            raise
        diff = compare(expected, got, num_fwd_outputs=self.call.num_fwd_outputs, explain=self._explain)
        if diff is None:
            _count("verified")
            return got
        _count("mismatch")
        if self.mode == "raise":
            raise diff
        warn_user(f"{diff.diff}\nfxcut: using torch's partition of this graph", VerifyWarning)
        self._outcome, self._reason = "mismatch", "verify mode found fxcut's decision different from torch's"
        return expected

    def _explain(self, names: list[str]) -> list[dict[str, Any]]:
        """fxcut's account of each named node from the route's own decision
        (the rule -- ban, tag, cut -- that placed it).  Best effort:
        explaining never hides the mismatch."""
        missing = "not in the graph fxcut decides on (dead code, or merged by CSE)"
        decided = self.decided
        if decided is None:
            return [{"node": n, "text": f"{n}: (fxcut's decision is not at hand)"} for n in names]
        try:
            lowered = decided.decision.arrays
            index = {node.name: i for i, node in enumerate(lowered.nodes) if node.op != "output"}
            found = {facts["node"]: facts for facts in accounts(
                decided.decision, decided.saved, self.call.num_fwd_outputs, [index[n] for n in names if n in index])}
        except Exception as e:  # noqa: BLE001
            return [{"node": n, "text": f"{n}: (fxcut could not explain it: {type(e).__name__}: {e})"} for n in names]
        return [found.get(n) or {"node": n, "text": f"{n}: {missing}"} for n in names]


def _saved_names(fw: fx.GraphModule, num_fwd_outputs: int) -> list[str]:
    output = next(iter(reversed(fw.graph.nodes)))
    return [n.name if isinstance(n, fx.Node) else repr(n) for n in output.args[0][num_fwd_outputs:]]


#: The meta keys torch's partitioner writes (or carries) on the forward and
#: backward graphs' nodes that verify mode compares besides the code.
COMPARED_META: tuple[str, ...] = ("recompute", "ac_graph_id", "partitioner_tag", "autograd_backward")


def _meta_diff(label: str, a: fx.GraphModule, b: fx.GraphModule, limit: int = 20) -> list[str]:
    """The compared meta keys that differ, node by node (nodes matched by name)."""
    theirs = {n.name: n for n in a.graph.nodes}
    out = []
    for node in b.graph.nodes:
        other = theirs.get(node.name)
        if other is None:
            continue
        for key in COMPARED_META:
            x, y = other.meta.get(key), node.meta.get(key)
            if x != y or (key in other.meta) != (key in node.meta):
                out.append(f"    {label} {node.name}: meta[{key!r}] torch {x!r}, fxcut {y!r}")
    if len(out) > limit:
        out = out[:limit] + [f"    ... ({len(out) - limit} more)"]
    return out


def compare(
    expected: PartitionResult,
    got: PartitionResult,
    *,
    num_fwd_outputs: int,
    explain: Callable[[list[str]], list[dict[str, Any]]] | None = None,
) -> PartitionMismatch | None:
    """None when ``got`` (fxcut's modules) equals ``expected`` (torch's),
    else the :class:`PartitionMismatch` describing the difference.
    ``explain``: fxcut's account of the nodes saved by one side only (by
    name), from the decision behind ``got``."""
    (tfw, tbw), (ffw, fbw) = expected, got
    torch_saved = _saved_names(tfw, num_fwd_outputs)
    fxcut_saved = _saved_names(ffw, num_fwd_outputs)
    same_saved = torch_saved == fxcut_saved
    meta_lines = _meta_diff("forward", tfw, ffw) + _meta_diff("backward", tbw, fbw)
    if same_saved and tfw.code == ffw.code and tbw.code == fbw.code and not meta_lines:
        return None
    version = versions.installed_version()
    lines = [f"fxcut's partition differs from torch {version}'s "
             f"(saved values: torch {len(torch_saved)}, fxcut {len(fxcut_saved)})"]
    only_torch = [n for n in torch_saved if n not in fxcut_saved]
    only_fxcut = [n for n in fxcut_saved if n not in torch_saved]
    if only_torch:
        lines.append(f"  saved by torch only: {', '.join(only_torch)}")
    if only_fxcut:
        lines.append(f"  saved by fxcut only: {', '.join(only_fxcut)}")
    if not same_saved and not only_torch and not only_fxcut:
        lines.append("  the same saved values in a different order:")
        lines.append(f"    torch: {', '.join(torch_saved)}")
        lines.append(f"    fxcut: {', '.join(fxcut_saved)}")
    nodes = explain(only_torch + only_fxcut) if explain is not None and (only_torch or only_fxcut) else []
    for facts in nodes:
        lines.append("  " + facts["text"].replace("\n", "\n  "))
    if meta_lines:
        lines.append("  tags differ (torch -> fxcut):")
        lines.extend(meta_lines)
    for label, a, b in (("forward", tfw, ffw), ("backward", tbw, fbw)):
        if a.code != b.code:
            lines.append(f"  {label} code differs (torch -> fxcut):")
            lines.extend("    " + line for line in _code_diff(a.code, b.code))
    return PartitionMismatch("\n".join(lines), torch_saved, fxcut_saved, nodes)


def _code_diff(a: str, b: str, limit: int = 40) -> list[str]:
    out = [line.rstrip("\n") for line in difflib.unified_diff(
        a.splitlines(), b.splitlines(), "torch", "fxcut", n=1, lineterm="")]
    if len(out) > limit:
        out = out[:limit] + [f"... ({len(out) - limit} more diff lines)"]
    return out


__all__ = [
    "untested_reason",
    "FallbackWarning",
    "PartitionMismatch",
    "UntestedTorchWarning",
    "VERIFY_ENV",
    "VerifyWarning",
    "COMPARED_META",
    "Call",
    "Guard",
    "compare",
    "is_torchs_own",
    "note_fallback",
    "partition_counts",
    "reset_counts",
    "torch_partition",
    "torchs_own_min_cut",
    "verify_mode",
    "Zero3Walk",
    "compile_scope",
    "guarded_walk",
    "lookup_torch",
    "walk_module",
]
