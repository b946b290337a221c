"""The C core's checks of a graph array, through fxcut._C.validate and
fxcut._C.param_alias_walk.

A well-formed array comes from fxcut.torchrules.lower.lower_structure; each test breaks
one thing in it and asserts the exception type, that the message names the
culprit, and (for errors found by the core) the exception's ``node``.
"""

from __future__ import annotations

import dataclasses
import operator
import types
from array import array
from typing import Any

import numpy as np
import pytest
import torch
import torch.fx as fx
import torch.utils._pytree as pytree
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fxcut import _C
from fxcut.solve.arrays import GraphArrays
from fxcut.torchrules.lower import LoweredGraph, _output_leaves, lower_structure
from fxcut.torchrules.ops import zero3_facts
from fxcut.torchrules.versions import rules_or_nearest

aten = torch.ops.aten

FIELDS = ["kind", "flags", "tag", "ac_graph_id", "nbytes", "arg_ptr", "arg_idx", "in_ptr", "in_idx", "outputs"]
TYPECODES = {"kind": "B", "flags": "I", "tag": "b", "ac_graph_id": "i", "nbytes": "q",
             "arg_ptr": "i", "arg_idx": "i", "in_ptr": "i", "in_idx": "i", "outputs": "i"}
N = 6  # nodes in base()


def base() -> GraphArrays:
    """primals_1, primals_2, view(primals_1), neg(view), add(view, other=primals_2), output."""
    graph = fx.Graph()
    p1 = graph.placeholder("primals_1")
    p2 = graph.placeholder("primals_2")
    view = graph.call_function(aten.view.default, (p1, [4]))
    neg = graph.call_function(aten.neg.default, (view,))
    add = graph.call_function(aten.add.Tensor, (view,), {"other": p2})
    graph.output((neg, add))
    return lower_structure(graph, zero3_facts())


def with_(arrays: GraphArrays, **changes: Any) -> GraphArrays:
    return dataclasses.replace(arrays, **changes)


def changed(field: str, index: int, value: int) -> GraphArrays:
    arrays = base()
    buf = array(TYPECODES[field], getattr(arrays, field))
    buf[index] = value
    return with_(arrays, **{field: buf})


def raises(exc: type[BaseException], arrays: Any, params: Any = None) -> BaseException:
    with pytest.raises(exc) as info:
        if params is None:
            _C.validate(arrays)
        else:
            _C.param_alias_walk(arrays, params)
    assert type(info.value) is exc
    return info.value


# ---------------------------------------------------------------------------
# the well-formed array


def test_lowering_of_the_base_graph() -> None:
    a = base()
    assert list(a.kind) == [_C.KIND_PLACEHOLDER] * 2 + [_C.KIND_CALL_FUNCTION] * 3 + [_C.KIND_OUTPUT]
    assert [bool(f & _C.F_PRIMAL) for f in a.flags] == [True, True, False, False, False, False]
    assert [bool(f & _C.F_NO_COPY) for f in a.flags] == [False, False, True, False, False, False]
    assert list(a.tag) == [_C.TAG_NONE] * N
    assert list(a.arg_ptr) == [0, 0, 0, 1, 2, 3, 3] and list(a.arg_idx) == [0, 2, 2]
    assert list(a.in_ptr) == [0, 0, 0, 1, 2, 4, 6] and list(a.in_idx) == [0, 2, 2, 1, 3, 4]
    assert list(a.outputs) == [3, 4]


def test_well_formed_array_validates_and_walks() -> None:
    a = base()
    assert _C.validate(a) is None
    assert _C.param_alias_walk(a, array("i", [0])) == bytes([0, 0, 1, 0, 0, 0])
    assert _C.param_alias_walk(a, array("i", [1])) == bytes(N)  # primals_2 reaches add only via kwargs
    assert _C.param_alias_walk(a, array("i", [])) == bytes(N)
    assert _C.param_alias_walk(a, array("i", [0, 0, 1])) == bytes([0, 0, 1, 0, 0, 0])


def test_numpy_buffers_and_boundary_values_are_accepted() -> None:
    a = base()
    numpy_arrays = with_(a, **{f: np.frombuffer(bytes(getattr(a, f)), dtype=getattr(a, f).typecode) for f in FIELDS})
    assert _C.validate(numpy_arrays) is None
    edge = with_(a, nbytes=array("q", [_C.SIZE_UNKNOWN] * N), tag=array("b", [-1, 0, 1, 2, 3, 5]),
                 kind=array("B", [0, 0, 1, 1, 5, 3]), outputs=array("i", [-1, 5]))
    assert _C.validate(edge) is None
    assert _C.param_alias_walk(edge, np.array([0], dtype=np.int32)) == bytes([0, 0, 1, 0, 0, 0])


def test_empty_graph_array_is_valid() -> None:
    empty = types.SimpleNamespace(**{f: array(TYPECODES[f]) for f in FIELDS})
    empty.arg_ptr = array("i", [0])
    empty.in_ptr = array("i", [0])
    assert _C.validate(empty) is None
    assert _C.param_alias_walk(empty, array("i")) == b""


# ---------------------------------------------------------------------------
# lengths and CSR ends (checked by the binding)


@pytest.mark.parametrize("field", ["flags", "tag", "ac_graph_id", "nbytes", "arg_ptr", "in_ptr"])
@pytest.mark.parametrize("delta", [-1, 1])
def test_wrong_length_raises_value_error_naming_the_array(field: str, delta: int) -> None:
    a = base()
    buf = array(TYPECODES[field], getattr(a, field))
    if delta < 0:
        buf.pop()
    else:
        buf.append(buf[-1])
    expected = N + 1 if field.endswith("_ptr") else N
    for params in (None, array("i", [0])):
        exc = raises(ValueError, with_(a, **{field: buf}), params)
        assert f"{field} has {expected + delta} entries, expected {expected}" in str(exc)


@pytest.mark.parametrize("csr", ["arg", "in"])
def test_csr_end_must_match_the_index_array(csr: str) -> None:
    a = base()
    longer = array("i", getattr(a, f"{csr}_idx")) + array("i", [0])
    exc = raises(ValueError, with_(a, **{f"{csr}_idx": longer}))
    assert "CSR ends do not match" in str(exc) and f"{csr}_ptr[{N}]" in str(exc)
    exc = raises(ValueError, changed(f"{csr}_ptr", N, getattr(a, f"{csr}_ptr")[N] - 1))
    assert "CSR ends do not match" in str(exc)


# ---------------------------------------------------------------------------
# contents (checked by the core; the exception carries .node)


@pytest.mark.parametrize("csr", ["arg", "in"])
def test_ptr_must_start_at_zero(csr: str) -> None:
    exc = raises(ValueError, changed(f"{csr}_ptr", 0, 1))
    assert f"{csr}_ptr[0] must be 0, got 1" in str(exc)
    assert exc.node == -1  # type: ignore[attr-defined]


@pytest.mark.parametrize("csr", ["arg", "in"])
def test_decreasing_ptr_names_the_node(csr: str) -> None:
    # ptr[3] raised above ptr[4]: node 3's range ends before it starts
    ptr = getattr(base(), f"{csr}_ptr")
    exc = raises(ValueError, changed(f"{csr}_ptr", 3, ptr[4] + 1))
    assert f"{csr}_ptr decreases at node 3" in str(exc)
    assert exc.node == 3  # type: ignore[attr-defined]


@pytest.mark.parametrize("csr", ["arg", "in"])
def test_ptr_far_beyond_the_end_is_caught_before_idx_is_read(csr: str) -> None:
    # ptr[2] points a million entries past the end of idx; the decrease at
    # node 2 must be reported without reading idx there (regression: the
    # check used to walk idx node by node and read past its end first).
    exc = raises(ValueError, changed(f"{csr}_ptr", 2, 1_000_000))
    assert f"{csr}_ptr decreases at node 2 (1000000 >" in str(exc)
    assert exc.node == 2  # type: ignore[attr-defined]


@pytest.mark.parametrize("csr, edge, node", [("arg", 1, 3), ("in", 3, 4)])
@pytest.mark.parametrize("value", [N, 1000, -1, -(2**31)])
def test_index_out_of_range_raises_index_error(csr: str, edge: int, node: int, value: int) -> None:
    exc = raises(IndexError, changed(f"{csr}_idx", edge, value))
    assert f"{csr}_idx[{edge}] = {value} of node {node} is outside [0, {N})" in str(exc)
    assert exc.node == node  # type: ignore[attr-defined]
    exc = raises(IndexError, changed(f"{csr}_idx", edge, value), array("i", [0]))
    assert exc.node == node  # type: ignore[attr-defined]


@pytest.mark.parametrize("csr, edge, node", [("arg", 1, 3), ("in", 3, 4)])
@pytest.mark.parametrize("target", ["self", "later"])
def test_forward_reference_or_cycle_raises_value_error(csr: str, edge: int, node: int, target: str) -> None:
    used = node if target == "self" else node + 1
    exc = raises(ValueError, changed(f"{csr}_idx", edge, used))
    assert f"node {node} uses node {used}" in str(exc) and "cycle" in str(exc)
    assert exc.node == node  # type: ignore[attr-defined]
    exc = raises(ValueError, changed(f"{csr}_idx", edge, used), array("i", [0]))
    assert "cycle" in str(exc) and exc.node == node  # type: ignore[attr-defined]


@pytest.mark.parametrize("value", [_C.KIND_CALL_METHOD + 1, 255])
def test_bad_kind_raises_value_error(value: int) -> None:
    exc = raises(ValueError, changed("kind", 2, value))
    assert f"kind[2] = {value} is not a node kind" in str(exc)
    assert exc.node == 2  # type: ignore[attr-defined]


@pytest.mark.parametrize("value", [6, 127, -2, -128])
def test_bad_tag_raises_value_error(value: int) -> None:
    exc = raises(ValueError, changed("tag", 4, value))
    assert f"tag[4] = {value} is not a recompute policy" in str(exc)
    assert exc.node == 4  # type: ignore[attr-defined]


def test_negative_nbytes_raises_value_error() -> None:
    exc = raises(ValueError, changed("nbytes", 1, -2))
    assert "nbytes[1] = -2" in str(exc)
    assert exc.node == 1  # type: ignore[attr-defined]


@pytest.mark.parametrize("value", [N, -2, 2**31 - 1])
def test_output_out_of_range_raises_index_error(value: int) -> None:
    exc = raises(IndexError, changed("outputs", 1, value))
    assert f"outputs[1] = {value} is outside [-1, {N})" in str(exc)
    assert exc.node == -1  # type: ignore[attr-defined]


@pytest.mark.parametrize("node", [2, 3, 5])
def test_param_that_is_not_a_placeholder_raises_value_error(node: int) -> None:
    exc = raises(ValueError, base(), array("i", [0, node]))
    assert f"params[1] = node {node} is not a placeholder" in str(exc)
    assert exc.node == node  # type: ignore[attr-defined]


@pytest.mark.parametrize("value", [N, -1, 2**31 - 1])
def test_param_out_of_range_raises_index_error(value: int) -> None:
    exc = raises(IndexError, base(), array("i", [1, value]))
    assert f"params[1] = {value} is outside [0, {N})" in str(exc)


# ---------------------------------------------------------------------------
# buffer types and missing attributes


def _numpy_2d(a: GraphArrays, field: str) -> Any:
    return np.asarray(getattr(a, field)).reshape(-1, 1)


def _numpy_strided(a: GraphArrays, field: str) -> Any:
    doubled = np.repeat(np.asarray(getattr(a, field)), 2)
    return doubled[::2]


@pytest.mark.parametrize(
    "field, make",
    [
        ("kind", lambda a, f: array("i", getattr(a, f))),
        ("flags", lambda a, f: array("H", getattr(a, f))),
        ("flags", lambda a, f: array("f", getattr(a, f))),
        ("tag", lambda a, f: array("h", getattr(a, f))),
        ("ac_graph_id", lambda a, f: array("q", getattr(a, f))),
        ("nbytes", lambda a, f: array("d", getattr(a, f))),
        ("nbytes", lambda a, f: array("i", getattr(a, f))),
        ("arg_ptr", lambda a, f: list(getattr(a, f))),
        ("arg_idx", lambda a, f: array("q", getattr(a, f))),
        ("in_ptr", _numpy_2d),
        ("in_idx", _numpy_strided),
        ("outputs", lambda a, f: "3,4"),
        ("outputs", lambda a, f: np.asarray(getattr(a, f), dtype=np.float32)),
        ("kind", lambda a, f: np.asarray(getattr(a, f), dtype=np.bool_)),
    ],
)
def test_wrong_buffer_type_raises_type_error_naming_the_array(field: str, make: Any) -> None:
    a = base()
    bad = with_(a, **{field: make(a, field)})
    for params in (None, array("i", [0])):
        exc = raises(TypeError, bad, params)
        assert str(exc).startswith(f"{field} must ")


def test_strided_buffer_is_reported_as_not_contiguous() -> None:
    a = base()
    for params in (None, array("i", [0])):
        exc = raises(TypeError, with_(a, in_idx=_numpy_strided(a, "in_idx")), params)
        assert "in_idx must be a C-contiguous buffer" in str(exc)
    with pytest.raises(TypeError, match="params must be a C-contiguous buffer"):
        _C.param_alias_walk(a, np.array([0, 1, 0, 1], dtype=np.int32)[::2])


@pytest.mark.parametrize("params", [array("q", [0]), array("h", [0]), [0], np.array([0.0], dtype=np.float32), None])
def test_wrong_params_buffer_raises_type_error(params: Any) -> None:
    with pytest.raises(TypeError, match="params must "):
        _C.param_alias_walk(base(), params)


@pytest.mark.parametrize("missing", FIELDS)
def test_missing_attribute_raises_type_error_naming_it(missing: str) -> None:
    a = base()
    partial = types.SimpleNamespace(**{f: getattr(a, f) for f in FIELDS if f != missing})
    for params in (None, array("i", [0])):
        exc = raises(TypeError, partial, params)
        assert f"no attribute '{missing}'" in str(exc)


def test_entry_points_check_their_arity() -> None:
    with pytest.raises(TypeError):
        _C.param_alias_walk(base())  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        _C.validate(None)


# ---------------------------------------------------------------------------
# random garbage never crashes

_RANGE = {"b": (-(2**7), 2**7 - 1), "B": (0, 2**8 - 1), "h": (-(2**15), 2**15 - 1), "H": (0, 2**16 - 1),
          "i": (-(2**31), 2**31 - 1), "I": (0, 2**32 - 1), "q": (-(2**63), 2**63 - 1), "Q": (0, 2**64 - 1),
          "f": (-(2**24), 2**24)}


def _plausible_csr(draw: st.DrawFn, n: int) -> tuple[list[int], list[int]]:
    """ptr, idx with every index an earlier node (a valid CSR)."""
    ptr, idx = [0], []
    for i in range(n):
        idx.extend(draw(st.lists(st.integers(0, i - 1), max_size=3)) if i else [])
        ptr.append(len(idx))
    return ptr, idx


@st.composite
def garbage(draw: st.DrawFn) -> tuple[Any, Any]:
    """A plausible graph array (mostly valid), then a few corruptions: a
    value anywhere in any type's range, a wrong length, a wrong item type,
    a missing attribute."""
    n = draw(st.integers(0, 12))
    values: dict[str, list[Any]] = {
        "kind": draw(st.lists(st.sampled_from([_C.KIND_PLACEHOLDER, _C.KIND_CALL_FUNCTION, _C.KIND_CALL_FUNCTION,
                                               _C.KIND_GET_ATTR, _C.KIND_OUTPUT, _C.KIND_CALL_METHOD]),
                              min_size=n, max_size=n)),
        "flags": draw(st.lists(st.integers(0, 2**32 - 1), min_size=n, max_size=n)),
        "tag": draw(st.lists(st.integers(-1, 5), min_size=n, max_size=n)),
        "ac_graph_id": draw(st.lists(st.integers(-(2**31), 2**31 - 1), min_size=n, max_size=n)),
        "nbytes": draw(st.lists(st.integers(-1, 2**63 - 1), min_size=n, max_size=n)),
        "outputs": draw(st.lists(st.integers(-1, n - 1), max_size=4)) if n else [],
    }
    values["arg_ptr"], values["arg_idx"] = _plausible_csr(draw, n)
    values["in_ptr"], values["in_idx"] = _plausible_csr(draw, n)
    typecodes = dict(TYPECODES)
    placeholders = [i for i, k in enumerate(values["kind"]) if k == _C.KIND_PLACEHOLDER]
    params = draw(st.lists(st.sampled_from(placeholders), max_size=3)) if placeholders else []
    params_code = "i"
    missing: set[str] = set()

    for _ in range(draw(st.integers(0, 4))):
        field = draw(st.sampled_from([*FIELDS, "params"]))
        current = params if field == "params" else values[field]
        how = draw(st.sampled_from(["value"] * 5 + ["length", "type", "missing"]))
        if how == "value":
            lo, hi = _RANGE[typecodes.get(field, "i")]
            value = draw(st.one_of(st.integers(-2, n + 2), st.sampled_from([lo, hi, lo + 1, hi - 1])))
            value = min(max(value, lo), hi)
            if current:
                current[draw(st.integers(0, len(current) - 1))] = value
            else:
                current.append(value)
        elif how == "length":
            if current and draw(st.booleans()):
                current.pop(draw(st.integers(0, len(current) - 1)))
            else:
                current.append(draw(st.integers(-1, n)))
        elif how == "type":
            code = draw(st.sampled_from("bBhHiIqQf"))
            if field == "params":
                params_code = code
            else:
                typecodes[field] = code
        else:
            missing.add(field)

    def make(code: str, items: list[Any]) -> array:
        lo, hi = _RANGE[code]
        return array(code, [float(v) if code == "f" else min(max(v, lo), hi) for v in items])

    fields = {f: make(typecodes[f], values[f]) for f in FIELDS if f not in missing}
    return types.SimpleNamespace(**fields), (None if "params" in missing else make(params_code, params))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(garbage())
def test_random_garbage_never_crashes(case: tuple[Any, Any]) -> None:
    arrays, params = case
    for call in (lambda: _C.validate(arrays), lambda: _C.param_alias_walk(arrays, params)):
        try:
            result = call()
        except (ValueError, IndexError, TypeError) as exc:
            assert str(exc)
        else:
            assert result is None or result == _walk_in_python(arrays, params)


def _walk_in_python(arrays: Any, params: Any) -> bytes:
    """The walk over a (valid) graph array, for the cases the core accepts."""
    aliasing = _C.F_NO_COPY | _C.F_CAST
    reached = set(params)
    marks = bytearray(len(arrays.kind))
    for i, kind in enumerate(arrays.kind):
        if kind != _C.KIND_CALL_FUNCTION or not arrays.flags[i] & aliasing:
            continue
        if any(arrays.arg_idx[e] in reached for e in range(arrays.arg_ptr[i], arrays.arg_ptr[i + 1])):
            marks[i] = 1
            reached.add(i)
    return bytes(marks)


# ---------------------------------------------------------------------------
# the named boundary: signatures, constants, typed results

SIGNATURES = {
    "validate": "(graph, /)",
    "param_alias_walk": "(graph, params, /)",
    "min_cut": "(n_vertices, tail, head, cap, source, sink, algorithm=0)",
    "partition_decide": "(graph, options, /, *, num_fwd_outputs, keep_network=0, static_lifetime=None, "
                        "dont_ban=None, force_save=None, fuse_a=None, fuse_b=None)",
    "budget_plan": "(graph, options, /, *, num_fwd_outputs, memory_budget, static_lifetime=None, "
                   "input_storage=None, force_save=None, fuse_a=None, fuse_b=None)",
    "knapsack": "(memory, runtime, max_memory, solver, /)",
    "aggressive_options": "(options, /)",
    "memory_simulate": "(graph, /, *, num_fwd_outputs, saved, storage_of=None, flops=None, marks=None, "
                       "timeline=False, fusion=None, fused_cost=None, iteration=None, realize=None, hold_saved=False, "
                       "workspace=None, kernel_calls=False)",
    "plan_simulate": "(graph, /, *, num_fwd_outputs, role, saved, storage_of=None, flops=None, marks=None, "
                     "fusion=None, fused_cost=None, iteration=None, realize=None, hold_saved=False, workspace=None, "
                     "kernel_calls=False)",
    "plan_frontier": "(graph, /, *, num_fwd_outputs, role, storage_of=None, flops=None, seeds=None, "
                     "exact_max_free=16, max_work=4000000000, time_limit=1.0, max_points=1024, marks=None, "
                     "fusion=None, fused_cost=None, iteration=None, realize=None, threads=0, hold_saved=False, "
                     "workspace=None, kernel_calls=False)",
    "cse_key": "(args, kwargs, env, config)",
    "lower_read": "(nodes, replace, config, /)",
    "prepare_plan": "(nodes, node_facts, config, /, *, eliminate_dead, cse)",
    "placeholder_role": "(name, /)",
    "partitioner_tag_flags": "(tag, mutable, /)",
}


def test_every_c_function_has_its_signature() -> None:
    import inspect

    functions = {name for name, f in vars(_C).items() if isinstance(f, types.BuiltinFunctionType)}
    assert functions == set(SIGNATURES)
    for name, text in SIGNATURES.items():
        assert str(inspect.signature(getattr(_C, name))) == text, name


def test_tag_constants_are_torchs_checkpoint_policies() -> None:
    from torch.utils.checkpoint import CheckpointPolicy

    assert {p.name: p.value for p in CheckpointPolicy} == {
        name: getattr(_C, f"TAG_{name}") for name in
        ("MUST_SAVE", "PREFER_SAVE", "MUST_RECOMPUTE", "PREFER_RECOMPUTE", "MUST_CPU_OFFLOAD", "PREFER_CPU_OFFLOAD")
    }
    assert _C.TAG_NONE not in {p.value for p in CheckpointPolicy}


def test_mode_constants_are_distinct_and_named() -> None:
    assert sorted([_C.KEEP_NONE, _C.KEEP_NETWORK, _C.KEEP_BUILD_ONLY]) == [0, 1, 2]
    assert len({_C.MAXFLOW_DEFAULT, _C.MAXFLOW_PUSH_RELABEL, _C.MAXFLOW_DINIC}) == 3
    assert _C.KNAPSACK_SOLVERS == ("dp", "dp_lean", "greedy", "dp_knapsack_sliding_hirschberg")


def _decision_inputs() -> tuple[Any, Any]:
    import synthetic_arrays

    return synthetic_arrays.build(3), synthetic_arrays.DEFAULT_OPTIONS


def test_decision_results_are_typed() -> None:
    arrays, options = _decision_inputs()
    d = _C.partition_decide(arrays, options, num_fwd_outputs=arrays.num_fwd_outputs)
    assert type(d) is _C.Decision
    n = len(arrays.kind)
    formats = {"tag": "b", "node_class": "B", "ban_reason": "B", "dist_from_bw": "q", "weight": "q"}
    for field, fmt in formats.items():
        view = getattr(d, field)
        assert isinstance(view, memoryview) and view.format == fmt and len(view) == n and view.readonly, field
    assert d.saved.format == "i" and len(d.saved) > 0 and list(d.saved) == sorted(d.saved)
    assert all(d.node_class[i] & _C.C_SAVED for i in d.saved)
    assert d.network is None and isinstance(d.cut_value, int) and d.cut_value > 0
    assert list(d.tag) == list(arrays.tag)  # no tag pass changes a synthetic graph's TAG_NONE


def test_keep_network_modes() -> None:
    arrays, options = _decision_inputs()
    n = len(arrays.kind)
    solved = _C.partition_decide(arrays, options, num_fwd_outputs=arrays.num_fwd_outputs,
                                 keep_network=_C.KEEP_NETWORK)
    built = _C.partition_decide(arrays, options, num_fwd_outputs=arrays.num_fwd_outputs,
                                keep_network=_C.KEEP_BUILD_ONLY)
    assert len(built.saved) == 0 and built.cut_value == 0
    tail, head, cap = solved.network
    assert (tail.format, head.format, cap.format) == ("i", "i", "q")
    assert [bytes(v) for v in solved.network] == [bytes(v) for v in built.network]
    value, sink_side = _C.min_cut(2 * n + 2, tail, head, cap, 2 * n, 2 * n + 1, _C.MAXFLOW_DINIC)
    assert value == solved.cut_value
    saved = [i for i in range(n) if solved.weight[i] != _C.WEIGHT_NONE and not sink_side[2 * i]
             and sink_side[2 * i + 1]]
    assert saved == list(solved.saved)


def test_budget_plan_results_are_typed() -> None:
    arrays, options = _decision_inputs()
    p = _C.budget_plan(arrays, options, num_fwd_outputs=arrays.num_fwd_outputs, memory_budget=1.0)
    assert type(p) is _C.BudgetPlan and type(p.decision) is _C.Decision
    assert p.stage == _C.STAGE_MIN_CUT and p.n_passes == 1
    assert p.candidates.format == "i" and p.memories.format == "d" and len(p.candidates) == 0
    plain = _C.partition_decide(arrays, options, num_fwd_outputs=arrays.num_fwd_outputs)
    assert list(p.decision.saved) == list(plain.saved) and p.decision.cut_value == plain.cut_value
    zero = _C.budget_plan(arrays, options, num_fwd_outputs=arrays.num_fwd_outputs, memory_budget=0.0)
    assert zero.stage == _C.STAGE_INPUTS and zero.n_passes == 0
    inputs = [i for i in range(len(arrays.kind)) if arrays.kind[i] == _C.KIND_PLACEHOLDER
              and arrays.flags[i] & (_C.F_PRIMAL | _C.F_FWD_SEED)]
    assert sorted(zero.decision.saved) == inputs


def test_knapsack_results_are_typed() -> None:
    r = _C.knapsack([0.25, 0.5, 0.125], [3.0, 2.0, 1.0], 0.4, "greedy")
    assert type(r) is _C.KnapsackResult
    assert r.save.format == "B" and r.order.format == "i"
    # greedy: by runtime / memory (12, 4, 8): items 0 and 2 fit
    assert list(r.order) == [0, 2, 1] and list(r.save) == [1, 0, 1] and r.value == 4.0
    save, order, value, peak = r
    assert peak == r.peak_bytes >= 0


# --------------------------------------------------------------------------- the C reader

#: The C reader equals the Python path, and its rules equal torch's: on every
#: supported torch (``pytest -m fidelity``, scripts/matrix.sh).
fidelity = pytest.mark.fidelity

_FIELDS = ("kind", "flags", "tag", "ac_graph_id", "nbytes", "arg_ptr", "arg_idx", "in_ptr", "in_idx", "outputs")


def _both_paths(graph: fx.Graph, **kw: Any) -> tuple[LoweredGraph, LoweredGraph]:
    from fxcut.torchrules.lower import lower_for_partition
    from fxcut.torchrules.ops import default_facts

    facts, rules = default_facts(), rules_or_nearest()
    py = lower_for_partition(graph, facts, impure_random=True, rules=rules, use_c=False, **kw)
    c = lower_for_partition(graph, facts, impure_random=True, rules=rules, use_c=True, **kw)
    return py, c


def _assert_same_arrays(py: LoweredGraph, c: LoweredGraph) -> None:
    for f in _FIELDS:
        assert getattr(c, f) == getattr(py, f), f
        assert getattr(c, f).typecode == getattr(py, f).typecode, f
    assert c.nodes == py.nodes and c.index == py.index


@fidelity
@pytest.mark.parametrize("name", ["gpt2_dynamic", "llama_sac", "moe", "gpt2_dropout"])
def test_c_reader_lowers_zoo_graphs_like_the_python_path(name: str) -> None:
    """_C.lower_read's arrays equal the Python path's on real joint graphs
    (symbolic sizes, selective checkpointing tags, ac_graph_id, random ops,
    tuple values), as is and through a DCE/CSE plan (removed + replace)."""
    import zoo

    from fxcut.torchrules import prepare
    from fxcut.torchrules.ops import default_facts

    graph = zoo.capture(name).fresh().graph
    _assert_same_arrays(*_both_paths(graph))
    prep = prepare.plan(graph, default_facts(), cse=True, impure_random=True, rules=rules_or_nearest())
    _assert_same_arrays(*_both_paths(graph, removed=prep.removed, replace=prep.replace))


def _odd_graph() -> tuple[fx.Graph, dict[fx.Node, fx.Node], fx.Node]:
    """Placeholders of every role, a node with no meta, a non-tensor and a
    sequence value, a symbolic size, meta keys that need the slow path, a
    partitioner tag that is not a str, a str subclass target, non-Node args,
    and two inputs that one replacement merges."""
    g = fx.Graph()
    meta = torch.empty(0, device="meta")

    def ph(name: str, val: Any = None) -> fx.Node:
        n = g.placeholder(name)
        if val is not None:
            n.meta["val"] = val
        return n

    class Name(str):
        pass

    x = ph("primals_1", torch.empty(4, 8, device="meta"))
    y = ph("primals_2", torch.empty(4, 8, dtype=torch.float16, device="meta"))
    ph("tangents_1", torch.empty(4, 8, device="meta"))
    ph("fwd_seed", torch.empty((), dtype=torch.int64, device="meta"))
    ph("bwd_base_offset", torch.empty((), dtype=torch.int64, device="meta"))
    ph("primals_3")  # no meta at all
    odd_name = g.placeholder("p")
    odd_name.target = Name("tangents_odd")
    odd_name.meta["val"] = meta
    aten = torch.ops.aten
    a = g.call_function(aten.mul.Tensor, (x, 2.0))
    a.meta["val"] = torch.empty(4, 8, device="meta")
    a.meta["partitioner_tag"] = "is_backward"
    b = g.call_function(aten.mul.Tensor, (y, 2.0))
    b.meta.update(val=torch.empty(4, 8, device="meta"), partitioner_tag=["not", "a", "str"])
    c = g.call_function(aten.add_.Tensor, (a, b))
    c.meta.update(val=torch.empty(4, 8, device="meta"), partitioner_tag="is_backward", recompute=None)
    d = g.call_function(aten.sum.default, (c,))
    d.meta.update(val=torch.empty((), device="meta"), ac_graph_id=3, has_backward_hook=True)
    e = g.call_function(aten.split.Tensor, (d, 2))
    e.meta["val"] = [torch.empty(2, device="meta"), torch.empty(2, device="meta")]
    f = g.call_function(aten.sym_size.int, (x, 0))
    f.meta["val"] = 4
    h = g.call_function(aten.cat.default, ([a, b, x], 0), {"out": None})  # Nodes inside a list
    h.meta["val"] = torch.empty(12, 8, device="meta")
    k = g.call_function(aten.add.Tensor, (a, b))  # b is replaced by a below: one input
    k.meta["val"] = torch.empty(4, 8, device="meta")
    g.output(([k, h, None, e, f],))
    return g, {b: a}, k


@fidelity
def test_c_reader_takes_odd_nodes_through_the_slow_path() -> None:
    g, replace, merged = _odd_graph()
    _assert_same_arrays(*_both_paths(g))
    py, c = _both_paths(g, replace=replace)
    _assert_same_arrays(py, c)
    k = py.index[merged]
    assert list(c.in_idx[c.in_ptr[k]:c.in_ptr[k + 1]]) == [c.index[merged.args[0]]]  # a and b: one input


@fidelity
def test_c_reader_leaves_a_foreign_node_to_the_python_error() -> None:
    """A node that uses a node of another graph: the reader gives up and the
    Python path raises its LoweringError naming the node."""
    from fxcut.torchrules.lower import LoweringError

    other = fx.Graph()
    stranger = other.placeholder("x")
    g = fx.Graph()
    x = g.placeholder("x")
    x.meta["val"] = torch.empty(2, device="meta")
    n = g.call_function(torch.ops.aten.add.Tensor, (x, stranger))
    n.meta["val"] = torch.empty(2, device="meta")
    g.output((n,))
    for use_c in (False, True):
        from fxcut.torchrules.lower import lower_for_partition
        from fxcut.torchrules.ops import default_facts

        with pytest.raises(LoweringError, match=f"node '{n.name}' uses 'x'"):
            lower_for_partition(g, default_facts(), impure_random=True, rules=rules_or_nearest(), use_c=use_c)


def _sequence_graph() -> tuple[fx.Graph, dict[str, fx.Node]]:
    """Nodes whose meta["val"] is a tuple or list of odd items: None, a
    zero-size tensor, a nested list (torch counts it 0), a SymInt, a plain
    CPU tensor, empty ones, a tensor of symbolic size (the slow path), a
    namedtuple (the slow path), and a placeholder holding a tuple."""
    from collections import namedtuple

    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    env = ShapeEnv()
    sym = env.create_unbacked_symint()
    with FakeTensorMode(shape_env=env):
        symbolic = torch.empty(sym, 3)
    pair = namedtuple("pair", "a b")
    g = fx.Graph()

    def meta(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.empty(*shape, dtype=dtype, device="meta")

    x = g.placeholder("primals_1")
    x.meta["val"] = meta(4, 8)
    held = g.placeholder("primals_2")
    held.meta["val"] = (meta(3), None)
    vals: dict[str, Any] = {
        "with_none": (meta(4, 8), None, meta(0, dtype=torch.float16)),
        "nested": [meta(2), [meta(3), meta(5)], 7],
        "symint": (meta(3, dtype=torch.float64), sym),
        "cpu": (torch.ones(3, dtype=torch.float64), meta(2, 2, dtype=torch.int8)),
        "empty_tuple": (),
        "empty_list": [],
        "symbolic": (symbolic, meta(2)),
        "namedtuple": pair(meta(6), None),
    }
    nodes = {"held": held}
    last = x
    for name, val in vals.items():
        n = g.call_function(aten.split.Tensor, (last, 2))
        n.meta["val"] = val
        nodes[name] = n
        item = g.call_function(operator.getitem, (n, 0))
        item.meta["val"] = meta(2)
        last = item
    g.output((last, held))
    return g, nodes


@fidelity
def test_c_reader_sizes_sequence_values_like_the_python_path() -> None:
    g, nodes = _sequence_graph()
    py, c = _both_paths(g)
    _assert_same_arrays(py, c)
    size = {name: c.nbytes[c.index[n]] for name, n in nodes.items()}
    assert size == {"held": 12, "with_none": 128, "nested": 8, "symint": 24, "cpu": 28, "empty_tuple": 0,
                    "empty_list": 0, "symbolic": 4096 * 3 * 4 + 8, "namedtuple": 24}
    seq = _C.F_NON_TENSOR | _C.F_VAL_IS_SEQ
    assert all(c.flags[c.index[n]] & seq == seq for n in nodes.values())
    assert not any(c.flags[c.index[n]] & _C.F_FREE_OBJECT for n in nodes.values())
    replace = {nodes["nested"]: nodes["with_none"]}
    _assert_same_arrays(*_both_paths(g, replace=replace))


@fidelity
def test_c_reader_takes_sequences_without_the_slow_path() -> None:
    """Exact tuples and lists of exact sizes are read in C: the slow path
    sees only the symbolic size, the namedtuple and the output; opaque() is
    asked once for tuples and once for lists, and its answer is kept."""
    from fxcut.torchrules.lower import _NodeFacts, _ValueFacts
    from fxcut.torchrules.ops import default_facts

    g, nodes = _sequence_graph()
    facts = default_facts()
    node_facts = _NodeFacts(facts, _ValueFacts(facts, True, rules_or_nearest()), True)
    slow: list[str] = []
    asked: list[type] = []

    def record(node: fx.Node) -> Any:
        slow.append(node.name)
        return node_facts(node)

    def opaque(node: fx.Node) -> bool:
        asked.append(type(node.meta["val"]))
        return type(node.meta["val"]) is list

    config = dataclasses.replace(node_facts.reader_config(), slow=record, opaque=opaque)
    out = _C.lower_read(list(g.nodes), None, config)
    assert out is not None
    assert sorted(slow) == sorted([nodes["symbolic"].name, nodes["namedtuple"].name, "output"])
    assert sorted(asked, key=str) == [list, tuple]
    flags, index = array("I", out[1]), out[10]
    free = {name for name, n in nodes.items() if flags[index[n]] & _C.F_FREE_OBJECT}
    assert free == {"nested", "empty_list"}


@fidelity
def test_opaque_sequences_are_free_objects_on_both_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    """A tuple or list type torch calls opaque: F_FREE_OBJECT on both paths."""
    import fxcut.torchrules.lower

    monkeypatch.setattr(fxcut.torchrules.lower, "_is_opaque", lambda node: True)
    g, nodes = _sequence_graph()
    py, c = _both_paths(g)
    _assert_same_arrays(py, c)
    assert all(c.flags[c.index[n]] & _C.F_FREE_OBJECT for n in nodes.values())


@fidelity
@pytest.mark.parametrize("items", [1, 2])
def test_sequence_too_big_for_64_bits_raises_on_both_paths(items: int) -> None:
    """One tensor whose bytes overflow int64, or two whose sum does: both
    paths raise the LoweringError naming the node."""
    from fxcut.torchrules.lower import LoweringError, lower_for_partition
    from fxcut.torchrules.ops import default_facts

    g = fx.Graph()
    x = g.placeholder("primals_1")
    x.meta["val"] = torch.empty(2, device="meta")
    n = g.call_function(aten.split.Tensor, (x, 2))
    huge = torch.empty(1, device="meta").expand(2**62) if items == 1 else torch.empty(2**60, device="meta")
    n.meta["val"] = (huge,) * items
    g.output((n,))
    for use_c in (False, True):
        with pytest.raises(LoweringError, match=f"node '{n.name}'"):
            lower_for_partition(g, default_facts(), impure_random=True, rules=rules_or_nearest(), use_c=use_c)


_ROLES = _C.F_PRIMAL | _C.F_TANGENT | _C.F_FWD_SEED | _C.F_BWD_SEED


@fidelity
@pytest.mark.parametrize("name", [
    "primals_1", "tangents_1", "fwd_seed", "fwd_base_offset", "bwd_seed", "bwd_base_offset", "x", "", "tangent_1",
    "my_tangents_3", "bwd_seed_tangents", "fwd_seed_bwd_seed", "bwd_base_offset_fwd_seed", "ré_fwd_seed",
    "a\udc80bwd_base_offset", "primals_fwd_seedling", "fwd_base_offse",
])
def test_placeholder_role_is_torchs(name: str) -> None:
    """A placeholder's role from its name, a rule with one copy (C:
    ``_C.placeholder_role``, which the C reader applies and the Python path
    asks): torch's own tests (_is_tangent, _is_fwd_seed_offset,
    _is_bwd_seed_offset, _is_primal) give it; where a name passes several,
    the first of tangent, fwd seed, bwd seed.  Both lowering paths stamp it."""
    from torch._functorch._aot_autograd.utils import _is_bwd_seed_offset, _is_fwd_seed_offset, _is_primal, _is_tangent

    g = fx.Graph()
    node = g.placeholder("p")
    node.target = name
    node.meta["val"] = torch.empty(2, device="meta")
    g.output((node,))
    tests = [(_is_tangent, _C.F_TANGENT), (_is_fwd_seed_offset, _C.F_FWD_SEED), (_is_bwd_seed_offset, _C.F_BWD_SEED),
             (_is_primal, _C.F_PRIMAL)]
    expected = next(flag for test, flag in tests if test(node))
    assert _C.placeholder_role(name) == expected
    py, c = _both_paths(g)
    _assert_same_arrays(py, c)
    assert c.flags[0] & _ROLES == expected


class _StrTag(str):
    pass


class _EqualTo:
    """A tag that is no str, equal to ``text`` through its own ``__eq__``."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __eq__(self, other: object) -> bool:
        return other == self.text

    __hash__ = object.__hash__


_TAG_FLAGS = _C.F_IS_BACKWARD_TAG | _C.F_MUST_BE_IN_BW | _C.F_MUST_BE_IN_FW


def _tagged_node(target: Any, tag: Any) -> tuple[fx.Graph, fx.Node]:
    """primals_1 -> ``target(x, x)`` tagged ``tag`` -> output."""
    g = fx.Graph()
    x = g.placeholder("primals_1")
    x.meta["val"] = torch.empty(4, device="meta")
    n = g.call_function(target, (x, x))
    n.meta.update(val=torch.empty(4, device="meta"), partitioner_tag=tag)
    g.output((n,))
    return g, n


@fidelity
@pytest.mark.parametrize("target", [aten.add_.Tensor, aten.add.Tensor], ids=["mutable", "functional"])
@pytest.mark.parametrize("tag", [
    None, "is_backward", "must_be_in_backward", "must_be_in_forward", "is_forward", "other", _StrTag("is_backward"),
    _StrTag("must_be_in_backward"), _EqualTo("is_backward"), _EqualTo("must_be_in_backward"), ["is_backward"], 3,
], ids=repr)
def test_partitioner_tag_flags_are_torchs(tag: Any, target: Any) -> None:
    """The flags a partitioner_tag gives, a rule with one copy (C:
    ``_C.partitioner_tag_flags``, which the C reader applies and the Python
    path and fxcut.torchrules.ops.tag_flags ask): torch's
    _has_tag_is_backward, _must_be_in_backward and _must_be_in_forward, on
    a mutable and a functional target, for tags of every kind (a str
    subclass, an object equal through its __eq__).  Both lowering paths
    stamp them."""
    from torch._functorch.partitioners import _has_tag_is_backward, _must_be_in_backward, _must_be_in_forward

    from fxcut.torchrules.ops import is_mutable_op, tag_flags

    g, n = _tagged_node(target, tag)
    expected = ((_C.F_IS_BACKWARD_TAG if _has_tag_is_backward(n) else 0)
                | (_C.F_MUST_BE_IN_BW if _must_be_in_backward(n) else 0)
                | (_C.F_MUST_BE_IN_FW if _must_be_in_forward(n) else 0))
    assert _C.partitioner_tag_flags(tag, is_mutable_op(target)) == expected
    assert tag_flags(tag, is_mutable_op(target)) == expected
    assert bool(tag_flags(tag, is_mutable_op(target)) & _C.F_MUST_BE_IN_BW) == _must_be_in_backward(n)
    py, c = _both_paths(g)
    _assert_same_arrays(py, c)
    assert c.flags[1] & _TAG_FLAGS == expected


@fidelity
def test_must_be_in_forward_flag_is_torchs() -> None:
    """F_MUST_BE_IN_FW (bit 29) where torch's _must_be_in_forward holds: an
    untagged mutable op and a functional op tagged must_be_in_forward; not a
    mutable op tagged is_backward or must_be_in_backward.  From the rule
    itself and as both lowering paths stamp it."""
    from torch._functorch.partitioners import _must_be_in_forward

    from fxcut.torchrules.ops import is_mutable_op

    assert _C.F_MUST_BE_IN_FW == 1 << 29
    cases = [(None, aten.add_.Tensor, True), ("must_be_in_forward", aten.add.Tensor, True),
             ("is_backward", aten.add_.Tensor, False), ("must_be_in_backward", aten.add_.Tensor, False)]
    for tag, target, in_forward in cases:
        g, n = _tagged_node(target, tag)
        assert _must_be_in_forward(n) is in_forward, (tag, target)
        bit = _C.F_MUST_BE_IN_FW if in_forward else 0
        assert _C.partitioner_tag_flags(tag, is_mutable_op(target)) & _C.F_MUST_BE_IN_FW == bit, (tag, target)
        py, c = _both_paths(g)
        _assert_same_arrays(py, c)
        assert py.flags[1] & _C.F_MUST_BE_IN_FW == c.flags[1] & _C.F_MUST_BE_IN_FW == bit, (tag, target)


def _output_of(value_of: Any) -> fx.Node:
    g = fx.Graph()
    a, b = g.placeholder("a"), g.placeholder("b")
    return g.output(value_of(a, b))


@fidelity
@pytest.mark.parametrize("value_of", [
    lambda a, b: (a, b, None),
    lambda a, b: [a, None, b],
    lambda a, b: (),
    lambda a, b: a,
    lambda a, b: None,
    lambda a, b: (a, [b, None], None),
    lambda a, b: (a, 3, b),
    lambda a, b: {"x": a, "y": (b, None)},
    lambda a, b: types.SimpleNamespace,  # a leaf that is not a node
    lambda a, b: torch.return_types.max((a, b)),
], ids=["tuple", "list", "empty", "node", "none", "nested", "int", "dict", "object", "namedtuple"])
def test_output_leaves_are_pytrees_leaves(value_of: Any) -> None:
    """The flat-sequence shortcut of ``_output_leaves`` gives what pytree
    gives, for the shapes it takes and the ones it hands to pytree."""
    out = _output_of(value_of)
    expected = list(pytree.arg_tree_leaves(*out.args))
    got = _output_leaves(out)
    assert [id(x) for x in got] == [id(x) for x in expected]
    assert type(got) is list
