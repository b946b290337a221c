"""Ask inductor what it would run: the buffers, kernel order and memory of
one forward or backward module, without compiling a kernel.

fxcut's inductor memory model (:mod:`fxcut.solve.memory`, ``csrc/memory_fused.c``)
is an approximation fast enough for a search over thousands of decisions.
This module is its reference: it hands a module to inductor's own passes on
fake tensors -- the post-grad passes, ``GraphLowering`` (which decides what
becomes a buffer), the ``Scheduler`` (fusion, ``reorder_for_peak_memory``)
and the Python wrapper's code generation (buffer reuse, in-place updates,
frees) -- and reads what they produce.  Nothing is compiled: the C++ kernels
are generated as text and never built.

Two answers, both inductor's own:

- :attr:`InductorMemory.scheduler_peak`: ``torch._inductor.memory.estimate_peak_memory``
  over the scheduler's final node order (what ``reorder_for_peak_memory``
  minimises; it allocates every buffer at its kernel and frees it after its
  last reader, with no in-place reuse).
- :attr:`InductorMemory.wrapper_peak` and :attr:`InductorMemory.live_bytes`:
  the allocations and frees the generated wrapper performs, read from its
  ``call`` body (``empty_strided_*``, ``del``, ``# reuse``, ``# alias``,
  extern kernels that allocate their outputs).  This is what runs: on the
  zoo it equals the torch profiler's measured peak of a compiled step to
  within the 8 bytes of the loss and its gradient seed (docs/memory_model.md).

Both count activation bytes as fxcut's models do: graph inputs that are
parameters, primals or tangents (``primals_*``, ``tangents_*``) are not
counted; a backward's saved values are (live from the start, freed after
their last use: the wrapper clears its argument list).  A backward's
donated buffers (saved values no forward input, user output or gradient
aliases, AOT Autograd's ``bw_donated_idxs``) are passed to inductor as AOT
Autograd passes them, so in-place updates into them happen as they do in a
real step.

The cost is inductor's: seconds per module (the lowering and the kernels'
source), so this is for validation, tests and benchmarks, not for a search.
"""

from __future__ import annotations

import ast
import contextlib
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx
from torch.multiprocessing.reductions import StorageWeakRef

from .snapshot import copy_graph_module


class WrapperNotUnderstood(RuntimeError):
    """A line of the generated wrapper that touches a buffer in a way this
    reader does not know (a newer inductor's code generation)."""


@dataclass(frozen=True)
class InductorBuffer:
    """One buffer inductor's scheduler made: its name, bytes, the fx node it
    was made for (its ``origin_node``, or None) and every fx node inlined
    into it (``origins``)."""

    name: str
    nbytes: int
    origin: str | None
    origins: tuple[str, ...]
    kind: str  # the IR node's class name, e.g. ComputedBuffer, ExternKernelOut


@dataclass
class InductorMemory:
    """What inductor made of one module (see the module docstring)."""

    #: scheduler buffers, in the scheduler's final kernel order
    buffers: list[InductorBuffer]
    #: the scheduler's final order: per kernel, the names of its buffers
    kernels: list[tuple[str, ...]]
    scheduler_peak: int
    wrapper_peak: int
    #: live bytes after every allocation and free of the wrapper, in order
    live_bytes: list[int] = field(default_factory=list)
    #: bytes live when the module returns (its outputs, held values)
    end_bytes: int = 0
    wrapper_code: str = ""


def _val(n: Any) -> Any:
    return n.meta.get("val") if isinstance(n, fx.Node) else None


def _storage(v: Any) -> StorageWeakRef | None:
    if not isinstance(v, torch.Tensor):
        return None
    try:
        return StorageWeakRef(v.untyped_storage())  # type: ignore[no-untyped-call]
    except (NotImplementedError, RuntimeError):
        return None


def _outputs(gm: fx.GraphModule) -> list[Any]:
    (out,) = gm.graph.find_nodes(op="output")
    args = out.args[0]
    return list(args) if isinstance(args, (list, tuple)) else [args]


def _not_counted(name: str) -> bool:
    # inductor's own test for inputs that are not activations (torch._inductor.utils.is_nonfreeable_buffers)
    return name.startswith(("primals", "tangents", "arg", "fwd_rng_state", "bwd_rng_state"))


def donated_indices(fw_module: fx.GraphModule, bw_module: fx.GraphModule) -> list[int]:
    """The backward placeholders AOT Autograd donates to inductor: saved
    tensors whose storage no forward input, user forward output or gradient
    shares (AOT Autograd's ``collect_bw_donated_buffer_idxs``, fxcut's copy:
    placeholder positions in ``bw_module``)."""
    bw_inputs = list(bw_module.graph.find_nodes(op="placeholder"))
    n_tangents = sum(1 for n in bw_inputs if n.name.startswith("tangents"))
    n_saved = len(bw_inputs) - n_tangents
    fw_outs = _outputs(fw_module)
    user_outs = fw_outs[: len(fw_outs) - n_saved]
    taken: set[StorageWeakRef] = set()
    for v in [*(_val(n) for n in fw_module.graph.find_nodes(op="placeholder")),
              *(_val(o) for o in user_outs), *(_val(o) for o in _outputs(bw_module))]:
        ref = _storage(v)
        if ref is not None:
            taken.add(ref)
    out = []
    for k, n in enumerate(bw_inputs):
        ref = _storage(_val(n))
        if not n.name.startswith("tangents") and ref is not None and ref not in taken:
            out.append(k)
    return out


def ask_inductor(module: fx.GraphModule, *, is_backward: bool, donated: Sequence[int] | None = None,
                 wrapper: bool = True, scalar_kernels: bool = True) -> InductorMemory:
    """Inductor's lowering, scheduling and (``wrapper``) wrapper code of
    ``module`` (a forward or backward module a partition built; its
    placeholders' ``meta["val"]`` are fake tensors), read as an
    :class:`InductorMemory`.  ``donated``: the backward's donated
    placeholder positions (:func:`donated_indices`).  ``scalar_kernels``:
    generate the C++ kernels' scalar versions only (:func:`_scalar_cpu_kernels`;
    the same wrapper memory events, in less than half the time).  ``module``
    is not modified."""
    from torch._inductor.compile_fx import _recursive_post_grad_passes
    from torch._inductor.debug import DebugContext
    from torch._inductor.fx_passes.post_grad import view_to_reshape
    from torch._inductor.graph import GraphLowering
    from torch._inductor.virtualized import V

    gm = copy_graph_module(module)
    inputs = [n.meta.get("val") for n in gm.graph.find_nodes(op="placeholder")]
    fakes = [v for v in inputs if isinstance(v, torch.Tensor)]
    if not fakes:
        raise ValueError("the module has no tensor input: nothing to lower")
    fake_mode = getattr(fakes[0], "fake_mode", None)
    if fake_mode is None:
        raise ValueError("the module's placeholders must carry fake tensors in meta['val']")
    with V.set_fake_mode(fake_mode), DebugContext():
        view_to_reshape(gm)  # type: ignore[no-untyped-call]  # unannotated in torch
        _recursive_post_grad_passes(gm, is_inference=False)
        graph = GraphLowering(gm, example_inputs=inputs, shape_env=fake_mode.shape_env, is_inference=False,
                              is_backward=is_backward)
        if is_backward and donated is not None:
            graph.bw_donated_idxs = list(donated)
        with V.set_graph_handler(graph):
            graph.run(*inputs)
            graph.init_wrapper_code()
            graph._update_scheduler()
            buffers, kernels, scheduler_peak = _read_scheduler(graph)
            sizes = _buffer_bytes(graph)
            code = ""
            if wrapper:
                wrapper_code: Any = graph.wrapper_code  # its methods are unannotated in torch
                wrapper_code.push_codegened_graph(graph)
                with _scalar_cpu_kernels() if scalar_kernels else contextlib.nullcontext():
                    graph.scheduler.codegen()
                generated = wrapper_code.generate(graph.is_inference)
                wrapper_code.pop_codegened_graph()
                code = generated[0].value
    result = InductorMemory(buffers, kernels, scheduler_peak, -1, wrapper_code=code)
    if wrapper:
        result.live_bytes, result.end_bytes = wrapper_events(code, module, sizes, size_hints(fake_mode.shape_env))
        result.wrapper_peak = max(result.live_bytes, default=0)
    return result


@contextlib.contextmanager
def _scalar_cpu_kernels() -> Iterator[None]:
    """Inductor's C++ code generation without its vectorized kernels.

    The wrapper's allocations, reuses and frees do not depend on them: the
    C++ backend generates a kernel's scalar version first, and the buffers
    that kernel keeps local (``removed_buffers``) come from it alone; the
    vectorized and tiled versions only add loop bodies.  Generating them was
    about 60% of an ask's time (cProfile on HF Llama's partitions); the
    wrappers' memory events are the same with and without (tests/
    test_inductor_model.py checks it).  The setting holds only while the
    ask generates code; the step's own compile is untouched."""
    from torch._inductor import config

    with config.patch({"cpp.simdlen": 1}):  # no vector ISA has 1 bit: scalar kernels only
        yield


def _read_scheduler(graph: Any) -> tuple[list[InductorBuffer], list[tuple[str, ...]], int]:
    from torch._inductor import memory
    from torch.utils._ordered_set import OrderedSet

    sched = graph.scheduler
    buffers: list[InductorBuffer] = []
    kernels: list[tuple[str, ...]] = []
    for node in sched.nodes:
        names = []
        for sub in node.get_nodes():
            for buf in sub.get_outputs():
                irn = buf.node
                origin = getattr(irn, "origin_node", None)
                mpi = getattr(buf, "mpi_buffer", None)
                size = int(mpi.size_alloc) if mpi is not None else 0
                buffers.append(InductorBuffer(buf.get_name(), size, origin.name if origin is not None else None,
                                              tuple(sorted(o.name for o in getattr(irn, "origins", ()))),
                                              type(irn).__name__))
                names.append(buf.get_name())
        kernels.append(tuple(names))
    inputs = OrderedSet(graph.graph_inputs.keys())
    freeable = memory.get_freeable_input_buf(sched.nodes, inputs)
    memory.assign_memory_planning_info_for_scheduler_buffers(sched.nodes, sched.name_to_buf)
    peak, _ = memory.estimate_peak_memory(sched.nodes, freeable, OrderedSet(graph.get_output_names()))
    return buffers, kernels, int(peak)


def _buffer_bytes(graph: Any) -> dict[str, int]:
    """The storage bytes of every buffer the lowering registered (0 for a
    tuple's layout: its items are buffers of their own)."""
    from torch._inductor import ir
    from torch._inductor.utils import get_dtype_size

    out: dict[str, int] = {}
    for name, buf in graph.name_to_buffer.items():
        layout = getattr(buf, "layout", None)
        if isinstance(layout, (ir.MultiOutputLayout, ir.NoneLayout)):
            out[name] = 0
            continue
        try:
            numel = graph.sizevars.optimization_hint(graph.get_allocation_storage_size(buf), fallback=0)
            out[name] = int(numel) * get_dtype_size(buf.get_dtype())
        except (AttributeError, NotImplementedError, TypeError):
            continue
    return out


# --------------------------------------------------------------------------- the wrapper's memory events

_ITEMSIZE = {f"torch.{name}": torch.empty((), dtype=getattr(torch, name)).element_size()
             for name in ("float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8",
                          "bool", "complex64", "complex128", "float8_e4m3fn", "float8_e5m2")
             if isinstance(getattr(torch, name, None), torch.dtype)}
_ALLOC = re.compile(r"^(\w+) = empty_strided_\w+\((\(.*?\)), (\(.*?\)), (torch\.\w+)\)$")
_REUSE = re.compile(r"^(\w+) = (?:reinterpret_tensor\((\w+),.*\)|(\w+)); del (\w+)  # reuse$")
_ALIAS = re.compile(r"^(\w+) = reinterpret_tensor\((\w+),.*\)  # alias$")
_ITEM = re.compile(r"^(\w+) = (\w+)\[(\d+)\]$")
#: a second name for a buffer (what a mutating kernel wrote into: ``buf35 = buf34``)
_RENAME = re.compile(r"^(\w+) = (\w+)$")
_DEL = re.compile(r"^del (.*)$")
_ASSIGN = re.compile(r"^(\w+) = (.*)$")


def size_hints(shape_env: Any) -> dict[str, int]:
    """The value each backed size symbol of ``shape_env`` had when the
    graph was traced (``s33`` -> 7), by the name inductor's wrapper prints;
    empty without a shape environment.  The generated code of a graph traced
    with dynamic shapes sizes its buffers by these symbols, and a step at
    the traced sizes allocates what they give (the memory models use the
    same hints)."""
    if shape_env is None:
        return {}
    # torch 2.13 renamed var_to_val (still there, deprecated) to backed_var_to_val
    table = getattr(shape_env, "backed_var_to_val", None)
    if table is None:
        table = getattr(shape_env, "var_to_val", None) or {}
    hints: dict[str, int] = {}
    for sym, val in table.items():
        try:
            hints[str(sym)] = int(val)
        except (TypeError, ValueError):
            continue
    return hints


_BINARY: dict[type[ast.operator], Callable[[int, int], int]] = {
    ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
    ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b}


def _size_value(node: ast.expr, hints: Mapping[str, int], line: str) -> int:
    """One size or stride the wrapper prints: an integer, a symbol, or
    integer arithmetic over them (``2*s33``, ``(-1) + s0``, ``max(1, s0)``,
    inductor's ceiling division ``-((-s0) // 2)``)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in hints:
            raise WrapperNotUnderstood(f"a size of symbol {node.id!r}, which has no traced value (an unbacked "
                                       f"size), in: {line}")
        return hints[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _size_value(node.operand, hints, line)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        a, b = _size_value(node.left, hints, line), _size_value(node.right, hints, line)
        if isinstance(node.op, (ast.FloorDiv, ast.Mod)) and b == 0:
            raise WrapperNotUnderstood(f"a size divided by zero in: {line}")
        return _BINARY[type(node.op)](a, b)
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("max", "min")
            and node.args and not node.keywords):
        values = [_size_value(a, hints, line) for a in node.args]
        return max(values) if node.func.id == "max" else min(values)
    raise WrapperNotUnderstood(f"a size this reader does not evaluate ({ast.unparse(node)}) in: {line}")


def _size_tuple(text: str, hints: Mapping[str, int], line: str) -> tuple[int, ...]:
    """A shape or stride tuple of an ``empty_strided_*`` call, evaluated
    with the traced value of each size symbol."""
    try:
        tree = ast.parse(text, mode="eval").body
    except SyntaxError:
        raise WrapperNotUnderstood(f"a size tuple this reader cannot parse in: {line}") from None
    if not isinstance(tree, ast.Tuple):
        raise WrapperNotUnderstood(f"a size that is not a tuple in: {line}")
    return tuple(_size_value(e, hints, line) for e in tree.elts)


def _storage_bytes(shape: Sequence[int], stride: Sequence[int], itemsize: int) -> int:
    if any(s == 0 for s in shape):
        return 0
    return (1 + sum((s - 1) * st for s, st in zip(shape, stride))) * itemsize


def _call_body(code: str) -> list[str]:
    lines = code.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip().startswith("def call(self, args)")
                     or line.strip().startswith("def call(args)"))
    except StopIteration:
        raise WrapperNotUnderstood("the wrapper has no call(args) function") from None
    indent = len(lines[start]) - len(lines[start].lstrip()) + 4
    body = []
    for line in lines[start + 1:]:
        if line.strip() and len(line) - len(line.lstrip()) < indent:
            break
        body.append(line.strip())
    return body


#: a storage the wrapper's names hold: an input's (its fake tensor's storage) or one the wrapper allocates
_StorageKey = StorageWeakRef | tuple[str, str, int]


class _WrapperWalk:
    """The state of one read of a wrapper's ``call``: which storage each name
    holds, which names hold each storage (a storage is freed when the last
    one lets go), and the live bytes after each allocation and free."""

    def __init__(self, known: dict[str, int], symbols: Mapping[str, int], items: dict[str, list[str]]) -> None:
        self.known = known
        self.symbols = symbols
        self.items = items  # an extern kernel's tuple -> the names its items get later
        self.owner: dict[str, _StorageKey] = {}      # a name in the wrapper -> its storage's key
        self.size: dict[_StorageKey, int] = {}       # a storage's key -> its bytes
        self.refs: dict[_StorageKey, set[str]] = {}  # a storage's key -> the names holding it
        self.held_items: dict[str, list[_StorageKey]] = {}  # a tuple's name -> the storages of its items
        self.item_key: dict[str, _StorageKey] = {}   # an item's name -> its storage, allocated by the kernel's call
        self.live = 0
        self.events: list[int] = []

    def inputs(self, module: fx.GraphModule) -> None:
        """The saved values, live from the start, once per storage (parameters and tangents not counted)."""
        for n in module.graph.find_nodes(op="placeholder"):
            v = n.meta.get("val")
            ref = _storage(v)
            if ref is None or _not_counted(n.name):
                continue
            self.owner[n.name] = ref
            if ref not in self.size:
                self.size[ref] = int(v.untyped_storage().nbytes())
                self.live += self.size[ref]
            self.refs.setdefault(ref, set()).add(n.name)
        self.events.append(self.live)

    def allocated_by_kernel(self, name: str, line: str) -> int:
        if name not in self.known:
            raise WrapperNotUnderstood(f"the size of {name!r}, allocated by an extern kernel, is unknown: {line}")
        return self.known[name]

    def hold(self, name: str, key: _StorageKey) -> None:
        self.owner[name] = key
        self.refs.setdefault(key, set()).add(name)

    def release(self, name: str, key: _StorageKey) -> None:
        self.refs[key].discard(name)
        if not self.refs[key]:
            self.live -= self.size[key]
            self.events.append(self.live)

    def drop(self, name: str) -> None:
        for key in self.held_items.pop(name, ()):
            self.release(name, key)
        owned = self.owner.pop(name, None)
        if owned is not None:
            self.release(name, owned)

    def new_storage(self, name: str, nbytes: int) -> _StorageKey:
        key = ("buffer", name, len(self.events))
        self.size[key] = nbytes
        self.refs[key] = set()
        self.live += nbytes
        self.events.append(self.live)
        return key

    def allocate(self, name: str, nbytes: int) -> None:
        self.hold(name, self.new_storage(name, nbytes))

    def read(self, line: str) -> None:
        """One line of ``call``; raises WrapperNotUnderstood for one it cannot
        account for (a guess would make the measured peak wrong silently)."""
        if not line or line.startswith(("#", "assert_", "args.clear()", "return ")) or "= args" in line:
            return
        if (m := _ALLOC.match(line)) is not None:
            dtype = m.group(4)
            if dtype not in _ITEMSIZE:
                raise WrapperNotUnderstood(f"unknown dtype {dtype} in: {line}")
            shape, stride = _size_tuple(m.group(2), self.symbols, line), _size_tuple(m.group(3), self.symbols, line)
            self.allocate(m.group(1), _storage_bytes(shape, stride, _ITEMSIZE[dtype]))
        elif (m := _REUSE.match(line)) is not None:
            new, old, dead = m.group(1), m.group(2) or m.group(3), m.group(4)
            if old in self.owner:
                self.hold(new, self.owner[old])
            if dead != new:
                self.drop(dead)
        elif (m := _ALIAS.match(line)) is not None:
            if m.group(2) in self.owner:
                self.hold(m.group(1), self.owner[m.group(2)])
        elif (m := _ASSIGN.match(line)) is not None and m.group(1) in self.symbols:
            return  # a size symbol bound from the arguments (``s33 = primals_3``, ``s0 = arg0_1.size(0)``)
        elif (m := _ITEM.match(line)) is not None:
            # an item of an extern kernel's tuple: allocated by the kernel's call, or here if that was not seen
            if m.group(1) in self.item_key:
                self.hold(m.group(1), self.item_key[m.group(1)])
            else:
                self.allocate(m.group(1), self.allocated_by_kernel(m.group(1), line))
        elif (m := _RENAME.match(line)) is not None:
            if m.group(2) in self.owner:
                self.hold(m.group(1), self.owner[m.group(2)])
        elif (m := _DEL.match(line)) is not None:
            for name in m.group(1).split(","):
                self.drop(name.strip())
        elif (m := _ASSIGN.match(line)) is not None:
            self.assignment(m.group(1), m.group(2), line)
        elif line.startswith(("cpp_fused", "triton_", "extern_kernels.", "torch.ops.", "aten.", "del ")):
            return  # a kernel call writing buffers already allocated
        elif re.match(r"^\w+\(", line) or line in ("pass",):
            return
        else:
            raise WrapperNotUnderstood(f"unknown line in the wrapper: {line}")

    def assignment(self, name: str, rhs: str, line: str) -> None:
        """``name = rhs`` of no simpler form: an extern kernel's call, which
        allocates its result unless it writes an ``out=`` buffer."""
        allocates = rhs.startswith(("torch.ops.", "extern_kernels.", "aten.")) and "out=" not in rhs
        if allocates and name in self.items:
            # an extern kernel that allocates a tuple: every item named later, allocated now, held by the tuple
            for item in self.items.pop(name):
                key = self.item_key[item] = self.new_storage(item, self.allocated_by_kernel(item, line))
                self.refs[key].add(name)
                self.held_items.setdefault(name, []).append(key)
        elif allocates:
            # an extern kernel that allocates its result
            self.allocate(name, self.allocated_by_kernel(name, line))
        elif rhs.startswith(("torch.ops.", "extern_kernels.")):
            return
        else:
            raise WrapperNotUnderstood(f"unknown assignment in the wrapper: {line}")


def wrapper_events(code: str, module: fx.GraphModule, buffer_bytes: dict[str, int] | None = None,
                   hints: Mapping[str, int] | None = None) -> tuple[list[int], int]:
    """The live activation bytes after each allocation and free the wrapper
    ``code`` (inductor's generated Python wrapper of ``module``) performs,
    and the bytes live at its return.  The module's placeholders say what
    each input holds: saved values are live from the start and share a
    storage where their fake tensors do; parameters and tangents are not
    counted.  Sizes of the wrapper's own allocations come from its
    ``empty_strided_*`` calls; an extern kernel that allocates its result
    (a fallback op, an item of its tuple) is sized by ``buffer_bytes``
    (the lowering's buffers by name: :func:`ask_inductor` passes them).
    ``hints``: the traced value of each size symbol (:func:`size_hints`),
    for a module traced with dynamic shapes, whose wrapper sizes buffers
    by them (``empty_strided_cpu((s33, 64), ...)``) and binds them from its
    arguments (``s33 = primals_3``)."""
    known = buffer_bytes or {}
    symbols = hints or {}
    body = _call_body(code)
    # an extern kernel returning a tuple allocates all its items while it runs (its inputs still alive);
    # the wrapper names them later, one by one (``buf69 = buf68[0]``), and the tuple holds them until deleted
    items: dict[str, list[str]] = {}
    for line in body:
        if (m := _ITEM.match(line)) is not None:
            items.setdefault(m.group(2), []).append(m.group(1))
    walk = _WrapperWalk(known, symbols, items)
    walk.inputs(module)
    for line in body:
        walk.read(line)
    return walk.events, walk.live


__all__ = ["InductorBuffer", "InductorMemory", "WrapperNotUnderstood", "ask_inductor", "donated_indices",
           "size_hints", "wrapper_events"]
