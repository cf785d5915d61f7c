"""Hugging Face ``save_pretrained`` folders the tests make: a small GPT-2 with a tokenizer of its own, trained a
few steps on a text of random words, and a small ViT classifier with its preprocessor config."""

import random

import pytest
import torch

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

WORDS = ("the", "cat", "dog", "sat", "on", "a", "mat", "ran", "to", "house", "and", "saw", "big", "small", "red")


def text_file(tmp_path, words: int = 3000):
    rng = random.Random(0)
    path = tmp_path / f"text-{words}.txt"
    path.write_text(" ".join(rng.choice(WORDS) for _ in range(words)), encoding="utf-8")
    return path


def saved_gpt2(tmp_path, text):
    """A small GPT-2 with a byte-level BPE tokenizer of its own, trained a few steps on ``text`` and saved."""
    bpe = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token="[UNK]"))
    bpe.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel()
    corpus = text.read_text(encoding="utf-8")
    bpe.train_from_iterator([corpus], tokenizers.trainers.BpeTrainer(vocab_size=300, special_tokens=["[UNK]"]))
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=bpe, unk_token="[UNK]")
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=2, n_embd=32, n_head=2, vocab_size=len(tokenizer), n_positions=64, bos_token_id=0, eos_token_id=0))
    ids = torch.tensor(tokenizer(corpus)["input_ids"][:16 * 32]).reshape(16, 32)
    optimiser = torch.optim.AdamW(model.parameters(), 3e-3)
    for _ in range(5):
        loss = model(ids, labels=ids).loss
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    folder = tmp_path / "gpt2"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder, model.eval()


def saved_vit(tmp_path, channels: int = 3, side: int = 32):
    torch.manual_seed(1)
    model = transformers.ViTForImageClassification(transformers.ViTConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, image_size=side,
        patch_size=8, num_channels=channels, num_labels=10)).eval()
    folder = tmp_path / "vit"
    model.save_pretrained(folder)
    transformers.ViTImageProcessor(size={"height": side, "width": side}, image_mean=[0.5] * channels,
                                   image_std=[0.25] * channels).save_pretrained(folder)
    return folder, model
