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

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx
from torch._ops import OpOverload
from torch.fx.graph import CodeGen, _Namespace
from torch.fx.immutable_collections import immutable_dict, immutable_list
from torch.utils._pytree import tree_flatten, tree_is_leaf

import fxcut._C as _C
from .codegen import generated_code
from .gate import DCE_CSE_PLAN, gated
from .ops import TargetFacts, aten_target, default_facts, is_impure, mutable_hop_targets, mutated_inputs
from .versions import Rules


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
    """The identity torch's ``StorageWeakRef`` compares and hashes by (the
    storage's address), without making a weak reference per node."""
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        return None
    try:
        return val.untyped_storage()._cdata
    except NotImplementedError:
        return None


#: A leaf in a structure key (``_flatten``): torch's leaf TreeSpec.
_LEAF: tuple[Any, ...] = ("None", None, ())
_CONTAINERS: dict[type, str] = {t: str(t) for t in (tuple, list, dict, immutable_list, immutable_dict)}
_KNOWN_LEAVES: frozenset[type] = frozenset({
    fx.Node, int, float, bool, str, type(None), complex, torch.dtype, torch.device, torch.layout,
    torch.memory_format, torch.SymInt, torch.SymFloat, torch.SymBool,
})


class _NotFast(Exception):
    """A value holds a pytree container ``_flatten`` does not know."""


def _flatten_into(value: Any, leaves: list[Any]) -> tuple[Any, ...]:
    cls = value.__class__
    name = _CONTAINERS.get(cls)
    if name is None:
        if cls in _KNOWN_LEAVES or tree_is_leaf(value):
            leaves.append(value)
            return _LEAF
        raise _NotFast
    if cls is dict or cls is immutable_dict:
        return (name, list(value), tuple([_flatten_into(v, leaves) for v in value.values()]))
    return (name, None, tuple([_flatten_into(v, leaves) for v in value]))


def _spec_key(spec: Any) -> tuple[Any, ...]:
    """A pytree TreeSpec as the key ``_flatten_into`` builds: equal exactly
    when the TreeSpecs are (same ``str(type)``, context and children)."""
    if spec.type is None:
        return _LEAF
    return (str(spec.type), spec.context, tuple(_spec_key(c) for c in spec._children))


def _flatten(value: Any) -> tuple[list[Any], tuple[Any, ...]]:
    """``tree_flatten(value)``'s leaves, and its TreeSpec as a key that
    compares the way TreeSpecs do; fx's containers without pytree's
    per-call machinery, anything else through pytree itself."""
    leaves: list[Any] = []
    try:
        return leaves, _flatten_into(value, leaves)
    except _NotFast:
        leaves, spec = tree_flatten(value)
        return leaves, _spec_key(spec)


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


_SYM_TYPES = (torch.SymBool, torch.SymInt, torch.SymFloat)
#: A node's CSE key: (args, args_spec, kwargs, kwargs_spec, hash_arg) -- each of
#: args and kwargs flattened and substituted as ``fx_graph_cse`` does, its
#: structure as ``_flatten`` keys it, and the hash torch's table keys on.
CseKey = tuple[tuple[Any, ...], Any, tuple[Any, ...], Any, int]


def _substitute(values: Any, env: dict[fx.Node, fx.Node], floats_by_bits: bool) -> tuple[tuple[Any, ...], Any]:
    leaves, spec = _flatten(values)
    for i, v in enumerate(leaves):
        if isinstance(v, fx.Node) and v in env:
            leaves[i] = env[v]
        if isinstance(v, _SYM_TYPES):
            leaves[i] = v.node
        if floats_by_bits:
            leaves[i] = _by_bits(leaves[i])
    return tuple(leaves), spec


def python_cse_key(args: Any, kwargs: Any, env: dict[fx.Node, fx.Node], floats_by_bits: bool) -> CseKey:
    """A node's CSE key (``CseKey``), in Python: the reference for, and the
    fallback of, the C extension's ``cse_key``."""
    a, a_spec = _substitute(args, env, floats_by_bits)
    k, k_spec = _substitute(kwargs, env, floats_by_bits)
    return a, a_spec, k, k_spec, hash((tuple((x, type(x)) for x in a), tuple((x, type(x)) for x in k)))


@dataclass(frozen=True, slots=True, kw_only=True)
class CseKeyConfig:
    """The config of the C extension's ``cse_key`` (and ``PlanConfig.key``),
    its fields read by name (csrc/py_cse.c; a missing or ill-typed one is a
    TypeError naming it)."""

    node_cls: type
    #: The symbolic types whose values are keyed by their ``.node``.
    sym_types: tuple[type, ...]
    #: fx's containers (exact types) -> ``str(type)``, the structure key's name.
    containers: dict[type, str]
    #: Those of them that are dicts (keyed by their keys, in order).
    dict_types: tuple[type, ...]
    #: Types that are pytree leaves without asking pytree.
    known_leaves: frozenset[type]
    #: pytree's leaf test, for any other type.
    tree_is_leaf: Callable[[Any], bool]
    #: A float or complex leaf -> its key by bit pattern (torch 2.14's CSE), or None: the value itself.
    by_bits: Callable[[Any], Any] | None
    #: A leaf's structure key (torch's leaf TreeSpec).
    leaf_key: tuple[Any, ...]


def cse_key_config(floats_by_bits: bool) -> CseKeyConfig:
    """The ``config`` argument of the C extension's ``cse_key``."""
    return CseKeyConfig(node_cls=fx.Node, sym_types=_SYM_TYPES, containers=_CONTAINERS,
                        dict_types=(dict, immutable_dict), known_leaves=_KNOWN_LEAVES, tree_is_leaf=tree_is_leaf,
                        by_bits=_by_bits if floats_by_bits else None, leaf_key=_LEAF)


def _backward_seeds(output: fx.Node, num_fwd_outputs: int) -> list[fx.Node]:
    """The backward's outputs: the output node's values past the forward's."""
    from torch.utils._pytree import arg_tree_leaves

    leaves = arg_tree_leaves(*output.args)[num_fwd_outputs:]
    return [x for x in leaves if isinstance(x, fx.Node) and x.op != "output"]


def _backward_ancestors(nodes: list[fx.Node], num_fwd_outputs: int) -> set[fx.Node]:
    """The backward outputs and everything they are computed from."""
    stack = _backward_seeds(nodes[-1], num_fwd_outputs)
    seen: set[fx.Node] = set()
    while stack:
        node = stack.pop()
        if node not in seen:
            seen.add(node)
            stack.extend(node.all_input_nodes)
    return seen


def _is_mutation_wrapper(node: fx.Node) -> bool:
    """A functional wrapper (auto_functionalized, its v2, a user triton
    kernel) whose mutable bases torch 2.14's CSE keeps distinct."""
    if node.op != "call_function":
        return False
    target = node.target
    v2 = getattr(torch.ops.higher_order, "auto_functionalized_v2", None)
    return (v2 is not None and target is v2) or any(target is op for op in mutable_hop_targets())


def _mutation_bases_of(node: fx.Node) -> list[fx.Node]:
    """The inputs the functional wrapper ``node`` mutates."""
    v2 = getattr(torch.ops.higher_order, "auto_functionalized_v2", None)
    if v2 is not None and node.target is v2:
        bases: list[fx.Node] = []
        for base in node.kwargs.get("_all_bases", ()):  # type: ignore[union-attr]
            bases.extend(b for b in (base if isinstance(base, (list, tuple)) else (base,)) if isinstance(b, fx.Node))
        return bases
    return mutated_inputs(node)


def _mutation_bases(nodes: list[fx.Node]) -> set[fx.Node]:
    """Inputs a functional wrapper (auto_functionalized, its v2, a user triton
    kernel) mutates: torch 2.14's CSE keeps each one distinct."""
    bases: set[fx.Node] = set()
    for n in nodes:
        if _is_mutation_wrapper(n):
            bases.update(_mutation_bases_of(n))
    return bases


#: The facts ``_C.prepare_plan`` asks ``node_facts`` for, one bit each: never
#: merged (a random op, aten.empty), impure for dead-code elimination, impure
#: for CSE (impure_random=True), a mutation (``is_mutation_op``), a functional
#: wrapper (its mutable bases kept apart); and two that let the C plan ask
#: once for many nodes: "the same for every call_function node of this
#: target" and "the same for every node of this op with a str target" (a
#: placeholder, output or get_attr), each for nodes without an ``out`` keyword.
(NEVER_MERGED, IMPURE_DCE, IMPURE_CSE, MUTATES, MUTATION_WRAPPER, SAME_FOR_TARGET,
 SAME_FOR_OP) = (1 << k for k in range(7))


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanConfig:
    """The config of the C extension's ``prepare_plan``, its fields read by
    name (csrc/py_prepare.c; a missing or ill-typed one is a TypeError
    naming it)."""

    #: The bit ``node_facts`` answers for each fact (the constants above).
    never_merged: int = NEVER_MERGED
    impure_dce: int = IMPURE_DCE
    impure_cse: int = IMPURE_CSE
    mutates: int = MUTATES
    mutation_wrapper: int = MUTATION_WRAPPER
    same_for_target: int = SAME_FOR_TARGET
    same_for_op: int = SAME_FOR_OP
    #: (args, kwargs, env) -> the node's ``CseKey`` in Python, for arguments pytree must flatten.
    python_key: Callable[[Any, Any, dict[fx.Node, fx.Node]], CseKey]
    #: A functional wrapper -> the inputs it mutates (kept apart from 2.14), or None.
    bases_of: Callable[[fx.Node], list[fx.Node]] | None
    #: The output node -> the backward's outputs (values the backward needs kept apart, from 2.14), or None.
    backward_seeds: Callable[[fx.Node], list[fx.Node]] | None
    #: torch's ``free_unbacked_symbols`` (a node whose value has them is never merged).
    free_unbacked_symbols: Callable[[Any], Any]
    symbol_cls: type
    tensor_cls: type
    #: The release's CSE rules: key the stream context; skip impure nodes.
    keys_stream: bool
    skips_impure: bool
    #: The CSE key's own config.
    key: CseKeyConfig


def node_facts_of(facts: TargetFacts, impure_random: bool, rules: Rules) -> Callable[[fx.Node], int]:
    """``_C.prepare_plan``'s ``node_facts``: a node's facts as the bits
    above, computed as the Python plan computes them."""
    from torch._functorch.compile_utils import get_aten_target, rand_ops
    from torch._inductor.pattern_matcher import is_mutation_op

    empty = torch.ops.aten.empty
    skips_impure = rules.cse_skips_impure
    skips_bases = rules.cse_skips_mutation_bases

    def node_facts(node: fx.Node) -> int:
        bits = 0
        if _impure(node, facts, impure_random):
            bits |= IMPURE_DCE
        if skips_impure and _impure(node, facts, True):
            bits |= IMPURE_CSE
        target = get_aten_target(node)
        if target in rand_ops or target is empty:
            bits |= NEVER_MERGED
        if is_mutation_op(node):
            bits |= MUTATES
        if skips_bases and _is_mutation_wrapper(node):
            bits |= MUTATION_WRAPPER
        if node.op == "call_function" and not isinstance(node.target, torch._ops.HigherOrderOperator):
            bits |= SAME_FOR_TARGET
        elif node.op in ("placeholder", "output", "get_attr") and isinstance(node.target, str):
            # what the above reads of such a node is its op and its out keyword
            bits |= SAME_FOR_OP
        return bits

    return node_facts


def plan_config(rules: Rules, num_fwd_outputs: int | None) -> PlanConfig:
    """The ``config`` argument of the C extension's ``prepare_plan``."""
    import sympy
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    floats_by_bits = rules.cse_floats_by_bits

    def python_key(args: Any, kwargs: Any, env: dict[fx.Node, fx.Node]) -> CseKey:
        return python_cse_key(args, kwargs, env, floats_by_bits)

    backward_seeds: Callable[[fx.Node], list[fx.Node]] | None = None
    if rules.cse_keeps_backward_apart and num_fwd_outputs is not None:
        def backward_seeds(output: fx.Node, n: int = num_fwd_outputs) -> list[fx.Node]:
            return _backward_seeds(output, n)

    return PlanConfig(python_key=python_key,
                      bases_of=_mutation_bases_of if rules.cse_skips_mutation_bases else None,
                      backward_seeds=backward_seeds, free_unbacked_symbols=free_unbacked_symbols,
                      symbol_cls=sympy.Symbol, tensor_cls=torch.Tensor, keys_stream=rules.cse_keys_stream,
                      skips_impure=rules.cse_skips_impure, key=cse_key_config(floats_by_bits))


def _mutation_regions(nodes: list[fx.Node]) -> dict[fx.Node, int]:
    """Each node's mutation region (torch's ``meta["mutation_region_id"]``):
    CSE never merges across a mutation."""
    from torch._inductor.pattern_matcher import is_mutation_op

    region_ids: dict[fx.Node, int] = {}
    region = 0
    # is_mutation_op of an OpOverload target (outside inductor's namespace) is its
    # schema's is_mutable alone: one answer per target.
    # Keyed by id(target): the nodes hold their targets for the whole plan, and
    # an OpOverload's __hash__ is Python.
    mutable_target: dict[int, bool] = {}
    for node in nodes:
        target = node.target
        if isinstance(target, OpOverload) and target.namespace != "inductor":
            mutates = mutable_target.get(id(target))
            if mutates is None:
                mutates = mutable_target[id(target)] = bool(is_mutation_op(node))
        else:
            mutates = is_mutation_op(node)
        if mutates:
            region += 1
        region_ids[node] = region
    return region_ids


def _merged_duplicates(nodes: list[fx.Node], rules: Rules, facts: TargetFacts, backward: set[fx.Node] | None,
                       skip_bases: set[fx.Node], region_ids: dict[fx.Node, int]) -> dict[fx.Node, fx.Node]:
    """``fx_graph_cse``'s loop: duplicate -> representative.  One pass, the
    per-node tests inline (this is the reference the C plan is tested
    against, and it runs over every node)."""
    import sympy
    from torch._functorch.compile_utils import get_aten_target, rand_ops
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    never_merged: dict[int, bool] = {}  # id(target) -> a random op or aten.empty (never merged)
    output = nodes[-1]
    output_storages = {k for k in (_storage_key(n) for n in output.all_input_nodes) if k is not None}
    env: dict[fx.Node, fx.Node] = {}
    hash_env: dict[tuple[Any, Any, int], fx.Node] = {}
    token_map: dict[tuple[Any, Any, int], tuple[Any, ...]] = {}
    keys_stream = rules.cse_keys_stream
    replace: dict[fx.Node, fx.Node] = {}
    empty = torch.ops.aten.empty
    floats_by_bits = rules.cse_floats_by_bits

    for n in nodes:
        env[n] = n
        if n.op in ("placeholder", "output", "get_attr"):
            continue
        never = never_merged.get(id(n.target))
        if never is None:
            target = get_aten_target(n)
            never = never_merged[id(n.target)] = target in rand_ops or target is empty
        if never or n in skip_bases:
            continue
        if rules.cse_skips_impure and _impure(n, facts, True):
            continue
        if output_storages:
            storage = _storage_key(n)
            if storage is not None and storage in output_storages:
                continue
        val = n.meta.get("val")
        if isinstance(val, sympy.Symbol) and free_unbacked_symbols(val):
            continue
        key = python_cse_key(n.args, n.kwargs, env, floats_by_bits)
        args, args_spec, kwargs, kwargs_spec, hash_arg = key
        extra_key = (n in backward) if backward is not None else None
        # fx_graph_cse's token, a dict in torch, as a tuple of the same values in a fixed order.
        if keys_stream:
            custom = n.meta.get("custom", {})
            token: tuple[Any, ...] = (n.target, extra_key, args, args_spec, kwargs, kwargs_spec,
                                      (custom.get("stream", 0), custom.get("mempool"), custom.get("mempool_device")))
        else:
            token = (n.target, extra_key, args, args_spec, kwargs, kwargs_spec)
        hash_val = (n.target, extra_key, hash_arg)
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
    return replace


def plan_cse(
    nodes: list[fx.Node],
    rules: Rules,
    num_fwd_outputs: int | None = None,
    facts: TargetFacts | None = None,
    use_c: bool = True,
) -> tuple[dict[fx.Node, fx.Node], dict[fx.Node, int]]:
    """``fx_graph_cse``'s choices over ``nodes`` (the graph after dead-code
    elimination): duplicate -> representative, and the mutation region of
    every node (which torch records in ``meta["mutation_region_id"]``).
    ``rules``: the running release's CSE rules (fxcut.torchrules.versions).
    ``num_fwd_outputs``: as the partitioner runs CSE (from 2.14 it keeps
    values the backward needs apart from the others); None plans
    ``fx_graph_cse`` called on its own.  ``use_c``: the whole plan from the
    C extension's ``prepare_plan`` (one pass over the nodes, calling back
    here once per distinct target); False: this module's Python loop, the
    reference the C plan is tested against (the same plan)."""
    facts = facts or default_facts()
    if use_c:
        _, replace_c, region_ids_c = _C.prepare_plan(
            nodes, node_facts_of(facts, True, rules), plan_config(rules, num_fwd_outputs),
            eliminate_dead=False, cse=True)
        assert region_ids_c is not None
        return replace_c, region_ids_c
    backward: set[fx.Node] | None = None
    if rules.cse_keeps_backward_apart and num_fwd_outputs is not None:
        backward = _backward_ancestors(nodes, num_fwd_outputs)
    skip_bases = _mutation_bases(nodes) if rules.cse_skips_mutation_bases else set()
    region_ids = _mutation_regions(nodes)
    return _merged_duplicates(nodes, rules, facts, backward, skip_bases, region_ids), region_ids


@gated(DCE_CSE_PLAN)
def plan(graph: fx.Graph, facts: TargetFacts, *, cse: bool, impure_random: bool,
         rules: Rules, num_fwd_outputs: int | None = None, use_c: bool = True) -> Preparation:
    """What dead-code elimination (``impure_random`` as torch's reads it)
    and, when ``cse``, fx_graph_cse (as ``plan_cse``) will do to ``graph``.
    ``use_c``: in one pass of the C extension's ``prepare_plan``; False: in
    Python (``plan_dead_code`` and ``plan_cse``), the reference."""
    nodes = list(graph.nodes)
    if use_c:
        dead, replace, region_ids = _C.prepare_plan(
            nodes, node_facts_of(facts, impure_random, rules), plan_config(rules, num_fwd_outputs),
            eliminate_dead=True, cse=cse)
        return Preparation(dead=dead, replace=replace, region_ids=region_ids)
    dead = plan_dead_code(nodes, facts, impure_random)
    if not cse:
        return Preparation(dead=dead)
    alive = [n for n in nodes if n not in dead] if dead else nodes
    replace, region_ids = plan_cse(alive, rules, num_fwd_outputs, facts, use_c=False)
    return Preparation(dead=dead, replace=replace, region_ids=region_ids)


def _names_registered(names: list[str]) -> _Namespace:
    """A fresh ``_Namespace`` after ``create_name(name, None)`` for each of
    ``names`` in order, without the call where it would keep the name as is
    (an unused name its pattern takes, nothing it must not shadow): the name
    is recorded, with the count of its base, as ``create_name`` records it."""
    from torch.fx.graph import _illegal_names, _name_regex

    namespace = _Namespace()
    used, counts = namespace._used_names, namespace._base_count
    match = _name_regex.match
    for name in names:
        m = match(name)
        if m is None or name in used or name in _illegal_names:
            namespace.create_name(name, None)
            continue
        base, num = m.group(1, 2)
        counts[base] = counts.get(base, 0) if num is None else int(num)
        used.add(name)
    return namespace


def _as_fresh_graph(graph: fx.Graph) -> None:
    """Give ``graph`` the state of the new Graph torch's CSE copies into: the
    default code generator, no tracer, and a name table of the surviving
    nodes only (so nodes created later get the names torch's would)."""
    nodes = list(graph.nodes)
    namespace = _names_registered([node.name for node in nodes])
    position = {node: i for i, node in enumerate(nodes)}
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


@gated(DCE_CSE_PLAN)
def apply(joint_module: fx.GraphModule, prep: Preparation, expected: list[fx.Node]) -> None:
    """Dead-code elimination (torch's own, in place), then the planned CSE in
    place, then one recompile.  Raises PreparationMismatch if the graph's
    nodes are not ``expected`` afterwards -- as any failure of a copy, a
    :class:`~fxcut.torchrules.gate.TorchChanged` (the gate): the guard
    restores the graph and torch's partitioner decides it."""
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
    with generated_code(graph):
        joint_module.recompile()
    if list(graph.nodes) != expected:
        raise PreparationMismatch("dead-code elimination / CSE did not remove exactly the planned nodes")


__all__ = ["Preparation", "PreparationMismatch", "apply", "plan", "plan_cse", "plan_dead_code", "aten_target"]
