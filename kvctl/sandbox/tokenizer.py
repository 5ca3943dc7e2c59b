"""The sandbox model's tokenizer: one Unicode character per token id, nothing else.

SGLang's router (`sglang-router`, cache_aware) routes on a request's *text*: its approximate
radix tree is a tree of characters. The tiny sandbox model has no real vocabulary, so the
sandbox gives it one in which every token id `i` of the 512-id vocabulary is exactly one
character, `chr(0x4E00 + i)` (the CJK Unified Ideographs block, all one code point each,
none of them whitespace or combining)::

    ids   [17, 3, 300]            render(ids)  ->  "\u4e11\u4e03\u4f2c"
    text  "\u4e11\u4e03\u4f2c"    parse(text)  ->  [17, 3, 300]

so a prompt's text is its ids one-for-one, and the router's character tree is exactly a
token tree (a shared prefix of n tokens is a shared prefix of n characters).

The tokenizer (HF `tokenizers`, written as `tokenizer.json` + `tokenizer_config.json` next to
the model's config.json, so transformers' AutoTokenizer and SGLang's tokenizer manager load it
from the model dir, nothing downloaded) is a BPE model over the 512 single characters with
no merges: no normalizer, no pre-tokenizer, no post-processor (no BOS/EOS added), no special
tokens, a `Fuse` decoder (tokens concatenated, no spaces). A character outside the block is
the unknown token, id 0 (SGLang's padding id, which render never produces from a trace
prompt: prompts draw ids from 1). tests/unit/test_sandbox_tokenizer.py checks that the
library encodes render(ids) to ids and decodes ids to render(ids).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

BASE = 0x4E00  # CJK Unified Ideographs: 20,992 single-code-point characters from here
UNKNOWN_ID = 0


# The sandbox model's vocabulary (files.py TINY_CONFIG; a unit test keeps the two equal).
SANDBOX_VOCAB = 512


def _vocab_size(vocab_size: int | None) -> int:
    return SANDBOX_VOCAB if vocab_size is None else vocab_size


def render(ids: Iterable[int], vocab_size: int | None = None) -> str:
    """The text whose tokenization is exactly `ids` (one character per id)."""
    size = _vocab_size(vocab_size)
    out = []
    for i in ids:
        i = int(i)
        if not 0 <= i < size:
            raise ValueError(f"token id {i} is outside the sandbox vocabulary [0, {size})")
        out.append(chr(BASE + i))
    return "".join(out)


def parse(text: str, vocab_size: int | None = None) -> list[int]:
    """The ids of a text render() produced; ValueError naming the first foreign character."""
    size = _vocab_size(vocab_size)
    ids = []
    for at, char in enumerate(text):
        i = ord(char) - BASE
        if not 0 <= i < size:
            raise ValueError(f"character {char!r} at {at} is not a sandbox token "
                             f"(U+{BASE:04X}..U+{BASE + size - 1:04X})")
        ids.append(i)
    return ids


def build(vocab_size: int | None = None):
    """The `tokenizers.Tokenizer` (module docstring)."""
    from tokenizers import Tokenizer, decoders, models

    size = _vocab_size(vocab_size)
    vocab = {chr(BASE + i): i for i in range(size)}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=chr(BASE + UNKNOWN_ID)))
    tokenizer.decoder = decoders.Fuse()
    return tokenizer


def write_tokenizer(model_dir: Path, vocab_size: int | None = None) -> Path:
    """model_dir/tokenizer.json and tokenizer_config.json; returns model_dir."""
    model_dir.mkdir(parents=True, exist_ok=True)
    build(vocab_size).save(str(model_dir / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 1 << 30,
        "clean_up_tokenization_spaces": False,
        "add_bos_token": False, "add_eos_token": False,
    }  # fmt: skip
    (model_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=1))
    return model_dir
