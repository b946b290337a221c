"""Small, real model code whose joint graphs fxcut's tests and benchmarks partition.

Every builder takes keyword-only options with small defaults and returns a
:class:`BuiltModel` ``(model, make_inputs, loss_fn)``:

- ``model`` is an ``nn.Module`` in training mode, its parameters initialised
  from ``seed`` (the global RNG is left as it was);
- ``make_inputs()`` returns the positional inputs of ``model``, the same
  values on every call;
- ``loss_fn(output, inputs)`` reduces the model's output to a scalar loss
  (cross-entropy where the model is a classifier or a language model).

Built under a ``FakeTensorMode``, a model allocates none of its parameters,
so a GPT of billions of parameters can be traced (the ``fxcut`` command does
so; see :mod:`fxcut.tools.capture` for why the ``meta`` device is no substitute).

Models made of repeated blocks derive from :class:`BlockStack`; their blocks
can be wrapped in ``torch.utils.checkpoint.checkpoint`` by
:meth:`BlockStack.checkpointing`, which is how :mod:`fxcut.tools.capture` produces
activation-checkpoint and selective-checkpoint tags.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple, TypeVar

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint

Inputs = tuple[Any, ...]
LossFn = Callable[[Any, Inputs], torch.Tensor]
Device = str | torch.device


class BuiltModel(NamedTuple):
    """What a builder returns."""

    model: nn.Module
    make_inputs: Callable[[], Inputs]
    loss_fn: LossFn


class BlockStack(nn.Module):
    """A model whose repeated blocks may run under activation checkpointing.

    Subclasses call :meth:`call_block` for each block instead of calling it.
    """

    def __init__(self) -> None:
        super().__init__()
        self.checkpoint_blocks = False
        self.checkpoint_context_fn: Callable[[], Any] | None = None

    def call_block(self, block: nn.Module, *args: Any) -> Any:
        if not self.checkpoint_blocks:
            return block(*args)
        if self.checkpoint_context_fn is None:
            return torch.utils.checkpoint.checkpoint(block, *args, use_reentrant=False)
        return torch.utils.checkpoint.checkpoint(
            block, *args, use_reentrant=False, context_fn=self.checkpoint_context_fn
        )

    @contextlib.contextmanager
    def checkpointing(self, context_fn: Callable[[], Any] | None = None) -> Iterator[None]:
        """Checkpoint every block (non-reentrant) while the context is open.

        ``context_fn`` is checkpoint's ``context_fn``, e.g. a partial of
        ``create_selective_checkpoint_contexts`` for selective checkpointing.
        """
        saved = (self.checkpoint_blocks, self.checkpoint_context_fn)
        self.checkpoint_blocks, self.checkpoint_context_fn = True, context_fn
        try:
            yield
        finally:
            self.checkpoint_blocks, self.checkpoint_context_fn = saved


# --------------------------------------------------------------------------- helpers


ModuleT = TypeVar("ModuleT", bound=nn.Module)


def _seeded_build(seed: int, device: Device, dtype: torch.dtype, make: Callable[[], ModuleT]) -> ModuleT:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        with torch.device(device):
            model = make()
    if dtype != torch.float32:
        _cast_floating(model, dtype)
    return model.train()


def _cast_floating(model: nn.Module, dtype: torch.dtype) -> None:
    """``model.to(dtype)`` that also works on fake parameters and keeps tied weights tied.

    (``Module.to`` swaps the tensors of fake parameters, which fails.)
    """
    cast: dict[int, nn.Parameter] = {}
    for module in model.modules():
        for key, p in module._parameters.items():
            if p is not None and p.is_floating_point():
                if id(p) not in cast:
                    cast[id(p)] = nn.Parameter(p.detach().to(dtype), requires_grad=p.requires_grad)
                module._parameters[key] = cast[id(p)]
        for key, b in module._buffers.items():
            if b is not None and b.is_floating_point():
                module._buffers[key] = b.to(dtype)


def _random_floats(seed: int, shape: Sequence[int], device: Device, dtype: torch.dtype) -> torch.Tensor:
    if torch.device(device).type == "meta":
        return torch.empty(*shape, device="meta", dtype=dtype)
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(device=device, dtype=dtype)


def _random_tokens(seed: int, vocab: int, shape: Sequence[int], device: Device) -> torch.Tensor:
    if torch.device(device).type == "meta":
        return torch.empty(*shape, device="meta", dtype=torch.long)
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, tuple(shape), generator=g).to(device)


def _next_token_loss(logits: torch.Tensor, inputs: Inputs) -> torch.Tensor:
    (idx,) = inputs
    vocab = logits.shape[-1]
    return F.cross_entropy(logits[:, :-1].reshape(-1, vocab).float(), idx[:, 1:].reshape(-1))


def _classifier_loss(logits: torch.Tensor, inputs: Inputs) -> torch.Tensor:
    batch, classes = logits.shape
    targets = torch.arange(batch, device=logits.device) % classes
    return F.cross_entropy(logits.float(), targets)


def _mean_square_loss(out: torch.Tensor, inputs: Inputs) -> torch.Tensor:
    return out.float().square().mean()


def _causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
                      dropout: nn.Module) -> torch.Tensor:
    """softmax(q k^T / sqrt(d) masked causally) v, written out with matmul."""
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
    att = att.masked_fill(~mask, float("-inf"))
    att = F.softmax(att, dim=-1)
    return dropout(att) @ v


# --------------------------------------------------------------------------- mlp


class MLP(BlockStack):
    """Linear layers with an activation (and optional dropout) in between."""

    def __init__(self, in_features: int, hidden: int, out_features: int, layers: int,
                 dropout: float, activation: str) -> None:
        super().__init__()
        widths = [in_features] + [hidden] * (layers - 1)
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Linear(a, b), _activation(activation), nn.Dropout(dropout))
            for a, b in zip(widths[:-1], widths[1:])
        )
        self.head = nn.Linear(widths[-1], out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = self.call_block(block, x)
        return self.head(x)


def _activation(name: str) -> nn.Module:
    acts: dict[str, Callable[[], nn.Module]] = {
        "gelu": nn.GELU, "relu": nn.ReLU, "silu": nn.SiLU, "tanh": nn.Tanh,
    }
    if name not in acts:
        raise ValueError(f"activation {name!r} is not one of {sorted(acts)}")
    return acts[name]()


def mlp(*, layers: int = 3, in_features: int = 16, hidden: int = 32, out_features: int = 8,
        batch: int = 4, dropout: float = 0.0, activation: str = "gelu", frozen_layers: int = 0,
        dtype: torch.dtype = torch.float32, device: Device = "cpu", seed: int = 0) -> BuiltModel:
    """``layers`` linear layers (``layers - 1`` blocks of Linear+act+Dropout, then a head).

    The first ``frozen_layers`` blocks have ``requires_grad=False`` parameters.
    """
    if not 0 <= frozen_layers < layers:
        raise ValueError(f"need layers >= 1 and 0 <= frozen_layers < layers, "
                         f"got layers={layers} frozen_layers={frozen_layers}")
    model = _seeded_build(seed, device, dtype,
                          lambda: MLP(in_features, hidden, out_features, layers, dropout, activation))
    for block in model.blocks[:frozen_layers]:
        block.requires_grad_(False)
    return BuiltModel(model, lambda: (_random_floats(seed + 1, (batch, in_features), device, dtype),),
                      _mean_square_loss)


# --------------------------------------------------------------------------- gpt2


class GPT2Attention(nn.Module):
    causal: torch.Tensor  # a buffer

    def __init__(self, hidden: int, heads: int, seq: int, dropout: float, sdpa: bool) -> None:
        super().__init__()
        if hidden % heads:
            raise ValueError(f"hidden ({hidden}) must be divisible by heads ({heads})")
        self.heads, self.sdpa, self.p = heads, sdpa, dropout
        self.c_attn = nn.Linear(hidden, 3 * hidden)
        self.c_proj = nn.Linear(hidden, hidden)
        self.attn_dropout = nn.Dropout(dropout)
        self.resid_dropout = nn.Dropout(dropout)
        self.register_buffer("causal", torch.ones(seq, seq, dtype=torch.bool).tril(), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.p if self.training else 0.0,
                                               is_causal=True)
        else:
            y = _causal_attention(q, k, v, self.causal[:T, :T], self.attn_dropout)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class GPT2Block(nn.Module):
    def __init__(self, hidden: int, heads: int, seq: int, dropout: float, sdpa: bool) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(hidden)
        self.attn = GPT2Attention(hidden, heads, seq, dropout, sdpa)
        self.ln_2 = nn.LayerNorm(hidden)
        self.mlp = nn.Sequential(nn.Linear(hidden, 4 * hidden), nn.GELU(approximate="tanh"),
                                 nn.Linear(4 * hidden, hidden), nn.Dropout(dropout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2(BlockStack):
    """GPT-2: token + position embeddings, pre-LN blocks, LM head tied to the embedding."""

    def __init__(self, layers: int, hidden: int, heads: int, seq: int, vocab: int,
                 dropout: float, sdpa: bool, tie_weights: bool) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, hidden)
        self.wpe = nn.Embedding(seq, hidden)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(GPT2Block(hidden, heads, seq, dropout, sdpa) for _ in range(layers))
        self.ln_f = nn.LayerNorm(hidden)
        self.lm_head = nn.Linear(hidden, vocab, bias=False)
        for emb in (self.wte, self.wpe):
            nn.init.normal_(emb.weight, std=0.02)
        if tie_weights:
            self.lm_head.weight = self.wte.weight

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.blocks:
            x = self.call_block(block, x)
        return self.lm_head(self.ln_f(x))


def gpt2(*, layers: int = 2, hidden: int = 32, heads: int = 4, seq: int = 16, batch: int = 2,
         vocab: int = 64, dropout: float = 0.0, sdpa: bool = False, tie_weights: bool = True,
         dtype: torch.dtype = torch.float32, device: Device = "cpu", seed: int = 0) -> BuiltModel:
    """GPT-2 blocks; attention by matmul/softmax, or ``F.scaled_dot_product_attention`` if ``sdpa``."""
    model = _seeded_build(seed, device, dtype,
                          lambda: GPT2(layers, hidden, heads, seq, vocab, dropout, sdpa, tie_weights))
    return BuiltModel(model, lambda: (_random_tokens(seed + 1, vocab, (batch, seq), device),),
                      _next_token_loss)


# --------------------------------------------------------------------------- llama


class RMSNorm(nn.Module):
    def __init__(self, hidden: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return xf.type_as(x) * self.weight


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class LlamaAttention(nn.Module):
    def __init__(self, hidden: int, heads: int, kv_heads: int, sdpa: bool) -> None:
        super().__init__()
        if hidden % heads or heads % kv_heads:
            raise ValueError(f"need hidden % heads == 0 and heads % kv_heads == 0, "
                             f"got hidden={hidden} heads={heads} kv_heads={kv_heads}")
        self.heads, self.kv_heads, self.head_dim, self.sdpa = heads, kv_heads, hidden // heads, sdpa
        self.wq = nn.Linear(hidden, heads * self.head_dim, bias=False)
        self.wk = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(heads * self.head_dim, hidden, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                mask: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        q = self.wq(x).view(B, T, self.heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(B, T, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(B, T, self.kv_heads, self.head_dim).transpose(1, 2)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        groups = self.heads // self.kv_heads
        if groups > 1:
            k = k.repeat_interleave(groups, dim=1)
            v = v.repeat_interleave(groups, dim=1)
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            y = _causal_attention(q, k, v, mask, nn.Identity())
        return self.wo(y.transpose(1, 2).reshape(B, T, -1))


class LlamaBlock(nn.Module):
    def __init__(self, hidden: int, heads: int, kv_heads: int, intermediate: int, sdpa: bool) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(hidden)
        self.attention = LlamaAttention(hidden, heads, kv_heads, sdpa)
        self.ffn_norm = RMSNorm(hidden)
        self.w1 = nn.Linear(hidden, intermediate, bias=False)
        self.w3 = nn.Linear(hidden, intermediate, bias=False)
        self.w2 = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                mask: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), cos, sin, mask)
        h = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class Llama(BlockStack):
    """Llama: RMSNorm, rotary position embeddings, grouped-query attention, SwiGLU, no bias."""

    rope_cos: torch.Tensor  # buffers
    rope_sin: torch.Tensor
    causal: torch.Tensor

    def __init__(self, layers: int, hidden: int, heads: int, kv_heads: int, intermediate: int,
                 seq: int, vocab: int, rope_theta: float, sdpa: bool) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.blocks = nn.ModuleList(LlamaBlock(hidden, heads, kv_heads, intermediate, sdpa)
                                    for _ in range(layers))
        self.norm = RMSNorm(hidden)
        self.lm_head = nn.Linear(hidden, vocab, bias=False)
        head_dim = hidden // heads
        inv_freq = 1.0 / rope_theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        angles = torch.outer(torch.arange(seq, dtype=torch.float32), inv_freq)
        angles = torch.cat((angles, angles), dim=-1)
        self.register_buffer("rope_cos", angles.cos(), persistent=False)
        self.register_buffer("rope_sin", angles.sin(), persistent=False)
        self.register_buffer("causal", torch.ones(seq, seq, dtype=torch.bool).tril(), persistent=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        T = idx.shape[1]
        x = self.embed(idx)
        cos, sin = self.rope_cos[:T].to(x.dtype), self.rope_sin[:T].to(x.dtype)
        mask = self.causal[:T, :T]
        for block in self.blocks:
            x = self.call_block(block, x, cos, sin, mask)
        return self.lm_head(self.norm(x))


def llama(*, layers: int = 2, hidden: int = 32, heads: int = 4, kv_heads: int = 2,
          intermediate: int | None = None, seq: int = 16, batch: int = 2, vocab: int = 64,
          rope_theta: float = 10000.0, sdpa: bool = False, dtype: torch.dtype = torch.float32,
          device: Device = "cpu", seed: int = 0) -> BuiltModel:
    """Llama blocks; ``intermediate`` defaults to ``8 * hidden // 3`` rounded up to 8."""
    inter = intermediate if intermediate is not None else -(-(8 * hidden // 3) // 8) * 8
    model = _seeded_build(seed, device, dtype, lambda: Llama(
        layers, hidden, heads, kv_heads, inter, seq, vocab, rope_theta, sdpa))
    return BuiltModel(model, lambda: (_random_tokens(seed + 1, vocab, (batch, seq), device),),
                      _next_token_loss)


# --------------------------------------------------------------------------- vit


class ViTBlock(nn.Module):
    def __init__(self, hidden: int, heads: int, mlp_ratio: int, dropout: float) -> None:
        super().__init__()
        self.heads, self.p = heads, dropout
        self.norm1 = nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.norm2 = nn.LayerNorm(hidden)
        self.mlp = nn.Sequential(nn.Linear(hidden, mlp_ratio * hidden), nn.GELU(),
                                 nn.Dropout(dropout), nn.Linear(mlp_ratio * hidden, hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, N, C = x.shape
        qkv = self.qkv(self.norm1(x)).reshape(B, N, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.p if self.training else 0.0)
        x = x + self.proj(y.transpose(1, 2).reshape(B, N, C))
        return x + self.mlp(self.norm2(x))


class ViT(BlockStack):
    """Vision transformer: conv patch embedding, class token, SDPA attention blocks."""

    def __init__(self, layers: int, hidden: int, heads: int, image: int, patch: int,
                 channels: int, classes: int, dropout: float) -> None:
        super().__init__()
        if image % patch:
            raise ValueError(f"image ({image}) must be divisible by patch ({patch})")
        self.patch_embed = nn.Conv2d(channels, hidden, kernel_size=patch, stride=patch)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, hidden))
        self.pos_embed = nn.Parameter(torch.randn(1, (image // patch) ** 2 + 1, hidden) * 0.02)
        self.blocks = nn.ModuleList(ViTBlock(hidden, heads, 4, dropout) for _ in range(layers))
        self.norm = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(images).flatten(2).transpose(1, 2)
        x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1) + self.pos_embed
        for block in self.blocks:
            x = self.call_block(block, x)
        return self.head(self.norm(x[:, 0]))


def vit(*, layers: int = 2, hidden: int = 32, heads: int = 4, image: int = 16, patch: int = 4,
        channels: int = 3, classes: int = 10, batch: int = 2, dropout: float = 0.0,
        dtype: torch.dtype = torch.float32, device: Device = "cpu", seed: int = 0) -> BuiltModel:
    model = _seeded_build(seed, device, dtype,
                          lambda: ViT(layers, hidden, heads, image, patch, channels, classes, dropout))
    return BuiltModel(
        model, lambda: (_random_floats(seed + 1, (batch, channels, image, image), device, dtype),),
        _classifier_loss)


# --------------------------------------------------------------------------- resnet


class BasicBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.downsample: nn.Module = nn.Identity()
        if stride != 1 or c_in != c_out:
            self.downsample = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False),
                                            nn.BatchNorm2d(c_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.downsample(x))


class ResNet(BlockStack):
    """A small ResNet: conv stem, basic blocks with BatchNorm2d (training mode), pooling, linear."""

    def __init__(self, stages: int, blocks_per_stage: int, width: int, channels: int, classes: int) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(channels, width, 3, padding=1, bias=False),
                                  nn.BatchNorm2d(width), nn.ReLU())
        blocks: list[nn.Module] = []
        c = width
        for s in range(stages):
            c_out = width * 2 ** s
            for b in range(blocks_per_stage):
                blocks.append(BasicBlock(c, c_out, 2 if s > 0 and b == 0 else 1))
                c = c_out
        self.blocks = nn.ModuleList(blocks)
        self.fc = nn.Linear(c, classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.stem(images)
        for block in self.blocks:
            x = self.call_block(block, x)
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


def resnet(*, stages: int = 2, blocks_per_stage: int = 1, width: int = 8, image: int = 16,
           channels: int = 3, classes: int = 10, batch: int = 2, dtype: torch.dtype = torch.float32,
           device: Device = "cpu", seed: int = 0) -> BuiltModel:
    model = _seeded_build(seed, device, dtype,
                          lambda: ResNet(stages, blocks_per_stage, width, channels, classes))
    return BuiltModel(
        model, lambda: (_random_floats(seed + 1, (batch, channels, image, image), device, dtype),),
        _classifier_loss)


# --------------------------------------------------------------------------- convnet


class ConvNet(nn.Module):
    """conv-ReLU-maxpool stages, then a linear classifier."""

    def __init__(self, widths: Sequence[int], image: int, channels: int, classes: int) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        c = channels
        for w in widths:
            layers += [nn.Conv2d(c, w, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2)]
            c = w
        self.features = nn.Sequential(*layers)
        side = image // 2 ** len(widths)
        if side < 1:
            raise ValueError(f"image ({image}) is too small for {len(widths)} pooling stages")
        self.classifier = nn.Linear(c * side * side, classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(images).flatten(1))


def convnet(*, widths: Sequence[int] = (8, 16), image: int = 16, channels: int = 3, classes: int = 10,
            batch: int = 2, dtype: torch.dtype = torch.float32, device: Device = "cpu",
            seed: int = 0) -> BuiltModel:
    model = _seeded_build(seed, device, dtype, lambda: ConvNet(tuple(widths), image, channels, classes))
    return BuiltModel(
        model, lambda: (_random_floats(seed + 1, (batch, channels, image, image), device, dtype),),
        _classifier_loss)


# --------------------------------------------------------------------------- lstm


class LSTMLayer(nn.Module):
    """One LSTM layer, the recurrence written out as a Python loop over time steps."""

    def __init__(self, input_size: int, hidden: int) -> None:
        super().__init__()
        self.hidden = hidden
        self.ih = nn.Linear(input_size, 4 * hidden)
        self.hh = nn.Linear(hidden, 4 * hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        h = x.new_zeros(B, self.hidden)
        c = x.new_zeros(B, self.hidden)
        x_gates = self.ih(x)
        outputs = []
        for t in range(T):
            i, f, g, o = (x_gates[:, t] + self.hh(h)).chunk(4, dim=1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
            outputs.append(h)
        return torch.stack(outputs, dim=1)


class LSTM(nn.Module):
    def __init__(self, layers: int, input_size: int, hidden: int, classes: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(LSTMLayer(input_size if k == 0 else hidden, hidden)
                                    for k in range(layers))
        self.head = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return self.head(x[:, -1])


def lstm(*, layers: int = 1, input_size: int = 16, hidden: int = 32, seq: int = 6, batch: int = 2,
         classes: int = 10, dtype: torch.dtype = torch.float32, device: Device = "cpu",
         seed: int = 0) -> BuiltModel:
    model = _seeded_build(seed, device, dtype, lambda: LSTM(layers, input_size, hidden, classes))
    return BuiltModel(model, lambda: (_random_floats(seed + 1, (batch, seq, input_size), device, dtype),),
                      _classifier_loss)


# --------------------------------------------------------------------------- moe


class MoELayer(nn.Module):
    """Token-choice top-k mixture of experts with static shapes.

    Every (token, slot) pair gathers its token and its expert's weights by
    index, runs the expert FFN as a batched matmul, and is scattered back onto
    its token with ``index_add``.  A load-balancing term counts assignments
    per expert with ``scatter_add``.
    """

    def __init__(self, hidden: int, ffn: int, experts: int, topk: int) -> None:
        super().__init__()
        if not 1 <= topk <= experts:
            raise ValueError(f"topk ({topk}) must be between 1 and experts ({experts})")
        self.experts, self.topk = experts, topk
        self.router = nn.Linear(hidden, experts, bias=False)
        self.w_in = nn.Parameter(torch.randn(experts, hidden, ffn) / math.sqrt(hidden))
        self.w_out = nn.Parameter(torch.randn(experts, ffn, hidden) / math.sqrt(ffn))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        tokens = x.reshape(-1, x.shape[-1])
        n = tokens.shape[0]
        probs = F.softmax(self.router(tokens).float(), dim=-1)
        _, expert_ids = torch.topk(probs, self.topk, dim=-1)
        gates = probs.gather(1, expert_ids)
        gates = (gates / gates.sum(dim=-1, keepdim=True)).to(x.dtype)

        flat_experts = expert_ids.reshape(-1)
        token_ids = torch.arange(n, device=x.device).repeat_interleave(self.topk)
        routed = tokens.index_select(0, token_ids).unsqueeze(1)
        h = F.gelu(torch.bmm(routed, self.w_in[flat_experts]))
        y = torch.bmm(h, self.w_out[flat_experts]).squeeze(1) * gates.reshape(-1, 1)
        combined = torch.zeros_like(tokens).index_add(0, token_ids, y)

        load = torch.zeros(self.experts, device=x.device, dtype=probs.dtype).scatter_add(
            0, flat_experts, torch.ones_like(flat_experts, dtype=probs.dtype))
        aux = self.experts * (load / flat_experts.numel() * probs.mean(dim=0)).sum()
        return combined.view_as(x), aux


class MoEBlock(nn.Module):
    def __init__(self, hidden: int, ffn: int, experts: int, topk: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(hidden)
        self.moe = MoELayer(hidden, ffn, experts, topk)

    def forward(self, x: torch.Tensor, aux: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y, block_aux = self.moe(self.norm(x))
        return x + y, aux + block_aux


class MoE(BlockStack):
    def __init__(self, layers: int, hidden: int, ffn: int, experts: int, topk: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(MoEBlock(hidden, ffn, experts, topk) for _ in range(layers))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        aux = x.new_zeros((), dtype=torch.float32)
        for block in self.blocks:
            x, aux = self.call_block(block, x, aux)
        return x, aux


def _moe_loss(out: tuple[torch.Tensor, torch.Tensor], inputs: Inputs) -> torch.Tensor:
    y, aux = out
    return y.float().square().mean() + 0.01 * aux


def moe(*, layers: int = 1, hidden: int = 32, ffn: int = 64, experts: int = 4, topk: int = 2,
        seq: int = 8, batch: int = 2, dtype: torch.dtype = torch.float32, device: Device = "cpu",
        seed: int = 0) -> BuiltModel:
    model = _seeded_build(seed, device, dtype, lambda: MoE(layers, hidden, ffn, experts, topk))
    return BuiltModel(model, lambda: (_random_floats(seed + 1, (batch, seq, hidden), device, dtype),),
                      _moe_loss)


# --------------------------------------------------------------------------- registry

Builder = Callable[..., BuiltModel]

MODELS: dict[str, Builder] = {
    "mlp": mlp,
    "gpt2": gpt2,
    "llama": llama,
    "vit": vit,
    "resnet": resnet,
    "convnet": convnet,
    "lstm": lstm,
    "moe": moe,
}


#: One line on each built-in model (``fxcut --help`` lists them).
MODEL_SUMMARIES: dict[str, str] = {
    "mlp": "linear layers with GELU in between",
    "gpt2": "GPT-2: embeddings, pre-LN attention and MLP blocks, tied LM head",
    "llama": "Llama: RMSNorm, rotary embeddings, grouped-query attention, SwiGLU",
    "vit": "vision transformer: patch embedding, class token, SDPA blocks",
    "resnet": "a small ResNet with batch norm in training mode",
    "convnet": "conv-ReLU-maxpool stages, then a linear classifier",
    "lstm": "an LSTM, its recurrence unrolled into the graph",
    "moe": "token-choice top-k mixture-of-experts blocks",
}


def build_model(name: str, **cfg: Any) -> BuiltModel:
    """``MODELS[name](**cfg)``: ``(model, make_inputs, loss_fn)``."""
    try:
        builder = MODELS[name]
    except KeyError:
        raise KeyError(f"unknown model {name!r}; known: {', '.join(sorted(MODELS))}") from None
    return builder(**cfg)


__all__ = [
    "BlockStack", "BuiltModel", "LossFn", "MODELS", "MODEL_SUMMARIES", "build_model",
    "convnet", "gpt2", "llama", "lstm", "mlp", "moe", "resnet", "vit",
]
