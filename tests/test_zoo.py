"""The zoo's joint graphs are real, complete, independent per copy, and train like eager mode."""

from __future__ import annotations

import operator
import resource

import pytest
import torch
import torch.fx as fx
from torch._functorch.partitioners import default_partition, min_cut_rematerialization_partition
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.utils.checkpoint import CheckpointPolicy

import zoo
from fxcut import is_cast_op, recompute_param_aliases
from fxcut.tools.capture import JointCapture, capture, copy_graph_module
from fxcut.tools.models import MODELS, BlockStack, build_model
from training import capture_model, train_step

aten = torch.ops.aten
NAMES = list(zoo.CASES)


def _outputs(gm: fx.GraphModule) -> list[object]:
    (out,) = [n for n in gm.graph.nodes if n.op == "output"]
    return list(out.args[0])


def _targets(gm: fx.GraphModule) -> set[object]:
    return {n.target for n in gm.graph.nodes if n.op == "call_function"}


def _snapshot(gm: fx.GraphModule) -> list[tuple[object, ...]]:
    return [(n.name, n.op, str(n.target), tuple(map(str, n.args)), n.meta.get("recompute"),
             n.meta.get("ac_graph_id"), tuple(sorted(n.meta))) for n in gm.graph.nodes]


def test_zoo_has_the_required_cases() -> None:
    required = {"mlp", "gpt2", "llama_bf16", "llama_ckpt", "convnet", "gpt2_dropout", "llama_sac",
                "moe", "lstm", "vit", "resnet", "gpt2_ckpt"}
    assert required <= set(zoo.CASES)
    assert {"mlp_dynamic", "gpt2_dynamic"} & set(zoo.CASES)
    assert len(zoo.CASES) >= 14


# --------------------------------------------------------------------------- structure


@pytest.mark.parametrize("name", NAMES)
def test_joint_graph_has_primals_tangents_and_gradients(name: str) -> None:
    cap = zoo.capture(name)
    primals, tangents = cap.primals(), cap.tangents()
    assert primals and tangents
    assert all(n.name.startswith("primals_") for n in primals)
    assert all(n.name.startswith("tangents_") for n in tangents)
    assert len(cap.joint_inputs) == 2 and len(cap.joint_inputs[1]) == len(tangents)
    # AOT Autograd's joint outputs: the forward's, then one gradient per primal.
    outputs = _outputs(cap.gm)
    assert len(outputs) == cap.num_fwd_outputs + len(primals)
    grads = outputs[cap.num_fwd_outputs:]
    assert any(isinstance(g, fx.Node) for g in grads)
    for (position, _, _), param in zip(cap.param_indices, cap.param_names):
        frozen = zoo.CASES[name].cfg.get("frozen_layers", 0) and param.startswith("blocks.0.")
        assert (grads[position] is None) == bool(frozen), param
    assert "static_lifetime_input_indices" in cap.partition_kwargs


def _has_bf16_param_casts(cap: JointCapture) -> bool:
    params = {cap.primals()[pos] for pos, _, _ in cap.param_indices}
    casts = [n for n in cap.graph.nodes
             if n.op == "call_function" and n.args and n.args[0] in params
             and is_cast_op(n) == (True, torch.bfloat16)]
    return len(casts) > 0


def _recompute_tags(cap: JointCapture) -> set[object]:
    return {n.meta["recompute"] for n in cap.graph.nodes if "recompute" in n.meta}


def _ac_graph_ids(cap: JointCapture) -> set[int]:
    return {n.meta["ac_graph_id"] for n in cap.graph.nodes if "ac_graph_id" in n.meta}


def _has_random_ops(cap: JointCapture) -> bool:
    random = {aten.native_dropout.default, aten.bernoulli.default, aten.bernoulli_.float,
              aten.rand.default, aten.rand_like.default}
    return bool(_targets(cap.gm) & random)


def _sym_nodes(cap: JointCapture) -> list[fx.Node]:
    return [n for n in cap.graph.nodes if isinstance(n.meta.get("val"), torch.SymInt)]


def _has_routing_ops(cap: JointCapture) -> bool:
    need = {aten.topk.default, aten.gather.default, aten.index.Tensor, aten.index_select.default,
            aten.index_add.default, aten.scatter_add.default}
    return need <= _targets(cap.gm)


def _has_batch_norm(cap: JointCapture) -> bool:
    names = {str(t) for t in _targets(cap.gm)}
    return any("batch_norm" in t and "backward" not in t for t in names) and any(
        "batch_norm_backward" in t for t in names)


def _has_sdpa(cap: JointCapture) -> bool:
    return any("scaled_dot_product" in str(t) for t in _targets(cap.gm))


def _has_conv(cap: JointCapture) -> bool:
    return {aten.convolution.default, aten.convolution_backward.default} <= _targets(cap.gm)


@pytest.mark.parametrize("name", NAMES)
def test_expected_features_are_present(name: str) -> None:
    case, cap = zoo.CASES[name], zoo.capture(name)
    f = case.features
    assert _has_bf16_param_casts(cap) == (zoo.BF16_PARAM_CASTS in f)
    assert _has_random_ops(cap) == (zoo.RANDOM_OPS in f)
    assert bool(_sym_nodes(cap)) == (zoo.SYM_NODES in f)
    assert _has_batch_norm(cap) == (zoo.BATCH_NORM in f)
    assert _has_sdpa(cap) == (zoo.SDPA in f)
    assert _has_conv(cap) == (zoo.CONV in f)
    if zoo.ROUTING_OPS in f:
        assert _has_routing_ops(cap)
    tags = _recompute_tags(cap)
    if zoo.AC_GRAPH_ID in f:
        # one checkpoint region per block
        assert len(_ac_graph_ids(cap)) == case.cfg.get("layers", 2)
        assert CheckpointPolicy.PREFER_RECOMPUTE in tags
    else:
        assert not _ac_graph_ids(cap) and not tags
    if zoo.SAC_TAGS in f:
        assert tags == {CheckpointPolicy.MUST_SAVE, CheckpointPolicy.PREFER_RECOMPUTE}
        saved = {n.target for n in cap.graph.nodes if n.meta.get("recompute") == CheckpointPolicy.MUST_SAVE}
        assert saved <= {aten.mm.default, aten.bmm.default, aten.addmm.default} and saved
    elif zoo.AC_GRAPH_ID in f:
        assert tags == {CheckpointPolicy.PREFER_RECOMPUTE}
    if zoo.BUFFER_MUTATION in f:
        assert cap.num_fwd_outputs > 1  # updated running stats come back as forward outputs
    if zoo.SYM_NODES in f:
        syms = _sym_nodes(cap)
        assert any(n.op == "placeholder" for n in syms)
        assert any(n.op == "call_function" for n in syms)
    if zoo.TIED_WEIGHTS in f:
        model = zoo.CASES[name].build().model
        assert model.lm_head.weight is model.wte.weight
        (pos,) = [pos for (pos, _, _), p in zip(cap.param_indices, cap.param_names) if p == "wte.weight"]
        users = {u.target for u in cap.primals()[pos].users}
        assert aten.embedding.default in users and len(users) >= 2


def test_sac_context_lives_in_the_case_graph_only() -> None:
    # The same model without sac has no tags: the policy came from the capture option.
    assert not _recompute_tags(zoo.capture("llama"))
    assert zoo.capture("llama").num_nodes == zoo.capture("llama_sac").num_nodes


# --------------------------------------------------------------------------- copies


@pytest.mark.parametrize("name", NAMES)
def test_fresh_copies_are_independent(name: str) -> None:
    cap = zoo.capture(name)
    before = _snapshot(cap.gm)
    a, b = cap.fresh(), cap.fresh()
    assert a is not b and a.graph is not cap.graph and b.graph is not a.graph
    assert _snapshot(a) == before == _snapshot(b)
    for node_a, node_b, node in zip(a.graph.nodes, b.graph.nodes, cap.graph.nodes):
        assert node_a.meta is not node.meta and node_a.meta is not node_b.meta
        assert node_a.meta.get("val") is node.meta.get("val")
        node_a.meta["recompute"] = CheckpointPolicy.MUST_RECOMPUTE
        node_a.meta["ac_graph_id"] = -7
        if isinstance(node_a.meta.get("nn_module_stack"), dict):
            node_a.meta["nn_module_stack"]["fxcut_test"] = ("x", "y")
    assert _snapshot(cap.gm) == before == _snapshot(b)
    assert all("fxcut_test" not in n.meta.get("nn_module_stack", {}) for n in cap.graph.nodes)


@pytest.mark.parametrize("name", NAMES)
def test_partitioning_a_fresh_copy_leaves_the_capture_untouched(name: str) -> None:
    cap = zoo.capture(name)
    before = _snapshot(cap.gm)
    fw, bw = cap.partition(min_cut_rematerialization_partition)
    assert isinstance(fw, fx.GraphModule) and isinstance(bw, fx.GraphModule)
    assert _snapshot(cap.gm) == before


def test_copy_graph_module_runs_like_the_original() -> None:
    gm = fx.symbolic_trace(torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.ReLU()))
    copy = copy_graph_module(gm)
    x = torch.randn(4, 3)
    torch.testing.assert_close(copy(x), gm(x))
    assert [n.name for n in copy.graph.nodes] == [n.name for n in gm.graph.nodes]


# --------------------------------------------------------------------------- param_indices


@pytest.mark.parametrize("name", NAMES)
def test_param_indices_point_at_the_parameters(name: str) -> None:
    cap = zoo.capture(name)
    named = list(zoo.CASES[name].build().model.named_parameters())
    primals = cap.primals()
    assert sorted(cap.param_names) == sorted(p for p, _ in named)  # every parameter, once
    positions = [pos for pos, _, _ in cap.param_indices]
    assert len(set(positions)) == len(positions)
    for (pos, ds_id, shape), pname in zip(cap.param_indices, cap.param_names):
        assert isinstance(shape, torch.Size)
        assert named[ds_id][0] == pname
        assert tuple(primals[pos].meta["val"].shape) == tuple(shape) == tuple(named[ds_id][1].shape)
    # AOT Autograd itself marks parameters as static-lifetime inputs.
    assert set(positions) <= set(cap.partition_kwargs["static_lifetime_input_indices"])


def test_zero3_walk_tags_the_bf16_casts_of_parameters() -> None:
    cap = zoo.capture("llama_bf16")
    gm = cap.fresh()
    tagged = recompute_param_aliases(gm.graph, cap.param_indices)
    casts = [n for n in tagged if is_cast_op(n)[0]]
    assert casts and all(n.meta["recompute"] == CheckpointPolicy.MUST_RECOMPUTE for n in tagged)
    assert not _recompute_tags(cap)  # the capture itself is untouched


# --------------------------------------------------------------------------- training


@pytest.mark.parametrize("name", NAMES)
def test_min_cut_training_step_matches_eager(name: str) -> None:
    # Random cases included: on CPU the compiled graph's dropout masks equal eager's.
    zoo.assert_same_step(zoo.train(name, min_cut_rematerialization_partition), zoo.eager(name),
                         **zoo.tolerances(name))


def test_train_compiles_with_the_given_partitioner() -> None:
    calls: list[int] = []

    def counting_partition(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(1)
        return default_partition(*args, **kwargs)

    step = zoo.train("gpt2_dropout", counting_partition)
    assert calls == [1]
    zoo.assert_same_step(step, zoo.train("gpt2_dropout", min_cut_rematerialization_partition))
    zoo.assert_same_step(step, zoo.eager("gpt2_dropout"))


def test_capture_step_equals_a_separate_train_step() -> None:
    case = zoo.CASES["llama_sac"]
    model, make_inputs, loss_fn = case.build()
    step = train_step(model, make_inputs(), loss_fn, min_cut_rematerialization_partition,
                      **case.step_options())
    zoo.assert_same_step(step, zoo.train("llama_sac", min_cut_rematerialization_partition), rtol=0, atol=0)
    assert all(p.grad is None for p in model.parameters())


# --------------------------------------------------------------------------- fake capture


def test_fake_capture_of_a_large_gpt_allocates_nothing() -> None:
    cfg = dict(layers=2, hidden=4096, heads=32, seq=64, batch=1, vocab=50257)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    cap = capture_model("gpt2", fake=True, autocast_dtype=torch.bfloat16, **cfg)
    rss_growth = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - rss_before
    param_bytes = sum(4 * torch.Size(shape).numel() for _, _, shape in cap.param_indices)
    assert param_bytes > 1.5e9
    assert rss_growth < param_bytes / 4
    vals = [n.meta["val"] for n in cap.graph.nodes if isinstance(n.meta.get("val"), torch.Tensor)]
    assert vals and all(isinstance(v, FakeTensor) for v in vals)
    assert dict(zip(cap.param_names, (s for _, _, s in cap.param_indices)))["wte.weight"] == (50257, 4096)
    assert _has_bf16_param_casts(cap)


def test_fake_capture_gives_the_real_capture_graph() -> None:
    real = zoo.capture("gpt2_ckpt")
    fake = capture_model("gpt2", fake=True, checkpoint=True, **zoo.CASES["gpt2_ckpt"].cfg)

    def shape(n: fx.Node) -> object:
        v = n.meta.get("val")
        return (tuple(v.shape), v.dtype, v.device) if isinstance(v, torch.Tensor) else None
    assert [(n.name, n.target, shape(n), n.meta.get("recompute")) for n in fake.graph.nodes] == \
        [(n.name, n.target, shape(n), n.meta.get("recompute")) for n in real.graph.nodes]
    assert fake.param_indices == real.param_indices


def test_capture_checks_fake_flag_and_blocks() -> None:
    model, make_inputs, loss_fn = build_model("mlp")
    with pytest.raises(ValueError, match="fake=True"):
        capture(model, make_inputs(), loss_fn, fake=True)
    model, make_inputs, loss_fn = build_model("convnet")
    with pytest.raises(TypeError, match="BlockStack"):
        capture(model, make_inputs(), loss_fn, checkpoint=True)


# --------------------------------------------------------------------------- models


@pytest.mark.parametrize("name", list(MODELS))
def test_models_are_deterministic_and_buildable_without_memory(name: str) -> None:
    a, b = build_model(name), build_model(name)
    for (na, pa), (nb, pb) in zip(a.model.named_parameters(), b.model.named_parameters()):
        assert na == nb and torch.equal(pa, pb)
    for x, y in zip(a.make_inputs(), b.make_inputs()):
        assert torch.equal(x, y)
    assert a.model.training
    meta = build_model(name, device="meta")
    assert all(p.device.type == "meta" for p in meta.model.parameters())
    out = meta.model(*meta.make_inputs())
    assert meta.loss_fn(out, meta.make_inputs()).shape == ()
    if name not in {"convnet", "lstm"}:
        assert isinstance(a.model, BlockStack)


def test_dtype_casts_fake_parameters_and_keeps_weights_tied() -> None:
    with FakeTensorMode():
        model = build_model("gpt2", dtype=torch.bfloat16).model
    assert all(p.dtype == torch.bfloat16 and isinstance(p, FakeTensor) for p in model.parameters())
    assert model.lm_head.weight is model.wte.weight
    assert isinstance(model.lm_head.weight, torch.nn.Parameter)


def test_build_model_names_unknown_models() -> None:
    with pytest.raises(KeyError, match="known: convnet"):
        build_model("nope")


def test_dynamic_gpt2_has_symint_arithmetic() -> None:
    targets = {n.target for n in zoo.capture("gpt2_dynamic").graph.nodes}
    assert targets & {operator.mul, operator.floordiv, operator.sub, operator.add}
