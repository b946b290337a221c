"""Random joint forward+backward graphs of the partitioner's shape.

The partition decision reads structure, targets, tags and ``meta["val"]``
sizes only, so values are meta-device tensors of random shapes: any aten op
may take any argument.  Each graph has primal and tangent placeholders (and
sometimes a forward seed), a forward part of fusible, view, random,
compute-intensive, reduction, multi-output and cat ops, a backward part
mixing tangents with forward values, random checkpoint tags and
``ac_graph_id`` regions, and an output of forward values then gradients.
"""

from __future__ import annotations

import operator
import random
from dataclasses import dataclass

import torch
import torch.fx as fx
from torch.utils.checkpoint import CheckpointPolicy

aten = torch.ops.aten
prims = torch.ops.prims

UNARY = [aten.relu.default, aten.sigmoid.default, aten.neg.default, aten.exp.default,
         aten.clone.default, aten.tanh.default]
BINARY = [aten.add.Tensor, aten.mul.Tensor, aten.sub.Tensor, aten.mm.default, aten.bmm.default]
VIEWS = [aten.view.default, aten.t.default, aten.unsqueeze.default, aten.expand.default,
         aten.permute.default, aten.alias.default]
REDUCE = [aten.sum.dim_IntList, aten.amax.default, aten.mean.dim]
OTHER = [aten.embedding.default, aten.sort.default]  # not in the allowlist


@dataclass
class RandomJoint:
    module: fx.GraphModule
    num_fwd_outputs: int
    static_lifetime_input_indices: list[int]


def _val(rng: random.Random, small: bool = False) -> torch.Tensor:
    numel = rng.choice([1, 2, 4] if small else [1, 4, 16, 64, 256, 1024, 4096])
    dtype = rng.choice([torch.float32, torch.bfloat16, torch.float16])
    return torch.empty(numel, dtype=dtype, device="meta")


def random_joint(seed: int, n_fw: int | None = None) -> RandomJoint:
    rng = random.Random(seed)
    g = fx.Graph()
    n_primals = rng.randint(1, 5)
    n_tangents = rng.randint(1, 3)
    n_fw = n_fw if n_fw is not None else rng.randint(1, 40)
    primals = []
    for k in range(n_primals):
        p = g.placeholder(f"primals_{k + 1}")
        p.meta["val"] = _val(rng)
        primals.append(p)
    if rng.random() < 0.2:
        seed_node = g.placeholder("fwd_seed")
        seed_node.meta["val"] = torch.empty((), dtype=torch.int64, device="meta")
        primals.append(seed_node)
    tangents = []
    for k in range(n_tangents):
        t = g.placeholder(f"tangents_{k + 1}")
        t.meta["val"] = _val(rng)
        tangents.append(t)

    fw: list[fx.Node] = list(primals)
    region = 1
    use_tags = rng.random() < 0.5
    # A long chain of pointwise ops (a residual stream) exercises the
    # long-fusible-chain rule, which needs more than 100 forward nodes.
    chain = rng.random() < 0.15
    for _ in range(n_fw):
        pick = rng.random()
        if chain and rng.random() < 0.9:
            node = g.call_function(rng.choice(UNARY[:4]), (fw[-1],))
            node.meta["val"] = _val(rng)
            fw.append(node)
            continue
        src = lambda: rng.choice(fw[-8:] if rng.random() < 0.7 else fw)  # noqa: E731
        if pick < 0.3:
            node = g.call_function(rng.choice(UNARY), (src(),))
        elif pick < 0.55:
            node = g.call_function(rng.choice(BINARY), (src(), src()))
        elif pick < 0.7:
            node = g.call_function(rng.choice(VIEWS), (src(), [-1]))
        elif pick < 0.78:
            node = g.call_function(rng.choice(REDUCE), (src(), [0]))
            node.meta["val"] = _val(rng, small=True)
        elif pick < 0.84:
            drop = g.call_function(aten.native_dropout.default, (src(), 0.1, True))
            drop.meta["val"] = (_val(rng), _val(rng))
            node = g.call_function(operator.getitem, (drop, rng.randint(0, 1)))
        elif pick < 0.9:
            node = g.call_function(aten.cat.default, ([src(), src()],))
        elif pick < 0.95:
            node = g.call_function(prims.convert_element_type.default, (src(), torch.bfloat16))
        else:
            node = g.call_function(rng.choice(OTHER), (src(), src()))
        if "val" not in node.meta:
            node.meta["val"] = _val(rng)
        if use_tags and rng.random() < 0.3:
            node.meta["recompute"] = rng.choice(
                [CheckpointPolicy.PREFER_RECOMPUTE, CheckpointPolicy.MUST_RECOMPUTE,
                 CheckpointPolicy.MUST_SAVE, CheckpointPolicy.PREFER_SAVE]
            )
            if rng.random() < 0.2:
                region += 1
            node.meta["ac_graph_id"] = region
        fw.append(node)

    computed = fw[len(primals):] or fw
    fwd_outputs = rng.sample(computed, k=min(len(computed), rng.randint(1, 3)))
    bw: list[fx.Node] = list(tangents)
    for _ in range(rng.randint(1, max(2, n_fw // 2))):
        a = rng.choice(bw[-6:])
        b = rng.choice(fw) if rng.random() < 0.6 else rng.choice(bw)
        node = g.call_function(rng.choice([aten.mul.Tensor, aten.add.Tensor, aten.mm.default]), (a, b))
        node.meta["val"] = _val(rng)
        bw.append(node)
    grads: list[fx.Node | None] = []
    for _ in primals:
        grads.append(rng.choice(bw[len(tangents):] or bw) if rng.random() < 0.8 else None)
    g.output(tuple(fwd_outputs) + tuple(grads))
    g.lint()
    statics = [k for k in range(n_primals) if rng.random() < 0.5]
    return RandomJoint(fx.GraphModule(torch.nn.Module(), g), len(fwd_outputs), statics)
