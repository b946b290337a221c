"""Random ops under a memory budget: what torch's decision gets wrong, and what fxcut does instead.

On real joint graphs traced by AOT Autograd from small functions, one per
random op the tracer can produce (factories and ``_like`` forms, the
in-place samplers, dropout in its forms, bernoulli, multinomial, normal,
gamma, dirichlet, rrelu, SDPA with dropout), each built so that its
backward needs the random values:

- ``safe_budget=True`` and the plan (``planned_partitioner(b)``) give
  eager mode's loss and gradients, same seed, at every budget b in
  (0, 0.3, 0.7, 1): no random op is recomputed;
- fxcut's default path makes torch's exact decision -- its step equals the
  step through torch's own partitioner bit for bit, right or wrong -- and
  warns (``fxcut.UnsafeRecomputeWarning``, naming the op) exactly where
  torch's gradients differ from eager's: at budget 0 for every case, and
  nowhere torch is right (the joint graph holding the op the case is named
  after, so each case tests what it says);
- under inductor (whose random ops draw from ``prims.inductor_seeds``) the
  same, checked by the step's own consistency;
- the rule itself: every op torch tags ``nondeterministic_seeded`` draws,
  SDPA without dropout and ``philox_rand`` (seeded by its arguments) do not.

With AOT Autograd's no-op compilers on CPU a compiled step draws from the
global generator in graph order, as eager mode does, so "same as eager" is
checkable to the bit; a backward that draws again sees other numbers.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from functorch.compile import aot_function, nop
from torch._functorch import config as functorch_config
from torch._functorch.partitioners import min_cut_rematerialization_partition as torch_min_cut

import fxcut
from fxcut.route import safety
from fxcut.solve.hazards import RANDOM
from fxcut.torchrules.ops import draws_random_numbers

BUDGETS = (0.0, 0.3, 0.7, 1.0)
Step = tuple[torch.Tensor, torch.Tensor]


def _lin(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x @ w


def _weights() -> torch.Tensor:
    # Position weights: a loss that is not symmetric in the columns, so a
    # permutation or index drawn again gives other gradients.
    return torch.arange(16.0) / 16


def _mul(sample: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """``sin(h * sample(h))``: the backward needs the sample."""
    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        h = _lin(x, w)
        return (h * sample(h)).sin()
    return fn


def _masked(sample: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """``sin(h) * sample(h)``."""
    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        h = _lin(x, w)
        return h.sin() * sample(h)
    return fn


def _indexed(indices: Callable[[], torch.Tensor]) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """``sin(h[:, indices()])``: the backward scatters through the indices."""
    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return _lin(x, w)[:, indices()].sin()
    return fn


def _sdpa_dropout(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    q = _lin(x, w).view(1, 2, 8, 8)
    return F.scaled_dot_product_attention(q, q.cos(), q.sin(), dropout_p=0.5).sin()


#: case -> (function of (x, w), the op its joint graph must hold)
CASES: dict[str, tuple[Callable[[torch.Tensor, torch.Tensor], torch.Tensor], str]] = {
    "randn": (_mul(lambda h: torch.randn(8, 16)), "aten.randn.default"),
    "rand": (_mul(lambda h: torch.rand(8, 16)), "aten.rand.default"),
    "randint": (lambda x, w: torch.gather(_lin(x, w), 1, torch.randint(0, 16, (8, 16))).sin(),
                "aten.randint.low"),
    "randperm": (_indexed(lambda: torch.randperm(16)), "aten.randperm.default"),
    "multinomial": (_indexed(lambda: torch.multinomial(torch.ones(16), 16)), "aten.multinomial.default"),
    "normal(tensor, float)": (_mul(lambda h: torch.normal(torch.zeros(8, 16), 1.0)), "aten.normal.Tensor_float"),
    "normal(float, tensor)": (_mul(lambda h: torch.normal(0.0, torch.ones(8, 16))), "aten.normal.float_Tensor"),
    "normal(tensor, tensor)": (_mul(lambda h: torch.normal(torch.zeros(8, 16), torch.ones(8, 16))),
                               "aten.normal.Tensor_Tensor"),
    "normal(float, float)": (_mul(lambda h: torch.normal(0.0, 1.0, (8, 16))), "aten.normal.float_float"),
    "normal_": (_mul(lambda h: torch.empty(8, 16).normal_()), "aten.normal_functional.default"),
    "bernoulli(tensor)": (_masked(lambda h: torch.bernoulli(torch.full((8, 16), 0.5))), "aten.bernoulli.default"),
    "bernoulli(tensor, p)": (_masked(lambda h: torch.bernoulli(torch.empty(8, 16), 0.3)), "aten.bernoulli.p"),
    "bernoulli_(p)": (_masked(lambda h: torch.empty(8, 16).bernoulli_(0.5)), "aten.bernoulli.p"),
    "bernoulli_(tensor)": (_masked(lambda h: torch.empty(8, 16).bernoulli_(torch.full((8, 16), 0.5))),
                           "aten.bernoulli.Tensor"),
    "dropout": (lambda x, w: F.dropout(_lin(x, w).sin(), 0.5, training=True), "aten.native_dropout.default"),
    "native_dropout": (lambda x, w: torch.native_dropout(_lin(x, w).sin(), 0.5, True)[0],
                       "aten.native_dropout.default"),
    "alpha_dropout": (lambda x, w: F.alpha_dropout(_lin(x, w).sin(), 0.5, training=True), "aten.bernoulli.p"),
    "feature_dropout": (lambda x, w: F.dropout1d(_lin(x, w).sin().unsqueeze(0), 0.5, training=True)[0],
                        "aten.bernoulli.p"),
    "rand_like": (_mul(torch.rand_like), "aten.rand_like.default"),
    "randn_like": (_mul(torch.randn_like), "aten.randn_like.default"),
    "randint_like": (_mul(lambda h: torch.randint_like(h, 0, 5)), "aten.randint_like.low_dtype"),
    "exponential_": (_mul(lambda h: torch.empty(8, 16).exponential_()), "aten.exponential.default"),
    "uniform_": (_mul(lambda h: torch.empty(8, 16).uniform_()), "aten.uniform.default"),
    "cauchy_": (_mul(lambda h: torch.empty(8, 16).cauchy_().clamp(-3, 3)), "aten.cauchy.default"),
    "geometric_": (_mul(lambda h: torch.empty(8, 16).geometric_(0.5)), "aten.geometric.default"),
    "log_normal_": (_mul(lambda h: torch.empty(8, 16).log_normal_()), "aten.log_normal.default"),
    "random_": (_mul(lambda h: torch.empty(8, 16).random_(5)), "aten.random.to"),
    "poisson": (_mul(lambda h: torch.poisson(torch.full((8, 16), 3.0))), "aten.poisson.default"),
    "binomial": (_mul(lambda h: torch.binomial(torch.full((8, 16), 5.0), torch.full((8, 16), 0.5))),
                 "aten.binomial.default"),
    "_standard_gamma": (lambda x, w: torch._standard_gamma(F.softplus(_lin(x, w)) + 1),
                        "aten._standard_gamma.default"),
    "Dirichlet.rsample": (lambda x, w: torch.distributions.Dirichlet(F.softplus(_lin(x, w)) + 1,
                                                                     validate_args=False).rsample(),
                          "aten._sample_dirichlet.default"),
    "rrelu": (lambda x, w: F.rrelu(_lin(x, w), training=True), "aten.rrelu_with_noise_functional.default"),
    # on CPU, SDPA with dropout traces to its math form, with native_dropout
    "sdpa(dropout_p=0.5)": (_sdpa_dropout, "aten.native_dropout.default"),
}


#: the random ops of the cases, by name (the warning names one of them)
_SEEDED_NAMES = {name for _, name in CASES.values()}


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(4)
    return torch.randn(8, 16, generator=g), (torch.randn(16, 16, generator=g) / 4).requires_grad_()


def _loss(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> Callable[..., torch.Tensor]:
    def loss(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        out = fn(x, w)
        return (out * _weights()[: out.shape[-1]]).sum()
    return loss


def _run(loss: Callable[..., torch.Tensor], seed: int = 0) -> Step:
    x, w = _inputs()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        value = loss(x, w)
        value.backward()
    assert w.grad is not None
    return value.detach(), w.grad


Fn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def eager(fn: Fn) -> Step:
    return _run(_loss(fn))


def compiled(fn: Fn, partition_fn: Any, budget: float = 1.0) -> Step:
    """One forward+backward of ``fn`` through AOT Autograd (no-op
    compilers: eager kernels) cut by ``partition_fn`` under
    ``activation_memory_budget=budget``."""
    with functorch_config.patch(activation_memory_budget=budget):
        return _run(aot_function(_loss(fn), fw_compiler=nop, bw_compiler=nop, partition_fn=partition_fn))


def same_as(a: Step, b: Step) -> bool:
    try:
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    except AssertionError:
        return False
    return True


def joint_targets(fn: Fn) -> set[str]:
    seen: set[str] = set()

    def record(gm: torch.fx.GraphModule, *args: Any, **kwargs: Any) -> Any:
        seen.update(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return torch_min_cut(gm, *args, **kwargs)

    compiled(fn, record)
    return seen


SAFE = functools.partial(fxcut.min_cut_rematerialization_partition, safe_budget=True)


#: each test starts and ends with no UnsafeRecomputeWarning already given (conftest.py)
pytestmark = pytest.mark.usefixtures("fresh_unsafe_warnings")


# --------------------------------------------------------------------------- safe_budget and the plan: eager's gradients


@pytest.mark.fidelity
@pytest.mark.parametrize("name", CASES)
def test_safe_budget_and_the_plan_give_eagers_gradients_at_every_budget(name: str) -> None:
    fn = CASES[name][0]
    ref = eager(fn)
    for b in BUDGETS:
        with warnings.catch_warnings():
            warnings.simplefilter("error", fxcut.UnsafeRecomputeWarning)  # safe_budget decides: nothing to warn
            got = compiled(fn, SAFE, b)
        assert same_as(got, ref), f"safe_budget=True at activation_memory_budget={b}: {got} != eager {ref}"
        planned = compiled(fn, fxcut.planned_partitioner(b))
        assert same_as(planned, ref), f"planned_partitioner({b}): {planned} != eager {ref}"


# --------------------------------------------------------------------------- the default path: torch's decision, warned


def _warnings_of(fn: Fn, budget: float) -> tuple[Step, list[str]]:
    safety.reset_warnings()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        step = compiled(fn, fxcut.min_cut_rematerialization_partition, budget)
    return step, [str(w.message) for w in caught if issubclass(w.category, fxcut.UnsafeRecomputeWarning)]


@pytest.mark.fidelity
@pytest.mark.parametrize("name", CASES)
def test_the_default_path_warns_exactly_where_torchs_gradients_are_wrong(name: str) -> None:
    fn, op = CASES[name]
    ref = eager(fn)
    targets = joint_targets(fn)
    assert op in targets  # the case tests the op it is named after
    seeded = {t for t in targets if t in _SEEDED_NAMES}
    wrong_at: list[float] = []
    for b in BUDGETS:
        theirs = compiled(fn, torch_min_cut, b)
        ours, messages = _warnings_of(fn, b)
        # torch's decision, drawn the same way: equal to the bit, right or wrong
        assert torch.equal(ours[0], theirs[0]) and torch.equal(ours[1], theirs[1]), f"budget {b}"
        wrong = not same_as(theirs, ref)
        assert bool(messages) == wrong, (f"activation_memory_budget={b}: torch's gradients are "
                                         f"{'wrong' if wrong else 'right'}, warnings: {messages}")
        if wrong:
            wrong_at.append(b)
            assert any(op in m and "pytorch/pytorch#190758" in m and "safe_budget=True" in m
                       for m in messages for op in seeded), messages
    # Budget 0 saves the inputs only: torch recomputes every random op the backward needs.
    assert 0.0 in wrong_at



def test_the_warning_points_at_the_users_line() -> None:
    """UnsafeRecomputeWarning names the user's file and line (here: this
    file's call of the compiled step), not fxcut's or torch's code."""
    fn = CASES["randn"][0]
    safety.reset_warnings()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled(fn, fxcut.min_cut_rematerialization_partition, 0.0)
    found = [w for w in caught if issubclass(w.category, fxcut.UnsafeRecomputeWarning)]
    assert found
    assert {w.filename for w in found} == {__file__}


def test_no_warning_where_no_random_op_is_recomputed() -> None:
    """A function without random ops: torch is right at every budget, and
    fxcut says nothing."""
    plain = _mul(torch.sigmoid)
    ref = eager(plain)
    for b in BUDGETS:
        assert same_as(compiled(plain, torch_min_cut, b), ref)
        _, messages = _warnings_of(plain, b)
        assert messages == []


# --------------------------------------------------------------------------- the rule


def _node(target: Any, *args: Any, **kwargs: Any) -> torch.fx.Node:
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    return graph.call_function(target, (x, *args), kwargs)


def test_every_op_torch_tags_nondeterministic_seeded_draws() -> None:
    aten = torch.ops.aten
    for op in (aten.randn.default, aten.rand_like.default, aten.bernoulli.p, aten.multinomial.default,
               aten.normal.Tensor_float, aten.uniform.default, aten.randperm.default, aten.native_dropout.default,
               aten.rrelu_with_noise_functional.default):
        assert torch.Tag.nondeterministic_seeded in op.tags
        assert draws_random_numbers(_node(op)), op
    for op in (aten.mul.Tensor, aten.sin.default, aten.native_dropout_backward.default):
        assert not draws_random_numbers(_node(op)), op


def test_sdpa_without_dropout_and_philox_do_not_draw() -> None:
    sdpa = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default
    assert torch.Tag.nondeterministic_seeded in sdpa.tags
    assert not draws_random_numbers(_node(sdpa, None, None, 0.0))
    assert not draws_random_numbers(_node(sdpa, None, None, dropout_p=0.0))
    assert draws_random_numbers(_node(sdpa, None, None, 0.1))
    philox = torch.ops.rngprims.philox_rand.default
    assert torch.Tag.nondeterministic_seeded in philox.tags
    assert not draws_random_numbers(_node(philox))


def test_unsafe_nodes_marks_the_random_op_of_a_real_joint_graph() -> None:
    from fxcut.route.lower import lower_plan
    from fxcut.route.plan import make_plan
    from fxcut.tools.decisions import torch_now

    graphs: list[tuple[torch.fx.GraphModule, int]] = []

    def keep(gm: torch.fx.GraphModule, *args: Any, **kwargs: Any) -> Any:
        from fxcut.torchrules.snapshot import copy_graph_module

        graphs.append((copy_graph_module(gm), kwargs["num_fwd_outputs"]))
        return torch_min_cut(gm, *args, **kwargs)

    compiled(CASES["randn"][0], keep)
    (gm, nfo), = graphs
    plan = make_plan(gm, torch_now(), num_fwd_outputs=nfo)
    arrays = lower_plan(plan)
    # the hazards as the route reads them (fxcut.solve.hazards.unsafe_nodes over torch's facts)
    marked = {arrays.nodes[i].name for i, bits in enumerate(plan.torch.unsafe(arrays).bits) if bits & RANDOM}
    assert marked == {n.name for n in gm.graph.nodes if n.target is torch.ops.aten.randn.default}


# --------------------------------------------------------------------------- under inductor


def _scaled_by_noise(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return x * w * torch.rand_like(x), w


@pytest.mark.fidelity
def test_inductor_seeds_are_kept_saved_by_safe_budget_and_the_plan() -> None:
    """Under inductor a random op becomes ``inductor_random`` drawn from a
    seed that ``prims.inductor_seeds`` draws; recomputing the seeds in the
    backward draws another noise.  Inductor's RNG is not eager's, so the
    check is the step's own: with ``w = 1`` the gradient of ``sum(x * w *
    noise)`` in ``w`` is the forward's output itself."""
    x = torch.rand(64) + 0.5

    def step(backend: Any) -> tuple[bool, list[str]]:
        torch._dynamo.reset()
        safety.reset_warnings()
        w = torch.ones(64, requires_grad=True)
        try:
            # no cache: a graph inductor finds in its caches is never partitioned (nothing to warn about)
            with functorch_config.patch(activation_memory_budget=0.0), warnings.catch_warnings(record=True) as caught, \
                    torch._inductor.config.patch(fx_graph_cache=False, force_disable_caches=True):
                warnings.simplefilter("always")
                y, _ = torch.compile(_scaled_by_noise, backend=backend)(x, w)
                y.sum().backward()
        finally:
            torch._dynamo.reset()
        assert w.grad is not None
        messages = [str(c.message) for c in caught if issubclass(c.category, fxcut.UnsafeRecomputeWarning)]
        return torch.equal(w.grad, y.detach()), messages

    consistent, messages = step(fxcut.inductor_backend())
    assert not consistent  # torch's decision: the backward's noise is not the forward's
    assert len(messages) == 1 and "prims.inductor_seeds.default" in messages[0], messages
    for backend in (fxcut.inductor_backend(safe_budget=True), fxcut.inductor_backend(memory_budget=0.0)):
        consistent, messages = step(backend)
        assert consistent and messages == []
