"""fxcut inside DeepSpeed DeepCompile, against the installed DeepSpeed's own code.

DeepSpeed is installed without its native ops (they need CUDA):

    DS_BUILD_OPS=0 pip install --no-build-isolation deepspeed torch==2.13.0

Its ``get_no_copy_ops`` builds the native extension, so wherever DeepSpeed's
own walk runs here, that one function is replaced by fxcut's (the same set).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.fx as fx
from torch.utils.checkpoint import CheckpointPolicy

ds_partitioner = pytest.importorskip(
    "deepspeed.compile.partitioner",
    reason="deepspeed is not importable; install it with "
           "DS_BUILD_OPS=0 pip install --no-build-isolation deepspeed torch==2.13.0",
)
import deepspeed.compile.backend as ds_backend  # noqa: E402
import deepspeed.compile.inductor as ds_inductor  # noqa: E402

import fxcut  # noqa: E402
import fxcut.integrations.deepspeed as fxds  # noqa: E402
import fxcut.partition  # noqa: E402
import fxcut.route.decide  # noqa: E402
import fxcut.torchrules.zero3  # noqa: E402
import zoo  # noqa: E402

aten = torch.ops.aten

#: DeepSpeed's own functions, as imported (before any install()).
DS_OWN = {
    ("partitioner", "_recompute_param_aliases"): ds_partitioner._recompute_param_aliases,
    ("partitioner", "get_wrapped_partitioner"): ds_partitioner.get_wrapped_partitioner,
    ("backend", "get_wrapped_partitioner"): ds_backend.get_wrapped_partitioner,
    ("inductor", "get_wrapped_partitioner"): ds_inductor.get_wrapped_partitioner,
    ("backend", "min_cut_rematerialization_partition"): ds_backend.min_cut_rematerialization_partition,
}
MODULES = {"partitioner": ds_partitioner, "backend": ds_backend, "inductor": ds_inductor}


@pytest.fixture
def installed():
    fxds.install()
    try:
        yield
    finally:
        fxds.uninstall()


@pytest.fixture
def fxcut_calls(monkeypatch):
    """Counts of fxcut's walks (in C: "walk"; DeepCompile's walk in plain
    Python, where torch decides: "python walk", only once one ran) and C
    decisions during the test."""
    calls = {"walk": 0, "decide": 0}
    walk, decide = fxcut.torchrules.zero3.c_walk, fxcut.route.decide.decide_plan
    python_walk = fxcut.torchrules.zero3.reference_walk

    def spy_walk(*args, **kwargs):
        calls["walk"] += 1
        return walk(*args, **kwargs)

    def spy_python_walk(*args, **kwargs):
        calls["python walk"] = calls.get("python walk", 0) + 1
        return python_walk(*args, **kwargs)

    def spy_decide(*args, **kwargs):
        calls["decide"] += 1
        return decide(*args, **kwargs)

    monkeypatch.setattr(fxcut.torchrules.zero3, "c_walk", spy_walk)
    monkeypatch.setattr(fxcut.torchrules.zero3, "reference_walk", spy_python_walk)
    monkeypatch.setattr(fxcut.route.decide, "decide_plan", spy_decide)
    return calls


@pytest.fixture
def no_cuda_no_copy_ops(monkeypatch):
    """DeepSpeed's own walk, with its CUDA-only get_no_copy_ops replaced by fxcut's."""
    monkeypatch.setattr(ds_partitioner, "get_no_copy_ops", fxcut.get_no_copy_ops)


# --------------------------------------------------------------------------- install


def test_install_rebinds_what_deepcompile_looks_up_and_uninstall_restores_it(installed):
    assert ds_backend.min_cut_rematerialization_partition is fxcut.min_cut_rematerialization_partition
    for mod in ("partitioner", "backend", "inductor"):
        assert MODULES[mod].get_wrapped_partitioner is fxds.get_wrapped_partitioner
    assert ds_partitioner._recompute_param_aliases is fxds.recompute_param_aliases
    fxds.install()  # idempotent: uninstall still restores DeepSpeed's own
    fxds.uninstall()
    assert not fxds.installed()
    for (mod, attr), own in DS_OWN.items():
        assert getattr(MODULES[mod], attr) is own, f"{mod}.{attr}"


def test_deepcompile_eager_backend_expression_partitions_with_fxcut(installed, fxcut_calls):
    """backend.py's eager path: get_wrapped_partitioner(z3, indices,
    min_cut_rematerialization_partition, frame_id, frames) by its module's names."""
    cap = zoo.capture("llama_bf16")
    frames: set[int] = set()
    fn = ds_backend.get_wrapped_partitioner(True, cap.param_indices, ds_backend.min_cut_rematerialization_partition,
                                            11, frames)
    fw, bw = cap.partition(fn)
    assert fxcut_calls == {"walk": 1, "decide": 1}
    assert frames == {11}
    assert ds_partitioner.get_num_fwd_outputs(11) == cap.num_fwd_outputs

    # The same graphs as DeepSpeed's own wrapper with torch's partitioner.
    fxds.uninstall()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ds_partitioner, "get_no_copy_ops", fxcut.get_no_copy_ops)
        own = ds_backend.get_wrapped_partitioner(True, cap.param_indices, ds_backend.min_cut_rematerialization_partition,
                                                 12, set())
        tfw, tbw = cap.partition(own)
    assert fxcut_calls == {"walk": 1, "decide": 1}
    assert (fw.code, bw.code) == (tfw.code, tbw.code)


def test_deepcompile_inductor_wrapper_keeps_inductor_passes_and_cuts_with_fxcut(installed, fxcut_calls):
    """inductor.py's path: DeepCompile wraps inductor's own partition_fn;
    inductor's joint-graph passes run, then fxcut cuts."""
    from torch._inductor import compile_fx

    cap = zoo.capture("llama_bf16")
    frames: set[int] = set()
    fn = ds_inductor.wrap_partition_fn(True, compile_fx.partition_fn, list(cap.joint_inputs[0]), cap.param_indices,
                                       21, frames)
    fw, bw = cap.partition(fn)
    assert fxcut_calls == {"walk": 1, "decide": 1}
    assert frames == {21}

    fxds.uninstall()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ds_partitioner, "get_no_copy_ops", fxcut.get_no_copy_ops)
        own = ds_inductor.wrap_partition_fn(True, compile_fx.partition_fn, list(cap.joint_inputs[0]),
                                            cap.param_indices, 22, set())
        tfw, tbw = cap.partition(own)
    assert fxcut_calls == {"walk": 1, "decide": 1}
    assert (fw.code, bw.code) == (tfw.code, tbw.code)


def test_a_plan_uses_the_memory_model_of_the_program_each_deepcompile_backend_runs():
    """install(memory_budget=b): DeepCompile's eager backend runs its modules
    through make_boxed_func(gm.forward), holding every saved value through
    the backward (the "unfused_held" model); its inductor backend runs
    inductor's modules (the "inductor" model).  Each route plans on its own."""
    from torch._inductor import compile_fx

    import deepspeed.compile.backend as ds_backend_module

    fxds.install(memory_budget=0.0)
    try:
        eager_plan = ds_backend.min_cut_rematerialization_partition
        assert eager_plan.planner.memory_model == "unfused_held"
        cap = zoo.capture("llama_bf16")
        fn = ds_backend_module.get_wrapped_partitioner(True, cap.param_indices,
                                                       ds_backend.min_cut_rematerialization_partition, 31, set())
        cap.partition(fn)
        assert eager_plan.planner.last is not None and eager_plan.planner.last.memory_model == "unfused_held"

        cap = zoo.capture_inductor("llama_bf16")
        seen: list[str] = []
        inductor_plan = fxds._partition("inductor")
        original = inductor_plan.planner.plan

        def spy(*args: Any, **kwargs: Any) -> Any:
            seen.append(inductor_plan.planner.memory_model)
            return original(*args, **kwargs)

        inductor_plan.planner.plan = spy  # type: ignore[method-assign]
        fn = ds_inductor.wrap_partition_fn(True, compile_fx.partition_fn, list(cap.joint_inputs[0]),
                                           cap.param_indices, 32, set())
        cap.partition(fn)
        assert seen == ["inductor"]
        assert inductor_plan is not eager_plan
    finally:
        fxds.uninstall()
    assert ds_backend.min_cut_rematerialization_partition is DS_OWN[("backend", "min_cut_rematerialization_partition")]


def test_without_zero3_the_wrapper_only_records_the_frame(installed, fxcut_calls):
    cap = zoo.capture("mlp")
    frames: set[int] = set()
    fn = ds_partitioner.get_wrapped_partitioner(False, cap.param_indices, None, 5, frames)
    gm = cap.fresh()
    fw, _ = fn(gm, cap.joint_inputs, num_fwd_outputs=cap.num_fwd_outputs, **cap.partition_kwargs)
    assert fxcut_calls == {"walk": 0, "decide": 1} and frames == {5}
    assert not any("recompute" in n.meta for n in gm.graph.nodes)


# --------------------------------------------------------------------------- DeepSpeed's unit cases


def _view_and_neg_graph(neg_policy: CheckpointPolicy | None = None) -> tuple[fx.Graph, fx.Node, fx.Node]:
    """DeepSpeed's test graph: a view of the parameter and a neg of the activation."""
    graph = fx.Graph()
    param = graph.placeholder("primals_1")
    act = graph.placeholder("primals_2")
    view = graph.call_function(aten.view.default, (param, [4]))
    neg = graph.call_function(aten.neg.default, (act,))
    if neg_policy is not None:
        neg.meta["recompute"] = neg_policy
    graph.output((view, neg))
    return graph, view, neg


@pytest.fixture(params=["deepspeed", "fxcut"])
def walk(request, monkeypatch):
    """DeepSpeed's ``_recompute_param_aliases`` as its module holds it: its
    own, or fxcut's after install().  DeepSpeed's tests set the no-copy set
    to {aten.view.default} through the module attribute."""
    monkeypatch.setattr(ds_partitioner, "get_no_copy_ops", lambda: {aten.view.default})
    if request.param == "fxcut":
        fxds.install()
        request.addfinalizer(fxds.uninstall)
        assert ds_partitioner._recompute_param_aliases is fxds.recompute_param_aliases
    return lambda graph, indices: ds_partitioner._recompute_param_aliases(graph, indices)


def test_view_of_param_is_must_recompute_and_activation_untagged(walk):
    graph, view, neg = _view_and_neg_graph()
    walk(graph, [(0, 1, torch.Size([4]))])
    assert view.meta["recompute"] is CheckpointPolicy.MUST_RECOMPUTE
    assert "recompute" not in neg.meta
    assert all(n.meta["ac_graph_id"] == 1 for n in graph.nodes)


def test_must_save_on_an_activation_is_kept(walk):
    graph, view, neg = _view_and_neg_graph(CheckpointPolicy.MUST_SAVE)
    walk(graph, [(0, 1, torch.Size([4]))])
    assert view.meta["recompute"] is CheckpointPolicy.MUST_RECOMPUTE
    assert neg.meta["recompute"] is CheckpointPolicy.MUST_SAVE


def test_replaced_no_copy_set_is_honoured_by_fxcut(installed, monkeypatch):
    # With no no-copy op at all, the view is not an alias: nothing is tagged.
    monkeypatch.setattr(ds_partitioner, "get_no_copy_ops", lambda: set())
    graph, view, _ = _view_and_neg_graph()
    ds_partitioner._recompute_param_aliases(graph, [(0, 1, torch.Size([4]))])
    assert "recompute" not in view.meta


# --------------------------------------------------------------------------- the zoo


def _same(a: Any, b: Any) -> bool:
    if a is b:
        return True
    if type(a) is not type(b) or isinstance(a, torch.Tensor):
        return False
    try:
        return bool(a == b)
    except Exception:
        return False


@pytest.mark.parametrize("case", sorted(zoo.CASES))
def test_walk_writes_deepspeeds_meta_on_zoo_graph(case, no_cuda_no_copy_ops):
    assert not fxds.installed()
    cap = zoo.capture(case)
    theirs, ours = cap.fresh(), cap.fresh()
    ds_partitioner._recompute_param_aliases(theirs.graph, cap.param_indices)
    tagged = fxcut.recompute_param_aliases(ours.graph, cap.param_indices)
    assert len(theirs.graph.nodes) == len(ours.graph.nodes)
    for a, b in zip(theirs.graph.nodes, ours.graph.nodes):
        assert a.name == b.name
        assert list(a.meta) == list(b.meta), a.name
        diff = [k for k in a.meta if not _same(a.meta[k], b.meta[k])]
        assert not diff, f"{a.name}: meta differs at {diff}"
    # Not vacuous: every zoo model has a Linear/matmul weight used through a view.
    assert tagged
    theirs_by_name = {n.name: n for n in theirs.graph.nodes}
    assert all(theirs_by_name[n.name].meta["recompute"] is CheckpointPolicy.MUST_RECOMPUTE for n in tagged)


# --------------------------------------------------------------------------- install under threads


def test_concurrent_installs_leave_deepspeed_restorable(monkeypatch):
    """Two install() calls racing (both inside install at once, held there by a
    barrier) and then uninstall(): DeepSpeed gets its own functions back, not
    fxcut's (the second install must not record the first one's patches as
    DeepSpeed's originals)."""
    import threading

    modules = fxds._modules
    barrier = threading.Barrier(2)

    def both_inside() -> Any:
        try:
            barrier.wait(timeout=0.5)  # under install's lock only one thread gets here at a time
        except threading.BrokenBarrierError:
            pass
        return modules()

    monkeypatch.setattr(fxds, "_modules", both_inside)
    errors: list[BaseException] = []

    def install() -> None:
        try:
            fxds.install()
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=install) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert fxds.installed()
    fxds.uninstall()
    assert not fxds.installed()
    for (mod, attr), own in DS_OWN.items():
        assert getattr(MODULES[mod], attr) is own, f"{mod}.{attr}"


def test_installs_and_uninstalls_from_many_threads_end_consistent():
    import threading

    def churn() -> None:
        for _ in range(50):
            fxds.install()
            fxds.uninstall()

    threads = [threading.Thread(target=churn) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    fxds.uninstall()
    for (mod, attr), own in DS_OWN.items():
        assert getattr(MODULES[mod], attr) is own, f"{mod}.{attr}"
    fxds.install()
    try:
        assert ds_backend.min_cut_rematerialization_partition is fxcut.min_cut_rematerialization_partition
        assert ds_partitioner._recompute_param_aliases is fxds.recompute_param_aliases
    finally:
        fxds.uninstall()
