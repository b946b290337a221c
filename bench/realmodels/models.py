"""Real architectures built from small configs, no downloads: the real-model benchmark's models.

Each builder returns a :class:`RealModel`: the module (in training mode, every
dropout, drop-path, layer-drop and SpecAugment probability set to 0 so a
compiled step can be compared with eager), its inputs as keyword arguments,
and a loss over its output.  Weights and inputs come from fixed seeds, so two
builds of one model are equal to the bit.

The Hugging Face ``transformers`` models need the ``[bench]`` extra
(``pip install -e '.[bench]'``).  ``plain_mlp`` and ``plain_convnet`` need
torch only: the smoke test and machines without the extra use them.

Sizes are chosen so one inductor compile takes tens of seconds on a
laptop-class CPU: 2 layers (convnets: a few stages), hidden 128-256,
sequences of 64-128, batch 4.  ``timm`` is not used: its import needs
torchvision, and the torchvision wheels on PyPI link torch's CUDA build
(on a ``+cpu`` torch their ``_C`` does not load and ``import torchvision``
fails); the convnets come from ``transformers`` instead.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

LossFn = Callable[[Any, dict[str, torch.Tensor]], torch.Tensor]


@dataclass
class RealModel:
    """A model ready for one training step: ``loss_fn(model(**inputs), inputs)``."""

    name: str
    family: str
    model: nn.Module
    inputs: dict[str, torch.Tensor]
    loss_fn: LossFn
    #: the dtype the forward runs under ``torch.autocast`` (None: none)
    autocast: torch.dtype | None = None

    def parameter_bytes(self) -> int:
        return sum(p.numel() * p.element_size() for p in self.model.parameters())


#: Builders by name, in the benchmark's order; the value says which package it needs.
Builder = Callable[[], RealModel]
BUILDERS: dict[str, tuple[Builder, str | None]] = {}


def _register(name: str, needs: str | None) -> Callable[[Builder], Builder]:
    def add(fn: Builder) -> Builder:
        BUILDERS[name] = (fn, needs)
        return fn
    return add


def available(name: str) -> bool:
    """Whether ``name``'s package is installed (plain models always are)."""
    needs = BUILDERS[split_name(name)[0]][1]
    return needs is None or importlib.util.find_spec(needs) is not None


def model_names(*, only_available: bool = False) -> list[str]:
    return [n for n in BUILDERS if not only_available or available(n)]


#: The variants a model name may carry after a colon each: ``deep`` (the
#: architecture at >= 12 layers or blocks), ``bf16`` (the forward under
#: CPU bf16 autocast).  ``gpt2:deep:bf16`` is both.
VARIANTS = ("deep", "bf16")
_DEEP = [False]


def split_name(name: str) -> tuple[str, set[str]]:
    """``"gpt2:deep"`` -> ``("gpt2", {"deep"})``; a ValueError for an unknown variant."""
    base, *variants = name.split(":")
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        raise ValueError(f"unknown model variant(s) {', '.join(unknown)} of {name!r} (choose from {', '.join(VARIANTS)})")
    return base, set(variants)


def _n(small: Any, deep: Any) -> Any:
    """A builder's size: ``small`` for the benchmark's small config, ``deep`` under the ``deep`` variant."""
    return deep if _DEEP[0] else small


def build(name: str) -> RealModel:
    """Build ``name`` (a key of :data:`BUILDERS`, with :data:`VARIANTS`) deterministically."""
    base, variants = split_name(name)
    if base not in BUILDERS:
        raise ValueError(f"unknown model {base!r} (choose from {', '.join(BUILDERS)})")
    fn, needs = BUILDERS[base]
    if not available(base):
        raise ModuleNotFoundError(f"model {base!r} needs the {needs!r} package: pip install -e '.[bench]'")
    torch.manual_seed(0)
    _DEEP[0] = "deep" in variants
    try:
        built = fn()
    finally:
        _DEEP[0] = False
    built.model.train()
    built.name = name
    if "bf16" in variants:
        built.autocast = torch.bfloat16
    return built


def _gen() -> torch.Generator:
    return torch.Generator().manual_seed(1234)


# --------------------------------------------------------------------------- losses


def _logits(out: Any) -> torch.Tensor:
    return out.logits if hasattr(out, "logits") else out


def _lm_loss(out: Any, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """Next-token cross-entropy of a causal LM's logits on its own input ids."""
    logits = _logits(out)[:, :-1]
    target = inputs["input_ids"][:, 1:]
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), target.reshape(-1))


def _token_loss(key: str) -> LossFn:
    """Cross-entropy of per-token logits against ``inputs[key]``."""
    def loss(out: Any, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        logits = _logits(out)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), inputs[key].reshape(-1))
    return loss


def _class_loss(out: Any, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    return F.cross_entropy(_logits(out).float(), inputs["_labels"])


def _frame_loss(out: Any, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """A speech model's per-frame logits against fixed per-frame targets
    (the first frames' worth of ``_frames``; CTC would work too, cross-entropy is simpler to compare)."""
    logits = _logits(out)
    target = inputs["_frames"][:, : logits.shape[1]]
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), target.reshape(-1))


class _WithoutPrivate(nn.Module):
    """Passes every input but the ``_``-prefixed ones (the loss's targets) to the model."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, **inputs: torch.Tensor) -> Any:
        return self.inner(**{k: v for k, v in inputs.items() if not k.startswith("_")})


# --------------------------------------------------------------------------- plain torch (no extra)


class _PlainMLP(nn.Module):
    def __init__(self, dim: int, hidden: int, layers: int, classes: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))
            for _ in range(layers))
        self.head = nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = x + block(x)
        return self.head(x.mean(dim=1))  # type: ignore[no-any-return]


@_register("plain_mlp", None)
def plain_mlp() -> RealModel:
    """Residual pre-norm MLP blocks over a sequence (torch only)."""
    model = _PlainMLP(dim=64, hidden=256, layers=_n(2, 12), classes=10)
    g = _gen()
    inputs = {"x": torch.randn(4, 32, 64, generator=g), "_labels": torch.randint(0, 10, (4,), generator=g)}
    return RealModel("plain_mlp", "mlp (torch only)", _WithoutPrivate(model), inputs, _class_loss)


class _Input(nn.Module):
    """Calls a positional-input module with the keyword ``input``."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return self.net(input)  # type: ignore[no-any-return]


@_register("plain_convnet", None)
def plain_convnet() -> RealModel:
    """Conv + batch norm + ReLU stages (torch only)."""
    def stage(cin: int, cout: int) -> nn.Module:
        return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
                             nn.MaxPool2d(2))

    model = nn.Sequential(stage(3, 16), stage(16, 32), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))
    g = _gen()
    inputs = {"input": torch.randn(4, 3, 32, 32, generator=g), "_labels": torch.randint(0, 10, (4,), generator=g)}

    return RealModel("plain_convnet", "convnet + batch norm (torch only)", _WithoutPrivate(_Input(model)), inputs,
                     _class_loss)


# --------------------------------------------------------------------------- transformers


def _tokens(batch: int, seq: int, vocab: int) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, seq), generator=_gen())


def _images(batch: int, channels: int, size: int, classes: int) -> dict[str, torch.Tensor]:
    g = _gen()
    return {"pixel_values": torch.randn(batch, channels, size, size, generator=g),
            "_labels": torch.randint(0, classes, (batch,), generator=g)}


_BATCH, _SEQ, _VOCAB = 4, 128, 2048


@_register("gpt2", "transformers")
def gpt2() -> RealModel:
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(vocab_size=_VOCAB, n_positions=_SEQ, n_embd=256, n_layer=_n(2, 12), n_head=4, resid_pdrop=0.0,
                     embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    inputs = {"input_ids": _tokens(_BATCH, _SEQ, _VOCAB)}
    return RealModel("gpt2", "decoder LM, dense", GPT2LMHeadModel(cfg), inputs, _lm_loss)


def _llama_like(name: str, family: str, cls_name: str, cfg_name: str, **extra: Any) -> RealModel:
    import transformers

    cfg = getattr(transformers, cfg_name)(
        vocab_size=_VOCAB, hidden_size=256, intermediate_size=512, num_hidden_layers=_n(2, 12), num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=_SEQ, attention_dropout=0.0, **extra)
    model = getattr(transformers, cls_name)(cfg)
    return RealModel(name, family, model, {"input_ids": _tokens(_BATCH, _SEQ, _VOCAB)}, _lm_loss)


@_register("llama", "transformers")
def llama() -> RealModel:
    return _llama_like("llama", "decoder LM, dense (RMSNorm, rotary, SwiGLU, GQA)", "LlamaForCausalLM", "LlamaConfig")


@_register("mixtral", "transformers")
def mixtral() -> RealModel:
    return _llama_like("mixtral", "decoder LM, MoE (4 experts, top-2)", "MixtralForCausalLM", "MixtralConfig",
                       num_local_experts=4, num_experts_per_tok=2, router_aux_loss_coef=0.0)


@_register("qwen2_moe", "transformers")
def qwen2_moe() -> RealModel:
    return _llama_like("qwen2_moe", "decoder LM, MoE (4 experts top-2 + shared expert)", "Qwen2MoeForCausalLM",
                       "Qwen2MoeConfig", num_experts=4, num_experts_per_tok=2, moe_intermediate_size=256,
                       shared_expert_intermediate_size=512, router_aux_loss_coef=0.0)


@_register("bert", "transformers")
def bert() -> RealModel:
    from transformers import BertConfig, BertForMaskedLM

    cfg = BertConfig(vocab_size=_VOCAB, hidden_size=256, num_hidden_layers=_n(2, 12), num_attention_heads=4,
                     intermediate_size=1024, max_position_embeddings=_SEQ, hidden_dropout_prob=0.0,
                     attention_probs_dropout_prob=0.0)
    ids = _tokens(_BATCH, _SEQ, _VOCAB)
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "_labels": ids.flip(1).contiguous()}
    return RealModel("bert", "encoder (masked LM)", _WithoutPrivate(BertForMaskedLM(cfg)), inputs,
                     _token_loss("_labels"))


@_register("t5", "transformers")
def t5() -> RealModel:
    from transformers import T5Config, T5ForConditionalGeneration

    cfg = T5Config(vocab_size=_VOCAB, d_model=256, d_kv=64, d_ff=512, num_layers=_n(2, 6), num_decoder_layers=_n(2, 6),
                   num_heads=4, dropout_rate=0.0, decoder_start_token_id=0, pad_token_id=0)
    g = _gen()
    src = torch.randint(1, _VOCAB, (_BATCH, _SEQ), generator=g)
    tgt = torch.randint(1, _VOCAB, (_BATCH, _SEQ // 2), generator=g)
    inputs = {"input_ids": src, "decoder_input_ids": tgt, "_labels": tgt.roll(-1, 1).contiguous()}
    return RealModel("t5", "encoder-decoder", _WithoutPrivate(T5ForConditionalGeneration(cfg)), inputs,
                     _token_loss("_labels"))


@_register("bart", "transformers")
def bart() -> RealModel:
    from transformers import BartConfig, BartForConditionalGeneration

    cfg = BartConfig(vocab_size=_VOCAB, d_model=256, encoder_layers=_n(2, 6), decoder_layers=_n(2, 6), encoder_attention_heads=4,
                     decoder_attention_heads=4, encoder_ffn_dim=512, decoder_ffn_dim=512, max_position_embeddings=_SEQ,
                     dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, encoder_layerdrop=0.0,
                     decoder_layerdrop=0.0)
    g = _gen()
    src = torch.randint(3, _VOCAB, (_BATCH, _SEQ), generator=g)
    tgt = torch.randint(3, _VOCAB, (_BATCH, _SEQ // 2), generator=g)
    inputs = {"input_ids": src, "decoder_input_ids": tgt, "_labels": tgt.roll(-1, 1).contiguous()}
    return RealModel("bart", "encoder-decoder", _WithoutPrivate(BartForConditionalGeneration(cfg)), inputs,
                     _token_loss("_labels"))


@_register("wav2vec2", "transformers")
def wav2vec2() -> RealModel:
    from transformers import Wav2Vec2Config, Wav2Vec2ForCTC

    cfg = Wav2Vec2Config(vocab_size=32, hidden_size=128, num_hidden_layers=_n(2, 12), num_attention_heads=4,
                         intermediate_size=512, conv_dim=(64, 64, 64), conv_stride=(5, 4, 4), conv_kernel=(10, 8, 8),
                         num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4, hidden_dropout=0.0,
                         activation_dropout=0.0, attention_dropout=0.0, feat_proj_dropout=0.0, final_dropout=0.0,
                         layerdrop=0.0, mask_time_prob=0.0, mask_feature_prob=0.0)
    g = _gen()
    inputs = {"input_values": torch.randn(_BATCH, 16000 // 2, generator=g),
              "_frames": torch.randint(0, 32, (_BATCH, 1000), generator=g)}
    return RealModel("wav2vec2", "speech (conv feature encoder + transformer)", _WithoutPrivate(Wav2Vec2ForCTC(cfg)),
                     inputs, _frame_loss)


@_register("whisper", "transformers")
def whisper() -> RealModel:
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    cfg = WhisperConfig(vocab_size=_VOCAB, num_mel_bins=80, d_model=128, encoder_layers=_n(2, 6), decoder_layers=_n(2, 6),
                        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=512,
                        decoder_ffn_dim=512, max_source_positions=200, max_target_positions=64, dropout=0.0,
                        attention_dropout=0.0, activation_dropout=0.0, encoder_layerdrop=0.0, decoder_layerdrop=0.0,
                        pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1,
                        mask_time_prob=0.0, mask_feature_prob=0.0)
    g = _gen()
    tgt = torch.randint(3, _VOCAB, (_BATCH, 32), generator=g)
    inputs = {"input_features": torch.randn(_BATCH, 80, 400, generator=g), "decoder_input_ids": tgt,
              "_labels": tgt.roll(-1, 1).contiguous()}
    return RealModel("whisper", "speech encoder-decoder (conv front end)",
                     _WithoutPrivate(WhisperForConditionalGeneration(cfg)), inputs, _token_loss("_labels"))


@_register("vit", "transformers")
def vit() -> RealModel:
    from transformers import ViTConfig, ViTForImageClassification

    cfg = ViTConfig(image_size=64, patch_size=8, num_channels=3, hidden_size=256, num_hidden_layers=_n(2, 12),
                    num_attention_heads=4, intermediate_size=1024, hidden_dropout_prob=0.0,
                    attention_probs_dropout_prob=0.0, num_labels=10)
    return RealModel("vit", "vision transformer", _WithoutPrivate(ViTForImageClassification(cfg)),
                     _images(_BATCH, 3, 64, 10), _class_loss)


@_register("swin", "transformers")
def swin() -> RealModel:
    from transformers import SwinConfig, SwinForImageClassification

    cfg = SwinConfig(image_size=64, patch_size=4, num_channels=3, embed_dim=64, depths=_n([2, 2], [2, 10]), num_heads=[2, 4],
                     window_size=4, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, drop_path_rate=0.0,
                     num_labels=10)
    return RealModel("swin", "vision transformer, windowed (Swin)", _WithoutPrivate(SwinForImageClassification(cfg)),
                     _images(_BATCH, 3, 64, 10), _class_loss)


@_register("resnet", "transformers")
def resnet() -> RealModel:
    from transformers import ResNetConfig, ResNetForImageClassification

    cfg = ResNetConfig(num_channels=3, embedding_size=32, hidden_sizes=[32, 64, 128, 256], depths=_n([1, 1, 1, 1], [3, 4, 6, 3]),
                       layer_type="bottleneck", num_labels=10)
    return RealModel("resnet", "convnet + batch norm (ResNet bottleneck)",
                     _WithoutPrivate(ResNetForImageClassification(cfg)), _images(_BATCH, 3, 64, 10), _class_loss)


@_register("mobilenet_v2", "transformers")
def mobilenet_v2() -> RealModel:
    from transformers import MobileNetV2Config, MobileNetV2ForImageClassification

    cfg = MobileNetV2Config(num_channels=3, image_size=64, depth_multiplier=_n(0.35, 1.0), classifier_dropout_prob=0.0,
                            num_labels=10)
    return RealModel("mobilenet_v2", "convnet + batch norm (depthwise, inverted residuals)",
                     _WithoutPrivate(MobileNetV2ForImageClassification(cfg)), _images(_BATCH, 3, 64, 10), _class_loss)


@_register("efficientnet", "transformers")
def efficientnet() -> RealModel:
    from transformers import EfficientNetConfig, EfficientNetForImageClassification

    cfg = EfficientNetConfig(num_channels=3, image_size=64, width_coefficient=0.25, depth_coefficient=_n(0.25, 1.0),
                             dropout_rate=0.0, drop_connect_rate=0.0, hidden_dim=320, num_labels=10)
    model = EfficientNetForImageClassification(cfg)
    # transformers draws these batch norms' weights from N(0, 0.02): seven blocks of that shrink the
    # activations to 1e-33, and a step of such a model measures nothing useful.
    for mod in model.modules():
        if isinstance(mod, nn.BatchNorm2d):
            nn.init.ones_(mod.weight)
            nn.init.zeros_(mod.bias)
    return RealModel("efficientnet", "convnet + batch norm (MBConv, squeeze-excite, SiLU)", _WithoutPrivate(model), _images(_BATCH, 3, 64, 10), _class_loss)


@_register("convnext", "transformers")
def convnext() -> RealModel:
    from transformers import ConvNextConfig, ConvNextForImageClassification

    cfg = ConvNextConfig(num_channels=3, patch_size=4, hidden_sizes=[32, 64, 128, 256], depths=_n([1, 1, 2, 1], [3, 3, 9, 3]),
                         drop_path_rate=0.0, image_size=64, num_labels=10)
    return RealModel("convnext", "convnet + layer norm (ConvNeXt)", _WithoutPrivate(ConvNextForImageClassification(cfg)),
                     _images(_BATCH, 3, 64, 10), _class_loss)


__all__ = ["BUILDERS", "VARIANTS", "RealModel", "available", "build", "model_names", "split_name"]
