"""Text a language model is analysed on: a user's file, tokenised by the model's own tokenizer, in windows.

``--data text=FILE`` with a Hugging Face decoder: the file is read as UTF-8 (at most :data:`MAX_TEXT_BYTES`), encoded
by the tokenizer saved beside the model (``save_pretrained``'s ``tokenizer.json`` and friends, read from that folder
alone), and cut into consecutive, non-overlapping windows of ``length`` tokens — the analysed "inputs" — the last
partial window dropped. Nothing is downloaded and no code from the folder runs.

As a data set of the lab (``data.name=text``, :func:`text_data`), each window of ``data.tokens`` tokens is labelled
with the token that follows it — what a language model's features at its last token predict — and the first
``data.train_fraction`` of the windows are the training split, the rest the test split.
"""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO

import torch
from torch import Tensor

from lab.data.toy2d import ToyData
from lab.extras import require

__all__ = ["MAX_TEXT_BYTES", "TEXT", "load_tokenizer", "text_data", "text_windows"]

TEXT = "text"
"""The data set name of a text file read by a model's tokenizer."""

MAX_TEXT_BYTES = 64 * 2**20
"""The most text read from a file: 64 MiB is tens of millions of tokens, far more windows than any analysis takes."""


def load_tokenizer(folder: str | Path):
    """The tokenizer ``save_pretrained`` wrote into ``folder``, read from that folder alone.

    Raises:
        MissingExtra: transformers is not installed (the ``[hf]`` extra).
        FileNotFoundError: the folder holds no tokenizer.
    """
    transformers = require("transformers")
    path = Path(folder).expanduser()
    if not any((path / name).is_file() for name in ("tokenizer.json", "vocab.json", "tokenizer.model")):
        raise FileNotFoundError(f"{path} holds no tokenizer (tokenizer.json, vocab.json or tokenizer.model): save "
                                "the model's tokenizer beside it with tokenizer.save_pretrained(folder)")
    return transformers.AutoTokenizer.from_pretrained(path, local_files_only=True, trust_remote_code=False)


def text_windows(source: str | Path | BinaryIO, tokenizer, length: int, windows: int | None = None) -> Tensor:
    """Token ids ``[N, length]`` of consecutive windows of the text in ``source``.

    Args:
        source: a path, or a binary file already open (a page opens it inside its data folders).
        tokenizer: a transformers tokenizer (:func:`load_tokenizer`).
        length: tokens per window (at least 2).
        windows: at most this many windows, the first ones (None: all).

    Raises:
        ValueError: ``length`` below 2, text that is not UTF-8, or too little text for one window.
        FileNotFoundError: no such file.
    """
    if length < 2:
        raise ValueError(f"a window holds at least 2 tokens; got {length}")
    if isinstance(source, str | Path):
        with open(Path(source).expanduser(), "rb") as f:
            raw = f.read(MAX_TEXT_BYTES)
        name = str(source)
    else:
        raw = source.read(MAX_TEXT_BYTES)
        name = getattr(source, "name", "the text")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"{name} is not UTF-8 text ({err.reason} at byte {err.start})") from None
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    count = len(ids) // length if windows is None else min(windows, len(ids) // length)
    if count < 1:
        raise ValueError(f"{name} holds {len(ids)} tokens: one window needs {length}")
    return torch.tensor(ids[:count * length], dtype=torch.long).reshape(count, length)


def text_data(root: str | Path, tokenizer: str | Path, tokens: int, train_fraction: float) -> ToyData:
    """The text set of the config's ``data`` section: the file ``root`` read by the tokenizer saved in ``tokenizer``,
    token ids ``x [n, tokens]`` of consecutive windows, ``y [n]`` the token after each; the first ``train_fraction``
    of the windows train, the rest test (one at least each).

    Raises:
        ValueError: too little text for two windows, or text that is not UTF-8; FileNotFoundError: no such file or
            tokenizer.
    """
    windows = text_windows(root, load_tokenizer(tokenizer), tokens + 1)
    if len(windows) < 2:
        raise ValueError(f"{root} holds one window of {tokens} tokens and the token after it: a train and a test split "
                         "need two (a longer text, or a smaller data.tokens)")
    n = min(max(int(len(windows) * train_fraction), 1), len(windows) - 1)
    x, y = windows[:, :-1].contiguous(), windows[:, -1].contiguous()
    return ToyData(x[:n], y[:n], x[n:], y[n:], TEXT)
