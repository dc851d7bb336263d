"""Build ``tokenizer/``: the tiny decoder's tokenizer, one character per token, 256 tokens.

    .venv-host/bin/python kernels/serving/make_tokenizer.py   # rewrites kernels/serving/tokenizer/

A Hugging Face fast tokenizer (``tokenizer.json`` + ``tokenizer_config.json``) that
``transformers.AutoTokenizer.from_pretrained("kernels/serving/tokenizer")`` loads offline, so the real
benchmark clients count tokens exactly as ``server.py`` does: token *i* is the character ``CHARS[i]``
(``server.py`` reads the same vocabulary from ``tokenizer.json``), a character outside the vocabulary is
``U+FFFD`` (token 0), and decoding concatenates. Every id sequence survives decode → encode unchanged,
so ``--dataset-name random-ids`` prompts arrive with exactly the requested number of tokens.
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
UNK = "\ufffd"


def characters() -> list[str]:
    chars = [UNK, "\n", "\t"]
    chars += [chr(c) for c in range(0x20, 0x7F)]  # printable ASCII, space included
    chars += [chr(c) for c in range(0xA1, 0x100) if c != 0xAD]  # Latin-1 letters and signs, no soft hyphen
    chars += [chr(c) for c in range(0x391, 0x3AA) if c != 0x3A2]  # Greek capitals
    chars += [chr(c) for c in range(0x3B1, 0x3CA)]  # Greek small letters
    chars += [chr(c) for c in range(0x410, 0x430)]  # Cyrillic capitals
    chars = chars[:256]
    assert len(chars) == len(set(chars)) == 256
    return chars


CHAT_TEMPLATE = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}assistant: "


def build(out: Path = HERE / "tokenizer") -> None:
    from tokenizers import Tokenizer, decoders, models

    vocab = {c: i for i, c in enumerate(characters())}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=UNK))
    tokenizer.decoder = decoders.Fuse()
    out.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(out / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": UNK,
        "model_max_length": 4096,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    build()
