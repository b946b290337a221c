"""One rank of tests/test_distributed.py, launched by ``torch.distributed.run``.

Trains a small transformer under FSDP2 (``fully_shard``) on CPU with gloo,
compiled by inductor, twice from the same initial weights:

- ``fxcut``: ``torch.compile(backend=fxcut.inductor_backend(zero3_params=True))``
  -- fxcut partitions every joint graph, after DeepCompile's ZeRO-3 walk over
  the (unsharded, all-gathered) parameters each graph takes;
- ``torch``: inductor with torch's own partitioner behind the same ZeRO-3
  walk (DeepCompile's wrapper around torch's min-cut).

``FXCUT_DIST_MODE=ddp`` runs DistributedDataParallel instead of FSDP2.
Writes ``{out}/rank{r}.json``: the losses of both runs step by step and who
made the partitions (fxcut.partition_counts()).
"""

from __future__ import annotations

import json
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from torch._functorch import partitioners
from torch._inductor.compile_fx import compile_fx
from torch._inductor.custom_graph_pass import CustomPartitionerFn

import fxcut
from fxcut.route import guard
from fxcut.integrations import torch_compile

STEPS = 5
DIM, HEADS, LAYERS, VOCAB, SEQ, BATCH = 32, 4, 2, 64, 16, 4


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(DIM)
        self.qkv = nn.Linear(DIM, 3 * DIM)
        self.proj = nn.Linear(DIM, DIM)
        self.ln2 = nn.LayerNorm(DIM)
        self.fc1 = nn.Linear(DIM, 4 * DIM)
        self.fc2 = nn.Linear(4 * DIM, DIM)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, HEADS, DIM // HEADS).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, DIM))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class Transformer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, DIM)
        self.pos = nn.Parameter(torch.randn(SEQ, DIM) * 0.02)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.emb(tokens) + self.pos
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


class TorchPartitionerBehindWalk(CustomPartitionerFn):
    """torch's min-cut behind DeepCompile's ZeRO-3 walk, as an inductor
    ``custom_partitioner_fn`` (the reference run)."""

    def __init__(self, param_indices: list) -> None:
        self.param_indices = param_indices

    def __call__(self, gm, joint_inputs, **kwargs):
        # torch's min-cut looked up at call time: Calls counts it there
        # (fxcut's guard holds torch's own function, captured before Calls
        # wraps the name, so it would not be counted)
        partition = fxcut.get_wrapped_partitioner(
            bool(self.param_indices), self.param_indices,
            lambda *a, **k: partitioners.min_cut_rematerialization_partition(*a, **k))
        return partition(gm, joint_inputs, **kwargs)

    def uuid(self):
        return ("torch-behind-walk", tuple(e[0] for e in self.param_indices))


def torch_backend():
    def backend(gm, example_inputs):
        indices = torch_compile.zero3_param_indices(gm, example_inputs, True)
        return compile_fx(gm, example_inputs,
                          config_patches={"custom_partitioner_fn": TorchPartitionerBehindWalk(indices)})

    return backend


class Calls:
    """Counts torch's min-cut calls and the ZeRO-3 parameters of each graph."""

    def __init__(self) -> None:
        self.torch_min_cut = 0
        self.walked_params: list[int] = []
        real_min_cut = partitioners.min_cut_rematerialization_partition
        real_indices = torch_compile.zero3_param_indices

        def min_cut(*args, **kwargs):
            self.torch_min_cut += 1
            return real_min_cut(*args, **kwargs)

        def indices(*args, **kwargs):
            found = real_indices(*args, **kwargs)
            self.walked_params.append(len(found))
            return found

        partitioners.min_cut_rematerialization_partition = min_cut
        torch_compile.zero3_param_indices = indices

    def take(self) -> dict:
        out = {"torch_min_cut_calls": self.torch_min_cut, "walked_params": self.walked_params,
               "guard": guard.partition_counts()}
        self.torch_min_cut, self.walked_params = 0, []
        guard.reset_counts()
        return out


def wrap(model: nn.Module, mode: str) -> nn.Module:
    if mode == "ddp":
        return nn.parallel.DistributedDataParallel(model)
    from torch.distributed.fsdp import fully_shard

    for block in model.blocks:
        fully_shard(block)
    fully_shard(model)
    return model


def train(backend, mode: str, rank: int) -> list[float]:
    torch.manual_seed(0)
    model = wrap(Transformer(), mode)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    compiled = torch.compile(model, backend=backend)
    gen = torch.Generator().manual_seed(1000 + rank)  # each rank its own data
    losses = []
    for _ in range(STEPS):
        tokens = torch.randint(0, VOCAB, (BATCH, SEQ), generator=gen)
        logits = compiled(tokens)
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), tokens.roll(-1, 1).reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.detach().item())
    return losses


def main() -> int:
    out = sys.argv[1]
    mode = os.environ.get("FXCUT_DIST_MODE", "fsdp2")
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    result: dict = {"rank": rank, "mode": mode, "world": dist.get_world_size(), "torch": torch.__version__}
    try:
        calls = Calls()
        guard.reset_counts()
        result["fxcut_losses"] = train(fxcut.inductor_backend(zero3_params=True), mode, rank)
        result["fxcut_calls"] = calls.take()
        torch._dynamo.reset()
        result["torch_losses"] = train(torch_backend(), mode, rank)
        result["torch_calls"] = calls.take()
    except Exception as e:  # noqa: BLE001 - the test reports it
        import traceback

        result["error"] = f"{type(e).__name__}: {e}"
        result["traceback"] = traceback.format_exc()[-4000:]
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
