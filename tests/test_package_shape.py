"""The package's shape, checked from its source: its layers as folders with
imports pointing down only, the solver layer free of torch, ``torchrules``
entered through its one adapter, each C function with one Python owner, no
import cycle between fxcut's modules, inductor's cache key covering every
module that can change a partition, no development tooling in the package,
the library apart from its tooling (``fxcut.tools``), and ``import fxcut``
without inductor (the reason the few lazy imports that remain are lazy)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import fxcut
from fxcut.integrations.torch_compile import code_hash, decision_files

PACKAGE = Path(fxcut.__file__).resolve().parent


def _module_name(path: Path) -> str:
    parts = ["fxcut", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(name: str, path: Path, modules: dict[str, Path], *, type_checking: bool = False) -> set[str]:
    """The fxcut modules ``name`` imports anywhere in its code (function
    bodies included: a cycle closed at call time is a cycle too), and under
    ``if TYPE_CHECKING`` only when ``type_checking``."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node) and not type_checking:
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name in modules)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                if sub in modules:
                    found.add(sub)
                elif target in modules:
                    found.add(target)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(), str(path)))
    found.discard(name)
    return found


def _graph(*, type_checking: bool = False) -> dict[str, set[str]]:
    """fxcut's modules and the fxcut modules each imports (the C extension
    ``fxcut._C`` imports none)."""
    modules = {**_modules(), "fxcut._C": Path(fxcut._C.__file__)}
    return {name: (_imports(name, path, modules, type_checking=type_checking) if path.suffix == ".py" else set())
            for name, path in modules.items()}


#: The package's layers, bottom up, each a folder (or, for the entry, the
#: modules at the top of the package): a module imports modules of its own
#: layer and of the layers below it, never of one above -- at the top of a
#: module, in a function, or under ``if TYPE_CHECKING``.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("leaves", ("fxcut._C", "fxcut._version", "fxcut._paths", "fxcut._numbers", "fxcut._warn")),
    ("solve", ("fxcut.solve",)),  # the solvers over the graph array, the bridge to C: no torch
    ("torchrules", ("fxcut.torchrules",)),  # everything that reads torch, release by release, behind one adapter
    ("route", ("fxcut.route",)),  # guard -> plan -> lower -> decide -> build
    ("entry", ("fxcut.partition", "fxcut.planned", "fxcut.zero3", "fxcut.explain", "fxcut.pareto")),
    ("integrations", ("fxcut.integrations",)),
    ("api", ("fxcut",)),  # the package's __init__: the public names
    ("tools", ("fxcut.tools", "fxcut.__main__")),
]


def _layer(module: str) -> int:
    """The rank of ``module``'s layer in :data:`LAYERS` (a folder's modules
    by prefix; ``fxcut`` itself only by name)."""
    for rank, (_, members) in enumerate(LAYERS):
        for member in members:
            if module == member or (member != "fxcut" and module.startswith(member + ".")):
                return rank
    raise KeyError(module)


def _upward(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{m} ({LAYERS[_layer(m)][0]}) -> {n} ({LAYERS[_layer(n)][0]})"
                  for m, deps in graph.items() for n in deps if _layer(n) > _layer(m))


def test_every_module_lies_in_one_layer_and_the_layers_are_folders():
    graph = _graph()
    unplaced = []
    for m in graph:
        try:
            _layer(m)
        except KeyError:
            unplaced.append(m)
    assert unplaced == [], f"modules in no layer of LAYERS: {unplaced}"
    for folder in ("torchrules", "solve", "route", "integrations", "tools"):
        assert (PACKAGE / folder / "__init__.py").is_file(), folder
    # The flat modules of the old layout are gone.
    old = {"core", "budget", "lower", "plan", "build", "guard", "versions", "ops", "prepare", "extract",
           "codegen", "snapshot", "memory", "roles", "planner", "knapsack", "maxflow", "outpath"}
    assert not {p.stem for p in PACKAGE.glob("*.py")} & old


def test_imports_point_down_the_layers_only():
    assert _upward(_graph(type_checking=True)) == []


def test_the_layer_check_sees_an_upward_import():
    assert _upward({"fxcut.solve.core": {"fxcut.route.plan"}, "fxcut.route.plan": set()}) == [
        "fxcut.solve.core (solve) -> fxcut.route.plan (route)"]
    assert _upward({"fxcut.solve.core": {"fxcut.torchrules.ops"}, "fxcut.torchrules.ops": set()}) == [
        "fxcut.solve.core (solve) -> fxcut.torchrules.ops (torchrules)"]
    assert _upward({"fxcut.route.plan": {"fxcut.solve.core"}, "fxcut.solve.core": set()}) == []
    # a function-level import counts, and one under TYPE_CHECKING when asked
    graph = _graph(type_checking=True)
    assert "fxcut.solve.core" in graph["fxcut.route.plan"]


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (a list of modules, first = last), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def dfs(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                return stack[stack.index(n):] + [n]
            if n not in state:
                found = dfs(n)
                if found:
                    return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            found = dfs(m)
            if found:
                return found
    return None


def _reachable(graph: dict[str, set[str]], roots: list[str]) -> set[str]:
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo.extend(graph[m])
    return seen


def test_the_import_walk_sees_imports_in_functions_and_relative_ones():
    graph = _graph()
    # __init__ imports the torch.compile integration only in __getattr__.
    assert "fxcut.integrations.torch_compile" in graph["fxcut"]
    assert {"fxcut.solve.core", "fxcut.solve.knapsack"} <= graph["fxcut.solve.budget"]
    assert graph["fxcut.integrations.torch_compile"] >= {"fxcut._C", "fxcut.zero3"}
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_the_package_has_no_import_cycle():
    cycle = _cycle(_graph())
    assert cycle is None, " -> ".join(cycle or [])


def test_inductors_cache_key_covers_the_decision_path_only():
    """What InductorPartitioner runs (fxcut.partition, via fxcut.zero3's
    wrapper) and every fxcut module those import is hashed -- every module
    but the tooling, derived from the tree; the tooling (fxcut.tools: the
    CLI, the capture, the models, the report and the HTML page) is not."""
    modules = _modules()
    files = decision_files()
    hashed = {_module_name(PACKAGE / f) for f in files}
    assert all((PACKAGE / f).is_file() for f in files)
    needed = _reachable(_graph(), ["fxcut.partition", "fxcut.zero3", "fxcut.planned",
                                   "fxcut.integrations.torch_compile"]) - {"fxcut._C", "fxcut._version"}
    assert needed <= hashed, sorted(needed - hashed)
    assert {"fxcut.integrations.torch_compile", "fxcut.torchrules.inductor", "fxcut.torchrules.ask",
            "fxcut.solve.peakplan", "fxcut.solve.check"} <= hashed
    assert not any(_is_tooling(m) for m in hashed), sorted(hashed)
    assert hashed == {m for m in modules if not _is_tooling(m) and m != "fxcut.__main__"}


def test_changing_any_decision_module_changes_inductors_cache_key(tmp_path):
    """The key is a hash of every decision file's bytes (and the extension):
    a one-byte change to any of them gives another key; a change to the
    tooling does not.  Run on a copy of the package."""
    import shutil

    copy = tmp_path / "fxcut"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    ext = str(Path(fxcut._C.__file__))
    base = code_hash(str(copy), ext)
    assert code_hash(str(copy), ext) == base  # stable
    for rel in decision_files(str(copy)):
        path = copy / rel
        original = path.read_bytes()
        path.write_bytes(original + b"\n# changed\n")
        try:
            assert code_hash(str(copy), ext) != base, rel
        finally:
            path.write_bytes(original)
    tool = copy / "tools" / "cli.py"
    tool.write_bytes(tool.read_bytes() + b"\n# changed\n")
    assert code_hash(str(copy), ext) == base
    # a module added to a layer is covered without listing it
    (copy / "solve" / "newsolver.py").write_text("X = 1\n")
    assert "solve/newsolver.py" in decision_files(str(copy))
    assert code_hash(str(copy), ext) != base


def _imports_of_torch(path: Path) -> list[str]:
    """Every import of torch in ``path`` -- at the top, in a function, or
    under ``if TYPE_CHECKING`` -- as ``line: module``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module]
        found += [f"{node.lineno}: {n}" for n in names if n == "torch" or n.startswith("torch.")]
    return found


def test_the_solver_layer_imports_no_torch_and_nothing_above_it():
    """``fxcut.solve`` is arrays in, arrays out (as scipy's sparse.csgraph
    works on CSR arrays): no torch import anywhere in it, and no import of
    a torch-facing layer, at the top, in a function or for type checking."""
    solve = {m: p for m, p in _modules().items() if m.startswith("fxcut.solve")}
    assert len(solve) >= 14
    torch_imports = {m: _imports_of_torch(p) for m, p in solve.items()}
    assert {m: found for m, found in torch_imports.items() if found} == {}
    graph = _graph(type_checking=True)
    above = {m: sorted(d for d in graph[m] if _layer(d) > _layer("fxcut.solve.core")) for m in solve}
    assert {m: d for m, d in above.items() if d} == {}
    # the scan sees an import in a function and under TYPE_CHECKING
    probe = "def f():\n    import torch.fx\nif TYPE_CHECKING:\n    from torch import nn\n"
    path = PACKAGE.parent.parent / "tests" / "__probe_torch_import.py"
    try:
        path.write_text(probe)
        assert _imports_of_torch(path) == ["2: torch.fx", "4: torch"]
    finally:
        path.unlink()


#: What the layers above ``torchrules`` may import of it: its one adapter
#: (the door every compile goes through), the gate's exception and warning
#: classes, and the versions table (the guard's one lookup, the tested releases).
TORCHRULES_DOORS = {"fxcut.torchrules", "fxcut.torchrules.adapter", "fxcut.torchrules.gate",
                    "fxcut.torchrules.versions"}


def test_torchrules_is_entered_through_its_adapter():
    graph = _graph(type_checking=True)
    library = [m for m in graph if _layer(m) > _layer("fxcut.torchrules.gate") and not _is_tooling(m)
               and m != "fxcut.__main__"]
    assert "fxcut.route.guard" in library and "fxcut.zero3" in library
    entered = {m: sorted(d for d in graph[m] if d.startswith("fxcut.torchrules") and d not in TORCHRULES_DOORS)
               for m in library}
    assert {m: d for m, d in entered.items() if d} == {}
    assert "fxcut.torchrules.adapter" in graph["fxcut.route.plan"]


TOOLING = "fxcut.tools"


def _is_tooling(module: str) -> bool:
    return module == TOOLING or module.startswith(TOOLING + ".")


def test_the_tooling_is_a_subpackage_of_its_own():
    modules = _modules()
    assert {f"{TOOLING}.{m}" for m in ("cli", "capture", "models", "html", "report")} <= set(modules)
    # None of them is left at the top level under its old name.
    assert not {"fxcut.cli", "fxcut.capture", "fxcut.models", "fxcut.html", "fxcut.report"} & set(modules)


def test_the_library_never_imports_the_tooling():
    """No module outside fxcut.tools imports it, at the top or in a function
    (``python -m fxcut``, i.e. fxcut/__main__.py, is the one entry into it)."""
    graph = _graph()
    importers = {m: sorted(filter(_is_tooling, deps)) for m, deps in graph.items()
                 if not _is_tooling(m) and m != "fxcut.__main__"}
    assert {m: d for m, d in importers.items() if d} == {}
    assert graph["fxcut.__main__"] == {"fxcut.tools.cli"}
    library_roots = ["fxcut", "fxcut.partition", "fxcut.integrations.torch_compile", "fxcut.integrations.deepspeed"]
    assert not any(_is_tooling(m) for m in _reachable(graph, library_roots))


#: Run in a fresh interpreter: loads both integrations, compiles a small
#: training step with fxcut's AOT backend (AOT Autograd traces the joint
#: graph and fxcut's partitioner cuts it), checks the gradients against
#: eager, and prints the fxcut modules the process imported and who
#: partitioned.
_PARTITION_WITHOUT_TOOLING = """
import json, sys
import torch
import fxcut
import fxcut.integrations.deepspeed
import fxcut.integrations.torch_compile

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
x = torch.randn(5, 8)
model(x).pow(2).sum().backward()
expected = [p.grad.clone() for p in model.parameters()]
model.zero_grad()
compiled = torch.compile(model, backend=fxcut.aot_backend())
compiled(x).pow(2).sum().backward()
same = all(torch.allclose(p.grad, e) for p, e in zip(model.parameters(), expected))
print(json.dumps({"counts": fxcut.partition_counts(), "same_grads": same,
                  "modules": sorted(m for m in sys.modules if m == "fxcut" or m.startswith("fxcut."))}))
"""


def test_a_compile_through_fxcut_imports_no_tooling():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PACKAGE.parent), os.environ.get("PYTHONPATH", "")])}
    env.pop("FXCUT_VERIFY", None)
    out = subprocess.run([sys.executable, "-c", _PARTITION_WITHOUT_TOOLING], capture_output=True, text=True,
                         env=env, check=True, timeout=600)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    # fxcut's partitioner cut the joint graph (not a fallback to torch's) ...
    assert result["counts"] == {"fxcut": 1}, result["counts"]
    assert result["same_grads"]
    modules = set(result["modules"])
    # ... through the partition path (so the check below is not vacuous) ...
    assert {"fxcut.partition", "fxcut.solve.core", "fxcut.route.lower", "fxcut.zero3",
            "fxcut.integrations.torch_compile", "fxcut.integrations.deepspeed"} <= modules
    # ... and no tooling module was imported on the way.
    assert not {m for m in modules if _is_tooling(m)}, sorted(modules)


def _top_level_imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            names.update(a.name.partition(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module.partition(".")[0])
    return names


def test_development_tooling_is_not_in_the_package():
    """The benchmark and torch's reference live in bench/ and tests/; the
    package needs nothing but torch at import (numpy and scipy only for the
    "ilp" knapsack solver, matplotlib only to plot, both imported there)."""
    assert not set(_modules()) & {"fxcut.benchmark", "fxcut.torch_reference"}
    assert not (PACKAGE / "benchmark.py").exists() and not (PACKAGE / "torch_reference.py").exists()
    stdlib = set(sys.stdlib_module_names)
    for path in PACKAGE.rglob("*.py"):
        third_party = _top_level_imports(path) - stdlib - {"torch", "fxcut"}
        assert not third_party, (path.name, third_party)


def test_import_fxcut_does_not_import_inductor():
    code = "import sys, fxcut; print(sorted(m for m in sys.modules if m.startswith('torch._inductor')))"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PACKAGE.parent), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_the_c_extensions_stub_names_what_it_exports():
    """python/fxcut/_C.pyi (what type checkers read) against the module."""
    tree = ast.parse((PACKAGE / "_C.pyi").read_text())
    stubbed = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            stubbed.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            stubbed.add(node.target.id)
    exported = {name for name in dir(fxcut._C) if not name.startswith("_")}
    assert stubbed == exported, (sorted(exported - stubbed), sorted(stubbed - exported))
    for name in stubbed & exported:
        value = getattr(fxcut._C, name)
        kind = next(type(n).__name__ for n in tree.body if getattr(n, "name", None) == name
                    or getattr(getattr(n, "target", None), "id", None) == name)
        expected = {"ClassDef": isinstance(value, type), "FunctionDef": callable(value) and not isinstance(value, type),
                    "AnnAssign": isinstance(value, (int, tuple))}[kind]
        assert expected, name


#: Each function of fxcut's C extension and its one Python owner: core.py is
#: the bridge to the core's decision, the ZeRO-3 walk, the memory model and
#: the plan's search; knapsack.py and maxflow.py wrap their solver;
#: prepare.py plans dead-code elimination and CSE through ``prepare_plan``;
#: lower.py reads the nodes through ``lower_read`` and, on its Python path,
#: asks the reader's placeholder rule; ops.py owns the partitioner tags'
#: rule (``tag_flags``: torch's _must_be_in_forward and _must_be_in_backward,
#: one copy, in C).  Any module may read the extension's constants and classes.
C_FUNCTION_OWNERS: dict[str, str] = {
    "aggressive_options": "fxcut.solve.core", "budget_plan": "fxcut.solve.core",
    "memory_simulate": "fxcut.solve.core", "param_alias_walk": "fxcut.solve.core",
    "partition_decide": "fxcut.solve.core", "plan_frontier": "fxcut.solve.core", "plan_simulate": "fxcut.solve.core",
    "knapsack": "fxcut.solve.knapsack", "min_cut": "fxcut.solve.maxflow",
    "prepare_plan": "fxcut.torchrules.prepare", "lower_read": "fxcut.torchrules.lower",
    "placeholder_role": "fxcut.torchrules.lower", "partitioner_tag_flags": "fxcut.torchrules.ops",
}


def _c_functions() -> set[str]:
    import builtins
    import types

    return {name for name in dir(fxcut._C) if not name.startswith("__")
            and isinstance(getattr(fxcut._C, name), (types.BuiltinFunctionType, types.FunctionType))
            and not hasattr(builtins, name)}


def _c_function_references(name: str, path: Path, functions: set[str]) -> set[str]:
    """The functions of ``fxcut._C`` that module ``name`` refers to: as an
    attribute of a name bound to the extension (``from . import _C``,
    ``from .. import _C as C``, ``import fxcut._C as C``), a name imported
    from it (``from ._C import f``), or ``fxcut._C.f``."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    bound: set[str] = set()
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                target = ".".join(base[: len(base) - node.level + 1] + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                if target == "fxcut" and alias.name == "_C":
                    bound.add(alias.asname or "_C")
                elif target == "fxcut._C" and alias.name in functions:
                    found.add(alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "fxcut._C" and alias.asname:
                    bound.add(alias.asname)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in functions:
            owner = node.value
            if isinstance(owner, ast.Name) and owner.id in bound:
                found.add(node.attr)
            elif (isinstance(owner, ast.Attribute) and owner.attr == "_C"
                  and isinstance(owner.value, ast.Name) and owner.value.id == "fxcut"):
                found.add(node.attr)
    return found


def test_the_reference_walk_finds_c_function_references():
    functions = _c_functions()
    assert {"partition_decide", "budget_plan", "param_alias_walk", "knapsack", "min_cut"} <= functions
    assert "InfiniteCutError" not in functions and "KIND_PLACEHOLDER" not in functions
    core = _c_function_references("fxcut.solve.core", PACKAGE / "solve" / "core.py", functions)
    assert {"partition_decide", "budget_plan", "param_alias_walk"} <= core


def test_each_c_function_has_one_python_owner(tmp_path):
    """Every function of fxcut._C that the package calls is called from
    exactly one module, its owner in :data:`C_FUNCTION_OWNERS`; the others
    go through that owner's Python API."""
    functions = _c_functions()
    users: dict[str, set[str]] = {}
    for name, path in _modules().items():
        for f in _c_function_references(name, path, functions):
            users.setdefault(f, set()).add(name)
    assert {f: sorted(u) for f, u in users.items() if u != {C_FUNCTION_OWNERS.get(f)}} == {}
    # The walk catches each way of reaching the extension (a module of its own, checked alike).
    probe = tmp_path / "probe.py"
    probe.write_text("from . import _C as C\nfrom ._C import budget_plan\nimport fxcut._C\n"
                     "C.partition_decide\nfxcut._C.param_alias_walk\nC.KIND_PLACEHOLDER\n")
    assert _c_function_references("fxcut.probe", probe, functions) == {
        "partition_decide", "budget_plan", "param_alias_walk"}


def test_no_module_reaches_into_cores_private_names():
    """``fxcut.solve.core`` is the bridge to the C core: the others use its
    public names only."""
    modules = _modules()
    offenders = {}
    for name, path in modules.items():
        if name == "fxcut.solve.core":
            continue
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text())
        private = set()
        core_aliases = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = package.split(".")
                target = ".".join(base[: len(base) - node.level + 1] + ([node.module] if node.module else [])) \
                    if node.level else (node.module or "")
                for alias in node.names:
                    if target == "fxcut.solve.core" and alias.name.startswith("_"):
                        private.add(alias.name)
                    if target == "fxcut.solve" and alias.name == "core":
                        core_aliases.add(alias.asname or "core")
        private |= {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)
                    and isinstance(node.value, ast.Name) and node.value.id in core_aliases
                    and node.attr.startswith("_")}
        if private:
            offenders[name] = sorted(private)
    assert offenders == {}
