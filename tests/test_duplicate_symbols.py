"""Joint graphs whose SymInt inputs share one symbol: fxcut's forward and
backward equal torch's (issue 17, item 6).

Found on HF transformers' GPT-2 under ``torch.compile(dynamic=True)``: the
loss graph gets the hidden size twice, as a size of the hidden states
(``primals_3``, unused by the backward) and as an int argument
(``primals_9``); a ``view`` unifies the two symbols, so the ShapeEnv
replaces one by the other.  From 2.14 torch binds, for every backward
input, the symbols of its sizes before the replacement as well as after, so
the backward also receives the unused ``primals_3``.  The small functions
here are that shape (and its neighbours) without transformers: an int
argument unified with a tensor size, two ints unified with one size, a size
symbol shared by two inputs (duck sizing) and read by the backward.

Which of the two symbols the ShapeEnv keeps depends on their names (hashes
of the argument names), so the family varies the argument name; a test
checks that the family does contain the case above on this release.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.fx as fx
import torch.nn.functional as F
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.compilers import nop
from torch._functorch.partitioners import min_cut_rematerialization_partition as torch_partition

import fxcut
from fxcut.torchrules.snapshot import copy_graph_module

_W = torch.randn(8, 5, generator=torch.Generator().manual_seed(0))


def _lm_loss_source(size_name: str) -> str:
    # A language model's loss head: hidden states flattened by an int
    # argument (the hidden size), projected, cross entropy against labels.
    return (f"def lm_loss(h, labels, w, {size_name}):\n"
            f"    return F.cross_entropy(h.view(-1, {size_name}) @ w, labels.view(-1))\n")


def _lm_loss(size_name: str) -> Callable[..., torch.Tensor]:
    namespace: dict[str, Any] = {}
    exec(_lm_loss_source(size_name), {"F": F}, namespace)
    fn: Callable[..., torch.Tensor] = namespace["lm_loss"]
    return fn


def _two_ints(h: torch.Tensor, w: torch.Tensor, a: int, b: int) -> torch.Tensor:
    # Two int arguments unified with the same tensor size.
    return (h.view(-1, a) @ w).sum() + (h.view(-1, b) @ w).pow(2).sum()


def _duck_sized(x: torch.Tensor, y: torch.Tensor, n: int) -> torch.Tensor:
    # x and y share both size symbols; the backward reads the int n.
    return (x * y * n).sin().sum() + x.view(-1, n).cos().sum()


def _inputs(case: str) -> tuple[Callable[..., torch.Tensor], tuple[Any, ...]]:
    gen = torch.Generator().manual_seed(1)
    h = torch.randn(2, 3, 8, generator=gen).requires_grad_()
    w = _W.clone().requires_grad_()
    if case.startswith("lm_loss_"):
        labels = torch.randint(0, 5, (2, 3), generator=gen)
        return _lm_loss(case.removeprefix("lm_loss_")), (h, labels, w, 8)
    if case == "two_ints":
        return _two_ints, (h, w, 8, 8)
    if case == "duck_sized":
        x = torch.randn(3, 4, generator=gen).requires_grad_()
        y = torch.randn(3, 4, generator=gen).requires_grad_()
        return _duck_sized, (x, y, 4)
    raise KeyError(case)


CASES = ["lm_loss_n", "lm_loss_d", "lm_loss_k", "lm_loss_width", "two_ints", "duck_sized"]

Joint = tuple[fx.GraphModule, Any, dict[str, Any]]
_joints: dict[str, list[Joint]] = {}


def _compile(case: str, partition_fn: Callable[..., Any]) -> tuple[torch.Tensor, list[torch.Tensor | None]]:
    fn, args = _inputs(case)
    torch._dynamo.reset()
    backend = aot_autograd(fw_compiler=nop, bw_compiler=nop, partition_fn=partition_fn)
    loss = torch.compile(fn, backend=backend, dynamic=True)(*args)
    loss.backward()
    torch._dynamo.reset()
    return loss.detach(), [a.grad for a in args if isinstance(a, torch.Tensor) and a.requires_grad]


def joints(case: str) -> list[Joint]:
    """The joint graphs ``torch.compile(dynamic=True)`` hands the
    partitioner for ``case`` (captured once per process)."""
    if case not in _joints:
        found: list[Joint] = []

        def recorder(gm: fx.GraphModule, joint_inputs: Any, **kwargs: Any) -> Any:
            found.append((copy_graph_module(gm), joint_inputs, dict(kwargs)))
            return torch_partition(gm, joint_inputs, **kwargs)

        _compile(case, recorder)
        assert found, f"{case}: no joint graph reached the partitioner"
        _joints[case] = found
    return _joints[case]


def _placeholders(gm: fx.GraphModule) -> list[str]:
    return [n.name for n in gm.graph.find_nodes(op="placeholder")]


@pytest.mark.parametrize("case", CASES)
def test_partition_equals_torch(case: str) -> None:
    for gm, joint_inputs, kwargs in joints(case):
        tfw, tbw = torch_partition(copy_graph_module(gm), joint_inputs, **kwargs)
        ffw, fbw = fxcut.min_cut_rematerialization_partition(copy_graph_module(gm), joint_inputs, **kwargs)
        assert _placeholders(fbw) == _placeholders(tbw)
        assert ffw.code == tfw.code
        assert fbw.code == tbw.code


def _replaced_symint_primals(gm: fx.GraphModule) -> list[fx.Node]:
    """SymInt inputs whose symbol the ShapeEnv replaced by another input's."""
    found = []
    for node in gm.graph.find_nodes(op="placeholder"):
        val = node.meta.get("val")
        if isinstance(val, torch.SymInt) and val.node._expr != val.node.expr:
            found.append(node)
    return found


def test_family_has_an_unused_replaced_symint_input() -> None:
    """The GPT-2 shape is in the family on this release: a SymInt input the
    joint never reads whose symbol was replaced by another SymInt input's
    (which the backward does read)."""
    hits = []
    for case in CASES:
        for gm, _, _ in joints(case):
            for node in _replaced_symint_primals(gm):
                kept = [p for p in gm.graph.find_nodes(op="placeholder")
                        if p is not node and isinstance(p.meta.get("val"), torch.SymInt)
                        and p.meta["val"].node._expr == node.meta["val"].node.expr]
                if not node.users and kept and kept[0].users:
                    hits.append((case, node.name, kept[0].name))
    assert hits


def test_training_step_matches_eager() -> None:
    case = "lm_loss_d"
    got_loss, got_grads = _compile(case, fxcut.min_cut_rematerialization_partition)
    fn, args = _inputs(case)
    want_loss = fn(*args)
    want_loss.backward()
    want_grads = [a.grad for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    torch.testing.assert_close(got_loss, want_loss.detach())
    assert len(got_grads) == len(want_grads) == 2
    for got, want in zip(got_grads, want_grads):
        torch.testing.assert_close(got, want)
