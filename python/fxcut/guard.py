"""The guard around fxcut's partitioner: torch's own partitioner decides
wherever fxcut is not known to decide as it would, and verify mode proves,
graph by graph, that fxcut does.

Every call of :func:`fxcut.min_cut_rematerialization_partition` comes here:

1. **Untested torch.**  On a torch outside the tested range
   (:mod:`fxcut.versions`), the graph goes to torch's partitioner, with one
   :class:`UntestedTorchWarning` per process naming the version and the
   range.  ``allow_untested=True`` or ``FXCUT_ALLOW_UNTESTED_TORCH=1`` runs
   fxcut anyway (with the nearest tested release's rules).
2. **A feature fxcut does not model** (:func:`unmodelled_feature`), or fxcut
   failing where torch would not (:data:`FXCUT_GAPS`): torch's partitioner,
   one :class:`FallbackWarning` per reason.
3. **Verify mode** (``verify=`` or ``FXCUT_VERIFY``): torch's partitioner
   also decides, on a copy of the joint graph, and the saved values and the
   generated forward and backward code are compared.  A difference raises
   :class:`PartitionMismatch` (``"raise"``, ``FXCUT_VERIFY=1``) with a
   readable diff -- which node, and the rule fxcut applied to it -- or, in
   ``"warn"`` mode (``FXCUT_VERIFY=warn``), warns with that diff and returns
   torch's modules.

:func:`partition_counts` tells who made how many partitions in this process.
"""

from __future__ import annotations

import difflib
import logging
import operator
import os
import threading
import warnings
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch
import torch.fx as fx

from . import versions
from .explain import explain_values
from .snapshot import copy_graph_module

log = logging.getLogger("fxcut")

VERIFY_ENV = "FXCUT_VERIFY"

PartitionResult = tuple[fx.GraphModule, fx.GraphModule]


class UntestedTorchWarning(UserWarning):
    """fxcut is not tested on the running torch: torch's partitioner decides."""


class FallbackWarning(UserWarning):
    """A graph uses a feature fxcut does not model: torch's partitioner decides."""


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
    """Partitions made in this process, by who made them: ``fxcut``,
    ``torch_untested`` (untested torch), ``torch_unmodelled`` (a feature
    fxcut does not model), ``verified`` (fxcut's, checked equal to torch's),
    ``mismatch`` (verify found a difference)."""
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
    warnings.warn(message, category, stacklevel=4)


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


def _allow_untested(allow_untested: bool | None) -> bool:
    if allow_untested is not None:
        return bool(allow_untested)
    return os.environ.get(versions.ALLOW_UNTESTED_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def unmodelled_feature(joint_module: fx.GraphModule, rules: versions.Rules) -> str | None:
    """Why fxcut cannot decide this graph as the running torch would, or
    None when it can (one pass over the nodes, only for the rules the
    running release has)."""
    control_deps = _control_deps_hop() if rules.splits_control_deps else None
    with_effects = getattr(torch.ops.higher_order, "with_effects", None) if rules.effectful_leaves_only else None
    devices = rules.device_values_are_free
    epilogue = rules.epilogue_mutated_inputs_unsaveable
    if control_deps is None and with_effects is None and not devices and not epilogue:
        return None
    torch_release = f"torch {rules.release}"
    for node in joint_module.graph.nodes:
        meta = node.meta
        if epilogue and meta.get("aot_runtime_epilogue_input_mutation", False):
            return (f"input {node.name!r} is mutated after the forward, which {torch_release} "
                    "never saves; fxcut does not model that")
        if devices and isinstance(meta.get("val"), torch.device):
            return (f"node {node.name!r} has a torch.device value, which {torch_release} treats "
                    "as free and recomputable; fxcut does not model that")
        if node.op != "call_function":
            continue
        if control_deps is not None and node.target is control_deps:
            return (f"node {node.name!r} is a control_deps op, which {torch_release} splits "
                    "between forward and backward; fxcut does not model that split")
        if with_effects is not None and node.target is with_effects and _effects_unmodelled(node):
            return (f"effectful node {node.name!r} is tagged MUST_RECOMPUTE or has nested outputs, "
                    f"which {torch_release} handles differently; fxcut does not model that")
    return None


def _effects_unmodelled(node: fx.Node) -> bool:
    from torch.utils.checkpoint import CheckpointPolicy

    if node.meta.get("recompute") == CheckpointPolicy.MUST_RECOMPUTE:
        return True
    getitem = operator.getitem
    stack = [u for u in node.users if u.target is getitem]
    while stack:
        user = stack.pop()
        nested = [u for u in user.users if u.target is getitem]
        if nested and not isinstance(user.meta.get("val"), (tuple, list)):
            return True
        stack.extend(nested)
    return False


def _control_deps_hop() -> Any:
    try:
        from torch._inductor.fx_passes.control_dependencies import control_deps
    except ImportError:
        return None
    return control_deps


def _is_fxcuts(fn: object) -> bool:
    return str(getattr(fn, "__module__", "")).startswith("fxcut")


def _torchs_own_min_cut() -> Callable[..., PartitionResult]:
    """torch's ``min_cut_rematerialization_partition`` as torch defined it:
    where a user rebound torch's name to fxcut's partitioner, the reference
    torch's own ``compilers`` module took at import (falling back to the
    rebound name would call fxcut again)."""
    from torch._functorch import compilers, partitioners

    for fn in (partitioners.min_cut_rematerialization_partition, compilers.min_cut_rematerialization_partition):  # type: ignore[attr-defined]  # compilers re-imports it
        if not _is_fxcuts(fn):
            found: Callable[..., PartitionResult] = fn
            return found
    raise RuntimeError(
        "fxcut: torch's min_cut_rematerialization_partition has been replaced by fxcut's everywhere, so "
        "fxcut cannot hand a graph to torch's own partitioner; use fxcut.min_cut_rematerialization_partition "
        "as the partition_fn instead of rebinding torch's"
    )


def torch_partition(
    joint_module: fx.GraphModule,
    joint_inputs: Any,
    compiler: str = "inductor",
    *,
    num_fwd_outputs: int,
    static_lifetime_input_indices: list[int] | None = None,
) -> PartitionResult:
    """The running torch's own ``min_cut_rematerialization_partition``."""
    min_cut_rematerialization_partition = _torchs_own_min_cut()
    return min_cut_rematerialization_partition(
        joint_module, joint_inputs, compiler, num_fwd_outputs=num_fwd_outputs,
        static_lifetime_input_indices=static_lifetime_input_indices,
    )


def note_fallback(reason: str) -> None:
    """fxcut met a graph it does not model and hands it to torch: one
    warning per reason, counted."""
    log.info("fxcut: %s; using torch's partitioner for this graph", reason)
    _warn_once(f"unmodelled: {reason}", f"fxcut: {reason}; torch's own partitioner decides this graph",
               FallbackWarning)
    _count("torch_unmodelled")


def guarded_partition(
    inner: Callable[..., PartitionResult],
    joint_module: fx.GraphModule,
    joint_inputs: Any,
    compiler: str = "inductor",
    *,
    num_fwd_outputs: int,
    static_lifetime_input_indices: list[int] | None = None,
    verify: Any = None,
    allow_untested: bool | None = None,
    **kwargs: Any,
) -> PartitionResult:
    """``inner`` (fxcut's partition) behind the checks of this module."""
    args = (joint_module, joint_inputs, compiler)
    kw: dict[str, Any] = {"num_fwd_outputs": num_fwd_outputs,
                          "static_lifetime_input_indices": static_lifetime_input_indices}
    mode = verify_mode(verify)
    if versions.current() is None and not _allow_untested(allow_untested):
        version = versions.installed_version()
        _warn_once(
            "untested",
            f"fxcut: torch {version} is outside fxcut's tested range {versions.tested_range()}; "
            f"torch's own partitioner decides every graph.  Set {versions.ALLOW_UNTESTED_ENV}=1 "
            "(or allow_untested=True) to run fxcut anyway, ideally with FXCUT_VERIFY=1.",
            UntestedTorchWarning,
        )
        _count("torch_untested")
        return torch_partition(*args, **kw)
    if isinstance(joint_module, fx.GraphModule):
        reason = unmodelled_feature(joint_module, versions.rules_or_nearest())
        if reason is not None:
            note_fallback(reason)
            return torch_partition(*args, **kw)
    if mode is None:
        result = _fxcut_or_torch(inner, args, kw, kwargs)
        if result is None:
            return torch_partition(*args, **kw)
        _count("fxcut")
        return result
    return _verified(inner, mode, args, kw, kwargs)


#: What fxcut raising means a gap in fxcut (a torch it does not know, a graph
#: shape it does not model), not a bad input: torch's partitioner decides
#: instead.  Bad inputs (TypeError, ValueError, an unsatisfiable cut) still
#: raise fxcut's own clear error.
FXCUT_GAPS: tuple[type[BaseException], ...] = (
    AttributeError, ImportError, KeyError, IndexError, AssertionError, NotImplementedError,
)


def _fxcut_or_torch(inner: Callable[..., PartitionResult], args: tuple[Any, ...], kw: dict[str, Any],
                    kwargs: dict[str, Any]) -> PartitionResult | None:
    """fxcut's partition, or None (after one warning naming the error) when
    fxcut fails where torch's partitioner would not.  fxcut changes the
    joint graph only once its decision is made, and only as torch's own
    dead-code elimination, CSE and tag clean-up would: torch's partitioner
    can take the graph as it is."""
    try:
        return inner(*args, **kw, **kwargs)
    except FXCUT_GAPS as e:
        note_fallback(f"fxcut failed on this graph ({type(e).__name__}: {e})")
        return None


def _saved_names(fw: fx.GraphModule, num_fwd_outputs: int) -> list[str]:
    output = next(iter(reversed(fw.graph.nodes)))
    return [n.name if isinstance(n, fx.Node) else repr(n) for n in output.args[0][num_fwd_outputs:]]


def _verified(inner: Callable[..., PartitionResult], mode: str, args: tuple[Any, ...], kw: dict[str, Any],
              kwargs: dict[str, Any]) -> PartitionResult:

    joint_module = args[0]
    pristine = copy_graph_module(joint_module)
    expected = torch_partition(copy_graph_module(joint_module), *args[1:], **kw)
    got = _fxcut_or_torch(inner, args, kw, kwargs)
    if got is None:
        return expected
    diff = compare(expected, got, pristine, **kw)
    if diff is None:
        _count("verified")
        return got
    _count("mismatch")
    if mode == "raise":
        raise diff
    warnings.warn(f"{diff.diff}\nfxcut: using torch's partition of this graph", VerifyWarning, stacklevel=3)
    return expected


def compare(
    expected: PartitionResult,
    got: PartitionResult,
    joint_module: fx.GraphModule,
    *,
    num_fwd_outputs: int,
    static_lifetime_input_indices: list[int] | None = None,
) -> PartitionMismatch | None:
    """None when ``got`` (fxcut's modules) equals ``expected`` (torch's),
    else the :class:`PartitionMismatch` describing the difference.
    ``joint_module``: an unpartitioned copy of the joint graph, used (and
    modified) to explain the nodes that differ."""
    (tfw, tbw), (ffw, fbw) = expected, got
    torch_saved = _saved_names(tfw, num_fwd_outputs)
    fxcut_saved = _saved_names(ffw, num_fwd_outputs)
    same_saved = torch_saved == fxcut_saved
    if same_saved and tfw.code == ffw.code and tbw.code == fbw.code:
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
    nodes = _explain(joint_module, only_torch + only_fxcut, num_fwd_outputs, static_lifetime_input_indices)
    for facts in nodes:
        lines.append("  " + facts["text"].replace("\n", "\n  "))
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


def _explain(joint_module: fx.GraphModule, names: list[str], num_fwd_outputs: int,
             static_lifetime_input_indices: list[int] | None) -> list[dict[str, Any]]:
    """fxcut's account of each named node: the rule (ban, tag, cut) that
    placed it.  Best effort: explaining never hides the mismatch."""
    if not names:
        return []
    try:
        every = explain_values(joint_module, None, num_fwd_outputs=num_fwd_outputs,
                               static_lifetime_input_indices=static_lifetime_input_indices)
    except Exception as e:  # noqa: BLE001
        return [{"node": n, "text": f"{n}: (fxcut could not explain it: {type(e).__name__}: {e})"} for n in names]
    by_name = {facts["node"]: facts for facts in every}
    missing = "not in the graph fxcut decides on (dead code, or merged by CSE)"
    return [by_name.get(n) or {"node": n, "text": f"{n}: {missing}"} for n in names]


__all__ = [
    "FallbackWarning",
    "PartitionMismatch",
    "UntestedTorchWarning",
    "VERIFY_ENV",
    "VerifyWarning",
    "compare",
    "guarded_partition",
    "note_fallback",
    "partition_counts",
    "reset_counts",
    "torch_partition",
    "unmodelled_feature",
    "verify_mode",
]
