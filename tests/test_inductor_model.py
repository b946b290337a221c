"""The inductor memory model (csrc/memory_fused.c, fxcut.torchrules.fusion)
and the plan on it.

- the per-op kinds come from inductor's own tables;
- on small joint graphs captured through inductor, the model's peaks equal
  inductor's own answer -- its lowering, scheduler and wrapper code on fake
  tensors, nothing compiled (fxcut.torchrules.inductor) -- exactly where the
  model's rules are exact (mlp), within the stated 10% on a transformer;
- the inductor model's rules, one by one, on a hand-traced graph: an inlined
  pointwise chain costs no memory, an extern kernel realizes its input, an
  in-place update takes over a dying buffer;
- the plan on the inductor model: peak monotonic in b, b=1 no higher than
  torch's default decision under the model, the time cost prices an inlined
  recomputation below a kernel of its own;
- a training step through ``inductor_backend(memory_budget=b)`` matches eager;
- bad options are ValueErrors naming them; the C entry points name the node.
"""

from __future__ import annotations

import dataclasses

import re
import sys
from array import array
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn as nn

import fxcut
from fxcut import _C
from fxcut.planned import ASK_TIME_LIMIT, PeakPlanner
from fxcut.solve import core, memory
from fxcut.solve.arrays import GraphArrays
from fxcut.solve.cost import CPU, MachineModel, node_costs
from fxcut.tools.decisions import model_inputs, simulate_saved, torch_now
from fxcut.torchrules import facts
from fxcut.torchrules.fusion import fusion_kinds, op_kind
from fxcut.torchrules.versions import rules_or_nearest

sys.path.insert(0, str(Path(__file__).parent))
import zoo  # noqa: E402

aten = torch.ops.aten


# --------------------------------------------------------------------------- the kinds


@pytest.mark.parametrize("target, kind", [
    (aten.mm.default, _C.FUSE_EXTERN),
    (aten.addmm.default, _C.FUSE_EXTERN),
    (aten.bmm.default, _C.FUSE_EXTERN),
    (aten._scaled_dot_product_flash_attention_for_cpu.default, _C.FUSE_EXTERN),
    (aten.convolution_backward.default, _C.FUSE_EXTERN),
    (aten.sum.dim_IntList, _C.FUSE_REDUCTION),
    (aten.amax.default, _C.FUSE_REDUCTION),
    (aten.var_mean.correction, _C.FUSE_REDUCTION),
    (torch.ops.prims.inductor_random.default, _C.FUSE_REDUCTION),
    (aten.index_put.default, _C.FUSE_REDUCTION),
    (aten.cat.default, _C.FUSE_CAT),
    (aten.add.Tensor, _C.FUSE_POINTWISE),
    (aten.mul.Tensor, _C.FUSE_POINTWISE),
    (aten.exp.default, _C.FUSE_POINTWISE),
    (aten.where.self, _C.FUSE_POINTWISE),
])
def test_op_kind_follows_inductors_tables(target: Any, kind: int) -> None:
    assert op_kind(target) == kind


def test_heavy_and_copied_inputs_are_cpu_rules() -> None:
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    w = graph.placeholder("w")
    e = graph.call_function(aten.exp.default, (x,))
    c = graph.call_function(aten.convolution.default, (x, w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1))
    a = graph.call_function(aten.add.Tensor, (e, c))
    graph.output(a)
    nodes = list(graph.nodes)
    cpu = fusion_kinds(nodes, rules_or_nearest(), "cpu")
    cuda = fusion_kinds(nodes, rules_or_nearest(), "cuda")
    assert cpu[2] == _C.FUSE_POINTWISE | _C.FUSE_HEAVY and cuda[2] == _C.FUSE_POINTWISE
    # a forward convolution on CPU: copies of its inputs, and inductor's layout optimisation on in its module
    assert cpu[3] == _C.FUSE_EXTERN | _C.FUSE_COPIES_INPUTS | _C.FUSE_LAYOUT and cuda[3] == _C.FUSE_EXTERN
    assert cpu[4] == cuda[4] == _C.FUSE_POINTWISE
    assert cpu[0] == cpu[1] == cpu[5] == _C.FUSE_POINTWISE  # placeholders and the output: unused


def test_the_layout_optimisation_follows_inductors_config_and_mkldnn(monkeypatch: pytest.MonkeyPatch) -> None:
    from torch._inductor import config

    from fxcut.torchrules.fusion import layout_optimisation

    assert layout_optimisation("cuda") == "never"  # the GPU heuristics are not modelled
    with config.patch(layout_optimization=False):
        assert layout_optimisation("cpu") == "never"
    with config.patch(force_layout_optimization=True):
        assert layout_optimisation("cpu") == "always"
        graph = torch.fx.Graph()
        x = graph.placeholder("x")
        graph.output(graph.call_function(aten.exp.default, (x,)))
        assert fusion_kinds(list(graph.nodes), rules_or_nearest(), "cpu")[1] & _C.FUSE_LAYOUT  # every kernel
    monkeypatch.setattr(torch.backends.mkldnn, "enabled", False)
    assert layout_optimisation("cpu") == "never"


def test_heavy_ops_are_inductors_list_of_the_release() -> None:
    """HEAVY follows should_realize_on_reuse's heavy_ops: exp, log*,
    sigmoid, tanh (2.12: exp and sigmoid), and what lowers to them (silu:
    sigmoid); not erf, exp2 or expm1, so not an exact GELU, but a tanh one."""
    from fxcut.torchrules.versions import RELEASES

    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    ops = [graph.call_function(aten.exp.default, (x,)), graph.call_function(aten.erf.default, (x,)),
           graph.call_function(aten.tanh.default, (x,)), graph.call_function(aten.silu.default, (x,)),
           graph.call_function(aten.expm1.default, (x,)), graph.call_function(aten.gelu.default, (x,)),
           graph.call_function(aten.gelu.default, (x,), {"approximate": "tanh"})]
    graph.output(tuple(ops))
    nodes = list(graph.nodes)

    def heavy(release: str) -> list[bool]:
        kinds = fusion_kinds(nodes, RELEASES[release], "cpu")
        return [bool(kinds[i] & _C.FUSE_HEAVY) for i in range(1, 1 + len(ops))]

    assert heavy("2.13") == [True, False, True, True, False, False, True]
    assert heavy("2.15") == heavy("2.14") == heavy("2.13")
    assert heavy("2.12") == [True, False, False, True, False, False, False]
    assert not any(k & _C.FUSE_HEAVY for k in fusion_kinds(nodes, rules_or_nearest(), "cuda"))


def test_an_exact_gelu_recomputed_in_the_backward_is_inlined_as_inductor_does() -> None:
    """An MLP with exact GELUs at budget 0: the backward recomputes each
    GELU, and erf(h) + 1 is read twice (the GELU and its gradient).  erf is
    no heavy op of inductor's, so inductor inlines it into both readers; the
    model, which counted erf as heavy until 2026-12-05, made it a buffer and
    was 24% above inductor's backward peak (206,880 against 167,200 B on
    torch 2.13); now within 5%."""
    from fxcut.tools.capture import capture
    from fxcut.torchrules.inductor import ask_inductor, donated_indices

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 64), nn.GELU(), nn.Linear(64, 8))
    cap = capture(model, [torch.randn(32, 64)], lambda out, _: out.sum(), compiler="inductor")
    routed = _route(cap, 0.0)
    fw, bw = routed.modules
    assert any(n.target is aten.erf.default for n in bw.graph.nodes)
    est = simulate_saved(routed.decision.decision.arrays, list(routed.saved), cap.num_fwd_outputs, model="inductor")
    b = ask_inductor(bw, is_backward=True, donated=donated_indices(fw, bw))
    assert abs(est.bw_peak_bytes / b.wrapper_peak - 1) <= 0.05, (est.bw_peak_bytes, b.wrapper_peak)


# --------------------------------------------------------------------------- the rules on a small graph


class _Chain(nn.Module):
    """x -> mm -> (relu, *3, +1: a pointwise chain) -> mm -> sum: inductor
    inlines the chain into the one kernel that realizes the second mm's input."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(64, 128, bias=False)
        self.b = nn.Linear(128, 32, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.a(x)
        return self.b(torch.relu(h) * 3 + 1)


def _chain_capture() -> Any:
    from fxcut.tools.capture import capture

    torch.manual_seed(0)
    model = _Chain()
    x = torch.randn(16, 64)
    return capture(model, [x], lambda out, _: out.sum(), compiler="inductor")


@pytest.fixture(scope="module")
def chain() -> Any:
    return _chain_capture()


def _route(cap: Any, budget: float | None = None) -> Any:
    from fxcut import partition
    from fxcut.route.plan import make_plan

    plan = make_plan(cap.fresh(), torch_now(), num_fwd_outputs=cap.num_fwd_outputs,
                     static_lifetime_input_indices=cap.partition_kwargs.get("static_lifetime_input_indices"),
                     budget=budget)
    return partition.route(plan, cap.joint_inputs)


def test_inlined_chain_is_no_buffer_and_extern_input_is(chain: Any) -> None:
    routed = _route(chain)
    arrays = routed.decision.decision.arrays
    est = simulate_saved(arrays, list(routed.saved), chain.num_fwd_outputs, model="inductor", timeline=True)
    fw_kernels = [s.node for s in est.timeline if s.phase == "forward"]
    targets = {n.name: n.target for n in arrays.nodes}
    # the forward's kernels: the first mm, the chain's last node (the second mm's input: a buffer), the
    # second mm, the loss, and relu's mask the backward reads (relu itself, read twice but cheap, is inlined
    # into the add and the mask, so h lives until the mask's kernel)
    assert [targets[k].overloadpacket for k in fw_kernels] == [aten.mm, aten.add, aten.mm, aten.sum, aten.le], \
        fw_kernels
    # the peak, at the last call: the loss and the mask kernels run as one C++ call after the second mm
    # (inductor's CPU code flushes its kernel group at extern kernels only), so the call allocates the loss
    # and the mask (16x128 bools) at once, with h and the chain's result (16x128 floats each) and the second
    # mm (16x32) live
    h, chain_out, out, loss, mask = 16 * 128 * 4, 16 * 128 * 4, 16 * 32 * 4, 4, 16 * 128
    assert est.fw_peak_bytes == h + chain_out + out + loss + mask
    # with each fused group a call of its own (GPU kernels) the mask comes after the loss is allocated
    inputs = model_inputs(arrays, "inductor")
    assert inputs.inductor is not None and inputs.inductor.kernel_calls  # a CPU graph
    one_by_one = dataclasses.replace(inputs, inductor=dataclasses.replace(inputs.inductor, kernel_calls=False))
    gpu = simulate_saved(arrays, list(routed.saved), chain.num_fwd_outputs, model=one_by_one)
    assert gpu.fw_peak_bytes == h + chain_out + out + loss
    # the unfused model allocates relu and *3 too
    unfused = simulate_saved(arrays, list(routed.saved), chain.num_fwd_outputs)
    assert unfused.fw_peak_bytes > est.fw_peak_bytes


def test_model_and_inductors_own_wrapper_on_the_chain(chain: Any) -> None:
    """The backward: equal to the byte.  The forward: inductor fuses the
    mask kernel into the add kernel (both read h, though they are not
    neighbours), so h dies before the loss is allocated; the model, which
    fuses neighbours only, runs the mask in the loss's C++ call after the
    second mm: 2,052 bytes (the mask, the loss) above inductor's forward at
    torch's default decision (4 before kernel calls were modelled);
    equal at budget 0."""
    from fxcut.torchrules.inductor import ask_inductor, donated_indices

    found = {}
    for budget in (None, 0.0):
        routed = _route(chain, budget)
        fw, bw = routed.modules
        est = simulate_saved(routed.decision.decision.arrays, list(routed.saved), chain.num_fwd_outputs,
                              model="inductor")
        f = ask_inductor(fw, is_backward=False)
        b = ask_inductor(bw, is_backward=True, donated=donated_indices(fw, bw))
        found[budget] = (est.fw_peak_bytes - f.wrapper_peak, est.bw_peak_bytes - b.wrapper_peak)
    assert found == {None: (16 * 128 + 4, 0), 0.0: (0, 0)}, found


class _TinyLanguageModel(nn.Module):
    """Embedding, a projection, and a language-model head over a 512-token
    vocabulary (the loss: next-token cross entropy, logits sliced)."""

    def __init__(self) -> None:
        super().__init__()
        self.emb, self.proj, self.head = nn.Embedding(512, 64), nn.Linear(64, 64), nn.Linear(64, 512, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.proj(self.emb(ids))))


def test_model_equals_inductors_own_answer_on_a_language_model_head() -> None:
    """A language-model head and its shifted cross entropy, at torch's
    decisions at b = 1 and 0 and at the plan's b=0 pick on the model
    alone (which saves what the loss computes): the model's forward and
    backward peaks equal inductor's generated code to the byte.  Two rules
    make it so: on CPU the kernels between two extern kernels run as one
    C++ call (the pick's forward: the loss's outputs allocated with the
    logits live; without kernel calls the model is below), and kernels over
    different iteration spaces (the logits' slice, the whole in the
    gradient's slice_scatter) do not fuse, so a value both read is a buffer
    (until 2026-12-07 spaces within a factor 2 fused: 992 B below inductor's
    backward at every decision)."""
    from fxcut.planned import planned_partitioner
    from fxcut.tools.capture import capture
    from fxcut.torchrules.inductor import ask_inductor, donated_indices

    torch.manual_seed(0)
    ids = torch.randint(0, 512, (8, 32))
    cap = capture(_TinyLanguageModel(), [ids], lambda out, inp: nn.functional.cross_entropy(
        out[:, :-1].flatten(0, 1), inp[0][:, 1:].flatten()), compiler="inductor")
    for budget in (None, 0.0):
        routed = _route(cap, budget)
        fw, bw = routed.modules
        est = simulate_saved(routed.decision.decision.arrays, list(routed.saved), cap.num_fwd_outputs,
                             model="inductor")
        b = ask_inductor(bw, is_backward=True, donated=donated_indices(fw, bw))
        assert est.fw_peak_bytes == ask_inductor(fw, is_backward=False).wrapper_peak, budget
        if budget == 0.0 and torch.torch_version.TorchVersion(torch.__version__) < (2, 13):
            # torch 2.12's inductor holds one more 64 KiB buffer in this backward, not modelled
            assert b.wrapper_peak - est.bw_peak_bytes == 64 * 1024, (est.bw_peak_bytes, b.wrapper_peak)
        else:
            assert est.bw_peak_bytes == b.wrapper_peak, budget
    fn = planned_partitioner(0.0, memory_model="inductor", check_time_limit=0.0)
    fw, bw = fn(cap.fresh(), cap.joint_inputs, num_fwd_outputs=cap.num_fwd_outputs, **cap.partition_kwargs)
    prob, saved = fn.planner.last_problem, list(fn.planner.last.saved)
    inputs = prob.model_inputs()
    assert inputs.inductor is not None and inputs.inductor.kernel_calls
    est = memory.simulate(prob.arrays, saved, prob.num_fwd_outputs, inputs)
    f = ask_inductor(fw, is_backward=False)
    b = ask_inductor(bw, is_backward=True, donated=donated_indices(fw, bw))
    assert (est.fw_peak_bytes, est.bw_peak_bytes) == (f.wrapper_peak, b.wrapper_peak)
    one_by_one = dataclasses.replace(inputs, inductor=dataclasses.replace(inputs.inductor, kernel_calls=False))
    assert memory.simulate(prob.arrays, saved, prob.num_fwd_outputs, one_by_one).fw_peak_bytes < f.wrapper_peak


def _one_input_module() -> Any:
    """A module of one input, ``primals_1`` (not counted: not a saved value), for hand-written wrappers."""
    gm = torch.fx.symbolic_trace(lambda x: x + 1)
    (ph,) = gm.graph.find_nodes(op="placeholder")
    ph.name = "primals_1"
    return gm


#: the first lines of a hand-written wrapper of :func:`_one_input_module`
_WRAPPER_HEAD = ("def call(self, args):", "    primals_1, = args", "    args.clear()")


def test_wrapper_reader_follows_a_renamed_buffer() -> None:
    """``buf1 = buf0``: inductor names a single-output fallback's result
    again (HF Mixtral's histc and grouped_mm fallbacks): one storage, freed
    when its last name is deleted, not an unknown line."""
    from fxcut.torchrules.inductor import wrapper_events

    gm = _one_input_module()
    code = "\n".join([*_WRAPPER_HEAD,
        "    buf0 = torch.ops.aten.histc.default(primals_1, 4, 0, 3)",
        "    buf1 = buf0",
        "    del buf0",
        "    buf2 = empty_strided_cpu((4, ), (1, ), torch.float32)",
        "    del buf1",
        "    return (buf2, )",
    ])
    events, end = wrapper_events(code, gm, {"buf0": 16})
    # buf0 allocated (16), renamed (no event), its first name deleted (still held by buf1: no event),
    # buf2 allocated (32), buf1 deleted: the storage freed (16)
    assert (events, end) == ([0, 16, 32, 16], 16)


def test_wrapper_reader_allocates_a_tuples_items_at_the_kernels_call() -> None:
    """A fallback returning a tuple (SDPA's CPU backward: three gradients)
    allocates every item while it runs, its inputs still alive; the wrapper
    deletes the inputs, then names the items one by one (``buf69 =
    buf68[0]``), and the tuple holds them until ``del buf68``.  Read at the
    item lines, the peak missed the inputs and the gradients together: HF
    BERT's backward at torch's 0.6 decision, 1.06 MB below the measured
    step, which made the plan pick it over torch's 0.5 decision, lower in
    fact."""
    from fxcut.torchrules.inductor import wrapper_events

    gm = _one_input_module()
    code = "\n".join([*_WRAPPER_HEAD,
        "    buf0 = empty_strided_cpu((8, ), (1, ), torch.float32)",
        "    buf1 = empty_strided_cpu((8, ), (1, ), torch.float32)",
        "    buf2 = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward.default(buf0, buf1)",
        "    del buf0",
        "    del buf1",
        "    buf4 = buf2[1]",
        "    buf5 = empty_strided_cpu((2, ), (1, ), torch.float32)",
        "    buf3 = buf2[0]",
        "    del buf2",
        "    del buf4",
        "    return (buf3, buf5)",
    ])
    events, end = wrapper_events(code, gm, {"buf3": 16, "buf4": 64})
    # buf0, buf1 (32 each); the kernel's two items (64, 16) with both inputs alive: 144; the inputs freed;
    # buf5 (8); del buf2: its items are still named (buf3, buf4); del buf4 frees 64
    assert (events, end) == ([0, 32, 64, 128, 144, 112, 80, 88, 24], 24)
    assert max(events) == 144


@pytest.mark.parametrize("text, size", [
    ("(s33, 64)", (7, 64)),
    ("(64*s33, 2*s33 + s5)", (448, 17)),
    ("((-1) + s33, s33 // 2, s33 % 4)", (6, 3, 3)),
    ("(-((-s33) // 2), max(1, s5 - 8), min(s33, s5))", (4, 1, 3)),
    ("(4, )", (4,)),
    ("()", ()),
])
def test_wrapper_sizes_of_a_dynamic_graph_take_the_traced_values(text: str, size: tuple[int, ...]) -> None:
    """A graph traced with dynamic shapes: its wrapper sizes buffers by
    symbols; the reader evaluates them at the traced values."""
    from fxcut.torchrules.inductor import _size_tuple

    assert _size_tuple(text, {"s33": 7, "s5": 3}, "line") == size


@pytest.mark.parametrize("text, words", [
    ("(u0, 4)", "'u0', which has no traced value"),
    ("(s33 ** 2, )", "does not evaluate (s33 ** 2)"),
    ("(s33 // 0, )", "divided by zero"),
    ("s33", "not a tuple"),
    ("(s33, ", "cannot parse"),
    ("(__import__('os'), )", "does not evaluate"),
])
def test_wrapper_sizes_it_cannot_evaluate_are_named(text: str, words: str) -> None:
    from fxcut.torchrules.inductor import WrapperNotUnderstood, _size_tuple

    with pytest.raises(WrapperNotUnderstood, match=re.escape(words)):
        _size_tuple(text, {"s33": 7}, "line")


def test_inductor_check_asks_a_graph_traced_with_dynamic_shapes_at_its_traced_sizes() -> None:
    """``torch.compile(dynamic=True)`` (or ``mark_dynamic``): the check asks
    inductor about modules of its own, static at the traced sizes
    (:func:`fxcut.torchrules.ask.at_traced_sizes`): the same candidates and
    the same peaks as the graph traced with static shapes, and not one
    guard added to the compile's ShapeEnv (a lowering on it would
    specialize the batch size: a recompile per size, a failed
    ``mark_dynamic``)."""
    from fxcut.planned import planned_partitioner
    from fxcut.tools.capture import capture

    reports, guards = {}, {}
    for dynamic in (False, True):
        torch.manual_seed(0)
        model = _Chain()
        cap = capture(model, [torch.randn(16, 64)], lambda out, _: out.sum(), compiler="inductor", dynamic=dynamic)
        gm = cap.fresh()
        symbolic = any(isinstance(n.meta.get("val"), torch.SymInt) for n in gm.graph.nodes)
        assert symbolic == dynamic
        shape_env = next(v.fake_mode.shape_env for n in gm.graph.find_nodes(op="placeholder")
                         if isinstance(v := n.meta.get("val"), torch.Tensor))
        before = list(shape_env.guards) if shape_env is not None else []
        fn = planned_partitioner(0.5, memory_model="inductor", check_time_limit=ASK_TIME_LIMIT)
        fn(gm, cap.joint_inputs, num_fwd_outputs=cap.num_fwd_outputs, **cap.partition_kwargs)
        guards[dynamic] = (before, list(shape_env.guards) if shape_env is not None else [])
        reports[dynamic] = fn.planner.last.check
    static, dynamic_report = reports[False], reports[True]
    for report in (static, dynamic_report):
        assert report is not None and not report.failed and not report.skipped and report.torch_asked, report
    assert dynamic_report.asked == static.asked and dynamic_report.picked == static.picked
    assert guards[True][1] == guards[True][0]


def test_traced_sizes_keep_shared_storages() -> None:
    """Inputs that view one storage view one storage of the static copy
    too (the wrapper's walk counts a storage once); a size with no traced
    value is named."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    from fxcut.torchrules.ask import _static

    env = ShapeEnv()
    mode = FakeTensorMode(shape_env=env)
    s = env.create_symintnode(env.create_symbol(6, source=_source("s")), hint=6)
    with mode:
        base = torch.empty(s * 4, dtype=torch.float32)
    a, b = base[: s * 2].view(s, 2), base[s * 2:]
    static_mode = FakeTensorMode()
    storages: dict[object, torch.Tensor] = {}
    sa, sb = _static(a, static_mode, storages), _static(b, static_mode, storages)
    assert isinstance(sa, torch.Tensor) and isinstance(sb, torch.Tensor)
    assert (tuple(sa.shape), tuple(sb.shape), sb.storage_offset()) == ((6, 2), (12,), 12)
    assert sa.untyped_storage().nbytes() == 96 and len(storages) == 1
    assert _static(s, static_mode, storages) == 6
    unbacked = env.create_unbacked_symint()
    with pytest.raises(ValueError, match="no traced value"):
        _static(unbacked, static_mode, storages)


def _source(name: str) -> Any:
    from torch._dynamo.source import ConstantSource

    return ConstantSource(name)


def test_recomputed_chain_is_inlined_into_the_backward(chain: Any) -> None:
    """At budget 0 the backward recomputes relu/*3/+1: inductor inlines them
    (no buffer) where the unfused model allocates each."""
    routed = _route(chain, 0.0)
    arrays = routed.decision.decision.arrays
    saved = list(routed.saved)
    est = simulate_saved(arrays, saved, chain.num_fwd_outputs, model="inductor", timeline=True)
    bw_kernels = {s.node for s in est.timeline if s.phase == "backward"}
    recomputed = {arrays.nodes[i].name for i in est.recomputed}
    assert recomputed, "budget 0 must recompute"
    inlined = {n for n in recomputed if n not in bw_kernels}
    names = {arrays.nodes[i].name: arrays.nodes[i] for i in range(len(arrays))}
    assert any(names[n].target.overloadpacket is aten.relu for n in inlined), (inlined, bw_kernels)


# --------------------------------------------------------------------------- against inductor, zoo graphs


@pytest.mark.parametrize("budget", [None, 0.0])
def test_model_equals_inductors_own_answer_on_mlp(budget: float | None) -> None:
    """mlp: every rule the model states holds exactly: peaks equal to the byte."""
    from fxcut.torchrules.inductor import ask_inductor, donated_indices

    cap = zoo.capture_inductor("mlp")
    routed = _route(cap, budget)
    fw, bw = routed.modules
    est = simulate_saved(routed.decision.decision.arrays, list(routed.saved), cap.num_fwd_outputs,
                          model="inductor")
    f = ask_inductor(fw, is_backward=False)
    b = ask_inductor(bw, is_backward=True, donated=donated_indices(fw, bw))
    assert (est.fw_peak_bytes, est.bw_peak_bytes) == (f.wrapper_peak, b.wrapper_peak)


@pytest.mark.parametrize("name", ["gpt2", "moe"])
def test_scalar_kernels_give_the_same_wrapper_memory(name: str) -> None:
    """The check generates C++ kernels without their vectorized versions
    (less than half the time): the wrapper allocates, reuses and frees
    exactly as with them, event by event, forward and backward, at
    torch's default decision and at budget 0."""
    from fxcut.torchrules.inductor import ask_inductor, donated_indices

    cap = zoo.capture_inductor(name)
    for budget in (None, 0.0):
        fw, bw = _route(cap, budget).modules
        for module, backward in ((fw, False), (bw, True)):
            donated = donated_indices(fw, bw) if backward else None
            scalar = ask_inductor(module, is_backward=backward, donated=donated)
            full = ask_inductor(module, is_backward=backward, donated=donated, scalar_kernels=False)
            assert (scalar.live_bytes, scalar.end_bytes) == (full.live_bytes, full.end_bytes), (budget, backward)
            assert len(scalar.live_bytes) > 2
            # the vectorized kernels were generated only without the setting (this CPU picks a vector ISA)
            assert ("at::vec::" in full.wrapper_code) and ("at::vec::" not in scalar.wrapper_code)


def test_model_within_ten_percent_of_inductor_on_gpt2() -> None:
    """gpt2 at torch's default decision: within the stated 10% (inductor's
    kernel fusion beyond inlining and its peak-memory reordering are not
    modelled), and far closer than the unfused model."""
    from fxcut.torchrules.inductor import ask_inductor, donated_indices

    cap = zoo.capture_inductor("gpt2")
    routed = _route(cap)
    fw, bw = routed.modules
    arrays = routed.decision.decision.arrays
    est = simulate_saved(arrays, list(routed.saved), cap.num_fwd_outputs, model="inductor")
    unfused = simulate_saved(arrays, list(routed.saved), cap.num_fwd_outputs)
    f = ask_inductor(fw, is_backward=False)
    b = ask_inductor(bw, is_backward=True, donated=donated_indices(fw, bw))
    truth = max(f.wrapper_peak, b.wrapper_peak)
    assert abs(est.peak_bytes / truth - 1) <= 0.10, (est.peak_bytes, truth)
    assert abs(est.peak_bytes - truth) < abs(unfused.peak_bytes - truth)
    # the forward: closer still (measured 168,832 modelled vs 164,864 B inductor's on torch 2.13: the
    # neighbour-only fusion groups keep one more buffer live than inductor's scored fusion)
    assert abs(est.fw_peak_bytes / f.wrapper_peak - 1) <= 0.03, (est.fw_peak_bytes, f.wrapper_peak)


# --------------------------------------------------------------------------- the plan on the inductor model


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_plan_on_the_inductor_model_is_monotonic_and_b1_not_above_torch(name: str) -> None:
    from fxcut.planned import planned_partitioner

    cap = zoo.capture_inductor(name)
    peaks = []
    for b in (0.0, 0.5, 1.0):
        fn = planned_partitioner(b, memory_model="inductor", max_work=4_000_000, check=None)
        cap.partition(fn)
        choice = fn.planner.last
        assert choice.memory_model == "inductor" and choice.cost == "time"
        peaks.append(choice.peak_bytes)
        if b == 1.0:
            assert choice.peak_bytes <= choice.torch_peak_bytes
            assert choice.recompute_flops <= choice.torch_recompute_flops
        # the plan's peak is the inductor model's peak of the saved set it returned
        assert (choice.peak_bytes, choice.recompute_flops) == fn.planner.last_problem.model_point(choice.saved)
    assert peaks == sorted(peaks), peaks
    assert peaks[0] < peaks[-1]


def _frontier(peaks: list[int], costs: list[int]) -> Any:
    from fxcut.solve.planner import Frontier

    return Frontier(peaks, costs, [bytes([k]) for k in range(len(peaks))], 0, 0, False, False, 0, False)


def _torch(*points: tuple[float, int, int]) -> list[Any]:
    from fxcut.solve.check import TorchDecision

    return [TorchDecision(b, peak, cost) for b, peak, cost in points]


def test_checked_pick_follows_inductors_peaks() -> None:
    """The pick on inductor's own peaks.  Candidates 0-3: the model's
    frontier; 4: torch's default decision (cost 12), 5: torch's decision at
    budgets 0.3-0.5 (cost 16), 6: at 0-0.2 (cost 40).  The same candidates
    are asked at every b; b=0: the lowest peak; b>0: the cheapest whose
    peak is at most the lowest of torch's decisions at budgets >= b."""
    from fxcut.solve.check import checked_pick

    front = _frontier([100, 120, 150, 400], [30, 20, 10, 1])   # the model's frontier
    torch = _torch((1.0, 170, 12), (0.5, 140, 16), (0.2, 200, 40))
    truth = {0: 130, 1: 125, 2: 170, 3: 999, 4: 160, 5: 128, 6: 210}  # inductor's peaks

    def run(b: float, **kw: Any) -> tuple[list[int], Any]:
        asked: list[int] = []

        def peak_of(j: int) -> int:
            asked.append(j)
            return truth[j]

        j, report = checked_pick(front, torch, b, peak_of, **kw)
        assert j == report.picked
        return asked, report

    # the order, whatever b: the model's lowest, torch's default, torch's others by modelled peak (5: 140,
    # 6: 200), then the frontier by modelled peak (1: 120) -- four asks besides the first
    for b in (0.0, 0.5, 1.0):
        assert run(b)[0] == [0, 4, 5, 6, 1]
    asked, r = run(1.0)
    assert (r.picked, r.limit, r.lowest_peak, r.torch_peak) == (4, 160, 125, 160)
    # b=0.5: torch's decisions at >= 0.5 are 4 (160) and 5 (128): limit 128; within: 5 (cost 16), 1 (20): 5
    asked, r = run(0.5)
    assert (r.picked, r.limit, r.picked_peak) == (5, 128, 128) and r.picked_torch_budget == 0.5
    assert r.torch_asked == {1.0: 160, 0.5: 128, 0.2: 210} and not r.picked_by_model
    # b=0.1: torch's at 0.2 (210), 0.5 (128) and 1 (160): limit 128 -- torch's cheaper decision above b
    assert (run(0.1)[1].picked, run(0.1)[1].limit) == (5, 128)
    # b=0: the lowest peak asked, 1 (125)
    asked, r = run(0.0)
    assert (r.picked, r.limit) == (1, 125) and r.picked_torch_budget is None
    # two asks besides the first: 0, 4, 5; torch's at 0.2 on the model (200): b=0 is 5 (128)
    asked, r = run(0.0, max_asks=2)
    assert asked == [0, 4, 5] and (r.picked, r.limit) == (5, 128)
    # one: 0 and 4 asked; torch's at 0.5 counts at the model's 140 (it costs more than the default)
    asked, r = run(0.0, max_asks=1)
    assert asked == [0, 4] and (r.picked, r.limit) == (0, 130)
    asked, r = run(0.5, max_asks=1)
    assert (r.picked, r.limit, r.picked_peak) == (5, 140, 140) and r.picked_by_model
    assert run(1.0, max_asks=1)[1].picked == 4
    # the peaks and costs of the picks, b = 0 .. 1: the peak never falls, the cost never rises
    for kw in ({}, {"max_asks": 1}, {"max_asks": 2}):
        picks = [run(b, **kw)[1] for b in (0.0, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0)]
        peaks = [r.picked_peak for r in picks]
        assert peaks == sorted(peaks), (kw, peaks)
        costs = [([30, 20, 10, 1, 12, 16, 40])[r.picked] for r in picks]
        assert costs == sorted(costs, reverse=True), (kw, costs)
    # saved bytes: nothing saving more than torch's default (100) -- 1 (120) is out at every b
    saved = [50, 120, 30, 10, 100, 80, 70]
    asked, r = run(0.0, saved_bytes=saved)
    assert (r.picked, r.limit, r.saved_limit) == (5, 128, 100)
    assert run(0.5, saved_bytes=saved)[1].picked == 5
    # of equal lowest peaks b=0 takes the one saving fewest bytes, then the cheapest
    truth[1] = 128                                   # 1 (70 B, cost 20) now ties with torch's at 0.5 (80 B)
    assert run(0.0)[1].picked == 5 and run(0.0, saved_bytes=[50, 70, 30, 10, 100, 80, 70])[1].picked == 1
    truth[1] = 125
    # max_asks counts the asks besides the first
    assert len(run(1.0, max_asks=1)[1].asked) == 2
    # a candidate with the saved set of one asked before is not asked again
    asked, r = run(0.5, same=lambda j: 0 if j == 5 else j)
    assert asked == [0, 4, 6, 1, 2] and r.asked[0] == r.asked[5] == 130
    # b=0.5: torch's at 0.5 is 0's saved set (130), its default 160: limit 130; within: 0/5 (cost 30/16), 1
    assert (r.picked, r.limit) == (5, 130) and r.picked_torch_budget == 0.5


def test_unasked_decision_cheaper_than_torchs_default_is_not_taken() -> None:
    """A decision of torch's that the model prices below its default, not
    asked, does not count: b=1 is never a pick on the model's word alone."""
    from fxcut.solve.check import checked_pick

    front = _frontier([100], [30])
    for cost, at_half in ((8, 1), (16, 2)):
        picks = [checked_pick(front, _torch((1.0, 170, 12), (0.5, 140, cost)), b,
                              lambda j: {0: 130}[j], max_asks=0)[1] for b in (0.5, 1.0)]
        # cost 8: torch's at 0.5 is out; the limit at 0.5 is the default's 170 and the cheapest within it
        # the default itself.  cost 16: it counts (model 140) and is the cheapest within 140 at b=0.5
        assert [r.picked for r in picks] == [at_half, 1], (cost, picks)
        assert picks[0].picked_by_model and picks[1].picked_by_model  # the default, not asked here


def test_settling_asks_the_picks_that_rest_on_the_model() -> None:
    """BART's case: two of torch's decisions not asked, both picks, the
    model under inductor by different margins.  Candidate 0: the model's
    lowest (cost 50); 1: torch's default (cost 10); 2: its decision at
    0.7 (model 150, inductor 160, cost 20); 3: at 0.5 (model 140, inductor
    170, cost 30).  On the model's figures b=0.5 picks 3 and b=0.7 picks
    2: inductor's peak falls from 170 to 160 as b grows.  Settling asks 3,
    then 2 (b=0.5's pick once 3 is known), and both budgets pick 2."""
    from fxcut.solve.check import checked_pick

    front = _frontier([100], [50])
    torch = _torch((1.0, 200, 10), (0.7, 150, 20), (0.5, 140, 30))
    truth = {0: 110, 1: 200, 2: 160, 3: 170}

    def run(b: float, settle: int) -> tuple[list[int], Any]:
        asked: list[int] = []

        def peak_of(j: int) -> int:
            asked.append(j)
            return truth[j]

        return asked, checked_pick(front, torch, b, peak_of, max_asks=1, settle_asks=settle)[1]

    unsettled = [run(b, 0)[1] for b in (0.5, 0.7)]
    assert [(r.picked, r.picked_by_model, truth[r.picked]) for r in unsettled] == [(3, True, 170), (2, True, 160)]
    assert not unsettled[0].settled and unsettled[0].settling == []
    for b in (0.0, 0.5, 0.7, 1.0):
        asked, r = run(b, 2)
        assert asked == [0, 1, 3, 2] and r.settling == [3, 2] and r.settled, (b, asked, r)
    settled = {b: run(b, 2)[1] for b in (0.0, 0.3, 0.5, 0.6, 0.7, 1.0)}
    assert {b: (r.picked, r.picked_peak) for b, r in settled.items()} == {
        0.0: (0, 110), 0.3: (2, 160), 0.5: (2, 160), 0.6: (2, 160), 0.7: (2, 160), 1.0: (1, 200)}
    assert not any(r.picked_by_model for r in settled.values())
    # one settling ask: 3 asked, then the picks rest on 2's figure again and the report says so
    asked, r = run(0.5, 1)
    assert asked == [0, 1, 3] and (r.picked, r.picked_by_model, r.settled) == (2, True, False)
    # more asks than needed: it stops once every pick is asked
    assert run(0.5, 5)[0] == [0, 1, 3, 2]
    # not asking inductor at all settles nothing
    r = checked_pick(front, torch, 0.5, None, settle_asks=5)[1]
    assert r.picked_by_model and not r.settled and not r.settling


def test_checked_pick_counts_saved_bytes_where_the_graph_holds_them() -> None:
    """A graph whose saved tensors outlive its own run (its output goes on
    to a next graph): at b > 0 the pick is within torch's lowest peak and
    its lowest peak + saved bytes at budgets >= b.  Candidates 0-1: the
    frontier; 2: torch's default (peak 150, saves 100); 3: torch's
    decision at 0.5 (151, saves 20)."""
    from fxcut.solve.check import checked_pick

    front = _frontier([100, 110], [30, 20])
    torch = _torch((1.0, 170, 12), (0.5, 160, 16))
    truth = {0: 120, 1: 130, 2: 150, 3: 151}
    saved = [60, 10, 100, 20]

    def pick(b: float, holds: bool, sb: list[int] | None = None) -> Any:
        return checked_pick(front, torch, b, lambda j: truth[j], saved_bytes=saved if sb is None else sb,
                            holds_saved=holds)[1]

    # on peaks alone b=0.5's limit is the default's 150 and the default the cheapest within it -- 80 bytes
    # more held than torch's decision at 0.5 through the rest of the step
    r = pick(0.5, False)
    assert (r.picked, r.limit, r.holds_saved) == (2, 150, False)
    # held: peaks 120, 130, 150, 151; sums 180, 140, 250, 171.  Limits at 0.5: peak 150 (the default's),
    # sum 171 (torch's at 0.5): within both only 1
    r = pick(0.5, True)
    assert (r.picked, r.limit, r.held_limit, r.holds_saved, r.picked_peak) == (1, 150, 171, True, 130)
    # b=0.7 and 1: only the default at >= b, (150, 250): 0, 1 and 2 within, the default the cheapest
    assert [(pick(b, True).picked, pick(b, True).held_limit) for b in (0.7, 1.0)] == [(2, 250), (2, 250)]
    # b=0 is unchanged: the lowest peak (0), not the lowest sum (1)
    r = pick(0.0, True)
    assert (r.picked, r.limit, r.holds_saved) == (0, 120, False)
    # none within both (1 now saves 45: sum 175): within the peak and sum of torch's lowest sum, 3 (151, 171)
    r = pick(0.5, True, [60, 45, 100, 20])
    assert (r.picked, r.limit, r.held_limit) == (3, 151, 171)
    # without saved bytes there is nothing to add: the peaks alone
    r = checked_pick(front, torch, 0.5, lambda j: truth[j], holds_saved=True)[1]
    assert (r.picked, r.holds_saved) == (2, False)


def test_checked_pick_is_monotonic_on_random_candidates() -> None:
    """On random frontiers, torch decisions, inductor peaks, saved bytes
    and ask budgets: as b grows the picked peak never falls and the cost
    never rises; at b > 0 the pick is within the lowest of torch's
    eligible decisions at budgets >= b and no costlier than it.  For
    graphs holding their saved tensors: within torch's lowest peak + saved
    at budgets >= b by both measures, and where every pick is within the
    larger budgets' limits the cost never rises.  b=1 is
    torch's default or a candidate asked, at most the default's peak; the
    pick never saves more than torch's default."""
    import random

    from fxcut.solve.check import checked_pick

    budgets = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]
    held_cases = {True: 0, False: 0}
    settled_cases = 0
    for seed in range(500):
        rng = random.Random(seed)
        n = rng.randint(1, 6)
        fpeaks = sorted(rng.randint(50, 200) for _ in range(n))
        front = _frontier(fpeaks, sorted((rng.randint(1, 100) for _ in range(n)), reverse=True))
        t_budgets = [1.0] + sorted(rng.sample(budgets[:-1], rng.randint(0, 5)), reverse=True)
        torch = _torch(*[(b, rng.randint(50, 250), rng.randint(1, 120)) for b in t_budgets])
        m = n + len(torch)
        truth = [rng.randint(50, 250) for _ in range(m)]
        saved = [rng.randint(0, 100) for _ in range(m)]
        costs = list(front.recompute_flops) + [t.cost for t in torch]
        max_asks = rng.randint(0, m)
        # drawn apart, so that the candidates above are the ones drawn before settling existed
        settle = random.Random(-1 - seed).choice([0, m // 2, m])
        holds = seed % 2 == 1
        picks = [checked_pick(front, torch, b, lambda j: truth[j], max_asks=max_asks, saved_bytes=saved,
                              holds_saved=holds, settle_asks=settle)[1] for b in budgets]
        # settled (always with as many settling asks as candidates): every budget's pick asked, so the
        # peaks inductor would run are the picks' own -- monotonic in b where they were above
        assert len({r.settled for r in picks}) == 1 and (picks[0].settled or settle < m), seed
        if picks[0].settled:
            settled_cases += 1
            assert not any(r.picked_by_model for r in picks), seed
            if not holds:
                true_peaks = [truth[r.picked] for r in picks]
                assert true_peaks == sorted(true_peaks), (seed, true_peaks)
        assert [r.holds_saved for r in picks] == [False] + [holds] * (len(budgets) - 1)
        # b=0's peak is the lowest of every pick's
        assert all(picks[0].picked_peak <= r.picked_peak for r in picks), seed
        peaks = [r.picked_peak for r in picks]
        picked_costs = [costs[r.picked] for r in picks[1:]]
        if not holds:
            assert peaks == sorted(peaks) and picked_costs == sorted(picked_costs, reverse=True), (seed, peaks)
        else:
            # each pick within every larger budget's limits (no budget fell back): the cost never rises
            # and no larger budget's pick is below a smaller one's by both its peak and its sum
            nested = all(r.picked_peak <= q.limit and r.picked_peak + saved[r.picked] <= q.held_limit
                         for i, r in enumerate(picks[1:], 1) for q in picks[i + 1:])
            if nested:
                assert picked_costs == sorted(picked_costs, reverse=True), seed
                sums = [r.picked_peak + saved[r.picked] for r in picks]
                assert not any(peaks[k] < peaks[i] and sums[k] < sums[i]
                               for i in range(1, len(picks)) for k in range(i + 1, len(picks))), seed
            held_cases[nested] += 1
        assert len({tuple(sorted(r.asked)) for r in picks}) == 1      # the same candidates asked at every b
        for b, r in zip(budgets, picks):
            assert saved[r.picked] <= saved[n]
            peak = {j: (r.asked[j] if j in r.asked else torch[j - n].peak) for j in range(n, m)}
            ok = [j for j in range(n, m) if torch[j - n].budget >= b and saved[j] <= saved[n]
                  and (j in r.asked or j == n or torch[j - n].cost > torch[0].cost)]
            if b > 0.0 and not holds:
                best = min(ok, key=lambda j: (peak[j], costs[j]))
                assert r.picked_peak <= peak[best] and costs[r.picked] <= costs[best], (seed, b)
            if b > 0.0 and holds:
                # never above torch's lowest sum at budgets >= b by either measure
                best = min(ok, key=lambda j: (peak[j] + saved[j], peak[j]))
                assert r.picked_peak <= peak[best], (seed, b)
                assert r.picked_peak + saved[r.picked] <= peak[best] + saved[best], (seed, b)
                assert r.picked_peak <= min(peak[j] for j in ok) or r.limit == peak[best], (seed, b)
        last = picks[-1]
        assert last.picked == n or last.picked in last.asked
        if n in last.asked:
            assert last.picked_peak <= last.asked[n]
    # both kinds of held case were drawn, and settled checks
    assert held_cases[True] > 20 and held_cases[False] > 5, held_cases
    assert settled_cases > 100, settled_cases


def test_a_graph_holds_its_saved_tensors_when_it_returns_more_than_a_loss(chain: Any) -> None:
    """The chain's joint graph ends in its loss (one scalar tangent): its
    backward runs next.  The same model compiled without its loss returns
    its 16 x 32 output (a tangent of that shape), which goes on to other
    work before the backward, as a graph cut off by a graph break does."""
    from fxcut.torchrules.ask import holds_saved_tensors
    from fxcut.tools.capture import capture

    assert not holds_saved_tensors(chain.gm)
    torch.manual_seed(0)
    cap = capture(_Chain(), [torch.randn(16, 64)], lambda out, _: out * 2, compiler="inductor")
    assert [tuple(t.meta["val"].shape) for t in cap.tangents()] == [(16, 32)]
    assert holds_saved_tensors(cap.gm)


def test_checked_pick_needs_torchs_default_first() -> None:
    from fxcut.solve.check import checked_pick

    with pytest.raises(ValueError, match="torch's default"):
        checked_pick(_frontier([1], [1]), _torch((0.5, 1, 1)), 0.5, lambda j: 1)


def test_inductor_check_in_the_plan_keeps_b1_at_or_below_torch(chain: Any) -> None:
    from fxcut.planned import planned_partitioner

    picked = []
    asked = []
    for b in (0.0, 0.3, 0.5, 1.0):
        fn = planned_partitioner(b, memory_model="inductor", check_time_limit=ASK_TIME_LIMIT)
        chain.partition(fn)
        report = fn.planner.last.check
        assert report is not None and not report.failed and report.asked, report
        picked.append(report.picked_peak)
        asked.append(sorted(report.asked))
        assert report.picked_peak <= report.limit
        if b > 0.0:
            # no higher than any of torch's decisions asked at budgets >= b, saving no more than its default
            assert all(report.picked_peak <= p for k, p in report.torch_asked.items() if k >= b)
            prob = fn.planner.last_problem
            assert report.saved_limit is not None
            assert prob.simulate(fn.planner.last.saved).saved_bytes <= report.saved_limit
        if b == 1.0:
            assert report.limit == report.torch_peak and report.picked_peak <= report.torch_peak
    assert picked == sorted(picked), picked
    assert all(a == asked[0] for a in asked), asked   # the same candidates asked whatever the budget


def test_check_time_budget_is_spent_by_prediction_not_by_the_clock() -> None:
    """asks_within: how many asks fit at the measured per-node cost; the
    same answer whatever the machine's load."""
    from fxcut.solve.check import ASK_SECONDS_PER_NODE, asks_within

    assert asks_within(20.0, 470) == int(20.0 // (470 * ASK_SECONDS_PER_NODE)) == 8
    assert asks_within(20.0, 4860) == 0          # the 24-layer GPT: no candidate fits in 20 s
    assert asks_within(0.0, 10) == 0
    assert asks_within(1.0, 0) == int(1.0 // ASK_SECONDS_PER_NODE)


def test_checked_pick_stops_asking_when_told() -> None:
    """The wall-clock safety net: ``keep_asking`` False after two asks stops
    there; the pick is made among what was asked."""
    from fxcut.solve.check import checked_pick

    front = _frontier([100, 120, 150], [30, 20, 10])
    truth = {0: 130, 1: 125, 2: 170, 3: 160}
    asked: list[int] = []

    def peak_of(j: int) -> int:
        asked.append(j)
        return truth[j]

    j, report = checked_pick(front, _torch((1.0, 160, 12)), 0.0, peak_of, keep_asking=lambda: len(asked) < 2)
    assert asked == [0, 3] and sorted(report.asked) == [0, 3]
    assert (j, report.limit) == (0, 130)


def test_settling_asks_at_most_twice_what_the_time_budget_fits(monkeypatch: Any) -> None:
    """The planner's settling bound: as many asks as twice ``check_time_limit``
    fits by prediction (and ``max_checks``).  With a limit that fits two
    asks (torch's default and one more), settling may ask four; what it
    asked is in the report, and it stops early only once every budget's
    pick is asked."""
    import fxcut.solve.peakplan as peakplan
    from fxcut.planned import SETTLE_BUDGETS, planned_partitioner
    from fxcut.solve.check import ASK_SECONDS_PER_NODE, asks_within

    cap = zoo.capture_inductor("gpt2")
    probe = planned_partitioner(0.5, memory_model="inductor", max_work=4_000_000, check_time_limit=0.0)
    cap.partition(probe)
    n = len(probe.planner.last_problem.arrays.nodes)
    limit = 2.5 * n * ASK_SECONDS_PER_NODE
    assert asks_within(limit, n) == 2
    calls: list[tuple[int, int]] = []
    original = peakplan.checked_pick

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append((kwargs["max_asks"], kwargs["settle_asks"]))
        return original(*args, **kwargs)

    monkeypatch.setattr(peakplan, "checked_pick", spy)
    fn = planned_partitioner(0.5, memory_model="inductor", max_work=4_000_000, check_time_limit=limit)
    cap.partition(fn)
    assert calls == [(1, SETTLE_BUDGETS * 2)] and SETTLE_BUDGETS * 2 == 4
    report = fn.planner.last.check
    assert report is not None and not report.skipped
    assert len(report.asked) <= 2 + 4 and len(report.settling) <= 4
    assert report.settled or len(report.settling) == 4, report
    assert set(report.settling) <= set(report.asked)


def test_skipped_check_picks_among_torchs_decisions_on_the_model() -> None:
    """check_time_limit=0 fits no ask: the check is skipped (said in the
    report); b > 0 is then one of torch's own decisions, the cheapest whose
    modelled peak is at most the lowest of torch's decisions at budgets
    >= b (no search runs), and b=0 the model's own pick, the same as
    check=None: the modelled peak monotonic in b."""
    from fxcut.planned import planned_partitioner

    cap = zoo.capture_inductor("gpt2")
    peaks = []
    picked_at = []
    for budget in (0.0, 0.3, 0.5, 0.8, 1.0):
        skipped = planned_partitioner(budget, memory_model="inductor", max_work=4_000_000, check_time_limit=0.0)
        cap.partition(skipped)
        last = skipped.planner.last
        report = last.check
        assert report is not None and report.skipped and not report.asked, report
        assert "check_time_limit=0" in report.skipped
        peaks.append(last.peak_bytes)
        nodes = skipped.planner.last_problem.arrays.nodes
        planned = {nodes[i].name for i in last.saved}
        if budget > 0.0:
            assert report.picked_by_model and report.picked_torch_budget is not None
            picked_at.append(report.picked_torch_budget)
            routed = _route(cap, report.picked_torch_budget if report.picked_torch_budget < 1.0 else None)
            assert planned == {routed.decision.decision.arrays.nodes[i].name for i in routed.saved}
            above = [p for b, (p, _) in last.torch_points.items() if b >= budget]
            assert last.peak_bytes <= min(above) and report.limit == min(above)
            # no search ran: nothing enumerated, no frontier point
            assert not last.exact and last.frontier_points == 0
        else:
            model_only = planned_partitioner(budget, memory_model="inductor", max_work=4_000_000, check=None)
            cap.partition(model_only)
            assert last.saved == model_only.planner.last.saved
            assert last.peak_bytes <= last.torch_peak_bytes
    assert peaks == sorted(peaks), peaks
    assert peaks[0] < peaks[-1]
    # torch's own decisions are not monotonic on the model here: at 0.3 a decision of a larger budget is lower
    # (on torch 2.13: 0.6's); taking torch's decision at b would have left the peak non-monotonic
    assert picked_at[0] > 0.3, picked_at


def test_check_that_inductor_fails_picks_on_the_model_with_a_warning(monkeypatch: Any,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    """Inductor cannot lower a candidate: one warning names the error, and
    the plan is what the skipped check plans -- at b > 0 the same rule among
    torch's decisions on the model's peaks, at b=0 the model's lowest."""
    import logging

    import fxcut.torchrules.ask as ask
    from fxcut.planned import planned_partitioner

    cap = zoo.capture_inductor("gpt2")

    def broken(*args: Any, **kwargs: Any) -> int:
        raise RuntimeError("lowering failed for this candidate")

    for budget in (0.0, 0.3):
        skipped = planned_partitioner(budget, memory_model="inductor", max_work=4_000_000, check_time_limit=0.0)
        cap.partition(skipped)
        with monkeypatch.context() as m, caplog.at_level(logging.WARNING, logger="fxcut"):
            m.setattr(ask, "decision_peaks", broken)
            caplog.clear()
            failing = planned_partitioner(budget, memory_model="inductor", max_work=4_000_000,
                                          check_time_limit=ASK_TIME_LIMIT)
            cap.partition(failing)
        report = failing.planner.last.check
        # the ask is a gated copy of torch's: its error comes back as TorchChanged, naming the cause
        assert report.failed.startswith("TorchChanged: ") and not report.asked, report
        assert report.failed.endswith("RuntimeError: lowering failed for this candidate"), report
        warned = [r.getMessage() for r in caplog.records if "could not be asked" in r.getMessage()]
        assert len(warned) == 1 and "lowering failed for this candidate" in warned[0], warned
        assert failing.planner.last.saved == skipped.planner.last.saved
        if budget > 0.0:
            assert report.picked_by_model and report.picked_torch_budget is not None


def test_time_cost_prices_an_inlined_recompute_below_a_kernel(chain: Any) -> None:
    routed = _route(chain)
    arrays = routed.decision.decision.arrays
    storage = facts.storage_of(arrays)
    flops = facts.node_flops(arrays)
    numel = facts.value_numel(arrays)
    cost, inlined = node_costs(arrays, flops, storage, numel, CPU, fused=True)
    by_name = {n.name: i for i, n in enumerate(arrays.nodes)}
    relu = next(i for n, i in by_name.items() if arrays.nodes[i].target is aten.relu.default)
    mm = next(i for n, i in by_name.items() if arrays.nodes[i].target is aten.mm.default)
    # relu of 16x128: memory-bound, 2 x 8 KiB at 10 GB/s + 2 us; inlined: 2048 elements at 100 GFLOP/s
    assert cost[relu] == round((2 * 16 * 128 * 4 / 1e10 + 2e-6) * 1e12)
    assert inlined[relu] == round(16 * 128 / 1e11 * 1e12)
    assert inlined[relu] < cost[relu] / 100
    assert cost[mm] > inlined[mm]
    eager, _ = node_costs(arrays, flops, storage, numel, CPU, fused=False)
    assert eager[relu] - cost[relu] == round((CPU.op_overhead_s - CPU.kernel_overhead_s) * 1e12)


def test_step_through_inductor_backend_with_memory_budget_matches_eager() -> None:
    for budget in (0.0, 1.0):
        torch._dynamo.reset()
        torch.manual_seed(0)
        model = _Chain()
        x = torch.randn(16, 64)
        ref_model = _Chain()
        ref_model.load_state_dict(model.state_dict())
        ref_model(x).sum().backward()
        with torch._inductor.config.patch(fx_graph_cache=False, force_disable_caches=True):
            compiled = torch.compile(model, backend=fxcut.inductor_backend(memory_budget=budget))
            compiled(x).sum().backward()
        for (k, p), (_, q) in zip(model.named_parameters(), ref_model.named_parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=f"{k} at budget {budget}")
    torch._dynamo.reset()


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("kwargs, name", [
    (dict(memory_model="xla"), "memory_model"),
    (dict(cost="watts"), "cost"),
    (dict(machine="fast"), "machine"),
    (dict(check="tvm"), "check"),
    (dict(max_checks=0), "max_checks"),
    (dict(check_time_limit=-1.0), "check_time_limit"),
    (dict(check_time_limit=float("nan")), "check_time_limit"),
    (dict(check_time_limit=True), "check_time_limit"),
])
def test_bad_plan_options_name_them(kwargs: dict[str, Any], name: str) -> None:
    with pytest.raises(ValueError, match=name):
        PeakPlanner(0.5, **kwargs)
    with pytest.raises(ValueError, match=name):
        fxcut.planned_partitioner(0.5, **kwargs)


def test_backend_check_time_limit_reaches_the_planner_and_the_cache_key() -> None:
    from fxcut.integrations.torch_compile import InductorPartitioner, _fxcut_partition

    part = InductorPartitioner(memory_budget=0.5, check_time_limit=5.0)
    assert _fxcut_partition(None, 0.5, None, "inductor", part.check_time_limit).planner.check_time_limit == 5.0
    assert _fxcut_partition(None, 0.5, None, "inductor").planner.check_time_limit == 0.0  # not asked unless told
    assert part.uuid() != InductorPartitioner(memory_budget=0.5).uuid()  # a different plan: another cache entry
    fxcut.inductor_backend(memory_budget=0.5, check_time_limit=0)
    for bad in (-1.0, float("inf"), True):
        with pytest.raises(ValueError, match="check_time_limit"):
            fxcut.inductor_backend(memory_budget=0.5, check_time_limit=bad)
    with pytest.raises(ValueError, match="check_time_limit applies to a plan"):
        fxcut.inductor_backend(check_time_limit=5.0)


def test_bad_backend_memory_model_names_it() -> None:
    with pytest.raises(ValueError, match="memory_model"):
        fxcut.inductor_backend(memory_budget=0.5, memory_model="xla")
    with pytest.raises(ValueError, match="memory_model"):
        fxcut.aot_backend(memory_budget=0.5, memory_model=None)


def test_bad_machine_model_names_the_field() -> None:
    with pytest.raises(ValueError, match="bytes_per_s"):
        MachineModel(1e9, 0, 0, 0)
    with pytest.raises(ValueError, match="kernel_overhead_s"):
        MachineModel(1e9, 1e9, -1, 0)


def test_core_names_a_bad_fusion_entry(chain: Any) -> None:
    routed = _route(chain)
    arrays = routed.decision.decision.arrays
    n = len(arrays)
    saved = list(routed.saved)
    bad = bytearray(n)
    bad[3] = 7  # no such kind
    with pytest.raises(ValueError, match=r"fusion\[3\] = 7") as err:
        core.memory_simulate(arrays, saved, num_fwd_outputs=chain.num_fwd_outputs, fusion=bytes(bad))
    assert "node 3" in str(err.value)
    cost = array("q", [0] * n)
    cost[2] = -5
    with pytest.raises(ValueError, match=r"fused_cost\[2\] = -5"):
        core.memory_simulate(arrays, saved, num_fwd_outputs=chain.num_fwd_outputs, fusion=bytes(n), fused_cost=cost)
    with pytest.raises(ValueError, match="pass fusion too"):
        core.memory_simulate(arrays, saved, num_fwd_outputs=chain.num_fwd_outputs, fused_cost=array("q", [0] * n))
    with pytest.raises(TypeError, match="realize"):
        core.memory_simulate(arrays, saved, num_fwd_outputs=chain.num_fwd_outputs, fusion=bytes(n), realize=(1, 2))
    with pytest.raises(ValueError, match=r"realize\[1\]"):
        core.memory_simulate(arrays, saved, num_fwd_outputs=chain.num_fwd_outputs, fusion=bytes(n),
                             realize=(1, -2, 3))
    with pytest.raises(ValueError, match="fusion"):
        core.memory_simulate(arrays, saved, num_fwd_outputs=chain.num_fwd_outputs, fusion=bytes(n - 1))
    with pytest.raises(ValueError, match="kernel_calls applies to the inductor model only: pass fusion too"):
        core.memory_simulate(arrays, saved, num_fwd_outputs=chain.num_fwd_outputs, kernel_calls=True)
    roles = bytes(n)
    for entry in (_C.plan_simulate, _C.plan_frontier):
        kwargs: dict[str, Any] = {"saved": bytes(n)} if entry is _C.plan_simulate else {}
        with pytest.raises(ValueError, match="kernel_calls applies to the inductor model only"):
            entry(arrays, num_fwd_outputs=chain.num_fwd_outputs, role=roles, kernel_calls=True, **kwargs)


def test_simulate_rejects_an_unknown_model(chain: Any) -> None:
    routed = _route(chain)
    with pytest.raises(ValueError, match="memory_model"):
        simulate_saved(routed.decision.decision.arrays, list(routed.saved), chain.num_fwd_outputs,
                        model="gpu")  # type: ignore[arg-type]


def _primal_graph(n_in: list[list[int]], primals: int, outputs: list[int]) -> GraphArrays:
    """A graph array from each node's inputs: the first ``primals`` nodes
    primal placeholders, the last the output node, the rest computed; 64
    bytes each."""
    ptr = [0]
    for ins in n_in:
        ptr.append(ptr[-1] + len(ins))
    idx = [i for ins in n_in for i in ins]
    n = len(n_in)
    kinds = [_C.KIND_PLACEHOLDER] * primals + [_C.KIND_CALL_FUNCTION] * (n - primals - 1) + [_C.KIND_OUTPUT]
    return GraphArrays(kind=array("B", kinds),
                       flags=array("I", [_C.F_PRIMAL] * primals + [0] * (n - primals)), tag=array("b", [-1] * n),
                       ac_graph_id=array("i", [-1] * n), nbytes=array("q", [64] * n),
                       arg_ptr=array("i", ptr), arg_idx=array("i", idx), in_ptr=array("i", ptr),
                       in_idx=array("i", idx), outputs=array("i", outputs))


def _shared_leaves_arrays() -> GraphArrays:
    """Three primals c, d, e; b2 = f(c, d, e), b1 = f(c, d, e, b2) pointwise
    (inlined); cat(c, d, e, b1) the forward's one output.  The cat's kernel
    reads c, d, e through every inlined level: its walk meets each of them
    once per edge before visiting it -- more than the graph has nodes."""
    return _primal_graph([[], [], [], [0, 1, 2], [0, 1, 2, 3], [0, 1, 2, 4], [5]], primals=3, outputs=[5])


def test_kernel_walk_through_shared_inlined_leaves_stays_in_bounds() -> None:
    # Regression: the walk's stack had n + 1 entries, and this 7-node graph
    # pushes 11 (an out-of-bounds write, caught by scripts/sanitize.sh).
    arrays = _shared_leaves_arrays()
    fusion = bytes([_C.FUSE_POINTWISE] * 5 + [_C.FUSE_CAT, _C.FUSE_POINTWISE])
    r = core.memory_simulate(arrays, [], num_fwd_outputs=1, fusion=fusion, timeline=True, realize=(8, 8, 64))
    # b1 and b2 inline into the cat: one kernel, the cat's 64-byte buffer (primals cost nothing)
    assert list(r.schedule) == [5]
    assert r.peak_bytes == 64


def _reread_arrays(extra: int, one_reader: bool = False) -> tuple[GraphArrays, int]:
    """Primals x, y and ``extra`` more; a = f(x, y), c = f(x, a) and
    b = f(a, c, x, extras...) pointwise; two reductions of b (``one_reader``:
    the second reduces x instead), the forward's outputs.  b's inlined
    expression reaches x three times and y twice (6 + extra reads counted
    per path) but reads 2 + extra distinct buffers.  Returns the arrays and
    b's index."""
    p = 2 + extra
    x, y = 0, 1
    a, c, b = p, p + 1, p + 2
    n_in: list[list[int]] = [[] for _ in range(p)]
    n_in += [[x, y], [x, a], [a, c, x, *range(2, p)], [b], [x] if one_reader else [b], [b + 1, b + 2]]
    return _primal_graph(n_in, primals=p, outputs=[b + 1, b + 2]), b


@pytest.mark.parametrize("extra, realized", [(0, False), (2, False), (3, True)])
def test_reads_of_a_value_read_twice_are_counted_once_per_buffer(extra: int, realized: bool) -> None:
    """Inductor realizes a pointwise value read by two kernels when its
    expression reads more than ``realize_reads_threshold`` (4) distinct
    buffers (``num_reads``: a set of memory dependencies), not paths: b
    reaches x three times and y twice and is still inlined into both
    reductions; with 5 distinct buffers it is a buffer of its own.  (The
    LM loss's gradient of HF Llama at torch's budget-0 decision: counted
    per path, a 4 MiB value was a buffer held through the whole
    recomputed forward, 17% over inductor's code.)"""
    arrays, b = _reread_arrays(extra)
    n = len(arrays.kind)
    fusion = bytes([_C.FUSE_POINTWISE] * (n - 3) + [_C.FUSE_REDUCTION] * 2 + [_C.FUSE_POINTWISE])
    r = core.memory_simulate(arrays, [], num_fwd_outputs=2, fusion=fusion, timeline=True, realize=(4, 8, 64))
    assert list(r.schedule) == ([b] if realized else []) + [b + 1, b + 2]
    assert r.peak_bytes == 64 * (3 if realized else 2)


@pytest.mark.parametrize("extra, realized", [(6, False), (7, True)])
def test_accumulated_reads_are_counted_once_per_buffer(extra: int, realized: bool) -> None:
    """Any pointwise value reading more than the accumulated-reads
    threshold (here 8) distinct buffers is a buffer: 2 + 6 distinct (12
    per path) inline, 2 + 7 do not."""
    # one reduction reads b (the other reads x): only the accumulated rule can realize b
    arrays, b = _reread_arrays(extra, one_reader=True)
    n = len(arrays.kind)
    fusion = bytes([_C.FUSE_POINTWISE] * (n - 3) + [_C.FUSE_REDUCTION] * 2 + [_C.FUSE_POINTWISE])
    r = core.memory_simulate(arrays, [], num_fwd_outputs=2, fusion=fusion, timeline=True, realize=(64, 8, 64))
    assert list(r.schedule) == ([b] if realized else []) + [b + 1, b + 2]


@pytest.mark.parametrize("extra, realized", [(60, False), (68, True)])
def test_a_read_count_past_the_set_falls_back_to_paths(extra: int, realized: bool) -> None:
    """A threshold past the distinct-read set's size (64 entries): below
    the set's size the distinct count decides exactly (62 distinct, 66 per
    path: within a threshold of 65); past it the count per path (an upper
    bound) decides (70 distinct, 74 per path: over 65)."""
    arrays, b = _reread_arrays(extra, one_reader=True)
    n = len(arrays.kind)
    fusion = bytes([_C.FUSE_POINTWISE] * (n - 3) + [_C.FUSE_REDUCTION] * 2 + [_C.FUSE_POINTWISE])
    r = core.memory_simulate(arrays, [], num_fwd_outputs=2, fusion=fusion, timeline=True, realize=(65, 65, 1000))
    assert list(r.schedule) == ([b] if realized else []) + [b + 1, b + 2]


class _LMHead(nn.Module):
    """Embedding, a hidden layer and an LM head with the shifted-label
    cross entropy of Hugging Face's causal LMs."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(512, 64)
        self.a = nn.Linear(64, 64)
        self.head = nn.Linear(64, 512, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        logits = self.head(torch.relu(self.a(self.emb(ids))))
        return nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 512), ids[:, 1:].reshape(-1))


def test_lm_loss_gradient_is_inlined_at_budget_0_as_inductor_does() -> None:
    """At budget 0 the backward recomputes the forward between the loss's
    gradient (read twice: the log-softmax backward's sum and its
    subtraction) and its readers; inductor inlines it into both (3 distinct
    reads), so it costs nothing while the forward is recomputed.  Counted
    per path the model made it a buffer: 35% over inductor's code here."""
    from fxcut.tools.capture import capture
    from fxcut.torchrules.inductor import ask_inductor, donated_indices

    torch.manual_seed(0)
    cap = capture(_LMHead(), [torch.randint(0, 512, (4, 33))], lambda out, _: out, compiler="inductor")
    routed = _route(cap, 0.0)
    fw, bw = routed.modules
    est = simulate_saved(routed.decision.decision.arrays, list(routed.saved), cap.num_fwd_outputs,
                          model="inductor")
    b = ask_inductor(bw, is_backward=True, donated=donated_indices(fw, bw))
    assert abs(est.bw_peak_bytes - b.wrapper_peak) <= 0.1 * b.wrapper_peak, (est.bw_peak_bytes, b.wrapper_peak)


def test_leaves_past_the_record_are_walked_with_the_same_reads() -> None:
    """Each kernel's leaves (the buffers its inlined expression reads) are
    recorded once per module walk in room for 2(n + edges) entries; past
    it the kernels are walked each time they are asked.  40 leaf buffers,
    10 inlined values reading 4 each, 20 reductions reading all 10 (40
    leaves each) and a final reduction: 860 leaves against room for 828,
    so the last reduction and the final one are walked.  Their reads keep
    every leaf alive until the last reduction: the peak is all 40 leaves
    and 20 reductions at once (and so under scripts/sanitize.sh, in
    bounds)."""
    n_in: list[list[int]] = [[] for _ in range(40)]
    n_in += [[i] for i in range(40)]                              # 40..79: leaf buffers
    n_in += [[40 + 4 * j + i for i in range(4)] for j in range(10)]  # 80..89: inlined, 4 leaves each
    n_in += [list(range(80, 90)) for _ in range(20)]              # 90..109: reductions of all 10
    n_in += [list(range(90, 110)), [110]]                         # 110: the final reduction; the output
    arrays = _primal_graph(n_in, primals=40, outputs=[110])
    edges = sum(len(ins) for ins in n_in)
    assert 40 + 20 * 40 + 20 > 2 * (len(n_in) + 1 + edges)  # the record overflows
    fusion = bytes([_C.FUSE_POINTWISE] * 40 + [_C.FUSE_REDUCTION] * 40 + [_C.FUSE_POINTWISE] * 10 +
                   [_C.FUSE_REDUCTION] * 21 + [_C.FUSE_POINTWISE])
    r = core.memory_simulate(arrays, [], num_fwd_outputs=1, fusion=fusion, timeline=True, realize=(4, 12, 64))
    assert list(r.schedule) == list(range(40, 80)) + list(range(90, 111))
    assert r.peak_bytes == (40 + 20) * 64
