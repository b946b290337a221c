"""The Python code torch.fx generates for the modules fxcut builds, generated directly.

A ``GraphModule`` holds the code ``Graph.python_code(root_module="self")``
generates for its graph; building it is the largest share of a partition
that returns plain (eager) modules, and torch's code generator is generic
(per node: a name-table entry for the node's name, the target's qualified
name recomputed, every argument dispatched through a chain of isinstance
checks).  The forward and backward graphs a partition returns are a narrow
kind of graph: placeholders, calls of torch operator overloads and of
``operator.getitem``, one output, arguments made of nodes and plain values.

:func:`python_code` generates, for that kind of graph, the ``PythonCode``
torch's generator returns -- the same source text, line-number map,
prologue position and globals -- and returns None for any graph outside it
(another node kind, a node type annotation, a wrapped or boxed-argument
target, a name torch's code namespace would change, an argument of a type
not listed here, a code generator other than the default, the environment
variable that adds meta to the code): the caller then uses torch's own.
:func:`generated_code` makes one ``GraphModule`` construction use it.

Tested equal to torch's generator, field by field, on every zoo model's
modules and on odd graphs, on every supported release
(``tests/test_codegen.py``).  And checked in every process (the
compatibility gate, :mod:`fxcut.torchrules.gate`): the first graph this
module writes is also written by torch's generator and the two compared,
field by field; a difference -- or an exception of this module's, at any
graph -- turns it off for the rest of the process (one
:class:`~fxcut.torchrules.gate.FallbackWarning` naming what differed) and
torch's generator writes every module's code from then on.  A graph with a
code transformer (``Graph.on_generate_code``), another code generator or a
``Graph`` subclass of its own is written by torch's generator.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.fx as fx
from torch._ops import OpOverload
from torch.fx.graph import CodeGen, PythonCode
from torch.fx.immutable_collections import immutable_list

from .gate import CODE_GENERATOR, warn_once

#: Values whose repr torch's generator writes as is.
_REPR_TYPES: frozenset[type] = frozenset({
    int, float, bool, str, type(None), torch.dtype, torch.device, torch.layout, torch.memory_format,
})


class _Outside(Exception):
    """The graph is not of the kind :func:`python_code` generates."""


def _check_names(nodes: list[fx.Node]) -> None:
    """Every node's name is what torch's fresh code namespace gives it back:
    a name its name pattern takes as is, not one it must not shadow (a
    keyword, a builtin, a registered global; nor ``self``, the function's
    first parameter), and unique (fx's graph namespace keeps it so)."""
    from torch.fx.graph import _illegal_names, _name_regex

    match = _name_regex.match
    for node in nodes:
        name = node.name
        if name in _illegal_names or name == "self" or match(name) is None:
            raise _Outside(name)


class _Writer:
    """The argument text of one graph's code."""

    def __init__(self) -> None:
        self.reprs: dict[int, str] = {}  # id -> repr of dtype, device, layout, memory_format objects

    def arg(self, value: Any) -> str:
        cls = value.__class__
        if cls is fx.Node:
            return value.name  # type: ignore[no-any-return]
        if cls is tuple:
            if len(value) == 1:
                return f"({self.arg(value[0])},)"
            return "(" + ", ".join([self.arg(v) for v in value]) + ")"
        if cls is list or cls is immutable_list:
            return "[" + ", ".join([self.arg(v) for v in value]) + "]"
        if cls in _REPR_TYPES:
            if cls is int or cls is float or cls is bool or value is None:
                return repr(value)
            key = id(value)
            text = self.reprs.get(key)
            if text is None:
                text = self.reprs[key] = repr(value)
            return text
        raise _Outside(cls)

    def call_args(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        parts = [self.arg(a) for a in args]
        if kwargs:
            parts.extend([f"{k} = {self.arg(v)}" for k, v in kwargs.items()])
        return ", ".join(parts)


def _callee(target: Any, names: dict[int, tuple[Any, str, bool]]) -> tuple[str, bool]:
    """How torch writes a call of ``target``: (an operator overload's
    qualified name, False), or (the expression template of a Python operator
    such as ``{}[{}]``, True).  Raises _Outside for any other target."""
    cached = names.get(id(target))
    if cached is not None:
        return cached[1], cached[2]
    from torch.fx.graph import _is_from_torch, inplace_methods, magic_methods
    from torch.fx.node import _get_qualified_name

    module = getattr(target, "__module__", "")
    name = getattr(target, "__name__", "")
    if module == "_operator" and name in magic_methods:
        text, template = magic_methods[name], True
    elif module == "_operator" and name in inplace_methods:
        raise _Outside(target)
    elif isinstance(target, OpOverload) and _is_from_torch(target) and not getattr(target, "_boxed_arg_indices", ()):
        text, template = _get_qualified_name(target), False
    else:
        raise _Outside(target)
    names[id(target)] = (target, text, template)  # the target is kept alive with its id
    return text, template


#: The attributes a plain CodeGen instance has: any other (set by a caller,
#: or by a newer torch) may change what torch's generator writes.
_PLAIN_CODEGEN_FIELDS = frozenset({"_body_transformer", "_func_name"})


def _check_generator(graph: fx.Graph) -> CodeGen:
    """The graph's code generator, if torch's generator would write this
    graph's code as the default one does: no other generator class, no
    code transformer (``on_generate_code``), no attribute a plain one lacks,
    a ``Graph`` class that generates its code as ``fx.Graph`` does, and not
    the environment variable that adds meta to the code."""
    codegen = graph._codegen
    cls = type(graph)
    if (type(codegen) is not CodeGen or codegen._body_transformer is not None
            or not _PLAIN_CODEGEN_FIELDS.issuperset(vars(codegen))
            or cls.python_code is not fx.Graph.python_code or cls._python_code is not fx.Graph._python_code
            or os.environ.get("FX_GRAPH_SHOW_META", "0") == "1"):
        raise _Outside(codegen)
    return codegen


def _freed_after(nodes: list[fx.Node]) -> dict[fx.Node, list[str]]:
    """The values each node is the last user of, in the order torch's
    generator frees them: the first user met walking backwards."""
    last_user: dict[fx.Node, fx.Node] = {}
    freed_after: dict[fx.Node, list[str]] = {}
    for node in reversed(nodes):
        for source in node._input_nodes:
            if source not in last_user:
                last_user[source] = node
                freed_after.setdefault(node, []).append(source.name)
    return freed_after


def _call_line(node: fx.Node, writer: _Writer, callees: dict[int, tuple[Any, str, bool]]) -> str:
    """The assignment a call_function node generates (before its frees)."""
    meta = node.meta
    if meta.get("is_wrapped", False) or meta.get("boxed_arg_indices"):
        raise _Outside(node)
    callee, template = _callee(node.target, callees)
    if template:  # a Python operator, written as an expression: x[i], a * b
        if node.kwargs or len(node.args) != callee.count("{}"):
            raise _Outside(node)
        return f"{node.name} = {callee.format(*[writer.arg(a) for a in node.args])}"
    return f"{node.name} = {callee}({writer.call_args(node.args, node.kwargs)})"


def _generate(graph: fx.Graph) -> PythonCode:
    codegen = _check_generator(graph)
    nodes = list(graph.nodes)
    _check_names(nodes)
    if any(node.type is not None for node in nodes):
        raise _Outside(graph)

    freed_after = _freed_after(nodes)
    writer = _Writer()
    callees: dict[int, tuple[Any, str, bool]] = {}
    free_vars: list[str] = []
    lines: list[str] = []
    line_node: list[int] = []
    for i, node in enumerate(nodes):
        op = node.op
        if op == "placeholder":
            if node.args or node.target != node.name:
                raise _Outside(node)
            free_vars.append(node.name)
            continue
        if op == "call_function":
            text = _call_line(node, writer, callees)
            freed = freed_after.get(node)
            if not node.users:
                freed = [*freed, node.name] if freed else [node.name]
            if freed:
                text = f"{text};  {' = '.join(freed)} = None"
            lines.append(text)
            line_node.append(i)
            continue
        if op == "output":
            if len(node.args) != 1 or node.kwargs:
                raise _Outside(node)
            lines.append(f"return {writer.arg(node.args[0])}")
            line_node.append(i)
            # The line after the return statement: empty, still the output's.
            lines.append("")
            line_node.append(i)
            continue
        raise _Outside(node)
    if not lines:
        raise _Outside(graph)

    prologue = codegen.gen_fn_def(free_vars, "")
    first = prologue.count("\n") + 1
    lineno_map: dict[int, int | None] = {first + k: idx for k, idx in enumerate(line_node)}
    body = "\n".join(["    " + line for line in lines])
    src = f"\n\n\n{prologue}\n{body}"
    return PythonCode(src, _globals(), _lineno_map=lineno_map, _prologue_start=4)


def _globals() -> dict[str, Any]:
    """The globals torch's generator gives every graph of this kind: its
    registered builtins (``inf``, ``torch``, ``device``, ...), as its own
    generator makes them for an empty graph."""
    return fx.Graph().python_code(root_module="self").globals


def _differences(mine: PythonCode, theirs: PythonCode) -> list[str]:
    """What differs between two generators' code of one graph: the fields
    tests/test_codegen.py compares (source, line map, prologue position,
    globals by name and object)."""
    found = []
    if mine.src != theirs.src:
        a, b = theirs.src.splitlines(), mine.src.splitlines()
        line = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        found.append(f"source line {line + 1}: torch {a[line] if line < len(a) else '(none)'!r}, "
                     f"fxcut {b[line] if line < len(b) else '(none)'!r}")
    for field, label in (("_lineno_map", "line map"), ("_prologue_start", "prologue position")):
        if getattr(mine, field, None) != getattr(theirs, field, None):
            found.append(f"the {label}")
    if {k: id(v) for k, v in mine.globals.items()} != {k: id(v) for k, v in theirs.globals.items()}:
        found.append(f"the globals ({', '.join(sorted(set(mine.globals) ^ set(theirs.globals))) or 'their objects'})")
    return found


class _SelfCheck:
    """Whether this module's generator writes what torch's does, in this
    process: unchecked until the first graph it writes, then passed, or off
    for good."""

    def __init__(self) -> None:
        self.passed = False
        self.off = False
        self.lock = threading.Lock()

    def state(self) -> str:
        return "off" if self.off else "passed" if self.passed else "unchecked"

    def first(self, graph: fx.Graph, mine: PythonCode) -> PythonCode | None:
        """``mine`` if torch's generator writes the same for ``graph`` (the
        check passes for the process), else None (off for the process)."""
        theirs = type(graph).python_code(graph, root_module="self")
        found = _differences(mine, theirs)
        if not found:
            self.passed = True
            return mine
        self.turn_off(f"on the first graph it wrote, {'; '.join(found)}")
        return None

    def turn_off(self, why: str) -> None:
        with self.lock:
            if self.off:
                return
            self.off = True
        warn_once(f"fxcut's {CODE_GENERATOR} differs from torch {torch.__version__}'s ({why}); torch's "
                  "generator writes every module's code from now on")


_self_check = _SelfCheck()


def self_check_state() -> str:
    """``"unchecked"``, ``"passed"`` or ``"off"``: this process's check of
    this module's generator against torch's."""
    return _self_check.state()


def python_code(graph: fx.Graph) -> PythonCode | None:
    """``graph.python_code(root_module="self")`` as torch generates it, for
    graphs of the kind this module writes; None for any other graph, and
    for every graph once the process's check found a difference."""
    check = _self_check
    if check.off:
        return None
    try:
        code = _generate(graph)
    except _Outside:
        return None
    except Exception as e:  # a torch this module does not fit: torch's generator from now on
        check.turn_off(f"it raised {type(e).__name__}: {e}")
        return None
    if check.passed:
        return code
    return check.first(graph, code)


@contextmanager
def generated_code(graph: fx.Graph) -> Iterator[None]:
    """Within the block, a ``GraphModule`` built on ``graph`` (its
    ``recompile``) gets its code from :func:`python_code` -- the same
    ``PythonCode`` torch's generator returns -- where the graph is of that
    kind and the call is the plain one; torch's generator otherwise."""
    real = graph.python_code

    def python_code_of_graph(root_module: str, **options: Any) -> PythonCode:
        if root_module == "self" and not any(options.values()):
            code = python_code(graph)
            if code is not None:
                return code
        return real(root_module, **options)

    graph.python_code = python_code_of_graph  # type: ignore[method-assign]
    try:
        yield
    finally:
        del graph.python_code


__all__ = ["generated_code", "python_code", "self_check_state"]
