"""Lowering: a ``torch.fx.Graph`` to fxcut's compact graph array, in one pass.

Node index = position in ``graph.nodes``.  Per-target facts come from the
:class:`fxcut.torchrules.ops.TargetFacts` cache; only per-node facts (placeholder role,
the value in ``meta["val"]``, the recompute tag, sizes) are computed here,
then the side arrays the decision reads of torch's rules: the values the
cut must save (:func:`force_saved`) and the pairs it must keep together
(:func:`fuse_pairs`).  The result is a :class:`LoweredGraph`: the solvers'
:class:`~fxcut.solve.arrays.GraphArrays` with the fx nodes kept beside it
for the layers above.  Lowering reads the graph and never writes to it.
"""

from __future__ import annotations

import time
from array import array
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, overload

import torch
import torch.fx as fx
import torch.utils._pytree as pytree
from torch._library.fake_class_registry import FakeScriptObject
from torch.fx.experimental._backward_state import BackwardState
from torch.fx.experimental.proxy_tensor import py_sym_types
from torch.fx.immutable_collections import immutable_list
from torch.utils.checkpoint import CheckpointPolicy

import fxcut._C as _C
from ..solve.arrays import KIND_OF_OP, POLICY_NAMES, GraphArrays
from .ops import (_HOP, _IMPURE, _IMPURE_RANDOM, _MUTABLE, TargetFacts, dce_impure_random, default_facts,
                  invoke_subgraph_has_effects, is_cast_op, is_impure, mutated_inputs, object_nbytes, tag_flags,
                  tensor_nbytes, triton_wrapper_op)
from .gate import NODE_READERS, BadInput, gated
from .versions import Rules

if TYPE_CHECKING:
    from .prepare import Preparation


_FLAGS_MASK = (1 << 32) - 1
_F_IMPURE = _C.F_IMPURE
_F_BW_HOOK = _C.F_BW_HOOK
_F_GETITEM = _C.F_GETITEM
_F_NO_FUSE_OUT = _C.F_NO_FUSE_OUT
_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
_INT64_MAX = (1 << 63) - 1
_SIZE_UNKNOWN = _C.SIZE_UNKNOWN


class LoweringError(BadInput):
    """A node cannot be lowered; the message names it (a ValueError)."""


#: torch's ``CheckpointPolicy`` -> the graph array's ``tag`` code (the policies the core knows:
#: :data:`fxcut.solve.arrays.POLICY_NAMES`; a node tagged with another is a gap).
TAG_OF_POLICY: dict[Any, int] = {policy: getattr(_C, f"TAG_{policy.name}") for policy in CheckpointPolicy
                                 if policy.name in POLICY_NAMES}


class _NodeNames(Sequence[str]):
    """The names of ``nodes``, read when asked (lowering does not pay for them)."""

    def __init__(self, nodes: list[fx.Node]) -> None:
        self._nodes = nodes

    def __len__(self) -> int:
        return len(self._nodes)

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> list[str]: ...
    def __getitem__(self, i: int | slice) -> str | list[str]:
        if isinstance(i, slice):
            return [n.name for n in self._nodes[i]]
        return str(self._nodes[i].name)


@dataclass(kw_only=True)
class LoweredGraph(GraphArrays):
    """The graph array of an fx graph, with its nodes: ``nodes[i]`` is node
    ``i`` (the graph's nodes in order, those dead-code elimination will
    remove left out), ``index`` its inverse.  The solvers read it as a
    :class:`~fxcut.solve.arrays.GraphArrays`; the layers above map their
    answers (node indices) back to nodes through it."""

    nodes: list[fx.Node]
    index: dict[fx.Node, int]

    def target(self, i: int) -> str:
        return str(self.nodes[i].target)

    def handles(self, indices: Sequence[int]) -> list[object]:
        return [self.nodes[i] for i in indices]

    def nodes_at(self, indices: Iterable[int]) -> list[fx.Node]:
        """The nodes at ``indices``, in that order."""
        nodes = self.nodes
        return [nodes[i] for i in indices]

    def why_unsaveable(self, i: int) -> str | None:
        """As the partitioner sees ``meta["val"]``: why node ``i``'s value
        can never be saved, or None when it can be."""
        bits = self.flags[i]
        if not bits & _C.F_NON_TENSOR or bits & (_C.F_SYM | _C.F_FREE_OBJECT):
            return None
        meta = self.nodes[i].meta
        if "val" not in meta:
            return "no meta['val']: cannot be saved"
        val = meta["val"]
        if isinstance(val, (list, tuple)):
            return f"its value is a {type(val).__name__}: cannot be saved"
        return f"meta['val'] is {type(val).__name__} {val!r:.40}, not a tensor: cannot be saved"


def _lowered(nodes: list[fx.Node], index: dict[fx.Node, int], arrays: Sequence[array[int]]) -> LoweredGraph:
    kind, flags, tag, ac_graph_id, nbytes, arg_ptr, arg_idx, in_ptr, in_idx, outputs = arrays
    return LoweredGraph(kind=kind, flags=flags, tag=tag, ac_graph_id=ac_graph_id, nbytes=nbytes, arg_ptr=arg_ptr,
                        arg_idx=arg_idx, in_ptr=in_ptr, in_idx=in_idx, outputs=outputs, names=_NodeNames(nodes),
                        nodes=nodes, index=index)


def placeholder_flags(node: fx.Node) -> int:
    """A placeholder's role flag (primal, tangent, forward or backward seed)."""
    # The rule is the C reader's (csrc/py_lower.c): one copy.
    return _C.placeholder_role(str(node.target))


def _recompute_tag(node: fx.Node) -> int:
    policy = node.meta.get("recompute")
    if policy is None:
        return _C.TAG_NONE
    try:
        return TAG_OF_POLICY[policy]
    except (KeyError, TypeError):
        if isinstance(policy, CheckpointPolicy):  # a policy of a newer torch: a gap, not bad input
            raise NotImplementedError(f"node {node.name!r} is tagged {policy.name}, a checkpoint policy fxcut "
                                      "does not model") from None
        raise LoweringError(
            f"node {node.name!r}: meta['recompute'] = {policy!r} is not a "
            f"torch.utils.checkpoint.CheckpointPolicy"
        ) from None


def _ac_graph_id(node: fx.Node) -> tuple[int, int]:
    """(value, flag) for meta['ac_graph_id']."""
    if "ac_graph_id" not in node.meta:
        return 0, 0
    value = node.meta["ac_graph_id"]
    if not isinstance(value, int) or isinstance(value, bool) or not _INT32_MIN <= value <= _INT32_MAX:
        raise LoweringError(
            f"node {node.name!r}: meta['ac_graph_id'] = {value!r} is not a 32-bit integer"
        )
    return value, _C.F_HAS_AC_ID


def lower_structure(graph: fx.Graph, facts: TargetFacts, *, with_inputs: bool = True) -> LoweredGraph:
    """The structure of ``graph``: kinds, target flags, casts, the CSR of
    positional args and (``with_inputs``) the CSR of all inputs.  Tags,
    ac_graph_id and sizes are left empty: the ZeRO-3 walk reads no meta and
    no input beyond the positional args, so it skips both."""
    return _lower(graph, facts, value_facts=None, with_meta=False, with_inputs=with_inputs)


def _lower(
    graph: fx.Graph,
    facts: TargetFacts,
    value_facts: Any,
    with_meta: bool,
    with_inputs: bool = True,
    removed: set[fx.Node] | None = None,
    replace: dict[fx.Node, fx.Node] | None = None,
    edges: bool = True,
    use_c: bool = True,
) -> LoweredGraph:
    """One pass over ``graph.nodes``.  ``removed`` nodes are left out and
    every use of a ``replace`` key is lowered as a use of its value: the
    graph as dead-code elimination and CSE will leave it (fxcut.torchrules.prepare).
    ``use_c``: read the nodes through the C reader (``_C.lower_read``) when
    lowering for the partition; False, or a graph the reader leaves, takes
    the Python path (the same arrays)."""
    if not isinstance(graph, fx.Graph):
        raise TypeError(f"expected a torch.fx.Graph, got {type(graph).__name__}")
    nodes = [n for n in graph.nodes if n not in removed] if removed else list(graph.nodes)
    if use_c and with_meta and edges and value_facts is not None and (with_inputs or replace):
        read = _read_in_c(nodes, facts, value_facts, replace)
        if read is not None:
            return read
    if replace:
        return _lower_replaced(nodes, facts, value_facts, with_meta, replace)
    return _lower_nodes(nodes, facts, value_facts, with_meta, with_inputs, edges)


def _lower_nodes(
    nodes: list[fx.Node], facts: TargetFacts, value_facts: Any, with_meta: bool, with_inputs: bool, edges: bool
) -> LoweredGraph:
    index = {node: i for i, node in enumerate(nodes)}
    n = len(nodes)
    kind = array("B", bytes(n))
    flags = array("I", [0]) * n
    tag = array("b", [_C.TAG_NONE]) * n
    ac_graph_id = array("i", [0]) * n
    nbytes = array("q", [0]) * n
    arg_ptr = array("i", [0]) * (n + 1)
    in_ptr = array("i", [0]) * (n + 1)
    arg_idx = array("i")
    in_idx = array("i")
    outputs = array("i")
    node_cls = fx.Node
    arg_append = arg_idx.append
    in_append = in_idx.append
    kind_of_op = KIND_OF_OP
    node_facts = _NodeFacts(facts, value_facts, with_meta)

    for i, node in enumerate(nodes):
        op = node.op
        kind[i] = kind_of_op[op]
        flags[i], nbytes[i], tag[i], ac_graph_id[i] = node_facts(node)

        if not edges:
            continue
        try:
            for a in node.args:
                if a.__class__ is node_cls:
                    arg_append(index[a])
            if with_inputs:
                for a in node._input_nodes:
                    in_append(index[a])
        except KeyError as e:
            raise LoweringError(
                f"node {node.name!r} uses {e.args[0].name!r}, which is not in this graph"
            ) from None
        arg_ptr[i + 1] = len(arg_idx)
        in_ptr[i + 1] = len(in_idx)
        if op == "output":
            outputs.extend(index[a] if a.__class__ is node_cls else -1 for a in _output_leaves(node))

    return _lowered(nodes, index, (kind, flags, tag, ac_graph_id, nbytes, arg_ptr, arg_idx, in_ptr, in_idx, outputs))


@dataclass(frozen=True, slots=True, kw_only=True)
class ReaderConfig:
    """The config of the C reader ``_C.lower_read``, its fields read by name
    (csrc/py_lower.c, ``reader_config``; a missing or ill-typed one is a
    TypeError naming it)."""

    #: ``node.op`` -> the graph array's kind (:data:`fxcut.solve.arrays.KIND_OF_OP`).
    kind_of_op: dict[str, int]
    #: A call_function target -> its flag bits, Python-only bits included (``TargetFacts.flags``).
    flags_of: Callable[[Any], int]
    #: A node the reader does not take as plain -> (flags, nbytes, tag, ac_graph_id), the Python path's.
    slow: Callable[[fx.Node], tuple[int, int, int, int]]
    #: Whether a node's tuple or list value is opaque (asked once per call for each of tuple and list).
    opaque: Callable[[fx.Node], bool]
    node_cls: type
    tensor_cls: type
    #: Targets whose nodes are the slow path's (a cast, invoke_subgraph: their flags depend on the node).
    special_targets: tuple[Any, ...]
    #: Meta keys that make a node the slow path's.
    slow_meta_keys: tuple[str, ...]
    #: The user triton kernel's op (a getitem of its output is the slow path's), or None.
    triton_hop: Any
    #: Target bits that make a node the slow path's (a higher-order op: its purity depends on the node).
    slow_bits: int
    #: Target bits that make a node impure (with or without random ops, as the decision runs).
    impure_bits: int
    #: The target bit of a mutable schema (a mutation tagged ``is_backward`` must be in backward).
    mutable_bit: int


class _NodeFacts:
    """One node's (flags, nbytes, tag, ac_graph_id) as lowering computes them:
    the Python path's, and the C reader's for any node it does not take as
    plain (``_C.lower_read``)."""

    def __init__(self, facts: TargetFacts, value_facts: Any, with_meta: bool) -> None:
        self.target_flags = facts.flags
        self.value_facts = value_facts
        self.with_meta = with_meta
        self.convert = torch.ops.prims.convert_element_type.default
        self.invoke_subgraph = getattr(torch.ops.higher_order, "invoke_subgraph", None)
        self.to_copy = torch.ops.aten._to_copy.default

    def __call__(self, node: fx.Node) -> tuple[int, int, int, int]:
        op = node.op
        if op == "call_function":
            target = node.target
            bits = self.target_flags(target)
            if target is self.invoke_subgraph and invoke_subgraph_has_effects(node):
                bits |= _C.F_WITH_EFFECTS
            if target is self.convert or (target is self.to_copy and is_cast_op(node)[0]):
                bits |= _C.F_CAST
        elif op == "placeholder":
            bits = placeholder_flags(node)
        else:
            bits = 0
        nbytes = 0
        if self.value_facts is not None:
            bits, nbytes = self.value_facts(node, bits)
        tag, ac_value = _C.TAG_NONE, 0
        if self.with_meta:
            meta = node.meta
            if "recompute" in meta:
                tag = _recompute_tag(node)
            if "ac_graph_id" in meta:
                ac_value, ac_flag = _ac_graph_id(node)
                bits |= ac_flag
        return bits & _FLAGS_MASK, nbytes, tag, ac_value

    def reader_config(self) -> ReaderConfig:
        """What ``_C.lower_read`` calls back and what makes a node plain."""
        vf = self.value_facts
        special = tuple(t for t in (self.convert, self.to_copy, self.invoke_subgraph) if t is not None)
        return ReaderConfig(kind_of_op=KIND_OF_OP, flags_of=self.target_flags, slow=self, opaque=_is_opaque,
                            node_cls=fx.Node, tensor_cls=torch.Tensor, special_targets=special,
                            slow_meta_keys=("recompute", "ac_graph_id", "has_backward_hook"),
                            triton_hop=vf.triton_hop, slow_bits=_HOP, impure_bits=vf.impure_bit, mutable_bit=_MUTABLE)


@gated(NODE_READERS)
def _read_in_c(nodes: list[fx.Node], facts: TargetFacts, value_facts: _ValueFacts,
               replace: dict[fx.Node, fx.Node] | None) -> LoweredGraph | None:
    """``_lower`` with meta and value facts, through the C reader; None where
    the reader leaves a graph to the Python path (which then raises what it
    raises)."""
    node_facts = _NodeFacts(facts, value_facts, True)
    out = _C.lower_read(nodes, replace or None, node_facts.reader_config())
    if out is None:
        return None
    kind_b, flags_b, tag_b, ac_b, nbytes_b, arg_ptr_b, arg_idx_b, in_ptr_b, in_idx_b, output_at, index = out
    arrays = []
    for code, raw in (("B", kind_b), ("I", flags_b), ("b", tag_b), ("i", ac_b), ("q", nbytes_b),
                      ("i", arg_ptr_b), ("i", arg_idx_b), ("i", in_ptr_b), ("i", in_idx_b)):
        a = array(code)
        a.frombytes(raw)
        arrays.append(a)
    kind, flags, tag, ac_graph_id, nbytes, arg_ptr, arg_idx, in_ptr, in_idx = arrays
    outputs = array("i")
    node_cls = fx.Node
    try:
        for i in output_at:
            outputs.extend(
                index[replace.get(a, a) if replace else a] if a.__class__ is node_cls else -1
                for a in _output_leaves(nodes[i]))
    except KeyError:
        return None
    return _lowered(nodes, index, (kind, flags, tag, ac_graph_id, nbytes, arg_ptr, arg_idx, in_ptr, in_idx, outputs))


def _lower_replaced(
    nodes: list[fx.Node], facts: TargetFacts, value_facts: Any, with_meta: bool, replace: dict[fx.Node, fx.Node]
) -> LoweredGraph:
    """``_lower`` of the graph with uses redirected by ``replace``: lower the
    structure without edges, then rebuild both CSRs through the map (inputs
    deduplicated in first-use order, as a rebuilt node's would be)."""
    base = _lower_nodes(nodes, facts, value_facts, with_meta, with_inputs=False, edges=False)
    index = base.index
    node_cls = fx.Node
    arg_idx, in_idx, outputs = array("i"), array("i"), array("i")
    arg_ptr = array("i", [0]) * (len(nodes) + 1)
    in_ptr = array("i", [0]) * (len(nodes) + 1)
    try:
        for i, node in enumerate(nodes):
            for a in node.args:
                if a.__class__ is node_cls:
                    arg_idx.append(index[replace.get(a, a)])
            seen: dict[int, None] = {}
            for a in node._input_nodes:
                seen[index[replace.get(a, a)]] = None
            in_idx.extend(seen)
            arg_ptr[i + 1] = len(arg_idx)
            in_ptr[i + 1] = len(in_idx)
            if node.op == "output":
                outputs.extend(
                    index[replace.get(a, a)] if a.__class__ is node_cls else -1 for a in _output_leaves(node)
                )
    except KeyError as e:
        raise LoweringError(f"a node uses {e.args[0].name!r}, which is not in this graph") from None
    base.arg_ptr, base.arg_idx, base.in_ptr, base.in_idx, base.outputs = arg_ptr, arg_idx, in_ptr, in_idx, outputs
    return base


def _output_leaves(output: fx.Node) -> list[Any]:
    """The leaves of the output node's value, in order, as torch's partitioner
    sees them (``pytree.arg_tree_leaves`` over the output's args).  Leaves
    that are not nodes (``None`` gradients) are lowered as -1.  A flat
    sequence of nodes and ``None`` (what a joint graph returns) is its own
    leaf list, without pytree's per-leaf dispatch."""
    args = output.args
    if len(args) == 1:
        value: Any = args[0]
        if type(value) in _FLAT_SEQUENCES and all(
                a.__class__ is _NODE or a is None for a in value):
            return list(value)
    return list(pytree.arg_tree_leaves(*args))


_NODE = fx.Node
#: Sequence types pytree flattens into their items (fx stores lists as ``immutable_list``).
_FLAT_SEQUENCES = (tuple, list, immutable_list)



class _ValueFacts:
    """Per-node facts of the value a node produces, for the partitioner:
    the flag bits torch's checks on ``meta["val"]`` give, and the byte size
    torch's ``_size_of`` computes (SIZE_UNKNOWN where it would raise)."""

    def __init__(self, facts: TargetFacts, impure_random: bool, rules: Rules) -> None:
        self.facts = facts
        self.impure_random = impure_random
        self.sym_types = py_sym_types
        self.free_types = (BackwardState, FakeScriptObject)
        self.script_types = (torch.ScriptObject, FakeScriptObject)
        self.script_objects_free = bool(rules.config("unsafe_treat_script_objects_as_zero_size"))
        self.no_return_ops_free = rules.no_return_ops_take_no_memory
        self.assert_scalar = torch.ops.aten._assert_scalar.default
        self.triton_hop = triton_wrapper_op()
        self.impure_bit = _IMPURE_RANDOM if impure_random else _IMPURE

    def __call__(self, node: fx.Node, bits: int) -> tuple[int, int]:
        meta = node.meta
        nbytes = _C.SIZE_UNKNOWN
        if "val" in meta:
            val = meta["val"]
            if isinstance(val, torch.Tensor):
                nbytes = tensor_nbytes(val)
            else:
                bits |= _C.F_NON_TENSOR
                if isinstance(val, self.sym_types):
                    bits |= _C.F_SYM
                    if isinstance(val, torch.SymFloat):
                        bits |= _C.F_SYMFLOAT
                    nbytes = 1
                elif isinstance(val, (list, tuple)):
                    bits |= _C.F_VAL_IS_SEQ
                    nbytes = sum(object_nbytes(x) for x in val)
                elif isinstance(val, dict):
                    nbytes = sum(object_nbytes(x) for x in val.values())
                elif isinstance(val, self.script_types) and self.script_objects_free:
                    nbytes = 0
                if isinstance(val, self.free_types) or _is_opaque(node):
                    bits |= _C.F_FREE_OBJECT
        else:
            if "tensor_meta" not in meta:
                bits |= _C.F_NON_TENSOR
            target = node.target
            if node.op == "get_attr" or target is self.assert_scalar or (
                self.no_return_ops_free
                and isinstance(target, torch._ops.OpOverload) and len(target._schema.returns) == 0
            ):
                nbytes = 0
        if not _SIZE_UNKNOWN <= nbytes <= _INT64_MAX:
            raise LoweringError(
                f"node {node.name!r}: meta['val'] takes {nbytes} bytes, which does not fit "
                f"a signed 64-bit size (shape {_shape_of(meta.get('val'))})"
            )
        if node.op == "call_function":
            bits = self._call_function_bits(node, bits)
        return bits, nbytes

    def _call_function_bits(self, node: fx.Node, bits: int) -> int:
        """``bits`` carries the target's Python-only bits (fxcut.torchrules.ops)."""
        if bits & _HOP:
            if is_impure(node, self.facts, self.impure_random):
                bits |= _F_IMPURE
        elif bits & self.impure_bit:
            bits |= _F_IMPURE
        meta = node.meta
        tag = meta.get("partitioner_tag")
        if tag is not None or bits & _MUTABLE:
            # The rule is the C reader's (csrc/py_lower.c): one copy.
            bits |= tag_flags(tag, bool(bits & _MUTABLE))
        if meta.get("has_backward_hook", False):
            bits |= _F_BW_HOOK
        if bits & _F_GETITEM and self.triton_hop is not None:
            producer = node.args[0]
            if isinstance(producer, fx.Node) and producer.target is self.triton_hop:
                bits |= _F_NO_FUSE_OUT
        return bits


def _shape_of(val: Any) -> str:
    if isinstance(val, torch.Tensor):
        return f"{tuple(val.shape)}, {val.dtype}"
    if isinstance(val, (list, tuple)):
        return ", ".join(_shape_of(x) for x in val)
    return type(val).__name__


def _is_opaque(node: fx.Node) -> bool:
    # AOT Autograd's graph compiler imports inductor (seconds): only for the rare opaque value.
    from torch._functorch._aot_autograd.graph_compile import is_opaque_node

    return bool(is_opaque_node(node))


def lower_for_partition(
    graph: fx.Graph,
    facts: TargetFacts,
    *,
    impure_random: bool,
    rules: Rules,
    removed: set[fx.Node] | None = None,
    replace: dict[fx.Node, fx.Node] | None = None,
    use_c: bool = True,
) -> LoweredGraph:
    """Everything the partition decision reads: structure, target flags,
    per-node value facts, tags, ac_graph_id and byte sizes, the values the
    cut must save and the pairs it must keep together -- of the graph as it
    will be once ``removed`` nodes are gone and ``replace`` applied, as the
    release of ``rules`` reads it."""
    start = time.perf_counter()
    lowered = _lower(
        graph, facts, value_facts=_ValueFacts(facts, impure_random, rules), with_meta=True,
        removed=removed, replace=replace, use_c=use_c,
    )
    lowered.force_save = force_saved(lowered)
    lowered.fuse_a, lowered.fuse_b = fuse_pairs(lowered)
    lowered.seconds = time.perf_counter() - start
    return lowered


def lower_prepared(graph: fx.Graph, prep: Preparation, facts: TargetFacts, *, impure_random: bool,
                   rules: Rules) -> LoweredGraph:
    """The graph array of ``graph`` as the planned dead-code elimination and
    CSE ``prep`` will leave it (the graph itself is not modified)."""
    return lower_for_partition(graph, facts, impure_random=impure_random, removed=prep.removed,
                               replace=prep.replace, rules=rules)


def lower_graph(graph: fx.Graph, rules: Rules) -> LoweredGraph:
    """The graph array of ``graph`` as it is (no DCE/CSE planned), with the
    facts the decision reads: for tools and tests that decide a bare graph."""
    return lower_for_partition(graph, default_facts(), impure_random=dce_impure_random(), rules=rules)


def force_saved(lowered: LoweredGraph) -> array[int]:
    """Sources of mutations applied to the same input in forward and
    backward (torch's ``force_save_bw_mutation_src``): recomputing them
    would apply the mutation twice.  AOT Autograd emits these copy_ nodes
    only at the end of the joint graph.

    The copy's destination and source are read from the lowered positional
    args, not from ``node.args``: the lowering resolves CSE (a source that
    CSE merges with an equal node is lowered as that node)."""
    mutated_in_backward: set[int] = set()
    sources = array("i")
    index, arg_ptr, arg_idx = lowered.index, lowered.arg_ptr, lowered.arg_idx
    copy_ = torch.ops.aten.copy_.default
    for node in reversed(lowered.nodes):
        if node.op == "output":
            continue
        if node.target is not copy_:
            break
        tag = node.meta.get("partitioner_tag")
        if tag != "must_be_in_backward" and tag != "must_be_in_forward":
            continue
        i = index[node]
        start, end = arg_ptr[i], arg_ptr[i + 1]
        if end - start != 2:  # copy_(dst, src) of two nodes
            continue
        dst, src = arg_idx[start], arg_idx[start + 1]
        if tag == "must_be_in_backward":
            mutated_in_backward.add(dst)
        elif dst in mutated_in_backward:
            sources.append(src)
    return sources


def fuse_pairs(lowered: LoweredGraph) -> tuple[array[int], array[int]]:
    """Each mutable higher-order op (``auto_functionalized``, a user triton
    kernel) paired with every input it mutates: the cut keeps each pair on
    one side."""
    fuse_a, fuse_b = array("i"), array("i")
    index = lowered.index
    for b, bits in enumerate(lowered.flags):
        if bits & _C.F_MUTABLE_HOP:
            for a in mutated_inputs(lowered.nodes[b]):
                fuse_a.append(index[a])
                fuse_b.append(b)
    return fuse_a, fuse_b
