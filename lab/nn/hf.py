"""Hugging Face transformers behind the lab's model surface: every attention and MLP sub-layer a residual step.

A Transformer block of GPT-2, of a Llama-style decoder (Llama, Mistral, Qwen2) or of a ViT (ViT, DeiT) computes

    h ← h + Attn(norm₁(h))        then        h ← h + MLP(norm₂(h))

two residual steps on the token stream ``[B, tokens, D]``, each with an identity shortcut and a pre-norm branch:
the form the three papers' analyses take (Residual Alignment's block Jacobians, rank and probes per layer).
:class:`HFTransformer` names them ``blocks.{2i}`` (block i's attention) and ``blocks.{2i+1}`` (its MLP), as every lab
model names its blocks, and its ``forward_intermediates`` returns the stream after the embedding (h_0) and after
every step; every other state equals the ``hidden_states`` transformers itself returns (``output_hidden_states``).

A decoder's attention is causal: each step applies the causal mask the model applies, so a token's state never
depends on the tokens after it. The network is loaded from a ``save_pretrained`` folder only
(:func:`load_pretrained`: ``local_files_only``, no remote code, safetensors or ``weights_only`` pickles); nothing is
downloaded. transformers is the ``[hf]`` extra.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from torch import Tensor, nn

from lab.extras import require
from lab.nn.intermediates import check_format, collect, last_state
from lab.nn.residual_steps import ResidualSteps

__all__ = ["DECODERS", "ENCODERS", "HFStep", "HFTransformer", "load_pretrained"]

DECODERS = {"gpt2": "GPT-2", "llama": "Llama", "mistral": "Mistral", "qwen2": "Qwen2"}
"""Causal language models the lab reads, by ``config.model_type``: GPT-2's blocks and the Llama-style ones (RMSNorm,
rotary positions, a gated MLP)."""
ENCODERS = {"vit": "ViT", "deit": "DeiT"}
"""Vision encoders the lab reads, by ``config.model_type``."""


class HFStep(nn.Module):
    """One residual step ``h + F(h)`` of a transformers block, ``F`` its pre-norm branch (a function over the
    block's own modules; the step owns nothing). α = β = 1, no post-activation. ``tokenwise``: F acts on each token
    alone (an MLP), which per-token Jacobians use (:mod:`lab.analysis.token_jacobian`)."""

    alpha = 1.0
    beta = 1.0
    post_act = None

    def __init__(self, branch: Callable[[Tensor], Tensor], tokenwise: bool = False) -> None:
        super().__init__()
        self.branch = branch
        self.tokenwise = tokenwise

    def forward(self, h: Tensor) -> Tensor:
        return h + self.branch(h)


def _causal_mask(h: Tensor) -> Tensor:
    """The additive causal mask ``[1, 1, T, T]`` of a stream ``[B, T, D]`` (0 on and below the diagonal, the dtype's
    lowest value above), as transformers' eager attention adds it."""
    T = h.shape[1]
    upper = torch.ones(T, T, dtype=torch.bool, device=h.device).triu(1)
    return torch.zeros(T, T, dtype=h.dtype, device=h.device).masked_fill(upper, torch.finfo(h.dtype).min)[None, None]


def _gpt2_steps(model: nn.Module) -> list[HFStep]:
    steps = []
    for block in model.transformer.h:
        def attn(h: Tensor, b: nn.Module = block) -> Tensor:
            return b.attn(b.ln_1(h), attention_mask=_causal_mask(h))[0]

        def mlp(h: Tensor, b: nn.Module = block) -> Tensor:
            return b.mlp(b.ln_2(h))

        steps += [HFStep(attn), HFStep(mlp, tokenwise=True)]
    return steps


def _llama_steps(model: nn.Module) -> list[HFStep]:
    inner = model.model
    steps = []
    for layer in inner.layers:
        def attn(h: Tensor, layer: nn.Module = layer) -> Tensor:
            positions = torch.arange(h.shape[1], device=h.device)[None]
            rotary = inner.rotary_emb(h, position_ids=positions)
            return layer.self_attn(hidden_states=layer.input_layernorm(h), attention_mask=_causal_mask(h),
                                   position_ids=positions, position_embeddings=rotary)[0]

        def mlp(h: Tensor, layer: nn.Module = layer) -> Tensor:
            return layer.mlp(layer.post_attention_layernorm(h))

        steps += [HFStep(attn), HFStep(mlp, tokenwise=True)]
    return steps


def _vit_steps(encoder: nn.Module) -> list[HFStep]:
    steps = []
    for layer in encoder.layers:
        def attn(h: Tensor, layer: nn.Module = layer) -> Tensor:
            return layer.dropout(layer.attention(layer.layernorm_before(h))[0])

        def mlp(h: Tensor, layer: nn.Module = layer) -> Tensor:
            return layer.dropout(layer.mlp(layer.layernorm_after(h)))

        steps += [HFStep(attn), HFStep(mlp, tokenwise=True)]
    return steps


class HFTransformer(ResidualSteps):
    """A transformers model with the lab's model surface: ``iter_blocks`` over its 2 × layers residual steps,
    per-step ``forward_intermediates``.

    A causal language model takes token ids ``[B, T]`` and its features are the last token's final state (what
    predicts the next token); a vision encoder takes images ``[B, C, H, W]`` and its features are the class token's
    (what its classifier reads).

    Args:
        model: a ``GPT2LMHeadModel``/``GPT2Model``, a Llama-style ``*ForCausalLM``/``*Model``, or a
            ``ViTForImageClassification``/``ViTModel`` (DeiT alike); its attention is switched to the eager one,
            which forward-mode differentiation takes.

    Raises:
        ValueError: a model type the lab does not read (:data:`DECODERS`, :data:`ENCODERS`).
    """

    def __init__(self, model: nn.Module) -> None:
        kind = model.config.model_type
        if getattr(model.config, "_attn_implementation", "eager") != "eager":
            model.set_attn_implementation("eager")  # forward-mode AD (the Jacobians' jvp) has no rule for fused SDPA
        if kind == "gpt2":
            if not hasattr(model, "transformer"):
                model = _Wrapped(model, "transformer")
            steps = _gpt2_steps(model)
        elif kind in DECODERS:
            if not hasattr(model, "model"):
                model = _Wrapped(model, "model")
            steps = _llama_steps(model)
        elif kind in ENCODERS:
            steps = _vit_steps(self._encoder_of(model))
        else:
            raise ValueError(f"a transformers {kind!r} model: the lab reads GPT-2, Llama-style decoders "
                             f"({', '.join(DECODERS.values())}) and vision encoders ({', '.join(ENCODERS.values())})")
        super().__init__(model, steps)
        self.kind = kind
        self.causal = kind in DECODERS
        labels = getattr(model.config, "num_labels", None) if not self.causal else None
        self.num_classes = labels if hasattr(model, "classifier") else None

    @staticmethod
    def _encoder_of(model: nn.Module) -> nn.Module:
        """The ``ViTModel`` inside a classifier, or the model itself."""
        return getattr(model, model.base_model_prefix, model)

    def stem(self, x: Tensor) -> Tensor:
        """h_0 ``[B, tokens, D]``: token and position embeddings of ids ``[B, T]`` (a decoder) or patch, class-token
        and position embeddings of images ``[B, C, H, W]`` (an encoder), as the model's own forward makes them."""
        m = self.model
        if self.kind == "gpt2":
            t = m.transformer
            positions = torch.arange(x.shape[1], device=x.device)[None]
            return t.drop(t.wte(x) + t.wpe(positions))
        if self.causal:
            return m.model.embed_tokens(x)
        return self._encoder_of(m).embeddings(x)

    def final_norm(self, h: Tensor) -> Tensor:
        """The norm the model applies after its last block (GPT-2's ``ln_f``, a Llama's ``norm``, a ViT's
        ``layernorm``)."""
        m = self.model
        if self.kind == "gpt2":
            return m.transformer.ln_f(h)
        if self.causal:
            return m.model.norm(h)
        return self._encoder_of(m).layernorm(h)

    def forward_intermediates(self, x: Tensor, indices: int | Sequence[int] | None = None, norm: bool = False,
                              stop_early: bool = False, output_fmt: str = "NLC", intermediates_only: bool = False
                              ) -> list[Tensor] | tuple[Tensor, list[Tensor]]:
        """The token stream after the embedding and after every residual step (:mod:`lab.nn.intermediates`).

        Returns:
            ``(features [B, D], states)`` or only ``states``: h_0 and each step's output ``[B, tokens, D]``.
        """
        check_format(output_fmt, ("NLC",))
        if norm:
            raise ValueError("the stream of a transformers model is read before its final norm (norm=False)")
        states, last = collect(self._stream(x), len(self._steps) + 1, indices, stop_early and intermediates_only)
        return states if intermediates_only else (self.pool(last), states)

    def pool(self, h: Tensor) -> Tensor:
        """h_L → features ``[B, D]``: the final norm, then the last token (a decoder) or the class token."""
        return self.final_norm(h)[:, -1 if self.causal else 0]

    def forward_features(self, x: Tensor) -> Tensor:
        return self.pool(last_state(self._stream(x)))

    def forward_head(self, features: Tensor) -> Tensor:
        """The model's own head on the features: next-token logits (a language model) or class logits; the
        features themselves for a bare encoder or decoder."""
        for name in ("lm_head", "classifier"):
            head = getattr(self.model, name, None)
            if head is not None:
                return head(features)
        return features

    def forward(self, x: Tensor) -> Tensor:
        return self.forward_head(self.forward_features(x))


class _Wrapped(nn.Module):
    """A bare decoder (``GPT2Model``, ``LlamaModel``) under the attribute its ``*LMHeadModel`` keeps it in, so one
    path reads both; its state dict gains that prefix."""

    def __init__(self, inner: nn.Module, name: str) -> None:
        super().__init__()
        setattr(self, name, inner)
        self.config = inner.config


def load_pretrained(folder: str | Path) -> nn.Module:
    """The transformers model saved in ``folder`` (``save_pretrained``: ``config.json`` and its weights), in eval mode
    with the eager attention, read from that folder alone.

    Raises:
        MissingExtra: transformers is not installed (the ``[hf]`` extra); the message says how to install it.
        FileNotFoundError: ``folder`` holds no ``config.json``.
        ValueError: a model type the lab does not read, or a config that names remote code.
    """
    transformers = require("transformers")
    path = Path(folder).expanduser()
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{path} holds no config.json: give the folder save_pretrained wrote")
    config = transformers.AutoConfig.from_pretrained(path, local_files_only=True, trust_remote_code=False)
    if getattr(config, "auto_map", None):
        raise ValueError(f"{path}'s config names remote code (auto_map); the lab runs no code from a model folder")
    kind = config.model_type
    if kind not in DECODERS and kind not in ENCODERS:
        raise ValueError(f"{path} holds a transformers {kind!r} model: the lab reads GPT-2, Llama-style decoders "
                         f"({', '.join(DECODERS.values())}) and vision encoders ({', '.join(ENCODERS.values())})")
    architectures = getattr(config, "architectures", None) or []
    auto = (transformers.AutoModelForCausalLM if kind in DECODERS and any(a.endswith(("LMHeadModel", "ForCausalLM"))
                                                                          for a in architectures)
            else transformers.AutoModelForImageClassification if any(a.endswith("ForImageClassification")
                                                                      for a in architectures)
            else transformers.AutoModel)
    model = auto.from_pretrained(path, local_files_only=True, trust_remote_code=False, attn_implementation="eager")
    return model.eval()
