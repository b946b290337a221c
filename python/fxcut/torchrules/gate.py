"""The compatibility gate: what fxcut copies from torch is checked before it
is used, and a copy that fails sends the graph down torch's own path.

fxcut copies private torch behaviour -- the code generator
(:mod:`.codegen`), the C node readers (``_C.lower_read``,
``_C.prepare_plan``), the module builder (:mod:`.extract`), the dead-code
elimination and CSE plan (:mod:`.prepare`), the graph snapshot
(:mod:`.snapshot`) -- and a newer torch may change what they copy.  Three
checks keep that from ever changing a compile's result or failing it:

- **The private names** (:data:`fxcut.torchrules.versions.PRIVATE_NAMES`),
  checked once per process at the first partition
  (:func:`torch_problem`): every row the running release relies on
  resolves, and the node slots the C readers read are the member slots of
  ``torch._C._NodeBase`` holding what the public attributes give.  If one
  does not, torch's own partitioner decides every graph of the process.
- **Any exception inside a copy** that is not fxcut's own bad-input error
  (:class:`BadInput`, which names the node) becomes :class:`TorchChanged`
  (:func:`gated`, one decorator on each copy's entry points); the guard
  (:mod:`fxcut.route.guard`) treats it as a gap: the joint graph is
  restored and torch's partitioner decides it, with one
  :class:`FallbackWarning` per reason.
- **The code generator checks itself** against torch's generator on the
  first graph it writes in a process (:mod:`.codegen`); a difference, or an
  exception, turns it off for the process and torch's generator writes the
  code (it only reads the graph, so nothing needs undoing).

What the user sees: one :class:`FallbackWarning` per reason, naming what
did not hold; the same modules as torch's; a compile that never fails
where torch's would not.  A newer torch may make fxcut slower; never
different.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import logging
import threading
import types
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

import torch
import torch.fx as fx

from .._warn import warn_user
from .versions import ATTRIBUTE, NODE_SLOT, PRIVATE_NAMES, Private, Rules

log = logging.getLogger("fxcut")

#: The copies the gate names in its warnings.
CODE_GENERATOR = "code generator"
NODE_READERS = "node readers"
MODULE_BUILDER = "module builder"
DCE_CSE_PLAN = "dead-code elimination and CSE"
SNAPSHOT = "graph snapshot"
CONFIG = "config readers"
BUDGET_RULES = "memory-budget rules (runtime estimates, input storages, knapsack dispatch)"
NODE_FACTS = "node facts (storages, costs, random ops, mutated inputs, extraction marks)"
INDUCTOR_TABLES = "inductor's fusion tables"
INDUCTOR_LOWERING = "inductor's lowering (the plan's check)"
FEATURE_SCAN = "unmodelled-feature scan"
ZERO3_WALK = "ZeRO-3 parameter-alias walk"
STRUCTURED_TRACE = "structured trace (TORCH_TRACE) and compile id"


class FallbackWarning(UserWarning):
    """torch's partitioner (or its code generator) takes over where fxcut
    does not model a graph or a copy of torch does not hold."""


class BadInput(ValueError):
    """fxcut's own error for a graph it was given wrong: the message names
    the node.  A copy passes it on as it is (the user's error, not a gap)."""


class TorchChanged(Exception):
    """A copy of torch's behaviour failed in a way bad input does not
    explain: the running torch (or this graph's layout) differs from what
    the copy was written against.  A gap: torch's partitioner decides."""

    def __init__(self, copy: str, cause: BaseException) -> None:
        self.copy = copy
        self.cause = cause
        super().__init__(f"the {copy} fxcut copies from torch failed: {type(cause).__name__}: {cause}")


P = ParamSpec("P")
R = TypeVar("R")


def gated(copy: str, *, passes: tuple[type[BaseException], ...] = ()) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Make ``fn`` a gated entry of the copy named ``copy``: an exception it
    raises becomes :class:`TorchChanged` (the cause chained), except
    fxcut's bad-input errors, a TorchChanged already, the ``passes`` its
    caller handles, and what is not an ``Exception`` (KeyboardInterrupt)."""
    kept: tuple[type[BaseException], ...] = (BadInput, TorchChanged, *passes)

    def wrap(fn: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(fn)
        def entry(*args: P.args, **kwargs: P.kwargs) -> R:
            try:
                return fn(*args, **kwargs)
            except kept:
                raise
            except Exception as e:
                raise TorchChanged(copy, e) from e

        return entry

    return wrap


_warned: set[str] = set()
_lock = threading.Lock()


def warn_once(message: str) -> None:
    """One :class:`FallbackWarning` per message in the process (logged
    too), at the user's line."""
    with _lock:
        if message in _warned:
            return
        _warned.add(message)
    log.info("%s", message)
    warn_user(message, FallbackWarning)


# --------------------------------------------------------------------------- the names, once per process


class _Probes:
    """Small objects of the classes whose instance attributes the table
    names (a three-node graph, its module, its nodes), built once."""

    def __init__(self) -> None:
        graph = fx.Graph()
        x = graph.placeholder("x")
        y = graph.call_function(torch.ops.aten.add.Tensor, (x, x), {"alpha": 2})
        graph.output((y,))
        module = fx.GraphModule(torch.nn.Module(), graph)  # torch's generator writes its code
        from torch.fx.graph import CodeGen, PythonCode, _Namespace
        from torch.utils._pytree import TreeSpec, tree_flatten

        self.node = y
        self.by_class: dict[type, Any] = {
            fx.Graph: graph, fx.Node: y, fx.GraphModule: module, _Namespace: graph._graph_namespace,
            CodeGen: graph._codegen, PythonCode: graph.python_code(root_module="self"),
            torch._ops.OpOverload: torch.ops.aten.add.Tensor, torch.UntypedStorage: torch.empty(1).untyped_storage(),
            TreeSpec: tree_flatten((1,))[1],
        }


def resolve(name: str, probes: _Probes | None = None) -> Any:
    """The object ``name`` (a dotted :class:`~fxcut.torchrules.versions.Private`
    name) stands for, attribute by attribute from its top module: a
    submodule not imported yet is imported; on a class that lacks the
    attribute, its probe instance is asked.  Raises (ImportError,
    AttributeError, KeyError) where it does not resolve."""
    parts = name.split(".")
    obj: Any = importlib.import_module(parts[0])
    for i, attr in enumerate(parts[1:], start=2):
        if isinstance(obj, types.ModuleType) and not hasattr(obj, attr):
            obj = importlib.import_module(".".join(parts[:i]))
            continue
        try:
            obj = getattr(obj, attr)
        except AttributeError:
            if not isinstance(obj, type):
                raise
            obj = getattr((probes or _Probes()).by_class[obj], attr)
    return obj


def slot_problem(attr: str, node: fx.Node) -> str | None:
    """What is wrong with ``torch.fx.Node.<attr>`` as the C readers read it
    (None: nothing): the member slot of ``torch._C._NodeBase``, not shadowed,
    holding what the public attribute of the node gives."""
    slot = vars(torch._C._NodeBase).get(attr)
    seen = inspect.getattr_static(fx.Node, attr, None)
    if type(slot) is not types.MemberDescriptorType or seen is not slot:
        return (f"torch.fx.Node.{attr} is {type(seen).__name__}, not the member slot of torch._C._NodeBase "
                "fxcut's C readers read")
    value = getattr(node, attr)
    if attr in ("_args", "_kwargs") and value is not getattr(node, attr[1:]):
        return f"torch.fx.Node.{attr} is not what node.{attr[1:]} gives"
    if attr == "_input_nodes" and (type(value) is not dict or list(value) != node.all_input_nodes):
        return "torch.fx.Node._input_nodes is not a dict of what node.all_input_nodes lists"
    if attr == "meta" and type(value) is not dict:
        return f"torch.fx.Node.meta is a {type(value).__name__}, not a dict"
    return None


def row_problem(row: Private, probes: _Probes) -> str | None:
    """Why ``row`` does not hold on the running torch, or None."""
    if row.how == NODE_SLOT:
        return slot_problem(row.name.rpartition(".")[2], probes.node)
    if row.how != ATTRIBUTE:
        return None
    try:
        resolve(row.name, probes)
    except Exception as e:  # any way of not resolving
        return f"{row.name} ({type(e).__name__}: {e})"
    return None


def problems(rules: Rules) -> list[str]:
    """What does not hold, of the rows the release of ``rules`` relies on at
    every partition (rows used only by the integrations, or only under a
    condition, are checked where they are used)."""
    probes = _Probes()
    found = []
    for row in PRIVATE_NAMES:
        if not row.applies_to(rules.release) or row.when or all(u.startswith("fxcut.integrations.")
                                                                  for u in row.users):
            continue
        problem = row_problem(row, probes)
        if problem is not None:
            found.append(f"{problem} (relied on by {', '.join(row.users)})")
    return found


_checked: dict[str, str | None] = {}


def torch_problem(rules: Rules) -> str | None:
    """Why fxcut's copies do not hold on the running torch, or None: the
    table's rows checked once per process (per release's rules)."""
    with _lock:
        if rules.release in _checked:
            return _checked[rules.release]
    try:
        found = problems(rules)
    except Exception as e:  # building the probes failed: torch.fx itself is not what fxcut knows
        found = [f"the probe graph could not be built ({type(e).__name__}: {e})"]
    problem = None
    if found:
        problem = f"torch {torch.__version__} differs from what fxcut copies: {'; '.join(found)}"
    with _lock:
        _checked.setdefault(rules.release, problem)
        return _checked[rules.release]


def reset() -> None:
    """Forget the checks made in this process (tests simulating a changed torch)."""
    with _lock:
        _checked.clear()
        _warned.clear()


__all__ = [
    "BadInput",
    "CODE_GENERATOR",
    "DCE_CSE_PLAN",
    "FallbackWarning",
    "MODULE_BUILDER",
    "NODE_READERS",
    "SNAPSHOT",
    "TorchChanged",
    "gated",
    "problems",
    "reset",
    "resolve",
    "row_problem",
    "slot_problem",
    "torch_problem",
    "warn_once",
]
