"""fxcut's forward and backward graph building.

Given the saved values the decision chose, torch builds the two modules with
a chain of passes (``_extract_fwd_bwd_modules``, which extracts the backward
twice and the forward once, each copy followed by dead-code elimination;
``reordering_to_mimic_autograd_engine``, which copies the backward once more;
``raise_getitems`` with a recompile of each module).  Every pass copies every
node and most recompile code nobody reads before the next pass.

This module computes what those passes would keep, and in which order, on
the joint graph itself, and then creates each output graph's nodes exactly
once, in the order torch's last copy creates them, with the same names,
arguments, types and meta (the same sharing of meta dicts too), the same
name-table state and user-list order, and generates each module's code once
(or lazily, under torch's lazy graph modules, as torch's own modules are).

It builds them on the releases whose row of the versions table names it
the ``module_builder`` (:mod:`fxcut.torchrules.versions`: every supported release); on the others
torch's passes build every graph.  Graphs this module does not model (RNG functionalization, activation
offloading or quantization, opaque saved objects, backward state, HOP RNG
threading, collectives, call_module nodes, forward outputs that depend on
the backward) return ``None``: the caller then runs torch's passes.
"""

from __future__ import annotations

import copy
import itertools
import operator
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
import torch.fx as fx
from torch.fx.immutable_collections import immutable_dict
from torch.fx.node import map_aggregate

import fxcut._C as _C

from .codegen import generated_code
from .gate import MODULE_BUILDER, gated
from .ops import is_mutable_op, tag_flags
from .versions import BUILDER_FXCUT, Rules, is_assert_only_symbool


class _Unsupported(Exception):
    """A graph feature this builder leaves to torch's passes."""


@dataclass
class _Selection:
    """What torch's ``_extract_graph_with_inputs_outputs`` keeps."""

    inputs: list[fx.Node]
    copied: list[fx.Node]  # valid call_function/get_attr nodes, joint order (all get created)
    kept: set[fx.Node]  # of copied: those dead-code elimination keeps
    outputs: list[Any]  # joint nodes or constants


def _select(nodes: list[fx.Node], inputs: list[fx.Node], outputs: list[Any], subgraph: str,
            impure_random: bool, must_fw: dict[fx.Node, bool], must_bw: dict[fx.Node, bool]) -> _Selection:
    input_set = set(inputs)
    if len(input_set) != len(inputs):
        raise _Unsupported("an input listed twice")
    valid: set[fx.Node] = set(input_set)
    copied: list[fx.Node] = []
    for node in nodes:
        if node in input_set:
            continue
        if subgraph != "backward" and must_bw[node]:
            continue
        if subgraph != "forward" and must_fw[node]:
            continue
        op = node.op
        if op == "call_function":
            if valid.issuperset(node._input_nodes):
                valid.add(node)
                copied.append(node)
        elif op == "get_attr":
            valid.add(node)
            copied.append(node)
        elif op not in ("placeholder", "output"):
            raise _Unsupported(f"{op} node {node.name}")
    needed: set[fx.Node] = set()
    for x in outputs:
        if isinstance(x, fx.Node):
            if x not in valid:
                raise _Unsupported(f"output {x.name} is not computable in the {subgraph}")
            needed.add(x)
    kept: set[fx.Node] = set()
    for node in reversed(copied):
        if node in needed or node.is_impure(impure_random):
            kept.add(node)
            needed.update(node._input_nodes)
    return _Selection(inputs, copied, kept, outputs)


def placement_rules(nodes: Sequence[fx.Node]) -> tuple[dict[fx.Node, bool], dict[fx.Node, bool]]:
    """torch's ``_must_be_in_forward`` / ``_must_be_in_backward`` of every
    node: a ``partitioner_tag``, or a mutable op outside / inside the
    backward (``is_backward`` tag)."""
    must_fw: dict[fx.Node, bool] = {}
    must_bw: dict[fx.Node, bool] = {}
    mutable: dict[Any, bool] = {}
    for node in nodes:
        target = node.target
        m = mutable.get(target)
        if m is None:
            m = is_mutable_op(target)
            try:
                mutable[target] = m
            except TypeError:  # an unhashable target
                pass
        bits = tag_flags(node.meta.get("partitioner_tag", None), m)
        must_fw[node] = bool(bits & _C.F_MUST_BE_IN_FW)
        must_bw[node] = bool(bits & _C.F_MUST_BE_IN_BW)
    return must_fw, must_bw


def _static_tensor(val: Any) -> bool:
    """A tensor whose sizes, strides and storage offset are all plain ints
    (``free_symbols`` of it is empty)."""
    if not isinstance(val, torch.Tensor) or isinstance(val, torch.nn.Parameter):
        return False
    try:
        if val._has_symbolic_sizes_strides:
            return False
        return type(val.storage_offset()) is int
    except Exception:
        return False


def _symbols_to_bind(rules: Rules) -> Callable[[Any], set[Any]]:
    """The symbols of a backward input's value that the backward must get a
    binding for: those of its sizes after the ShapeEnv's replacements, and on
    releases that bind them (versions: ``binds_unreplaced_symbols``) also the
    ones before (``s80`` of an input whose size was later unified with
    ``s15``, whose first binding may be another, otherwise unused, input)."""
    from torch._functorch import partitioners
    from torch.fx.experimental.symbolic_shapes import free_symbols

    if not rules.binds_unreplaced_symbols:
        return lambda val: set(free_symbols(val))
    unreplaced: Callable[[Any], Any] = getattr(partitioners, "_free_symbols_without_replacements")
    return lambda val: set(free_symbols(val)) | set(unreplaced(val))


def _used_inputs(sel: _Selection) -> set[fx.Node]:
    used: set[fx.Node] = set()
    for node in sel.kept:
        used.update(node._input_nodes)
    used.update(x for x in sel.outputs if isinstance(x, fx.Node))
    return used & set(sel.inputs)


def _remove_by_name(values: list[fx.Node], name: str) -> None:
    for i, v in enumerate(values):
        if v.name == name:
            del values[i]
            return


def _output_meta(out: fx.Node, values: list[Any], descs: list[Any]) -> None:
    out.meta["desc"] = descs
    out.meta["output_stack_traces"] = [
        v.meta.get("stack_trace") if isinstance(v, fx.Node) else None for v in values
    ]


_SYM_TYPES = (torch.SymInt, torch.SymFloat, torch.SymBool)

#: Sets an attribute without ``Node.__setattr__``, which (on every supported
#: release) takes the node out of its graph's find-nodes table and puts it
#: back at the end of its bucket: for a node just created, the last of its
#: bucket already, that changes nothing but costs three ``hasattr`` and two
#: dict operations per node.
_set_attr = object.__setattr__


_Node = fx.Node
_new_node = fx.Node.__new__
_init_node_base = torch._C._NodeBase.__init__


def _meta_copy(meta: dict[str, Any]) -> dict[str, Any]:
    """``copy.copy(meta)``, as torch's ``node_copy`` copies it."""
    return meta.copy() if meta.__class__ is dict else copy.copy(meta)


class _Copier:
    """``Graph.node_copy`` into one graph, without ``create_node``'s pytree
    walk of the arguments (which looks for raw SymInt/SymFloat/SymBool
    values to warn about): the argument remap visits every leaf anyway, so
    it notes such a value, and only then the copy goes through torch's
    ``node_copy`` (and its warning).  Otherwise the node is created exactly
    as ``create_node`` creates it (name table, insertion, lookup table)."""

    def __init__(self, graph: fx.Graph, env: dict[Any, fx.Node]) -> None:
        self.graph = graph
        self.env = env
        self.namespace = graph._graph_namespace
        self.table = graph._find_nodes_lookup_table
        self.raw_sym = False
        node_cls = fx.Node
        sym_types = _SYM_TYPES

        def leaf(a: Any) -> Any:
            if a.__class__ is node_cls:
                return env[a]
            if isinstance(a, sym_types):
                self.raw_sym = True
            return a

        self.leaf = leaf

    def copy(self, node: fx.Node) -> fx.Node:
        graph = self.graph
        if graph.owning_module is not None:
            return graph.node_copy(node, self.env.__getitem__)
        self.raw_sym = False
        args = map_aggregate(node.args, self.leaf)
        kwargs = map_aggregate(node.kwargs, self.leaf) if node.kwargs else immutable_dict()
        op = node.op
        if self.raw_sym and op in ("call_function", "call_method", "call_module"):
            return graph.node_copy(node, self.env.__getitem__)
        if not kwargs:
            kwargs = immutable_dict()
        name = self.namespace.create_name(node.name, None)
        # ``fx.Node(...)`` minus its checks of op and target, which the
        # node copied from passed: the same two steps its __init__ ends with.
        new = _new_node(_Node)
        _init_node_base(new, graph, name, op, node.target, node.type)
        new._update_args_kwargs(args, kwargs)
        self.namespace.associate_name_with_obj(name, new)
        graph._insert(new)
        self.table.insert(new)
        graph._len += 1
        _set_attr(new, "meta", _meta_copy(node.meta))  # the newest node: see _set_attr
        return new


def _raise_getitems(graph: fx.Graph) -> None:
    """torch's ``raise_getitems`` without its recompile."""
    getitems = list(graph.find_nodes(op="call_function", target=operator.getitem))
    for node in getitems:
        if len(node.all_input_nodes) != 1:
            raise _Unsupported(f"getitem {node.name} with {len(node.all_input_nodes)} inputs")
    for node in reversed(getitems):
        node.all_input_nodes[0].append(node)


def _extraction_graph(sel: _Selection, descs: list[Any], flag_backward: bool) -> fx.Graph:
    """The graph torch's extraction leaves (after its dead-code elimination);
    ``flag_backward``: its nodes get ``meta["autograd_backward"]``."""
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    for node in sel.inputs:
        new = graph.placeholder(node.name)
        _set_attr(new, "meta", node.meta)  # the newest node: see _set_attr
        env[node] = new
    namespace = graph._graph_namespace
    kept = sel.kept
    copier = _Copier(graph, env)
    for node in sel.copied:
        if node in kept:
            new = copier.copy(node)
            if flag_backward:
                new.meta["autograd_backward"] = True
            env[node] = new
        else:
            # torch copies it, then erases it: its name stays taken.
            namespace.create_name(node.name, None)
    values = [env[x] if isinstance(x, fx.Node) else x for x in sel.outputs]
    out = graph.output(tuple(values))
    _output_meta(out, values, descs)
    return graph


def _reordered_backward(sel: _Selection, descs: list[Any], flag_backward: bool) -> fx.Graph | None:
    """The backward graph as ``reordering_to_mimic_autograd_engine`` copies
    it, built straight from the joint graph; None where that pass returns
    its input unchanged."""
    # Positions in the extracted backward graph: inputs, kept nodes, output.
    order: dict[fx.Node, int] = {}
    for node in sel.inputs:
        order[node] = len(order)
    body = [n for n in sel.copied if n in sel.kept]
    for node in body:
        order[node] = len(order)
    out_pos = len(order)
    out_inputs = list(dict.fromkeys(x for x in sel.outputs if isinstance(x, fx.Node)))

    first = out_pos + 1
    for node in sel.inputs:
        if "tangents" in node.name:
            for user in node.users:
                if user in sel.kept and order[user] < first:
                    first = order[user]
            if node in out_inputs and out_pos < first:
                first = out_pos
    if first > out_pos:
        return None

    graph = fx.Graph()
    env: dict[Any, fx.Node] = {}
    for node in sel.inputs:
        # As the extraction names it (``Graph.placeholder`` snake-cases the
        # name: ``reluOut`` -> ``relu_out``, ``__saved__`` -> ``saved``) and
        # the reordering copies that name.
        new = graph.create_node("placeholder", node.name, (), {}, None, None)
        _set_attr(new, "meta", _meta_copy(node.meta))  # the newest node: see _set_attr
        env[node] = new
    copier = _Copier(graph, env)

    def emit(node: fx.Node) -> None:
        new = copier.copy(node)
        if flag_backward:
            new.meta["autograd_backward"] = True
        env[node] = new

    def pull(roots: list[fx.Node]) -> None:
        stack = list(roots)
        found: set[fx.Node] = set()
        while stack:
            n = stack.pop()
            if n in found or n in env:
                continue
            found.add(n)
            stack.extend(n._input_nodes)
        for n in sorted(found, key=order.__getitem__):
            emit(n)

    def pull_output() -> fx.Node:
        pull(out_inputs)
        values = tuple(env[x] if isinstance(x, fx.Node) else x for x in sel.outputs)
        new = graph.create_node("output", "output", (values,), {}, "output", None)
        _output_meta(new, list(values), descs)
        return new

    copy_ = torch.ops.aten.copy_.default
    for node in body[: max(0, first - len(sel.inputs))]:
        if node.target is copy_ and node not in env:
            pull([node])
    for node in body[max(0, first - len(sel.inputs)):]:
        if node not in env:
            pull([node])
    pull_output()
    return graph


class SavedValues(NamedTuple):
    """The saved values as module extraction takes them: tensors (and other
    values), symbols (assert-only SymBools dropped), opaque objects."""

    values: list[fx.Node]
    sym: list[fx.Node]
    opaque: list[fx.Node]


@gated(MODULE_BUILDER)
def split_saved(saved: list[fx.Node]) -> SavedValues:
    """``saved`` split as torch's partitioner splits it before extraction."""
    from torch._functorch._aot_autograd.graph_compile import is_opaque_node
    from torch.fx.experimental.proxy_tensor import is_sym_node

    return SavedValues(
        values=[n for n in saved if not is_sym_node(n) and not is_opaque_node(n)],
        sym=[n for n in saved if is_sym_node(n) and not is_assert_only_symbool(n)],
        opaque=[n for n in saved if is_opaque_node(n)],
    )


@gated(MODULE_BUILDER)
def build_modules(joint_module: fx.GraphModule, saved: SavedValues, num_fwd_outputs: int,
                  static_nodes: Collection[fx.Node] | None, rules: Rules, *, impure_random: bool,
                  ) -> tuple[fx.GraphModule, fx.GraphModule] | None:
    """The forward and backward modules torch's ``_extract_fwd_bwd_modules``,
    ``reordering_to_mimic_autograd_engine``, ``raise_getitems`` and
    ``thread_graphsafe_rng_from_hops`` would return, or None for a graph
    this builder leaves to them.  ``static_nodes``: the static-lifetime
    primals (torch 2.15 marks them in their meta; otherwise they matter to
    torch's passes only for activation quantization, left to them).  Leaves
    the joint module as torch's passes leave it (untouched before 2.15).
    ``rules``: the running release's; ``impure_random``: whether random ops
    count as impure to dead-code elimination (inductor's ``fallback_random``),
    as the plan read it."""
    try:
        return _build(joint_module, list(saved.values), list(saved.sym), list(saved.opaque), num_fwd_outputs,
                      static_nodes, rules, impure_random)
    except _Unsupported:
        return None


def torch_modeled(rules: Rules) -> bool:
    """Whether this builder builds the modules on the release of ``rules``:
    the versions table names it the release's ``module_builder`` (its passes
    are the ones this builder reproduces)."""
    return rules.module_builder == BUILDER_FXCUT


def unsupported_reason(joint_module: fx.GraphModule, rules: Rules) -> str | None:
    """Why the fast builder leaves this joint graph to torch's passes
    (a graph-wide feature, or a torch release it does not model), or None."""
    from torch._inductor import config as inductor_config

    if not torch_modeled(rules):
        return f"torch {torch.__version__}'s module-building passes are not modeled"
    if rules.config("enable_activation_offloading"):
        return "activation offloading"
    if inductor_config.post_grad_fusion_options.get("activation_quantization_aten_pass") is not None:
        return "activation quantization"
    hop = torch.ops.higher_order.invoke_subgraph
    graph = joint_module.graph
    if graph.find_nodes(op="call_module"):
        return "call_module nodes"
    if graph.find_nodes(op="call_function", target=hop):
        return "invoke_subgraph (graph-safe RNG threading)"
    if graph.find_nodes(op="call_function", target=torch.ops._c10d_functional.wait_tensor.default):
        return "collectives (wait_tensor)"
    return None


def _check_supported(joint_module: fx.GraphModule, rules: Rules, saved_values: list[fx.Node],
                     saved_opaque_nodes: list[fx.Node]) -> None:
    """Raises _Unsupported for what torch's passes handle and this builder
    does not model: graph-wide features, and opaque saved values."""
    from torch._library.fake_class_registry import FakeScriptObject

    reason = unsupported_reason(joint_module, rules)
    if reason is not None:
        raise _Unsupported(reason)
    if saved_opaque_nodes:
        raise _Unsupported("opaque saved nodes")
    if any(isinstance(n.meta.get("val"), FakeScriptObject) for n in saved_values):
        raise _Unsupported("opaque saved objects")


def _joint_placeholders(nodes: list[fx.Node], rules: Rules, static_nodes: Collection[fx.Node] | None
                        ) -> tuple[list[fx.Node], list[fx.Node], list[fx.Node], list[fx.Node]]:
    """The primals, tangents and forward and backward seed offsets.  Marks
    the static primals where the release does, in the joint's meta dicts,
    which the modules' placeholders share."""
    from torch._functorch._aot_autograd.utils import (
        _is_bwd_seed_offset,
        _is_fwd_seed_offset,
        _is_primal,
        _is_tangent,
    )
    from torch.fx.experimental._backward_state import BackwardState

    placeholders = [n for n in nodes if n.op == "placeholder"]
    if any(isinstance(p.meta.get("val"), BackwardState) for p in placeholders):
        raise _Unsupported("backward state")
    primals = [p for p in placeholders if _is_primal(p)]
    if rules.marks_static_inputs and static_nodes is not None:
        for p in primals:
            p.meta["is_static_input"] = p in static_nodes
    tangents = [p for p in placeholders if _is_tangent(p)]
    fwd_seed = [p for p in placeholders if _is_fwd_seed_offset(p)]
    bwd_seed = [p for p in placeholders if _is_bwd_seed_offset(p)]
    return primals, tangents, fwd_seed, bwd_seed


def _with_symbol_bindings(graph: fx.Graph, saved_sym_nodes: list[fx.Node], saved_values: list[fx.Node],
                          tangents: list[fx.Node], rules: Rules) -> list[fx.Node]:
    """The saved symbols as torch saves them: the binding nodes of every
    symbol the backward's inputs mention (a symbol not saved yet gets its
    binding node from the graph), then the derived ones."""
    from torch.fx.experimental.symbolic_shapes import (
        find_symbol_binding_fx_nodes,
        is_symbol_binding_fx_node,
    )

    saved_symbols: set[Any] = set()
    binding: list[fx.Node] = []
    derived: list[fx.Node] = []
    for node in saved_sym_nodes:
        symbol = is_symbol_binding_fx_node(node)
        if symbol:
            saved_symbols.add(symbol)
            binding.append(node)
        else:
            derived.append(node)
    bindings = None
    symbols_of = _symbols_to_bind(rules)
    for node in itertools.chain(derived, saved_values, tangents):
        if "val" not in node.meta:
            continue
        val = node.meta["val"]
        if _static_tensor(val):
            continue
        new_symbols = symbols_of(val) - saved_symbols
        if new_symbols and bindings is None:
            bindings = find_symbol_binding_fx_nodes(graph)
        for s in sorted(new_symbols, key=lambda s: s.name):
            if bindings is not None and s in bindings:
                binding.append(bindings[s])
        saved_symbols |= new_symbols
    return binding + derived


def _saved_outputs(saved_values: list[fx.Node], saved_sym_nodes: list[fx.Node], fwd_descs: list[Any]
                   ) -> tuple[list[fx.Node], list[Any]]:
    """The saved values in the forward's output order (those checked for
    version changes first) and the forward outputs' descriptors."""
    from torch._functorch._aot_autograd.descriptors import (
        SavedForBackwardsAOTOutput,
        SavedForBackwardsNoVcCheckAOTOutput,
    )

    with_vc = [n for n in saved_values if not n.meta.get("saved_tensor_with_no_vc_check", False)]
    no_vc = [n for n in saved_values if n.meta.get("saved_tensor_with_no_vc_check", False)]
    saved_values = with_vc + no_vc
    start = len(with_vc)
    n_saved = len(saved_values) + len(saved_sym_nodes)
    fw_descs = list(fwd_descs) + [
        SavedForBackwardsNoVcCheckAOTOutput(i) if start <= i < len(saved_values) else SavedForBackwardsAOTOutput(i)
        for i in range(n_saved)
    ]
    return saved_values, fw_descs


def _modules(joint_module: fx.GraphModule, fw_sel: _Selection, bw_sel: _Selection, fw_descs: list[Any],
             bwd_descs: list[Any], rules: Rules) -> tuple[fx.GraphModule, fx.GraphModule]:
    """The two modules from their selections, each of the class torch's last
    pass makes it: the reordering a plain GraphModule, the extraction one
    that is lazy under torch's lazy graph modules."""
    from torch.fx._lazy_graph_module import _make_graph_module

    fw_graph = _extraction_graph(fw_sel, fw_descs, flag_backward=False)
    _raise_getitems(fw_graph)
    flag = rules.flags_backward_nodes
    bw_graph = _reordered_backward(bw_sel, bwd_descs, flag)
    reordered = bw_graph is not None
    if bw_graph is None:
        bw_graph = _extraction_graph(bw_sel, bwd_descs, flag)
    _raise_getitems(bw_graph)

    # Code generated as torch's generator writes it (fxcut.torchrules.codegen), faster.
    with generated_code(fw_graph):
        fw_module = _make_graph_module(joint_module, fw_graph)
    with generated_code(bw_graph):
        if reordered:
            bw_module = fx.GraphModule(joint_module, bw_graph)
        else:
            bw_module = _make_graph_module(joint_module, bw_graph)
    return fw_module, bw_module


def _build(joint_module: fx.GraphModule, saved_values: list[fx.Node], saved_sym_nodes: list[fx.Node],
           saved_opaque_nodes: list[fx.Node], num_fwd_outputs: int, static_nodes: Collection[fx.Node] | None,
           rules: Rules, impure_random: bool) -> tuple[fx.GraphModule, fx.GraphModule]:
    from torch._functorch import partitioners as tp

    _check_supported(joint_module, rules, saved_values, saved_opaque_nodes)
    graph = joint_module.graph
    nodes = list(graph.nodes)
    fwd_outputs, bwd_outputs, fwd_descs, bwd_descs = tp._extract_fwd_bwd_outputs(
        joint_module, num_fwd_outputs=num_fwd_outputs
    )
    primals, tangents, fwd_seed, bwd_seed = _joint_placeholders(nodes, rules, static_nodes)

    must_fw, must_bw = placement_rules(nodes)

    # The first backward extraction only tells which saved values the
    # backward really reads.
    probe = _select(nodes, saved_sym_nodes + saved_values + tangents + bwd_seed, bwd_outputs,
                    "backward", impure_random, must_fw, must_bw)
    used = _used_inputs(probe)
    for node in probe.inputs:
        if node not in used:
            _remove_by_name(saved_values, node.name)
            _remove_by_name(saved_sym_nodes, node.name)

    saved_sym_nodes = _with_symbol_bindings(graph, saved_sym_nodes, saved_values, tangents, rules)
    saved_values, fw_descs = _saved_outputs(saved_values, saved_sym_nodes, fwd_descs)
    fw_sel = _select(nodes, primals + fwd_seed, list(fwd_outputs) + saved_values + saved_sym_nodes,
                     "forward", impure_random, must_fw, must_bw)
    bw_inputs = saved_sym_nodes + saved_values + tangents + bwd_seed
    bw_input_set = set(bw_inputs)
    if len(bw_input_set) == len(bw_inputs) and bw_input_set == set(probe.inputs):
        # What survives depends on the set of inputs only: the probe's.
        bw_sel = _Selection(bw_inputs, probe.copied, probe.kept, probe.outputs)
    else:
        bw_sel = _select(nodes, bw_inputs, bwd_outputs, "backward", impure_random, must_fw, must_bw)
    return _modules(joint_module, fw_sel, bw_sel, fw_descs, bwd_descs, rules)


__all__ = ["SavedValues", "build_modules", "split_saved", "torch_modeled", "unsupported_reason"]
