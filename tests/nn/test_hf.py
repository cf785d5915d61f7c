"""Hugging Face transformers read as residual steps: the stream equals the model's own ``hidden_states``, decoders
stay causal, the logits are the model's, and RA2 on a GPT-2 built to share its Jacobians is the value known in
advance."""

import json

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")

from lab.nn.hf import HFTransformer, load_pretrained  # noqa: E402


def _saved(tmp_path, model) -> HFTransformer:
    model.save_pretrained(tmp_path / "net")
    return HFTransformer(load_pretrained(tmp_path / "net"))


def _gpt2(**kw):
    torch.manual_seed(0)
    config = transformers.GPT2Config(**{"n_layer": 2, "n_embd": 32, "n_head": 2, "vocab_size": 64,
                                        "n_positions": 32, "bos_token_id": 0, "eos_token_id": 0, **kw})
    return transformers.GPT2LMHeadModel(config).eval()


def _llama():
    torch.manual_seed(1)
    config = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, vocab_size=64,
                                      max_position_embeddings=32, bos_token_id=0, eos_token_id=0, pad_token_id=0)
    return transformers.LlamaForCausalLM(config).eval()


@pytest.mark.parametrize("build", [_gpt2, _llama], ids=["gpt2", "llama"])
def test_a_decoders_stream_is_its_own_hidden_states_causal_and_its_logits_the_models(tmp_path, build):
    model = build()
    view = _saved(tmp_path, model)
    ids = torch.randint(0, 64, (3, 10))
    with torch.no_grad():
        ours = view.forward_intermediates(ids, intermediates_only=True)
        theirs = model(ids, output_hidden_states=True)
    assert len(ours) == 5 and [name for name, _ in view.iter_blocks()] == [f"blocks.{j}" for j in range(4)]
    for i in range(2):  # transformers' hidden_states[i] is block i's input: our state before its attention step
        torch.testing.assert_close(ours[2 * i], theirs.hidden_states[i], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(view.final_norm(ours[-1]), theirs.hidden_states[-1], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(view(ids), theirs.logits[:, -1], atol=1e-5, rtol=1e-5)
    later = ids.clone()
    later[:, 6:] = (later[:, 6:] + 1) % 64
    with torch.no_grad():
        changed = view.forward_intermediates(later, intermediates_only=True)
    for h, g in zip(ours, changed, strict=True):  # causal: a token's state never sees the tokens after it
        torch.testing.assert_close(h[:, :6], g[:, :6])
        assert not torch.allclose(h[:, 6:], g[:, 6:])
    assert view.num_classes is None and view.causal


def test_a_vit_classifiers_stream_and_logits_are_the_models(tmp_path):
    torch.manual_seed(2)
    config = transformers.ViTConfig(image_size=8, patch_size=4, num_channels=1, hidden_size=32, num_hidden_layers=2,
                                    num_attention_heads=2, intermediate_size=64, num_labels=3)
    model = transformers.ViTForImageClassification(config).eval()
    view = _saved(tmp_path, model)
    x = torch.randn(2, 1, 8, 8)
    with torch.no_grad():
        ours = view.forward_intermediates(x, intermediates_only=True)
        theirs = model(x, output_hidden_states=True)
    assert ours[0].shape == (2, 5, 32)  # four patches and the class token
    for i in range(3):
        torch.testing.assert_close(ours[2 * i], theirs.hidden_states[i], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(view(x), theirs.logits, atol=1e-5, rtol=1e-5)
    assert view.num_classes == 3 and not view.causal


def test_ra2_of_a_gpt2_built_to_share_its_jacobians_is_the_value_known_in_advance(tmp_path):
    """One token, no norms, a linear MLP and every block a copy of the first: each attention step is one linear map
    and each MLP step another, at every input; pairs of one kind score 1, mixed pairs what exact SVDs give."""
    from lab.analysis.residual_alignment import residual_alignment

    model = _gpt2(activation_function="linear", n_layer=3)
    for block in model.transformer.h:
        block.ln_1, block.ln_2 = torch.nn.Identity(), torch.nn.Identity()
    for block in model.transformer.h[1:]:
        block.load_state_dict(model.transformer.h[0].state_dict())
    view = HFTransformer(model)
    ids = torch.randint(0, 64, (4, 1))
    with torch.no_grad():
        h = view.forward_intermediates(ids[:1], intermediates_only=True)[0]
    jacobians = [torch.func.jacrev(step.branch)(h).reshape(32, 32) for _, step in view.iter_blocks()]
    k = 4
    svds = [torch.linalg.svd(J.double()) for J in jacobians]
    expected = np.empty((6, 6))
    for i, J in enumerate(jacobians):
        for j, (U, _, Vh) in enumerate(svds):
            A = U[:, :k].T @ J.double() @ Vh[:k].T
            expected[i, j] = float((A.diagonal() ** 2).sum() / (A**2).sum())
    assert expected[0, 2] == pytest.approx(1.0) and expected[1, 0] < 0.9
    out = residual_alignment(view, ids, torch.arange(4) % 2, k=k, num_classes=2)
    np.testing.assert_allclose(out["scores"], expected, atol=2e-3)


def test_a_folder_is_read_alone_and_refused_clearly(tmp_path):
    with pytest.raises(FileNotFoundError, match="no config.json"):
        load_pretrained(tmp_path)
    _gpt2().save_pretrained(tmp_path / "remote")
    config = json.loads((tmp_path / "remote" / "config.json").read_text())
    (tmp_path / "remote" / "config.json").write_text(json.dumps({**config, "auto_map": {"AutoModel": "evil.Net"}}))
    with pytest.raises(ValueError, match="remote code"):
        load_pretrained(tmp_path / "remote")
    transformers.BertModel(transformers.BertConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                                   intermediate_size=32)).save_pretrained(tmp_path / "bert")
    with pytest.raises(ValueError, match="'bert' model: the lab reads GPT-2"):
        load_pretrained(tmp_path / "bert")
