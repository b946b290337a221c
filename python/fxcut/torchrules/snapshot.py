"""Put a GraphModule back exactly as it was when a partition fails.

The partitioner writes to the user's module only after its decision has
succeeded (dead-code elimination, CSE, recompute tags, then the module
building: :mod:`fxcut.torchrules.extract` where the versions table names it the
release's builder, torch's extraction passes elsewhere), but some of those
later steps can still fail: Python's compiler rejecting the generated code,
torch's module extraction or activation offloading, torch's own partitioner
in the fallback path.
:class:`ModuleSnapshot` records, before the first write, everything those
steps touch -- per graph: the node objects and their order, each node's
args, kwargs, users order and meta dict (object and contents); the graph's
name table, code generator and tracer fields; per module: its graph and its
generated code -- for the joint module and every GraphModule under it (dead-
code elimination recurses into subgraphs), and :meth:`restore` puts them back.
:func:`copy_graph_module` makes an independent copy to partition instead
(verify mode gives torch one).

Both rely on private ``torch.fx`` attributes; which, per release, is the
versions table's :attr:`fxcut.torchrules.versions.Rules.fx_internals` (and
tests/test_versions.py checks, on every release, that they exist as this
module expects).
"""

from __future__ import annotations

import copy
from typing import Any

import torch.fx as fx

from .gate import SNAPSHOT, gated
from .versions import FxInternals

_MISSING = object()


class _GraphState:
    def __init__(self, graph: fx.Graph, fx_internals: FxInternals) -> None:
        self.graph = graph
        nodes = list(graph.nodes)
        self.nodes = nodes
        # Parallel flat lists, no per-node object (this runs on every
        # partition, and every container it made would live through the
        # whole call, for the garbage collector to traverse): node i's users
        # are users[user_at[i]:user_at[i + 1]], its meta's keys and values
        # meta_keys / meta_values[meta_at[i]:meta_at[i + 1]].
        self.args = [n.args for n in nodes]
        self.kwargs = [n.kwargs for n in nodes]
        self.metas = [n.meta for n in nodes]
        users: list[fx.Node] = []
        user_at = [0]
        meta_keys: list[str] = []
        meta_values: list[Any] = []
        meta_at = [0]
        for node, meta in zip(nodes, self.metas):
            users.extend(node.users)
            user_at.append(len(users))
            meta_keys.extend(meta)
            meta_values.extend(meta.values())
            meta_at.append(len(meta_keys))
        self.users = users
        self.user_at = user_at
        self.meta_keys = meta_keys
        self.meta_values = meta_values
        self.meta_at = meta_at
        self.fields = {name: getattr(graph, name, _MISSING) for name in fx_internals.graph_fields}
        namespace = graph._graph_namespace
        self.namespace = namespace
        self.namespace_state = {k: copy.copy(v) for k, v in vars(namespace).items()}

    def restore(self) -> None:
        graph = self.graph
        root = graph._root
        nodes = self.nodes
        for node in nodes:
            if node._erased:
                # An erased node keeps stale neighbours; make it a lone node
                # so that moving it cannot unlink anything else.
                node._prev = node
                node._next = node
                node._erased = False
        current = list(graph.nodes)
        keep = {id(n) for n in nodes}
        added = [n for n in current if id(n) not in keep]  # nodes a failed pass inserted
        for node in added:
            node._remove_from_list()
            node._erased = True
        for node in nodes:
            root._prepend(node)
        graph._len = len(nodes)
        table = type(graph._find_nodes_lookup_table)()
        for node in nodes:
            table.insert(node)
        graph._find_nodes_lookup_table = table
        for node in added:
            node._update_args_kwargs(
                fx.node.map_arg(node.args, lambda _: None), fx.node.map_arg(node.kwargs, lambda _: None)
            )
        for node, args, kwargs in zip(nodes, self.args, self.kwargs):
            node._update_args_kwargs(args, kwargs)
        for i, (node, meta) in enumerate(zip(nodes, self.metas)):
            users = self.users[self.user_at[i]:self.user_at[i + 1]]
            if list(node.users) != users:
                node.users = dict.fromkeys(users)
            if node.meta is not meta:
                node.meta = meta
            a, b = self.meta_at[i], self.meta_at[i + 1]
            keys, values = self.meta_keys[a:b], self.meta_values[a:b]
            if list(meta) != keys or any(meta[k] is not v for k, v in zip(keys, values)):
                meta.clear()
                meta.update(zip(keys, values))
        for name, value in self.fields.items():
            if value is _MISSING:
                if hasattr(graph, name):
                    delattr(graph, name)
            else:
                setattr(graph, name, value)
        vars(self.namespace).update(self.namespace_state)
        graph._graph_namespace = self.namespace


class ModuleSnapshot:
    """The state of ``module`` and every GraphModule under it, restorable."""

    @gated(SNAPSHOT)
    def __init__(self, module: fx.GraphModule, fx_internals: FxInternals) -> None:
        """``fx_internals``: the private torch.fx attributes of the running
        release (from its :class:`~fxcut.torchrules.versions.Rules`)."""
        self.modules: list[tuple[fx.GraphModule, dict[str, Any], Any]] = []
        self.graphs: list[_GraphState] = []
        seen: set[int] = set()
        for sub in module.modules():
            if not isinstance(sub, fx.GraphModule) or id(sub) in seen:
                continue
            seen.add(id(sub))
            fields = {name: sub.__dict__.get(name, _MISSING) for name in fx_internals.module_fields}
            fields["_graph"] = sub.graph
            self.modules.append((sub, fields, type(sub).__dict__.get("forward", _MISSING)))
            self.graphs.append(_GraphState(sub.graph, fx_internals))

    @gated(SNAPSHOT)
    def restore(self) -> None:
        for state in self.graphs:
            state.restore()
        for sub, fields, forward in self.modules:
            for name, value in fields.items():
                if value is _MISSING:
                    sub.__dict__.pop(name, None)
                else:
                    sub.__dict__[name] = value
            if forward is not _MISSING:
                type(sub).forward = forward


#: Meta entries a copy shares with the original (fake tensors and their metadata).
_SHARED_META = frozenset({"val", "tensor_meta"})


@gated(SNAPSHOT)
def copy_graph_module(gm: fx.GraphModule) -> fx.GraphModule:
    """An independent copy of ``gm``: same node names and order, own meta dicts.

    Each node's ``meta`` is a new dict, and so is every dict or list directly
    inside it except ``val`` (fake tensors, or lists of them, are shared like
    every other value).  Attributes that ``get_attr`` nodes reach are shared.
    """
    graph = fx.Graph(tracer_cls=gm.graph._tracer_cls)
    graph._codegen = copy.copy(gm.graph._codegen)
    remap: dict[fx.Node, fx.Node] = {}
    for node in gm.graph.nodes:
        new = graph.node_copy(node, remap.__getitem__)
        new.meta = {k: (copy.copy(v) if k not in _SHARED_META and isinstance(v, (dict, list)) else v)
                    for k, v in node.meta.items()}
        if new.name != node.name:
            raise RuntimeError(f"copying renamed node {node.name!r} to {new.name!r}")
        remap[node] = new
    # A lazy module stays lazy: its code is generated when first needed (a
    # graph Python cannot compile, such as a 250-deep literal in dead code,
    # is partitioned all the same).
    from torch.fx._lazy_graph_module import _LazyGraphModule

    cls = _LazyGraphModule if isinstance(gm, _LazyGraphModule) else fx.GraphModule
    out = cls(gm, graph, class_name=type(gm).__name__)
    out.meta = dict(gm.meta)
    return out
