"""ModelConfig: the paper's presets, validation with clear messages, and the dict round trip."""

from __future__ import annotations

import dataclasses
import json

import pytest

from dotformer import ModelConfig
from dotformer.config import PRESETS
from dotformer.errors import ConfigError


def test_presets_follow_the_papers_table_3():
    base = ModelConfig.preset("base", src_vocab_size=100, tgt_vocab_size=100)
    assert (base.d_model, base.num_heads, base.d_ff, base.num_encoder_layers, base.num_decoder_layers) == (
        512,
        8,
        2048,
        6,
        6,
    )
    assert base.dropout == 0.1 and base.head_dim == 64
    big = ModelConfig.preset("big", src_vocab_size=100, tgt_vocab_size=100)
    assert (big.d_model, big.num_heads, big.d_ff, big.dropout, big.head_dim) == (1024, 16, 4096, 0.3, 64)
    # The paper's defaults: post-LN, ReLU, sinusoids, tied output.
    assert not base.norm_first and base.activation == "relu" and base.positional == "sinusoidal" and base.tie_output
    assert set(PRESETS) == {"tiny", "small", "base", "big"}


def test_preset_overrides_and_unknown_names():
    config = ModelConfig.preset("tiny", src_vocab_size=10, tgt_vocab_size=12, num_heads=8, norm_first=True)
    assert config.num_heads == 8 and config.norm_first and config.d_model == 64
    with pytest.raises(ConfigError, match="'huge'.*tiny, small, base, big"):
        ModelConfig.preset("huge", src_vocab_size=10, tgt_vocab_size=10)


def test_every_preset_builds_a_valid_config():
    for name in PRESETS:
        assert ModelConfig.preset(name, src_vocab_size=50, tgt_vocab_size=60).d_model % 8 == 0


@pytest.mark.parametrize(
    "overrides, words",
    [
        ({"d_model": 0}, ["d_model", "0"]),
        ({"d_model": 63}, ["d_model=63", "num_heads=4"]),
        ({"num_heads": -2}, ["num_heads", "-2"]),
        ({"d_ff": 1.5}, ["d_ff", "1.5"]),
        ({"d_ff": True}, ["d_ff", "True"]),
        ({"tgt_vocab_size": 0}, ["tgt_vocab_size"]),
        ({"src_vocab_size": 0}, ["src_vocab_size"]),
        ({"num_encoder_layers": -1}, ["num_encoder_layers"]),
        ({"num_decoder_layers": 0}, ["num_decoder_layers > 0"]),
        ({"dropout": 1.0}, ["dropout", "[0, 1)"]),
        ({"attention_dropout": -0.1}, ["attention_dropout"]),
        ({"activation": "tanh"}, ["activation", "'tanh'"]),
        ({"positional": "alibi"}, ["positional", "'alibi'"]),
        ({"arch": "seq2seq"}, ["arch", "'seq2seq'"]),
        ({"max_len": 0}, ["max_len"]),
        ({"pad_id": 20}, ["pad_id=20"]),
        ({"share_embeddings": True, "tgt_vocab_size": 11}, ["share_embeddings", "10", "11"]),
        ({"arch": "decoder-only", "num_decoder_layers": 0}, ["decoder-only"]),
        ({"arch": "encoder-only", "num_encoder_layers": 0}, ["encoder-only"]),
    ],
)
def test_invalid_fields_raise_config_error_naming_them(overrides, words):
    fields = {"src_vocab_size": 10, "tgt_vocab_size": 10, **overrides}
    with pytest.raises(ConfigError) as info:
        ModelConfig.preset("tiny", **fields)
    for word in words:
        assert word in str(info.value)


def test_decoder_only_needs_no_source_vocabulary():
    config = ModelConfig.preset("tiny", src_vocab_size=0, tgt_vocab_size=10, arch="decoder-only", num_encoder_layers=0)
    assert config.arch == "decoder-only"


def test_frozen_and_replace_validates():
    config = ModelConfig.preset("tiny", src_vocab_size=10, tgt_vocab_size=10)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.d_model = 128  # type: ignore[misc]
    assert config.replace(d_model=128).d_model == 128
    with pytest.raises(ConfigError, match="num_heads"):
        config.replace(d_model=66)


def test_dict_round_trip_through_json():
    config = ModelConfig.preset("small", src_vocab_size=40, tgt_vocab_size=50, norm_first=True, positional="learned")
    data = json.loads(json.dumps(config.to_dict()))
    assert ModelConfig.from_dict(data) == config
    assert data["d_model"] == 256 and data["arch"] == "encoder-decoder"


def test_from_dict_errors():
    data = ModelConfig.preset("tiny", src_vocab_size=10, tgt_vocab_size=10).to_dict()
    with pytest.raises(ConfigError, match="unknown ModelConfig field.*n_layers"):
        ModelConfig.from_dict({**data, "n_layers": 3})
    del data["tgt_vocab_size"]
    with pytest.raises(ConfigError, match="tgt_vocab_size"):
        ModelConfig.from_dict(data)
    with pytest.raises(ConfigError, match="dropout"):
        ModelConfig.from_dict({**data, "tgt_vocab_size": 10, "dropout": 2.0})
