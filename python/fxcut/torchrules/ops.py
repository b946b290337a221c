"""Facts about operators, computed once per distinct target and cached.

A joint graph of 50,000 nodes has a few hundred distinct targets, so every
per-target question (is it a view, is it fusible, does it alias its input) is
answered here once and stamped into the graph array's ``flags`` by
:mod:`fxcut.route.lower`.  The partitioner's op lists are the installed torch's own
(``torch._functorch.partitioners.get_default_op_list``), so fxcut follows
torch wherever a release changes them.
"""

from __future__ import annotations

import functools
import operator
import threading
import types
import weakref
from collections.abc import Iterable
from typing import Any

import torch
import torch.fx as fx

import fxcut._C as _C

aten = torch.ops.aten
prims = torch.ops.prims

F_NO_COPY: int = _C.F_NO_COPY
F_CAST: int = _C.F_CAST
F_VIEW: int = _C.F_VIEW
F_FUSIBLE: int = _C.F_FUSIBLE
F_RECOMPUTABLE: int = _C.F_RECOMPUTABLE
F_RANDOM: int = _C.F_RANDOM
F_COMPUTE_INTENSIVE: int = _C.F_COMPUTE_INTENSIVE
F_NON_BUILTIN: int = _C.F_NON_BUILTIN
F_GETITEM: int = _C.F_GETITEM
F_IMPURE: int = _C.F_IMPURE
F_COLLECTIVE: int = _C.F_COLLECTIVE
F_CAT: int = _C.F_CAT
F_LIFT_FRESH: int = _C.F_LIFT_FRESH
F_WITH_EFFECTS: int = _C.F_WITH_EFFECTS

# Python-only target bits, above the 32 the graph array keeps.
_MUTABLE = 1 << 40  # the target's schema is mutable
_IMPURE = 1 << 41  # dead-code elimination keeps it (impure_random=False)
_IMPURE_RANDOM = 1 << 42  # likewise with impure_random=True
_HOP = 1 << 43  # a higher-order op: purity depends on the node's arguments
_SEEDED = 1 << 44  # draws from the random generator (see draws_random_numbers)


def _wait_allgather_op() -> Any | None:
    """DeepSpeed's ``torch.ops.dc.wait_allgather.default``, when registered."""
    try:
        return torch.ops.dc.wait_allgather.default
    except (AttributeError, RuntimeError):
        return None


def _returns_aliased_tensor(op: torch._ops.OpOverload) -> bool:
    try:
        schema = op._schema
    except (AttributeError, RuntimeError):
        return True  # DeepCompile counts every overload without a schema
    return any(
        isinstance(ret.type, torch.TensorType) and ret.alias_info is not None
        for ret in schema.returns
    )


@functools.cache
def _aten_no_copy_ops() -> frozenset[Any]:
    # The dispatcher's full list, not ``dir(torch.ops.aten)``: the latter only
    # holds packets already touched, which would make the set depend on import
    # order.  Any op that appears in a graph is in both.
    names = sorted(
        {
            qualified.split("::", 1)[1].split(".", 1)[0]
            for qualified in torch._C._dispatch_get_all_op_names()
            if qualified.startswith("aten::")
        }
    )
    found: set[Any] = set()
    for name in names:
        try:
            packet = getattr(aten, name)
        except (AttributeError, RuntimeError):
            continue
        for overload_name in packet.overloads():
            op = getattr(packet, overload_name)
            if _returns_aliased_tensor(op):
                found.add(op)
    return frozenset(found)


def get_no_copy_ops(extra: Iterable[Any] = ()) -> frozenset[Any]:
    """Ops whose output may alias an input, as DeepCompile defines them.

    Every ``torch.ops.aten`` overload with a Tensor-typed return that carries
    alias info (views and in-place ops; list returns such as ``split`` are not
    Tensor-typed), every overload without a schema, DeepSpeed's
    ``dc.wait_allgather`` when registered, and ``extra``.
    """
    ops = set(_aten_no_copy_ops())
    wait = _wait_allgather_op()
    if wait is not None:
        ops.add(wait)
    ops.update(extra)
    return frozenset(ops)


def is_cast_op(node: fx.Node) -> tuple[bool, torch.dtype | None]:
    """``(True, dtype)`` when ``node`` casts in DeepCompile's sense.

    Two forms count, both ``call_function``: ``prims.convert_element_type``
    (dtype is ``args[1]``) and ``aten._to_copy`` with exactly the keyword
    ``dtype``.  Everything else is ``(False, None)``.
    """
    if node.op != "call_function":
        return False, None
    if node.target is prims.convert_element_type.default:
        return True, node.args[1]  # type: ignore[return-value]
    if node.target is aten._to_copy.default and set(node.kwargs) == {"dtype"}:
        return True, node.kwargs["dtype"]  # type: ignore[return-value]
    return False, None


def aten_target(target: Any) -> Any:
    """The key torch's op lists use: the overload packet where there is one."""
    return getattr(target, "overloadpacket", target)


#: Entries the facts cache holds at most; past it the cache starts afresh.
MAX_CACHED_TARGETS = 1 << 14

#: Targets that live as long as the process (torch's op registry, builtins):
#: cached by a strong reference.
_PERMANENT_TARGETS: tuple[type, ...] = (
    torch._ops.OpOverload,
    torch._ops.OpOverloadPacket,
    torch._ops.HigherOrderOperator,
    types.BuiltinFunctionType,
)


class TargetFacts:
    """Per-target flag bits, computed on first sight and cached.

    One instance per (no-copy set, op lists) combination; the partitioner's
    op lists come from the installed torch.  Thread-safe: a racing insert
    writes the same value.

    The cache never keeps a user's target alive: torch's ops and builtins
    are held strongly (they live as long as the process), any other target
    weakly, its entry dropped when it dies; a target that cannot be weakly
    referenced is held, but the cache holds at most
    :data:`MAX_CACHED_TARGETS` entries (past that it starts afresh).
    """

    def __init__(self, no_copy_ops: frozenset[Any] | None = None) -> None:
        self._no_copy = no_copy_ops
        # Keyed by id(target): OpOverload hashes in Python, ints do not.  The
        # entry holds the target (or a weak reference to it) so that a reused
        # id is never mistaken for the target that had it.
        self._cache: dict[int, tuple[Any, int]] = {}
        self._lock = threading.Lock()

    @functools.cached_property
    def _op_lists(self) -> Any:
        from torch._functorch.partitioners import get_default_op_list

        return get_default_op_list()

    def impure(self, target: Any, impure_random: bool) -> bool:
        """torch's purity test for a call_function target (not a
        higher-order op, whose purity depends on its arguments)."""
        return bool(self.flags(target) & (_IMPURE_RANDOM if impure_random else _IMPURE))

    def seeded(self, target: Any) -> bool:
        """Whether the target draws from the random generator (cached; the
        per-node exceptions are :func:`draws_random_numbers`')."""
        return bool(self.flags(target) & _SEEDED)

    def flags(self, target: Any) -> int:
        """The target's flag bits, including the Python-only high bits
        (_MUTABLE, _IMPURE, _IMPURE_RANDOM, _HOP) that lowering masks off."""
        hit = self._cache.get(id(target))
        if hit is not None:
            held = hit[0]
            if held is target or (held.__class__ is weakref.ref and held() is target):
                return hit[1]
        bits = self._compute(target)
        self._remember(target, bits)
        return bits

    def _remember(self, target: Any, bits: int) -> None:
        key = id(target)
        cache, lock = self._cache, self._lock
        held: Any = target
        if not isinstance(target, _PERMANENT_TARGETS):
            def forget(ref: "weakref.ref[Any]", key: int = key) -> None:
                # No lock: this may run from the garbage collector while this
                # thread holds it.  A race costs at most a recomputation.
                entry = cache.get(key)
                if entry is not None and entry[0] is ref:
                    cache.pop(key, None)

            try:
                held = weakref.ref(target, forget)
            except TypeError:  # not weakly referenceable: held, within the bound
                pass
        with lock:
            if len(cache) >= MAX_CACHED_TARGETS:
                cache.clear()
            cache[key] = (held, bits)

    def _compute(self, target: Any) -> int:
        bits = 0
        if self._no_copy is not None:
            try:
                if target in self._no_copy:
                    bits |= F_NO_COPY
            except TypeError:
                pass
        lists = self._op_lists
        key = aten_target(target)
        try:
            if key in lists.view_ops:
                bits |= F_VIEW
            if key in lists.fusible_ops:
                bits |= F_FUSIBLE
            if key in lists.recomputable_ops:
                bits |= F_RECOMPUTABLE
            if key in lists.random_ops:
                bits |= F_RANDOM
            if key in lists.compute_intensive_ops:
                bits |= F_COMPUTE_INTENSIVE
        except TypeError:
            pass
        if target is operator.getitem:
            bits |= F_GETITEM
        if key == aten.cat:
            bits |= F_CAT
        if target in (aten.lift_fresh_copy.default, aten.lift_fresh.default):
            bits |= F_LIFT_FRESH
        if target is torch.ops.higher_order.with_effects:
            # An invoke_subgraph is effectful only when its subgraph is
            # (a per-node fact: see :func:`invoke_subgraph_has_effects`).
            bits |= F_WITH_EFFECTS
        if target in mutable_hop_targets():
            bits |= _C.F_MUTABLE_HOP
        if isinstance(target, torch._ops.OpOverload):
            from torch._library.utils import is_builtin

            if target.namespace == "_c10d_functional":
                bits |= F_COLLECTIVE
            if not is_builtin(target):
                bits |= F_NON_BUILTIN
            if is_mutable_op(target):
                bits |= _MUTABLE
        if target is triton_wrapper_op():
            bits |= F_NON_BUILTIN
        if (isinstance(target, torch._ops.OpOverload) and torch.Tag.nondeterministic_seeded in target.tags
                or target is _run_and_save_rng_state()):
            bits |= _SEEDED
        if isinstance(target, torch._ops.HigherOrderOperator):
            bits |= _HOP
        else:
            from torch._library.utils import is_impure as torch_is_impure

            try:
                if torch_is_impure(target, impure_random=False):
                    bits |= _IMPURE
                if torch_is_impure(target, impure_random=True):
                    bits |= _IMPURE_RANDOM
            except Exception:  # an exotic callable torch cannot classify: keep it
                bits |= _IMPURE | _IMPURE_RANDOM
        return bits


@functools.cache
def default_facts() -> TargetFacts:
    """The facts the partitioner uses (no-copy set unused there)."""
    return TargetFacts()


@functools.cache
def zero3_facts() -> TargetFacts:
    """The facts the ZeRO-3 walk uses, with DeepCompile's no-copy set."""
    return TargetFacts(get_no_copy_ops())


def triton_wrapper_op() -> Any | None:
    """``torch.ops.higher_order.triton_kernel_wrapper_functional`` (a user
    triton kernel, functionalized), or None where this torch has not
    registered it: the one place fxcut looks it up."""
    return getattr(torch.ops.higher_order, "triton_kernel_wrapper_functional", None)


def _run_and_save_rng_state() -> Any | None:
    """``torch.ops.higher_order.run_and_save_rng_state`` (runs an op on the
    live generator and returns its state), or None where absent."""
    return getattr(torch.ops.higher_order, "run_and_save_rng_state", None)


def auto_functionalized_op() -> Any | None:
    """``torch.ops.higher_order.auto_functionalized``, or None."""
    return getattr(torch.ops.higher_order, "auto_functionalized", None)


def mutable_hop_targets() -> tuple[Any, ...]:
    """The functionalized mutable higher-order ops (auto_functionalized, a
    user triton kernel) this torch has: the inputs they mutate may fuse into
    them (:func:`mutated_inputs`)."""
    return tuple(op for op in (auto_functionalized_op(), triton_wrapper_op()) if op is not None)


def is_mutable_op(target: Any) -> bool:
    """torch's ``_is_mutable``: an op overload whose schema is mutable."""
    return isinstance(target, torch._ops.OpOverload) and bool(target._schema.is_mutable)


def tag_flags(tag: object, mutable: bool) -> int:
    """The flag bits a node's ``meta["partitioner_tag"]`` (None: none) gives
    it, its target mutable or not (:func:`is_mutable_op`): torch's two
    placement rules, ``_must_be_in_forward`` (``F_MUST_BE_IN_FW``) and
    ``_must_be_in_backward`` (``F_MUST_BE_IN_BW``), and the ``is_backward``
    tag.  The rules' one home is the C reader (csrc/py_lower.c); this is
    their one Python door."""
    bits: int = _C.partitioner_tag_flags(tag, mutable)
    return bits


def dce_impure_random() -> bool:
    """``impure_random`` as torch's dead-code elimination reads it at call
    time: inductor's ``fallback_random`` while inductor compiles (a tracing
    context exists), else True."""
    if torch._guards.TracingContext.try_get():
        # Inductor is compiling (so loaded) whenever a tracing context exists.
        import torch._inductor.config as inductor_config

        return bool(inductor_config.fallback_random)
    return True


def invoke_subgraph_has_effects(node: fx.Node) -> bool:
    """Whether torch takes this ``invoke_subgraph`` node as effectful (its
    getitems then forced saved): only while tracing, when the compile's
    invoke_subgraph cache records effects for the node's subgraph, as
    torch's ``is_with_effects`` decides it."""
    if torch._guards.TracingContext.try_get() is None:
        return False
    from torch._functorch._aot_autograd.utils import is_with_effects

    return bool(is_with_effects(node))



def mutated_inputs(node: fx.Node) -> list[fx.Node]:
    """The inputs a functionalized mutable op (auto_functionalized, a user
    triton kernel) mutates: torch lets those fuse into the op."""
    found: list[fx.Node] = []
    if node.target is auto_functionalized_op():
        from torch._higher_order_ops.auto_functionalize import get_mutable_args

        names, _ = get_mutable_args(node.args[0])  # type: ignore[arg-type]
        for name in names:
            arg = node.kwargs[name]
            if isinstance(arg, fx.Node):
                found.append(arg)
            elif isinstance(arg, list):
                found.extend(a for a in arg if isinstance(a, fx.Node))
    elif node.target is triton_wrapper_op():
        kwargs: Any = node.kwargs["kwargs"]
        cloned: list[str] = node.kwargs["tensors_to_clone"]  # type: ignore[assignment]  # a list of names
        for name in cloned:
            arg = kwargs[name]
            if isinstance(arg, fx.Node):
                found.append(arg)
    return found


def is_rng_node(node: fx.Node, zero_dropout_sdpa_is_rng: bool) -> bool:
    """Whether a recomputed ``node`` needs its RNG state threaded through
    (torch's RNG functionalization): a ``nondeterministic_seeded`` op -- but,
    when ``zero_dropout_sdpa_is_rng`` is false (torch 2.14 on), not an op with
    a ``dropout_p`` argument that is statically 0 (SDPA without dropout)."""
    target = node.target
    if torch.Tag.nondeterministic_seeded not in getattr(target, "tags", ()):
        return False
    return zero_dropout_sdpa_is_rng or not has_zero_dropout(node)


def has_zero_dropout(node: fx.Node) -> bool:
    """Whether ``node`` is an op with a ``dropout_p`` argument (the SDPA
    family) whose value is statically 0: such an op draws no random number."""
    target = node.target
    if not isinstance(target, torch._ops.OpOverload):
        return False
    schema_args = target._schema.arguments
    pos = next((k for k, a in enumerate(schema_args) if a.name == "dropout_p"), None)
    if pos is None:
        return False
    if len(node.args) > pos:
        p = node.args[pos]
    elif "dropout_p" in node.kwargs:
        p = node.kwargs["dropout_p"]
    elif schema_args[pos].default_value is not None:
        p = schema_args[pos].default_value
    else:
        return False
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    return bool(statically_known_true(p == 0.0))  # type: ignore[arg-type]  # p: a float or SymFloat, never a Tensor


def _replays_rng(target: Any) -> bool:
    """An op tagged ``nondeterministic_seeded`` whose numbers are a function
    of its arguments: ``rngprims.philox_rand`` takes the seed and offset it
    draws from (torch's functionalized RNG), so running it again replays it."""
    philox = getattr(getattr(torch.ops, "rngprims", None), "philox_rand", None)
    return philox is not None and target in (philox, getattr(philox, "default", None))


def draws_random_numbers(node: fx.Node, facts: TargetFacts | None = None) -> bool:
    """Whether running ``node`` a second time would draw different numbers
    from the generator than its first run: every op torch tags
    ``nondeterministic_seeded`` (the random factories and their ``_like``
    forms, ``bernoulli``, ``normal``, ``multinomial``, the in-place samplers,
    dropout, inductor's ``inductor_seeds``, ...) and the higher-order op
    that runs one on the live generator (``run_and_save_rng_state``) --
    except an SDPA-family op whose ``dropout_p`` is statically 0, and an op
    whose seed and offset are its arguments (``philox_rand``), which
    replay.  A value such a node computes must be saved for the backward,
    not recomputed, unless its RNG state is replayed (torch's RNG
    functionalization of ``MUST_RECOMPUTE``-tagged nodes does that).

    This is fxcut's rule for what a plan may recompute, not torch's random
    ban (``F_RANDOM``: torch's short ``random_ops`` list, which the default
    decision follows)."""
    if node.op != "call_function":
        return False
    bits = (facts or default_facts()).flags(node.target)
    if not bits & _SEEDED:
        return False
    return not has_zero_dropout(node) and not _replays_rng(node.target)


def is_impure(node: fx.Node, facts: TargetFacts, impure_random: bool) -> bool:
    """Whether dead-code elimination keeps ``node`` (a call_function)."""
    target = node.target
    bits = facts.flags(target)
    if bits & _HOP:
        from torch._library.utils import is_impure as torch_is_impure

        assert not isinstance(target, str)  # a higher-order op's target is the op
        return bool(
            torch_is_impure(target, args=node.args, kwargs=node.kwargs, impure_random=impure_random)
        )
    return bool(bits & (_IMPURE_RANDOM if impure_random else _IMPURE))


def tensor_nbytes(val: torch.Tensor) -> int:
    """Bytes of a tensor value as torch's partitioner sizes it (a symbolic
    element count by its hint)."""
    numel = val.numel()
    if type(numel) is not int:
        # Loaded already wherever a symbolic size exists; not worth its 0.8 s in ``import fxcut``.
        from torch.fx.experimental.symbolic_shapes import optimization_hint

        numel = optimization_hint(numel, fallback=4096)
    return int(numel) * val.dtype.itemsize


def object_nbytes(x: object) -> int:
    return tensor_nbytes(x) if isinstance(x, torch.Tensor) else 0


def value_nbytes(node: fx.Node) -> int:
    """Bytes of the value a node holds (0 for non-tensors, as torch's
    partitioner sizes symbolic values at 1 byte)."""
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor):
        return tensor_nbytes(val)
    if isinstance(val, (list, tuple)):
        return sum(object_nbytes(x) for x in val)
    return 1 if isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool)) else 0
