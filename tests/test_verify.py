"""Verify mode: torch's partitioner decides every graph too, and a
difference raises fxcut.PartitionMismatch naming the node and the rule (or,
warn-only, warns and uses torch's result)."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.fx as fx

import fxcut
import fxcut.torchrules.build
import fxcut.partition
import zoo
from fxcut.route import guard


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    monkeypatch.setattr(guard, "_warned", set())
    monkeypatch.delenv(guard.VERIFY_ENV, raising=False)
    guard.reset_counts()
    yield
    guard.reset_counts()


def _saved(fw: fx.GraphModule, num_fwd_outputs: int) -> list[str]:
    output = next(iter(reversed(fw.graph.nodes)))
    return [n.name for n in output.args[0][num_fwd_outputs:]]


def _verified(verify):
    def fn(*args, **kwargs):
        return fxcut.min_cut_rematerialization_partition(*args, verify=verify, **kwargs)
    return fn


@pytest.mark.parametrize("name", ["mlp", "gpt2_dropout", "llama_sac", "mlp_dynamic", "resnet"])
def test_verify_passes_on_zoo_graphs(name: str) -> None:
    cap = zoo.capture(name)
    fw, bw = cap.partition(_verified(True))
    tfw, tbw = cap.partition()
    assert fw.code == tfw.code and bw.code == tbw.code
    assert fxcut.partition_counts() == {"verified": 1}


def _inject_swap(monkeypatch) -> list[tuple[str, list[str]]]:
    """Make fxcut's decision save the inputs of one value it chose to save
    instead of the value itself (the backward then recomputes it): the first
    saved op output computed from forward values only.  Records
    ``(dropped, added)`` per call."""
    real = fxcut.torchrules.build.build_modules
    swaps: list[tuple[str, list[str]]] = []

    def build(joint_module, saved_values, *args, **kwargs):
        victim = next(n for n in saved_values
                      if n.op == "call_function" and n.all_input_nodes
                      and not any("tangents" in a.name for a in n.all_input_nodes))
        keep = [n for n in saved_values if n is not victim]
        added = [a for a in victim.all_input_nodes if a not in keep]
        swaps.append((victim.name, [a.name for a in added]))
        return real(joint_module, keep + added, *args, **kwargs)

    monkeypatch.setattr(fxcut.torchrules.build, "build_modules", build)
    return swaps


@pytest.mark.parametrize("name", ["mlp", "gpt2"])
def test_verify_catches_a_changed_saved_value_and_names_it(monkeypatch, name) -> None:
    swaps = _inject_swap(monkeypatch)
    cap = zoo.capture(name)
    with pytest.raises(fxcut.PartitionMismatch) as info:
        cap.partition(_verified(True))
    err = info.value
    ((dropped, added),) = swaps
    assert added, "the injected swap must add a value"
    assert dropped in err.torch_saved and dropped not in err.fxcut_saved
    assert set(added) <= set(err.fxcut_saved) - set(err.torch_saved)
    assert f"saved by torch only: {dropped}" in err.diff
    assert f"saved by fxcut only: {', '.join(added)}" in err.diff
    # which node and which rule: fxcut's own account of each differing node
    explained = {facts["node"]: facts for facts in err.nodes}
    assert set(explained) == {dropped, *added}
    assert explained[dropped]["saved"] is True and "saved: its value edge" in explained[dropped]["why"]
    for a in added:
        assert explained[a]["saved"] is False and explained[a]["text"].splitlines()[0] in err.diff
    assert "forward code differs (torch -> fxcut):" in err.diff and "backward code differs" in err.diff
    assert fxcut.partition_counts() == {"mismatch": 1}


def test_warn_only_mode_warns_and_returns_torchs_result(monkeypatch) -> None:
    swaps = _inject_swap(monkeypatch)
    cap = zoo.capture("mlp")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fw, bw = cap.partition(_verified("warn"))
    tfw, tbw = cap.partition()
    assert fw.code == tfw.code and bw.code == tbw.code
    assert _saved(fw, cap.num_fwd_outputs) == _saved(tfw, cap.num_fwd_outputs)
    msgs = [str(w.message) for w in caught if issubclass(w.category, fxcut.VerifyWarning)]
    assert len(msgs) == 1 and f"saved by torch only: {swaps[0][0]}" in msgs[0]
    assert "using torch's partition" in msgs[0]


def test_verify_env_var(monkeypatch) -> None:
    _inject_swap(monkeypatch)
    cap = zoo.capture("mlp")
    monkeypatch.setenv(guard.VERIFY_ENV, "1")
    with pytest.raises(fxcut.PartitionMismatch):
        cap.partition(fxcut.min_cut_rematerialization_partition)
    monkeypatch.setenv(guard.VERIFY_ENV, "warn")
    with pytest.warns(fxcut.VerifyWarning):
        cap.partition(fxcut.min_cut_rematerialization_partition)
    monkeypatch.setenv(guard.VERIFY_ENV, "0")
    fw, _ = cap.partition(fxcut.min_cut_rematerialization_partition)  # not checked: fxcut's (injected) result
    assert _saved(fw, cap.num_fwd_outputs) != _saved(cap.partition()[0], cap.num_fwd_outputs)


@pytest.mark.parametrize("bad", ["yes please", 2, "raise!"])
def test_bad_verify_value_is_a_clear_error(monkeypatch, bad) -> None:
    with pytest.raises(ValueError, match="verify="):
        guard.verify_mode(bad)
    monkeypatch.setenv(guard.VERIFY_ENV, "sometimes")
    with pytest.raises(ValueError, match="FXCUT_VERIFY='sometimes'"):
        guard.verify_mode()
    with pytest.raises(ValueError, match="verify="):
        fxcut.aot_backend(verify=bad)


def _mlp_step(backend) -> tuple[torch.Tensor, list[torch.Tensor]]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    x = torch.randn(5, 8)
    torch._dynamo.reset()
    loss = torch.compile(model, backend=backend)(x).square().mean()
    loss.backward()
    return loss.detach(), [p.grad for p in model.parameters()]


def test_aot_backend_verify_argument(monkeypatch) -> None:
    loss, grads = _mlp_step(fxcut.aot_backend(verify=True))
    assert fxcut.partition_counts() == {"verified": 1}
    ref_loss, ref_grads = _mlp_step("aot_eager")
    assert torch.equal(loss, ref_loss) and all(torch.equal(a, b) for a, b in zip(grads, ref_grads))
    _inject_swap(monkeypatch)
    with pytest.raises(Exception) as info:
        _mlp_step(fxcut.aot_backend(verify=True))
    chain, e = [], info.value
    while e is not None:
        chain.append(type(e))
        e = e.__cause__ or e.__context__
    assert fxcut.PartitionMismatch in chain
    # explicitly off beats the environment
    monkeypatch.setenv(guard.VERIFY_ENV, "1")
    _mlp_step(fxcut.aot_backend(verify=False))


def test_inductor_partitioner_carries_verify_into_its_cache_key() -> None:
    plain = fxcut.InductorPartitioner()
    checked = fxcut.InductorPartitioner(verify="warn")
    off = fxcut.InductorPartitioner(verify=False)
    assert checked.verify == "warn" and off.verify == "off" and plain.verify is None
    assert plain.uuid() != checked.uuid() and plain.uuid() == off.uuid()
    assert "verify='warn'" in repr(checked)


def test_the_fallback_reaches_torchs_partitioner_when_torchs_name_is_rebound_to_fxcut(monkeypatch) -> None:
    """A user who rebinds torch's ``min_cut_rematerialization_partition``
    (to fxcut's, or to a lambda around torch's): the hand-off to torch
    reaches the function torch's module defined, captured before the
    rebinding -- never the rebound name."""
    import torch._functorch.compilers as tc
    import torch._functorch.partitioners as tp

    real = tp.min_cut_rematerialization_partition
    assert guard.is_torchs_own(real) and guard.torchs_own_min_cut() is real
    calls = []
    monkeypatch.setattr(tc, "min_cut_rematerialization_partition", lambda *a, **k: calls.append(1) or real(*a, **k))
    monkeypatch.setattr(tp, "min_cut_rematerialization_partition", fxcut.min_cut_rematerialization_partition)
    cap = zoo.capture("mlp")
    fw, bw = guard.torch_partition(cap.fresh(), cap.joint_inputs, num_fwd_outputs=cap.num_fwd_outputs)
    assert calls == []
    tfw, tbw = real(cap.fresh(), cap.joint_inputs, num_fwd_outputs=cap.num_fwd_outputs)
    assert (fw.code, bw.code) == (tfw.code, tbw.code)
    for fake in (fxcut.min_cut_rematerialization_partition, lambda *a, **k: real(*a, **k)):
        assert not guard.is_torchs_own(fake)


def test_torchs_partitioner_is_refused_when_it_was_rebound_before_fxcut_could_take_it(monkeypatch) -> None:
    import torch._functorch.compilers as tc
    import torch._functorch.partitioners as tp

    monkeypatch.setattr(guard, "_captured", [])
    monkeypatch.setattr(tp, "min_cut_rematerialization_partition", fxcut.min_cut_rematerialization_partition)
    monkeypatch.setattr(tc, "min_cut_rematerialization_partition", fxcut.min_cut_rematerialization_partition)
    cap = zoo.capture("mlp")
    with pytest.raises(RuntimeError, match="has been replaced"):
        guard.torch_partition(cap.fresh(), cap.joint_inputs, num_fwd_outputs=cap.num_fwd_outputs)


def test_verify_is_for_the_default_plan_only() -> None:
    class SaveWhatTorchSaves:
        def choose_saved(self, plan, decision):
            return decision.saved

    cap = zoo.capture("mlp")
    with pytest.raises(ValueError, match="default plan only"):
        cap.partition(lambda *a, **k: fxcut.min_cut_rematerialization_partition(
            *a, verify=True, objective=SaveWhatTorchSaves(), **k))
    fw, bw = cap.partition(lambda *a, **k: fxcut.min_cut_rematerialization_partition(
        *a, objective=SaveWhatTorchSaves(), **k))
    tfw, tbw = cap.partition()
    assert (fw.code, bw.code) == (tfw.code, tbw.code)
    assert fxcut.partition_counts() == {"fxcut_objective": 1}
