"""A language model's text: the user's file, tokenised by the model's own tokenizer (read from its folder alone), in
consecutive windows of the stated length."""

import io

import pytest
import torch

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

from lab.data.text import load_tokenizer, text_windows  # noqa: E402

TEXT = "the quick brown fox jumps over the lazy dog. " * 40


def _saved_tokenizer(folder):
    """A word-level tokenizer trained on the test's text, saved as save_pretrained saves one."""
    model = tokenizers.models.WordLevel(unk_token="[UNK]")
    raw = tokenizers.Tokenizer(model)
    raw.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    raw.train_from_iterator([TEXT], tokenizers.trainers.WordLevelTrainer(special_tokens=["[UNK]"]))
    transformers.PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="[UNK]").save_pretrained(folder)


def test_windows_are_the_files_tokens_in_order(tmp_path):
    _saved_tokenizer(tmp_path / "model")
    tokenizer = load_tokenizer(tmp_path / "model")
    (tmp_path / "text.txt").write_text(TEXT)
    ids = text_windows(tmp_path / "text.txt", tokenizer, 8)
    every = tokenizer(TEXT, add_special_tokens=False)["input_ids"]
    assert ids.dtype == torch.long and ids.shape == (len(every) // 8, 8)
    assert ids.flatten().tolist() == every[:ids.numel()]
    assert tokenizer.decode(ids[0]).startswith("the quick brown fox")
    assert text_windows(io.BytesIO(TEXT.encode()), tokenizer, 8, windows=3).shape == (3, 8)


def test_bad_text_and_folders_are_said(tmp_path):
    _saved_tokenizer(tmp_path / "model")
    tokenizer = load_tokenizer(tmp_path / "model")
    with pytest.raises(FileNotFoundError, match="holds no tokenizer"):
        load_tokenizer(tmp_path)
    (tmp_path / "bad.txt").write_bytes(b"caf\xe9 " * 10)
    with pytest.raises(ValueError, match="not UTF-8 text"):
        text_windows(tmp_path / "bad.txt", tokenizer, 4)
    (tmp_path / "short.txt").write_text("the fox")
    with pytest.raises(ValueError, match="holds 2 tokens: one window needs 8"):
        text_windows(tmp_path / "short.txt", tokenizer, 8)
    with pytest.raises(ValueError, match="at least 2 tokens"):
        text_windows(tmp_path / "short.txt", tokenizer, 1)


def test_the_text_set_labels_each_window_with_the_token_after_it_and_splits_in_order(tmp_path):
    from lab.config import ConfigError, load_config
    from lab.train.build import build_data

    _saved_tokenizer(tmp_path / "model")
    (tmp_path / "text.txt").write_text(TEXT)
    cfg = load_config(None, {"data.name": "text", "data.root": str(tmp_path / "text.txt"),
                             "data.tokenizer": str(tmp_path / "model"), "data.tokens": 6,
                             "data.train_fraction": 0.75})
    data = build_data(cfg)
    every = load_tokenizer(tmp_path / "model")(TEXT, add_special_tokens=False)["input_ids"]
    n = len(every) // 7  # windows of 6 tokens and the one after
    assert len(data.x_train) == int(n * 0.75) and len(data.x_train) + len(data.x_test) == n
    assert data.x_train.shape[1] == 6 and data.x_train[0].tolist() == every[:6] and data.y_train[0] == every[6]
    assert data.x_test[0].tolist() == every[7 * len(data.x_train):7 * len(data.x_train) + 6]
    for settings in ({"data.name": "text", "data.root": str(tmp_path / "text.txt")},  # no tokenizer
                     {"data.name": "digits", "data.tokenizer": str(tmp_path / "model")}):
        with pytest.raises(ConfigError, match="data.tokenizer"):
            load_config(None, settings)
