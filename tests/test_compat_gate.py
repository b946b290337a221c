"""The compatibility gate (fxcut.torchrules.gate): every private torch,
torch.fx and CPython name or layout fxcut relies on is a row of the versions
table (and the table is honest both ways); fxcut's code generator checks
itself against torch's once per process; an exception inside any copy of
torch's behaviour sends the graph down torch's own path.  The tests
simulate a changed torch -- its generator writing one more line, a
constructor's signature, a private name gone, a node layout the C readers
do not expect, a code transformer -- and each asserts the modules equal
torch's own partitioner's on the same graph, the warnings (one), and the
user's joint graph as torch leaves it.  In the fidelity set: every
supported torch."""

from __future__ import annotations

import ast
import re
import types
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.fx as fx
from torch._functorch import config as functorch_config
from torch.fx.graph import CodeGen, PythonCode

import fxcut
import fxcut._C as _C
import zoo
from fxcut.route import guard
from fxcut.torchrules.lower import _NodeFacts, _read_in_c, _ValueFacts
from fxcut.torchrules import codegen, extract, gate, prepare, snapshot, versions
from fxcut.torchrules.ops import default_facts

PACKAGE = Path(fxcut.__file__).resolve().parent
#: the checkout's C sources (not beside the package: sanitize.sh tests a copy of python/ elsewhere)
CSRC = Path(__file__).resolve().parent.parent / "csrc"
RELEASE = versions.current().release  # type: ignore[union-attr]


# --------------------------------------------------------------------------- helpers


@pytest.fixture
def fresh_gate(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A process that has not checked anything yet: the gate's once-per-process
    checks, the code generator's self-check, the warnings given, the counts."""
    gate.reset()
    monkeypatch.setattr(codegen, "_self_check", codegen._SelfCheck())
    monkeypatch.setattr(guard, "_warned", set())
    monkeypatch.delenv(guard.VERIFY_ENV, raising=False)
    guard.reset_counts()
    yield
    gate.reset()  # the next test checks the unpatched torch again
    guard.reset_counts()


@contextmanager
def fallback_warnings() -> Iterator[list[warnings.WarningMessage]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield caught
    caught[:] = [w for w in caught if issubclass(w.category, fxcut.FallbackWarning)]


def joint_state(gm: fx.GraphModule) -> tuple[str, list[tuple[str, str, str]]]:
    """What a partition leaves of the user's joint graph: its code and nodes."""
    return gm.code, [(n.name, n.op, str(n.target)) for n in gm.graph.nodes]


def eager(gm: fx.GraphModule) -> fx.GraphModule:
    """``gm`` as a GraphModule whose code is generated when it is built (the
    zoo's joints are lazy, as torch.compile makes them)."""
    return fx.GraphModule(gm, gm.graph)


def both(name: str) -> tuple[tuple[str, str, Any], tuple[str, str, Any]]:
    """torch's and fxcut's partition of the zoo case on fresh copies of its
    joint graph (``name:eager``: an eager copy): (forward code, backward
    code, the joint as left), each."""
    name, _, how = name.partition(":")
    cap = zoo.capture(name)
    out = []
    for partition in (guard.torchs_own_min_cut(), fxcut.min_cut_rematerialization_partition):
        gm = eager(cap.fresh()) if how == "eager" else cap.fresh()
        fw, bw = partition(gm, cap.joint_inputs, *cap.partition_args, num_fwd_outputs=cap.num_fwd_outputs,
                           **cap.partition_kwargs)
        out.append((fw.code, bw.code, joint_state(gm)))
    return out[0], out[1]


def assert_torchs_modules(names: tuple[str, ...]) -> list[str]:
    """Each case partitioned by fxcut equals torch's (code of both modules,
    the joint as left); the FallbackWarnings given, as text."""
    with fallback_warnings() as caught:
        for name in names:
            expected, got = both(name)
            assert got[0] == expected[0], name
            assert got[1] == expected[1], name
            assert got[2] == expected[2], name
    return [str(w.message) for w in caught]


# --------------------------------------------------------------------------- the table: every row holds


@pytest.mark.parametrize("row", [r for r in versions.PRIVATE_NAMES if r.applies_to(RELEASE)], ids=lambda r: r.name)
def test_every_private_name_resolves_on_this_release(row: versions.Private) -> None:
    probes = gate._Probes()
    if row.how in (versions.ATTRIBUTE, versions.NODE_SLOT):
        assert gate.row_problem(row, probes) is None
    elif row.name.startswith("CPython tuple hash"):
        # The C readers' tuple hash, fed item by item, is the interpreter's.
        g = fx.Graph()
        x, y = g.placeholder("x"), g.placeholder("y")
        args, kwargs = (x, [y, 1.5, (2, None)], torch.float16), {"dim": -1, "out": [x]}
        for by_bits in (False, True):
            key = _C.cse_key(args, kwargs, {y: x}, prepare.cse_key_config(by_bits))
            assert key is not None and key[4] == prepare.python_cse_key(args, kwargs, {y: x}, by_bits)[4]
    else:
        assert row.how in (versions.OPTIONAL, versions.LAYOUT) and row.note, row


def test_the_gate_finds_nothing_wrong_with_this_torch() -> None:
    assert gate.problems(versions.current()) == []  # type: ignore[arg-type]


def test_a_row_that_does_not_hold_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check can fail: a name gone, a slot shadowed, a slot that holds
    something else than its public attribute."""
    probes = gate._Probes()
    missing = versions.Private("torch.fx.graph._no_such_name", versions.TORCH_FX, ("fxcut.torchrules.codegen",))
    assert "_no_such_name" in (gate.row_problem(missing, probes) or "")
    instance = versions.Private("torch.fx.Graph._no_such_field", versions.TORCH_FX, ("fxcut.torchrules.snapshot",))
    assert "_no_such_field" in (gate.row_problem(instance, probes) or "")
    slot = vars(torch._C._NodeBase)["_args"]
    monkeypatch.setattr(fx.Node, "_args", property(lambda n: slot.__get__(n)))
    assert "not the member slot" in (gate.slot_problem("_args", probes.node) or "")
    monkeypatch.undo()
    monkeypatch.setattr(fx.Node, "args", property(lambda n: tuple(slot.__get__(n))[:0]))
    assert "is not what node.args gives" in (gate.slot_problem("_args", probes.node) or "")


def test_the_snapshots_fx_internals_are_rows_of_the_table() -> None:
    """FxInternals (what the restore relies on) is folded into the table, not
    copied: every name of every release's row is a row used by snapshot."""
    rows = {r.name: r for r in versions.PRIVATE_NAMES}
    for rules in versions.RELEASES.values():
        fxi = rules.fx_internals
        for owner, names in (("torch.fx.GraphModule", fxi.module_fields), ("torch.fx.Graph", fxi.graph_fields),
                             ("torch.fx.Graph", fxi.graph_internals), ("torch.fx.Node", fxi.node_internals)):
            for name in names:
                row = rows[f"{owner}.{name}"]
                assert "fxcut.torchrules.snapshot" in row.users and row.applies_to(rules.release)


# --------------------------------------------------------------------------- the table: nothing unlisted


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _module_name(path: Path) -> str:
    parts = ["fxcut", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _library() -> dict[str, str]:
    """The library's modules (fxcut.tools aside: the table lists what the
    library relies on) and their source."""
    return {_module_name(p): p.read_text() for p in sorted(PACKAGE.rglob("*.py"))
            if not _module_name(p).startswith(("fxcut.tools", "fxcut.__main__"))}


def _own_private_names(sources: list[str]) -> set[str]:
    """The private names fxcut defines itself: its functions, classes,
    variables, parameters and ``self`` attributes."""
    own: set[str] = set()
    for source in sources:
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                own.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                own.add(node.id)
            elif isinstance(node, ast.arg):
                own.add(node.arg)
            elif (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
                  and isinstance(node.value, ast.Name) and node.value.id == "self"):
                own.add(node.attr)
    return {n for n in own if _private(n)}


_TORCH_PATH = re.compile(r"torch(\.\w+)+")


def scan(source: str, own: set[str], *, strings: bool = True) -> set[str]:
    """The private names ``source`` reaches: a dotted path from torch (an
    import, an attribute chain from a name bound to torch or to one of its
    modules, a string naming one, a config option read by name) with a
    private part, or ``?.<name>`` for a private attribute, a ``getattr``
    name or a keyword of an object fxcut does not define."""
    tree = ast.parse(source)
    bound: dict[str, str] = {}
    found: set[str] = set()

    def add(path: str) -> None:
        if any(_private(part) for part in path.split(".")):
            found.add(path)

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "torch":
                    bound[alias.asname or "torch"] = alias.name if alias.asname else "torch"
                    add(alias.name)
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "torch":
            for alias in node.names:
                bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
                add(f"{node.module}.{alias.name}")
    inner = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and id(node) not in inner:
            chain: list[str] = []
            value: ast.AST = node
            while isinstance(value, ast.Attribute):
                chain.insert(0, value.attr)
                value = value.value
            if isinstance(value, ast.Name) and value.id in bound:
                add(".".join([bound[value.id], *chain]))
            else:
                found.update(f"?.{a}" for a in chain if _private(a) and a not in own)
        elif isinstance(node, ast.Call):
            fn, args = node.func, node.args
            text = args[1].value if len(args) > 1 and isinstance(args[1], ast.Constant) else None
            if isinstance(fn, ast.Name) and fn.id in ("getattr", "hasattr", "setattr", "delattr") and \
                    isinstance(text, str) and _private(text):
                found.add(f"?.{text}")
            first = args[0].value if args and isinstance(args[0], ast.Constant) else None
            if isinstance(fn, ast.Attribute) and fn.attr == "config" and isinstance(first, str) and _private(first):
                found.add(f"torch._functorch.config.{first}")
            found.update(f"?.{k.arg}" for k in node.keywords if k.arg and _private(k.arg) and k.arg not in own)
        elif strings and isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                _TORCH_PATH.fullmatch(node.value):
            add(node.value)
    return found


def _rows_covering(path: str) -> list[versions.Private]:
    """The rows that list ``path``: by name (a private attribute of an object
    fxcut does not name: any row with that part), or a row of that name, one
    under it (a module fxcut imports), or -- for a row that is not a
    module -- the row a public attribute of it hangs off."""
    rows = versions.PRIVATE_NAMES
    if path.startswith("?."):
        return [r for r in rows if path[2:] in r.name.split(".")[1:]]
    covering = [r for r in rows if r.name == path or r.name.startswith(path + ".")]
    for r in rows:
        rest = path[len(r.name) + 1:].split(".") if path.startswith(r.name + ".") else None
        if rest and not any(_private(p) for p in rest) and r.applies_to(RELEASE):
            if not isinstance(gate.resolve(r.name), types.ModuleType):
                covering.append(r)
    return covering


def _scanned() -> dict[str, set[str]]:
    """path -> the library modules it is scanned in (the versions table's own
    strings aside: they are the table)."""
    library = _library()
    own = _own_private_names(list(library.values()))
    found: dict[str, set[str]] = {}
    for module, source in library.items():
        for path in scan(source, own, strings=module != "fxcut.torchrules.versions"):
            found.setdefault(path, set()).add(module)
    return found


def _c_private_names() -> dict[str, set[str]]:
    """The private attribute names the C readers read (string literals), by file."""
    found: dict[str, set[str]] = {}
    for path in sorted(CSRC.glob("*.[ch]")):
        for name in re.findall(r'"(_[A-Za-z0-9]\w*)"', path.read_text()):
            if _private(name):
                found.setdefault(name, set()).add(f"csrc/{path.name}")
    return found


def test_the_scan_finds_private_names() -> None:
    """The scan itself, on code written to hold each kind of reach."""
    source = '''
import torch
import torch.fx as fx
from torch._functorch import partitioners as tp
from torch.fx.graph import _illegal_names, CodeGen
def f(node, graph, rules):
    tp.default_partition(node)
    torch.ops.aten._to_copy.default
    node._input_nodes
    getattr(node, "_boxed", None)
    rules.config("_hidden_option")
    PythonCode("", {}, _lineno_map={})
    "torch._functorch.compilers"
    self._mine = 1
    fx.Node.args
'''
    found = scan(source, {"_mine"})
    assert found == {"torch._functorch.partitioners", "torch._functorch.partitioners.default_partition",
                     "torch.fx.graph._illegal_names", "torch.ops.aten._to_copy.default", "?._input_nodes",
                     "?._boxed", "torch._functorch.config._hidden_option", "?._lineno_map",
                     "torch._functorch.compilers"}
    assert _rows_covering("?._input_nodes")[0].name == "torch.fx.Node._input_nodes"
    assert [r.name for r in _rows_covering("torch.ops.aten._to_copy.default")] == ["torch.ops.aten._to_copy"]
    # A module's row does not cover what fxcut reaches under it.
    assert _rows_covering("torch._functorch.config.some_option") == []


def test_the_table_lists_every_private_name_the_library_reaches() -> None:
    unlisted = []
    for path, modules in sorted(_scanned().items()):
        rows = _rows_covering(path)
        users = {u for r in rows for u in r.users}
        if not rows or not modules <= users:
            unlisted.append(f"{path}: {sorted(modules - users)}")
    for name, files in sorted(_c_private_names().items()):
        users = {u for r in versions.PRIVATE_NAMES if r.name.rpartition(".")[2] == name for u in r.users}
        if not files <= users:
            unlisted.append(f"{name}: {sorted(files - users)}")
    assert unlisted == []


def test_every_user_a_row_names_relies_on_it() -> None:
    """No stale row: each listed module still reaches the name (found by the
    scan, or -- a name it reaches only by a string -- named in its source),
    each listed C reader still names the attribute."""
    scanned = _scanned()
    library = _library()
    # The snapshot reads the FxInternals names by name, through the release's row.
    through_fx_internals = {f"{owner}.{name}" for rules in versions.RELEASES.values() for owner, names in (
        ("torch.fx.GraphModule", rules.fx_internals.module_fields), ("torch.fx.Graph", rules.fx_internals.graph_fields),
        ("torch.fx.Graph", rules.fx_internals.graph_internals), ("torch.fx.Node", rules.fx_internals.node_internals),
    ) for name in names}
    assert "fx_internals.graph_fields" in library["fxcut.torchrules.snapshot"]
    stale = []
    for row in versions.PRIVATE_NAMES:
        if row.how == versions.LAYOUT:
            continue  # a layout is no name to scan for: its note says where it is relied on
        last = row.name.rpartition(".")[2]
        for user in row.users:
            if user == "fxcut.torchrules.snapshot" and row.name in through_fx_internals:
                continue
            if user.startswith("csrc/"):
                ok = f'"{last}"' in (CSRC / user.removeprefix("csrc/")).read_text()
            else:
                ok = any(user in modules and row in _rows_covering(path) for path, modules in scanned.items()) \
                    or last in library[user]
            if not ok:
                stale.append(f"{row.name}: {user}")
    assert stale == []


# --------------------------------------------------------------------------- (a) the generator writes one more line


def _one_more_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch's generator, as a newer torch might write it: a comment line
    at the end of every function it writes."""
    real = CodeGen._gen_python_code

    def gen_python_code(self: CodeGen, *args: Any, **kwargs: Any) -> PythonCode:
        code = real(self, *args, **kwargs)
        code.src = f"{code.src}\n    # written by torch.fx 9.9"
        return code

    monkeypatch.setattr(CodeGen, "_gen_python_code", gen_python_code)


@pytest.mark.usefixtures("fresh_gate")
def test_a_generator_that_writes_one_more_line_turns_fxcuts_off(monkeypatch: pytest.MonkeyPatch) -> None:
    _one_more_line(monkeypatch)
    assert codegen.self_check_state() == "unchecked"
    messages = assert_torchs_modules(("mlp:eager", "gpt2", "mlp"))
    assert len(messages) == 1, messages
    assert "code generator differs" in messages[0] and "written by torch.fx 9.9" in messages[0]
    assert codegen.self_check_state() == "off"
    fw, _ = zoo.capture("mlp").partition(fxcut.min_cut_rematerialization_partition)
    assert fw.code.endswith("# written by torch.fx 9.9")  # the simulated torch is what wrote it
    # fxcut still decided every graph: only the code generator stepped aside.
    assert fxcut.partition_counts() == {"fxcut": 4}


@pytest.mark.usefixtures("fresh_gate")
def test_the_self_check_passes_on_this_torch_once_and_costs_one_comparison(monkeypatch: pytest.MonkeyPatch) -> None:
    compared = []
    real = codegen._SelfCheck.first

    def first(self: codegen._SelfCheck, graph: fx.Graph, mine: PythonCode) -> PythonCode | None:
        compared.append(graph)
        return real(self, graph, mine)

    monkeypatch.setattr(codegen._SelfCheck, "first", first)
    assert assert_torchs_modules(("mlp:eager", "gpt2")) == []
    assert codegen.self_check_state() == "passed" and len(compared) == 1


# --------------------------------------------------------------------------- (b) a constructor's signature changes


def _pythoncode_renames_a_keyword(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch's PythonCode, as a newer torch might declare it: the keyword
    ``_prologue_start`` renamed -- and torch's own generator written for it."""
    real_init = PythonCode.__init__

    def new_init(self: PythonCode, src: str, globals: dict[str, Any], _lineno_map: Any = None, *,
                 prologue_start: int = 0) -> None:
        real_init(self, src, globals, _lineno_map, prologue_start)

    real_gen = CodeGen._gen_python_code

    def gen_python_code(self: CodeGen, *args: Any, **kwargs: Any) -> PythonCode:
        PythonCode.__init__ = real_init  # type: ignore[method-assign]
        try:
            return real_gen(self, *args, **kwargs)
        finally:
            PythonCode.__init__ = new_init  # type: ignore[method-assign]

    monkeypatch.setattr(PythonCode, "__init__", new_init)
    monkeypatch.setattr(CodeGen, "_gen_python_code", gen_python_code)


@pytest.mark.parametrize("checked", [False, True], ids=["before-the-self-check", "after-the-self-check"])
@pytest.mark.usefixtures("fresh_gate")
def test_pythoncode_no_longer_taking_a_keyword_never_fails_a_compile(monkeypatch: pytest.MonkeyPatch,
                                                                     checked: bool) -> None:
    if checked:
        codegen._self_check.passed = True
    _pythoncode_renames_a_keyword(monkeypatch)
    with pytest.raises(TypeError, match="_prologue_start"):  # the simulated torch rejects what fxcut passes
        PythonCode("", {}, _lineno_map=None, _prologue_start=4)  # type: ignore[call-arg]
    messages = assert_torchs_modules(("mlp:eager", "mlp"))
    assert len(messages) == 1 and "raised TypeError" in messages[0] and "_prologue_start" in messages[0], messages
    assert codegen.self_check_state() == "off"


# --------------------------------------------------------------------------- (c) a private name disappears


@pytest.mark.parametrize("checked", [False, True], ids=["found-by-the-table", "found-where-it-is-called"])
@pytest.mark.usefixtures("fresh_gate")
def test_a_private_function_the_builder_calls_gone(monkeypatch: pytest.MonkeyPatch, checked: bool) -> None:
    """torch's ``_aot_autograd.utils._is_primal`` gone (torch's partitioner
    holds its own reference, taken at import).  A fresh process finds it
    missing in the table's check; a process that had checked before meets
    it in the module builder: torch's path either way."""
    from torch._functorch._aot_autograd import utils

    if checked:
        assert gate.torch_problem(versions.current()) is None  # type: ignore[arg-type]
    monkeypatch.delattr(utils, "_is_primal")
    messages = assert_torchs_modules(("mlp", "mlp"))
    assert len(messages) == 1 and "_is_primal" in messages[0], messages
    assert ("module builder" in messages[0]) == checked
    assert ("relied on by fxcut.torchrules.extract" in messages[0]) == (not checked)
    assert fxcut.partition_counts() == {"torch_changed": 2}


@pytest.mark.usefixtures("fresh_gate")
def test_a_private_function_the_node_reader_calls_gone(monkeypatch: pytest.MonkeyPatch) -> None:
    """``is_opaque_node``, which the C node reader calls back for a value
    that is a tuple (gpt2's layer norms), gone after the process checked."""
    from torch._functorch._aot_autograd import graph_compile

    assert gate.torch_problem(versions.current()) is None  # type: ignore[arg-type]
    monkeypatch.delattr(graph_compile, "is_opaque_node")
    messages = assert_torchs_modules(("gpt2",))
    assert len(messages) == 1 and "node readers" in messages[0] and "is_opaque_node" in messages[0], messages
    assert fxcut.partition_counts() == {"torch_changed": 1}


# --------------------------------------------------------------------------- an exception inside each copy


def _raise(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("simulated: torch 9.9 changed this")


_COPIES: dict[str, tuple[Any, str]] = {
    "node readers": (_NodeFacts, "reader_config"),
    "dead-code elimination and CSE": (prepare, "node_facts_of"),
    "module builder": (extract, "_select"),
    "graph snapshot": (snapshot._GraphState, "__init__"),
}


@pytest.mark.parametrize("copy", sorted(_COPIES))
@pytest.mark.usefixtures("fresh_gate")
def test_an_exception_inside_a_copy_sends_the_graph_to_torch(monkeypatch: pytest.MonkeyPatch, copy: str) -> None:
    """A RuntimeError (no gap before the gate: a failed compile) raised
    inside each copy: torch's modules, one warning naming the copy."""
    owner, name = _COPIES[copy]
    monkeypatch.setattr(owner, name, _raise)
    messages = assert_torchs_modules(("mlp", "mlp"))
    assert len(messages) == 1 and f"the {copy} fxcut copies from torch failed" in messages[0] and "torch 9.9" in messages[0], messages
    assert fxcut.partition_counts() == {"torch_changed": 2}


@pytest.mark.usefixtures("fresh_gate")
def test_an_exception_after_the_graph_was_changed_restores_it_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """CSE applied in place, then the copy fails: the joint graph is put
    back before torch's partitioner sees it."""
    monkeypatch.setattr(prepare, "_as_fresh_graph", _raise)
    with functorch_config.patch(cse=True):
        messages = assert_torchs_modules(("llama",))
    assert len(messages) == 1 and "dead-code elimination and CSE" in messages[0]


def test_the_gate_passes_bad_input_and_what_its_caller_handles() -> None:
    class Handled(Exception):
        pass

    def entry(error: BaseException) -> Callable[[], None]:
        @gate.gated("test copy", passes=(Handled,))
        def run() -> None:
            raise error
        return run

    with pytest.raises(gate.TorchChanged, match="the test copy fxcut copies from torch failed: KeyError") as info:
        entry(KeyError("k"))()
    assert isinstance(info.value.__cause__, KeyError)
    for kept in (fxcut.LoweringError("node 'x': bad"), Handled(), KeyboardInterrupt()):
        with pytest.raises(type(kept)):
            entry(kept)()


@pytest.mark.usefixtures("fresh_gate")
def test_bad_input_inside_the_node_reader_is_still_fxcuts_error() -> None:
    """A LoweringError the reader raises (through its Python callback) is the
    user's error, not a gap: raised, the graph left as it was."""
    cap = zoo.capture("mlp")
    gm = cap.fresh()
    before = joint_state(gm)
    next(n for n in gm.graph.nodes if n.op == "call_function").meta["recompute"] = "sometimes"
    with pytest.raises(fxcut.LoweringError, match="is not a torch.utils.checkpoint.CheckpointPolicy"):
        fxcut.min_cut_rematerialization_partition(gm, cap.joint_inputs, num_fwd_outputs=cap.num_fwd_outputs)
    assert joint_state(gm) == before
    assert fxcut.partition_counts() == {}


# --------------------------------------------------------------------------- (d) a node layout the readers do not know


class _Node(fx.Node):
    """A node of a torch whose graphs hold a subclass of fx.Node."""


def _with_subclass_node(gm: fx.GraphModule) -> fx.GraphModule:
    node = next(n for n in gm.graph.nodes if n.op == "call_function")
    node.__class__ = _Node
    return gm


@pytest.mark.usefixtures("fresh_gate")
def test_a_node_of_a_subclass_goes_to_torch() -> None:
    cap = zoo.capture("mlp")
    out = []
    with fallback_warnings() as caught:
        for partition in (guard.torchs_own_min_cut(), fxcut.min_cut_rematerialization_partition):
            gm = _with_subclass_node(cap.fresh())
            fw, bw = partition(gm, cap.joint_inputs, num_fwd_outputs=cap.num_fwd_outputs)
            out.append((fw.code, bw.code, joint_state(gm)))
    assert out[0] == out[1]
    assert len(caught) == 1 and "a subclass of torch.fx.Node" in str(caught[0].message)
    assert fxcut.partition_counts() == {"torch_changed": 1}


def _readers_on(gm: fx.GraphModule) -> tuple[Any, Any]:
    """Both C readers, called directly on the graph's nodes."""
    nodes = list(gm.graph.nodes)
    facts = default_facts()
    rules = versions.current()
    assert rules is not None
    read = _read_in_c(nodes, facts, _ValueFacts(facts, False, rules), None)
    planned = _C.prepare_plan(nodes, prepare.node_facts_of(facts, False, rules), prepare.plan_config(rules, 1),
                              eliminate_dead=True, cse=True)
    return read, planned


def test_the_c_readers_never_crash_on_a_layout_they_do_not_expect(monkeypatch: pytest.MonkeyPatch) -> None:
    """A subclass node: the node reader leaves the graph to the Python path
    (None); the planner reads it through its properties.  A slot shadowed
    by a property: both read it by name, the same result."""
    cap = zoo.capture("mlp")
    plain = _readers_on(cap.fresh())
    assert plain[0] is not None
    read, planned = _readers_on(_with_subclass_node(cap.fresh()))
    assert read is None and [len(x) for x in planned[:2]] == [len(x) for x in plain[1][:2]]
    slot = vars(torch._C._NodeBase)["_input_nodes"]
    monkeypatch.setattr(fx.Node, "_input_nodes", property(lambda n: slot.__get__(n)))
    read, planned = _readers_on(cap.fresh())
    assert read is not None and read.in_idx == plain[0].in_idx and read.kind == plain[0].kind
    assert [len(x) for x in planned[:2]] == [len(x) for x in plain[1][:2]]
    # A slot that cannot be read at all: an exception (a gap for the node reader), never a crash.
    monkeypatch.setattr(fx.Node, "_input_nodes", property(_raise))
    with pytest.raises(gate.TorchChanged, match="node readers.*torch 9.9"):
        _readers_on(cap.fresh())


@pytest.mark.usefixtures("fresh_gate")
def test_a_node_slot_shadowed_by_a_property_sends_every_graph_to_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    """A torch whose ``Node._input_nodes`` is no longer the C slot: the gate's
    check at the first partition finds it, torch decides the process's graphs."""
    slot = vars(torch._C._NodeBase)["_input_nodes"]
    monkeypatch.setattr(fx.Node, "_input_nodes", property(lambda n: slot.__get__(n)))
    messages = assert_torchs_modules(("mlp", "mlp"))
    assert len(messages) == 1 and "torch.fx.Node._input_nodes is property" in messages[0], messages
    assert fxcut.partition_counts() == {"torch_changed": 2}


# --------------------------------------------------------------------------- (e) a code transformer


def _mark(body: list[str]) -> list[str]:
    return ["# transformed for the user\n", *body]


def _joint(cap: Any, kind: str) -> fx.GraphModule:
    """A fresh joint module: lazy (as torch.compile makes it), eager, or eager
    with the default code generator (AOT Autograd's joints have a pytree one,
    which fxcut's generator leaves to torch's in any case)."""
    gm = cap.fresh()
    if kind == "plain":
        gm.graph._codegen = CodeGen()
    return gm if kind == "lazy" else eager(gm)


@pytest.mark.parametrize("joint", ["lazy", "eager", "plain"])
@pytest.mark.parametrize("cse", [False, True], ids=["no-cse", "cse"])
@pytest.mark.usefixtures("fresh_gate")
def test_a_graph_with_a_code_transformer_gets_torchs_code(cse: bool, joint: str) -> None:
    """``on_generate_code`` on the joint graph: its code is torch's generator's,
    the transformer applied (torch's CSE builds a new graph, which has none)."""
    cap = zoo.capture("mlp")
    out = []
    with fallback_warnings() as caught, functorch_config.patch(cse=cse):
        for partition in (guard.torchs_own_min_cut(), fxcut.min_cut_rematerialization_partition):
            gm = _joint(cap, joint)
            with gm.graph.on_generate_code(lambda _: _mark):
                fw, bw = partition(gm, cap.joint_inputs, num_fwd_outputs=cap.num_fwd_outputs)
                out.append((fw.code, bw.code, joint_state(gm)))
    assert out[0] == out[1]
    assert ("# transformed for the user" in out[1][2][0]) == (not cse)
    # Not a gap: fxcut decides, only the generator defers to torch's.
    assert caught == [] and fxcut.partition_counts() == {"fxcut": 1}


def test_a_transformer_or_a_graph_class_of_its_own_is_left_to_torchs_generator() -> None:
    g = fx.Graph()
    x = g.placeholder("x")
    g.output((g.call_function(torch.ops.aten.relu.default, (x,)),))
    assert codegen.python_code(g) is not None
    with g.on_generate_code(lambda _: _mark):
        assert codegen.python_code(g) is None
        with codegen.generated_code(g):
            gm = fx.GraphModule(torch.nn.Module(), g)
        assert "# transformed for the user" in gm.code

    class OwnGraph(fx.Graph):
        def python_code(self, root_module: str, **kwargs: Any) -> PythonCode:
            return super().python_code(root_module, **kwargs)

    g.__class__ = OwnGraph
    assert codegen.python_code(g) is None
    g.__class__ = fx.Graph
    g._codegen.extra_option = True  # type: ignore[attr-defined]  # an attribute a plain CodeGen lacks
    assert codegen.python_code(g) is None
