"""The sandbox model's tokenizer (kvctl/sandbox/tokenizer.py): one character per token id, so
a prompt's text tokenizes to exactly its ids and SGLang's router's character tree is a token
tree."""

from __future__ import annotations

import json
import random

import pytest

from kvctl.sandbox import tokenizer as tok
from kvctl.sandbox.files import VOCAB, write_model

pytestmark = pytest.mark.unit


def test_render_then_parse_round_trips_every_id():
    ids = list(range(VOCAB)) + [0, 511, 1, 1, 256]
    text = tok.render(ids)
    assert len(text) == len(ids)
    assert tok.parse(text) == ids
    assert tok.render([0, 1, 511]) == "\u4e00\u4e01\u4fff"


def test_ids_and_characters_outside_the_vocabulary_are_named():
    with pytest.raises(ValueError, match="token id 512 is outside"):
        tok.render([1, 512])
    with pytest.raises(ValueError, match=r"character 'a' at 1 is not a sandbox token"):
        tok.parse("\u4e01a")


def test_the_tokenizers_library_encodes_render_ids_to_exactly_ids():
    """No added tokens (no BOS/EOS, no post-processor), no merges, no normalizer: random
    prompts up to 2,000 ids encode one-for-one; decode is the rendered text (no spaces)."""
    tokenizer = tok.build()
    rng = random.Random(3)
    for length in (1, 2, 17, 300, 2000):
        ids = [rng.randrange(VOCAB) for _ in range(length)]
        encoding = tokenizer.encode(tok.render(ids))
        assert encoding.ids == ids
        assert tokenizer.decode(ids) == tok.render(ids)
    assert tokenizer.get_vocab_size() == VOCAB
    assert tokenizer.encode("").ids == []


def test_a_foreign_character_is_the_unknown_id_0_not_dropped():
    assert tok.build().encode("\u4e05x\u4e06").ids == [5, tok.UNKNOWN_ID, 6]


def test_write_model_puts_the_tokenizer_next_to_config_json(tmp_path):
    """The files transformers' AutoTokenizer (and so SGLang's tokenizer manager) loads from
    the model dir: tokenizer.json and a tokenizer_config.json naming the fast class."""
    model = write_model(tmp_path / "model", 1024)
    assert {p.name for p in model.iterdir()} == {"config.json", "tokenizer.json",
                                                  "tokenizer_config.json"}
    config = json.loads((model / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert not config["add_bos_token"] and not config["add_eos_token"]
    from tokenizers import Tokenizer

    loaded = Tokenizer.from_file(str(model / "tokenizer.json"))
    assert loaded.encode(tok.render([9, 8, 7])).ids == [9, 8, 7]


def test_the_default_vocabulary_is_the_sandbox_models():
    from kvctl.sandbox.files import VOCAB
    from kvctl.sandbox.tokenizer import SANDBOX_VOCAB

    assert SANDBOX_VOCAB == VOCAB
