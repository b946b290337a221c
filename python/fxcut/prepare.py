"""Dead-code elimination and CSE as torch's partitioner runs them, planned
without touching the graph and applied in place only once the decision has
succeeded.

torch's partitioner first removes dead code (in place) and then rebuilds the
whole graph through ``fx_graph_cse``.  fxcut computes the same two results
as a plan -- the dead nodes, and each duplicate's representative -- lowers
the graph through that plan, decides, and only then applies it: dead nodes
erased, duplicates replaced by their representatives and erased.  The graph
that results has the nodes, names, order, arguments and meta of torch's CSE
copy; a bad input or an unsatisfiable decision leaves the user's graph as it
was.  ``apply`` checks the outcome against the plan, so a divergence is
caught, never silently partitioned.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx
from torch.fx.graph import CodeGen, _Namespace
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._pytree import tree_flatten

from .ops import TargetFacts, aten_target, default_facts, is_impure, mutable_hop_targets, mutated_inputs
from .versions import Rules, rules_or_nearest


@dataclass
class Preparation:
    """What dead-code elimination and CSE will do to a graph."""

    dead: set[fx.Node] = field(default_factory=set)
    replace: dict[fx.Node, fx.Node] = field(default_factory=dict)
    region_ids: dict[fx.Node, int] | None = None

    @property
    def removed(self) -> set[fx.Node]:
        return self.dead | set(self.replace)


def _impure(node: fx.Node, facts: TargetFacts, impure_random: bool) -> bool:
    op = node.op
    if op in ("placeholder", "output"):
        return True
    if op == "call_function":
        return is_impure(node, facts, impure_random)
    if op == "call_module":
        return node.is_impure(impure_random)
    return False


def plan_dead_code(nodes: list[fx.Node], facts: TargetFacts, impure_random: bool) -> set[fx.Node]:
    """The nodes ``Graph.eliminate_dead_code`` removes: walking backwards,
    a pure node none of whose users survive."""
    dead: set[fx.Node] = set()
    for node in reversed(nodes):
        if node.users and any(user not in dead for user in node.users):
            continue
        if not _impure(node, facts, impure_random):
            dead.add(node)
    return dead


def _storage_key(node: fx.Node) -> Any:
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        return None
    try:
        return StorageWeakRef(val.untyped_storage())  # type: ignore[no-untyped-call]  # unannotated in torch
    except NotImplementedError:
        return None


@dataclass(frozen=True)
class _FloatBits:
    """A float or complex argument keyed by its bit pattern (torch 2.14's CSE)."""

    kind: str
    bits: bytes


def _by_bits(value: Any) -> Any:
    import struct

    if type(value) is float:
        return _FloatBits("float", struct.pack(">d", value))
    if type(value) is complex:
        return _FloatBits("complex", struct.pack(">dd", value.real, value.imag))
    return value


def _backward_ancestors(nodes: list[fx.Node], num_fwd_outputs: int) -> set[fx.Node]:
    """The backward outputs and everything they are computed from."""
    from torch.utils._pytree import arg_tree_leaves

    leaves = arg_tree_leaves(*nodes[-1].args)[num_fwd_outputs:]
    stack = [x for x in leaves if isinstance(x, fx.Node) and x.op != "output"]
    seen: set[fx.Node] = set()
    while stack:
        node = stack.pop()
        if node not in seen:
            seen.add(node)
            stack.extend(node.all_input_nodes)
    return seen


def _mutation_bases(nodes: list[fx.Node]) -> set[fx.Node]:
    """Inputs a functional wrapper (auto_functionalized, its v2, a user triton
    kernel) mutates: torch 2.14's CSE keeps each one distinct."""
    v2 = getattr(torch.ops.higher_order, "auto_functionalized_v2", None)
    mutable_hops = mutable_hop_targets()
    bases: set[fx.Node] = set()

    def add(value: Any) -> None:
        for b in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(b, fx.Node):
                bases.add(b)

    for n in nodes:
        if n.op != "call_function":
            continue
        if v2 is not None and n.target is v2:
            for base in n.kwargs.get("_all_bases", ()):  # type: ignore[union-attr]
                add(base)
        elif any(n.target is op for op in mutable_hops):
            bases.update(mutated_inputs(n))
    return bases


def plan_cse(
    nodes: list[fx.Node],
    rules: Rules | None = None,
    num_fwd_outputs: int | None = None,
    facts: TargetFacts | None = None,
) -> tuple[dict[fx.Node, fx.Node], dict[fx.Node, int]]:
    """``fx_graph_cse``'s choices over ``nodes`` (the graph after dead-code
    elimination): duplicate -> representative, and the mutation region of
    every node (which torch records in ``meta["mutation_region_id"]``).
    ``rules``: the running release's CSE rules (fxcut.versions).
    ``num_fwd_outputs``: as the partitioner runs CSE (from 2.14 it keeps
    values the backward needs apart from the others); None plans
    ``fx_graph_cse`` called on its own."""
    rules = rules or rules_or_nearest()
    facts = facts or default_facts()
    backward: set[fx.Node] | None = None
    if rules.cse_keeps_backward_apart and num_fwd_outputs is not None:
        backward = _backward_ancestors(nodes, num_fwd_outputs)
    skip_bases = _mutation_bases(nodes) if rules.cse_skips_mutation_bases else set()
    import sympy
    from torch._functorch.compile_utils import get_aten_target, rand_ops
    from torch._inductor.pattern_matcher import is_mutation_op
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    region_ids: dict[fx.Node, int] = {}
    region = 0
    for node in nodes:
        if is_mutation_op(node):
            region += 1
        region_ids[node] = region

    output = nodes[-1]
    output_storages = {k for k in (_storage_key(n) for n in output.all_input_nodes) if k is not None}
    sym_types = (torch.SymBool, torch.SymInt, torch.SymFloat)
    env: dict[fx.Node, fx.Node] = {}
    hash_env: dict[tuple[Any, Any, int], fx.Node] = {}
    token_map: dict[tuple[Any, Any, int], dict[str, Any]] = {}
    replace: dict[fx.Node, fx.Node] = {}
    empty = torch.ops.aten.empty
    floats_by_bits = rules.cse_floats_by_bits

    def substitute(values: Any) -> tuple[tuple[Any, ...], Any]:
        leaves, spec = tree_flatten(values)
        for i, v in enumerate(leaves):
            if isinstance(v, fx.Node) and v in env:
                leaves[i] = env[v]
            if isinstance(v, sym_types):
                leaves[i] = v.node
            if floats_by_bits:
                leaves[i] = _by_bits(leaves[i])
        return tuple(leaves), spec

    for n in nodes:
        env[n] = n
        if n.op in ("placeholder", "output", "get_attr"):
            continue
        target = get_aten_target(n)
        if target in rand_ops or target is empty or n in skip_bases:
            continue
        if rules.cse_skips_impure and _impure(n, facts, True):
            continue
        if output_storages:
            key = _storage_key(n)
            if key is not None and key in output_storages:
                continue
        val = n.meta.get("val")
        if isinstance(val, sympy.Symbol) and free_unbacked_symbols(val):
            continue
        args, args_spec = substitute(n.args)
        kwargs, kwargs_spec = substitute(n.kwargs)
        extra_key = (n in backward) if backward is not None else None
        token = {"target": n.target, "extra_key": extra_key, "args": args, "args_spec": args_spec,
                 "kwargs": kwargs, "kwargs_spec": kwargs_spec}
        if rules.cse_keys_stream:
            custom = n.meta.get("custom", {})
            token["custom_context"] = (custom.get("stream", 0), custom.get("mempool"), custom.get("mempool_device"))
        hash_val = (n.target, extra_key,
                    hash((tuple((a, type(a)) for a in args), tuple((a, type(a)) for a in kwargs))))
        known = hash_val in hash_env
        overwrite = False
        if known and token_map[hash_val] == token:
            previous = hash_env[hash_val]
            if region_ids[n] == region_ids[previous]:
                env[n] = previous
                replace[n] = previous
                continue
            overwrite = True
        if overwrite or not known:
            hash_env[hash_val] = n
            token_map[hash_val] = token
    return replace, region_ids


def plan(graph: fx.Graph, facts: TargetFacts, *, cse: bool, impure_random: bool,
         rules: Rules | None = None, num_fwd_outputs: int | None = None) -> Preparation:
    nodes = list(graph.nodes)
    dead = plan_dead_code(nodes, facts, impure_random)
    if not cse:
        return Preparation(dead=dead)
    alive = [n for n in nodes if n not in dead] if dead else nodes
    replace, region_ids = plan_cse(alive, rules, num_fwd_outputs, facts)
    return Preparation(dead=dead, replace=replace, region_ids=region_ids)


def _as_fresh_graph(graph: fx.Graph) -> None:
    """Give ``graph`` the state of the new Graph torch's CSE copies into: the
    default code generator, no tracer, and a name table of the surviving
    nodes only (so nodes created later get the names torch's would)."""
    namespace = _Namespace()
    position: dict[fx.Node, int] = {}
    for i, node in enumerate(graph.nodes):
        namespace.create_name(node.name, None)
        position[node] = i
    # A copied graph registers every node's users in graph order; rewriting
    # arguments in place moves a user to the end of its inputs' user lists.
    for node in graph.nodes:
        users = node.users
        if len(users) > 1:
            order = sorted(users, key=position.__getitem__)
            if order != list(users):
                node.users = dict.fromkeys(order)
    graph._graph_namespace = namespace
    graph._codegen = CodeGen()
    graph._tracer_cls = None
    graph._tracer_extras = None
    graph._co_fields = {}


class PreparationMismatch(RuntimeError):
    """Applying the plan did not give the graph it promised."""


def apply(joint_module: fx.GraphModule, prep: Preparation, expected: list[fx.Node]) -> None:
    """Dead-code elimination (torch's own, in place), then the planned CSE in
    place, then one recompile.  Raises PreparationMismatch if the graph's
    nodes are not ``expected`` afterwards."""
    graph = joint_module.graph
    if prep.dead or any(node.op == "get_attr" for node in graph.nodes):
        # torch's own pass (it also cleans subgraph modules named by get_attr).
        graph.eliminate_dead_code()
    if prep.region_ids is not None:
        for node, region in prep.region_ids.items():
            node.meta["mutation_region_id"] = region
    if prep.replace:
        for duplicate, representative in prep.replace.items():
            duplicate.replace_all_uses_with(representative, propagate_meta=False)
        for duplicate in reversed(list(prep.replace)):
            graph.erase_node(duplicate)
    if prep.region_ids is not None:
        _as_fresh_graph(graph)
    joint_module.recompile()
    if list(graph.nodes) != expected:
        raise PreparationMismatch("dead-code elimination / CSE did not remove exactly the planned nodes")


__all__ = ["Preparation", "PreparationMismatch", "apply", "plan", "plan_cse", "plan_dead_code", "aten_target"]
