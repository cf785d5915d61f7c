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

As a lab model, :func:`hf_transformer` builds the network a ``config.json`` describes (its contents are the
``model.config`` setting, so a run folder holds everything that rebuilds it) and :func:`saved_model` reads what a
``save_pretrained`` folder holds: ``lab analyze … --model hf:DIR`` imports it as a run whose weights are the folder's
file (:mod:`lab.reports.imported`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from lab.extras import require
from lab.nn.input_stage import InputStage, input_stage
from lab.nn.intermediates import check_format, collect, last_state
from lab.nn.registry import register_model
from lab.nn.residual_steps import ResidualSteps
from lab.nn.weights import LoadReport, WeightsError, WeightsFile

__all__ = ["DECODERS", "ENCODERS", "HF_PREFIX", "HFStep", "HFTransformer", "SavedModel", "hf_transformer",
           "load_pretrained", "load_saved", "saved_model"]

HF_PREFIX = "hf:"
"""How a network names a ``save_pretrained`` folder: ``hf:DIR``."""
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
"""The weights file ``save_pretrained`` writes (safetensors; the older pickle), the first found is read."""
MAX_CONFIG_BYTES = 4 * 2**20
"""The largest ``config.json`` or ``preprocessor_config.json`` read (a thousand class names fit in a few kB)."""

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


def _gpt2_steps(decoder: nn.Module) -> list[HFStep]:
    steps = []
    for block in decoder.h:
        def attn(h: Tensor, b: nn.Module = block) -> Tensor:
            return b.attn(b.ln_1(h), attention_mask=_causal_mask(h))[0]

        def mlp(h: Tensor, b: nn.Module = block) -> Tensor:
            return b.mlp(b.ln_2(h))

        steps += [HFStep(attn), HFStep(mlp, tokenwise=True)]
    return steps


def _llama_steps(inner: nn.Module) -> list[HFStep]:
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
    (what its classifier reads). The state dict is the model's own under ``model.``; a ``save_pretrained`` file is
    loaded by transformers itself (:func:`load_saved`: its keys are converted as ``from_pretrained`` converts them).

    Args:
        model: a ``GPT2LMHeadModel``/``GPT2Model``, a Llama-style ``*ForCausalLM``/``*Model``, or a
            ``ViTForImageClassification``/``ViTModel`` (DeiT alike); its attention is switched to the eager one,
            which forward-mode differentiation takes.
        inputs: what makes the lab's image tensors into a vision encoder's inputs (None: it takes them as they are).

    Raises:
        ValueError: a model type the lab does not read (:data:`DECODERS`, :data:`ENCODERS`).
    """

    def __init__(self, model: nn.Module, inputs: InputStage | None = None) -> None:
        kind = model.config.model_type
        if getattr(model.config, "_attn_implementation", "eager") != "eager":
            model.set_attn_implementation("eager")  # forward-mode AD (the Jacobians' jvp) has no rule for fused SDPA
        if kind == "gpt2":
            steps = _gpt2_steps(getattr(model, "transformer", model))
        elif kind in DECODERS:
            steps = _llama_steps(getattr(model, "model", model))
        elif kind in ENCODERS:
            steps = _vit_steps(self._encoder_of(model))
        else:
            raise ValueError(f"a transformers {kind!r} model: the lab reads GPT-2, Llama-style decoders "
                             f"({', '.join(DECODERS.values())}) and vision encoders ({', '.join(ENCODERS.values())})")
        super().__init__(model, steps)
        self.kind = kind
        self.causal = kind in DECODERS
        self.input_stage = inputs
        labels = getattr(model.config, "num_labels", None) if not self.causal else None
        self.num_classes = labels if hasattr(model, "classifier") else None

    def _decoder(self) -> nn.Module:
        """The decoder under its language-model head (``GPT2Model``, ``LlamaModel``), or the bare one."""
        return getattr(self.model, "transformer" if self.kind == "gpt2" else "model", self.model)

    def no_weight_decay(self) -> set[str]:
        """Position embeddings, the class token, and every norm's and bias's parameters (as transformers'
        ``Trainer`` exempts biases and norms)."""
        return {n for n, p in self.named_parameters() if p.ndim <= 1 or "position" in n or n.endswith(
            ("cls_token", ".wpe.weight"))}

    @staticmethod
    def _encoder_of(model: nn.Module) -> nn.Module:
        """The ``ViTModel`` inside a classifier, or the model itself."""
        return getattr(model, model.base_model_prefix, model)

    def stem(self, x: Tensor) -> Tensor:
        """h_0 ``[B, tokens, D]``: token and position embeddings of ids ``[B, T]`` (a decoder) or patch, class-token
        and position embeddings of images ``[B, C, H, W]`` (an encoder), as the model's own forward makes them."""
        m = self.model
        if self.kind == "gpt2":
            t = self._decoder()
            positions = torch.arange(x.shape[1], device=x.device)[None]
            return t.drop(t.wte(x) + t.wpe(positions))
        if self.causal:
            return self._decoder().embed_tokens(x)
        return self._encoder_of(m).embeddings(x if self.input_stage is None else self.input_stage(x))

    def final_norm(self, h: Tensor) -> Tensor:
        """The norm the model applies after its last block (GPT-2's ``ln_f``, a Llama's ``norm``, a ViT's
        ``layernorm``)."""
        if self.kind == "gpt2":
            return self._decoder().ln_f(h)
        if self.causal:
            return self._decoder().norm(h)
        return self._encoder_of(self.model).layernorm(h)

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


def _check_kind(config: Mapping[str, Any], where: str) -> str:
    """The ``model_type`` of a transformers config (``config.json``'s contents), once it is one the lab reads and
    names no remote code.

    Raises:
        ValueError: remote code (``auto_map``), or a model type the lab does not read.
    """
    if config.get("auto_map"):
        raise ValueError(f"{where} names remote code (auto_map); the lab runs no code from a model folder")
    kind = config.get("model_type")
    if kind not in DECODERS and kind not in ENCODERS:
        raise ValueError(f"{where} describes a transformers {kind!r} model: the lab reads GPT-2, Llama-style decoders "
                         f"({', '.join(DECODERS.values())}) and vision encoders ({', '.join(ENCODERS.values())})")
    return kind


def _auto_class(transformers, kind: str, architectures: Sequence[str]):
    """The ``Auto*`` class that builds the architecture a config names: a language model's head, an image
    classifier's, or the bare model."""
    if kind in DECODERS and any(a.endswith(("LMHeadModel", "ForCausalLM")) for a in architectures):
        return transformers.AutoModelForCausalLM
    if any(a.endswith("ForImageClassification") for a in architectures):
        return transformers.AutoModelForImageClassification
    return transformers.AutoModel


def load_pretrained(folder: str | Path) -> nn.Module:
    """The transformers model saved in ``folder`` (``save_pretrained``: ``config.json`` and its weights), in eval mode
    with the eager attention, read from that folder alone.

    Raises:
        MissingExtra: transformers is not installed (the ``[hf]`` extra); the message says how to install it.
        FileNotFoundError: ``folder`` holds no ``config.json``.
        ValueError: a model type the lab does not read, or a config that names remote code.
    """
    transformers = require("transformers")
    saved = saved_model(folder)
    auto = _auto_class(transformers, saved.config["model_type"], saved.config.get("architectures") or [])
    model = auto.from_pretrained(saved.folder, local_files_only=True, trust_remote_code=False,
                                 attn_implementation="eager")
    return model.eval()


@dataclass(frozen=True)
class SavedModel:
    """What a ``save_pretrained`` folder holds, as the lab reads it.

    Attributes:
        folder: the folder (resolved).
        config: ``config.json``'s contents.
        weights: its weights file (:data:`WEIGHT_FILES`).
        preprocessor: ``preprocessor_config.json``'s contents (an image model's input size, mean and std), or None.
    """

    folder: Path
    config: dict[str, Any]
    weights: Path
    preprocessor: dict[str, Any] | None


def _read_json(path: Path) -> dict[str, Any]:
    with open(path, "rb") as f:
        raw = f.read(MAX_CONFIG_BYTES + 1)
    if len(raw) > MAX_CONFIG_BYTES:
        raise ValueError(f"{path} is over {MAX_CONFIG_BYTES // 2**20} MB: not a transformers config")
    try:
        value = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{path} is not JSON ({err})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{path} holds no JSON object")
    return value


def saved_model(folder: str | Path) -> SavedModel:
    """Read the ``save_pretrained`` folder ``folder``: its config, weights file and preprocessor config (no weights
    are loaded).

    Raises:
        FileNotFoundError: no such folder, no ``config.json`` or no weights file.
        ValueError: a config that is not JSON, names remote code or a model type the lab does not read; weights
            sharded over several files (the lab reads one file: save it with a larger ``max_shard_size``).
    """
    path = Path(folder).expanduser().resolve()
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{path} holds no config.json: give the folder save_pretrained wrote")
    config = _read_json(path / "config.json")
    _check_kind(config, f"{path}'s config")
    weights = next((path / name for name in WEIGHT_FILES if (path / name).is_file()), None)
    if weights is None:
        if any(path.glob("*.index.json")):
            raise ValueError(f"{path} holds its weights in shards (an *.index.json): the lab reads one weights file "
                             "and records its hash; save the model with save_pretrained(folder, "
                             "max_shard_size='100GB')")
        raise FileNotFoundError(f"{path} holds no weights file ({' or '.join(WEIGHT_FILES)})")
    pre = path / "preprocessor_config.json"
    return SavedModel(path, config, weights, _read_json(pre) if pre.is_file() else None)


def _from_config(config: Mapping[str, Any]) -> nn.Module:
    """The network ``config`` (``config.json``'s contents) describes, initialised as transformers initialises it,
    with the eager attention."""
    transformers = require("transformers")
    kind = _check_kind(config, "model.config")
    settings = {k: v for k, v in config.items() if k != "model_type"}
    try:
        built = transformers.AutoConfig.for_model(kind, **settings)
    except (TypeError, ValueError) as err:
        raise ValueError(f"model.config is not a valid {DECODERS.get(kind) or ENCODERS[kind]} config: {err}") from None
    auto = _auto_class(transformers, kind, config.get("architectures") or [])
    return auto.from_config(built, attn_implementation="eager")


def load_saved(model: HFTransformer, weights: WeightsFile, *, strict: bool = True) -> LoadReport:
    """Load a ``save_pretrained`` weights file already read (:func:`~lab.nn.weights.read_weights`: its bytes hashed)
    into ``model``, through transformers' ``from_pretrained`` on those tensors: the keys are converted as transformers
    converts a saved file (a ViT's saved ``encoder.layer.*`` keys are its modules' ``layers.*``), a head tied to the
    token embedding comes with it.

    Raises:
        WeightsError: when ``strict``, keys that do not match (missing, unexpected or of another shape, named).
    """
    inner = model.model
    loaded, info = type(inner).from_pretrained(None, config=inner.config, state_dict=dict(weights.state),
                                               attn_implementation="eager", ignore_mismatched_sizes=True,
                                               output_loading_info=True)
    report = LoadReport(missing=sorted(info["missing_keys"]), unexpected=sorted(info["unexpected_keys"]),
                        mismatched=sorted(f"{key}: {tuple(theirs)} ≠ {tuple(ours)}"
                                          for key, theirs, ours in info["mismatched_keys"]),
                        name=weights.name, sha256=weights.sha256, size=weights.size)
    if strict and not report.exact:
        raise WeightsError(f"{Path(weights.name).name} does not fit {type(inner).__name__}: {report.text()} (load it "
                           "anyway, keeping the model's own values there, with strict=False / --strict false)")
    mine = inner.state_dict()
    keep = set(report.initialised)
    inner.load_state_dict({k: v for k, v in loaded.state_dict().items() if k not in keep and k in mine}, strict=False)
    report.loaded = len(mine) - len(keep)
    return report


TINY_VIT = {"model_type": "vit", "architectures": ["ViTForImageClassification"], "hidden_size": 16,
            "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 32, "image_size": 8,
            "patch_size": 2, "num_channels": 1, "num_labels": 3}
"""A small ViT classifier's config: the builder's example (8 × 8 one-channel images, 16 patches of 2 px)."""


@register_model(family="hf", requires=("hf",), example={"config": TINY_VIT}, input_shape=(1, 8, 8))
def hf_transformer(config: dict | None = None, inputs: dict | None = None) -> HFTransformer:
    """A Hugging Face transformers network (GPT-2, a Llama-style decoder, a ViT or DeiT) as its ``config.json``
    describes it, at initialisation: the lab model an imported ``hf:DIR`` is (its weights are then the folder's).

    Args:
        config: ``config.json``'s contents (``model_type``, ``architectures`` and the architecture's settings).
        inputs: the settings of an input stage (:class:`~lab.nn.input_stage.InputStage`) that makes the lab's image
            tensors into a vision encoder's inputs (None: it takes them as they are).

    Raises:
        ValueError: no config, a model type the lab does not read, remote code, or settings transformers refuses.
        MissingExtra: transformers is not installed (the ``[hf]`` extra).
    """
    if not isinstance(config, dict):
        raise ValueError("model.config is the network's config.json (a mapping with its model_type); got "
                         f"{type(config).__name__}")
    return HFTransformer(_from_config(config).eval(), input_stage(inputs))
