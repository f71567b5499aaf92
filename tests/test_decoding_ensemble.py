"""Ensembles (decoding/ensemble.py): the average of the models' distributions at every step, each with its cache."""

from __future__ import annotations

import copy

import pytest
import torch
from decoding_support import pad, random_model, sources_of_mixed_lengths, teacher_forced_log_probs, with_eos

from dotformer.decoding import DecodeConfig, decode_batch
from dotformer.decoding.ensemble import Ensemble
from dotformer.errors import ConfigError

pytestmark = pytest.mark.numerical  # run again under another vector unit by scripts/test.sh

CONFIGS = [
    DecodeConfig(strategy="greedy", max_len_a=0.0, max_len_b=7),
    DecodeConfig(strategy="beam", beam_size=3, n_best=2, max_len_a=0.0, max_len_b=7),
    DecodeConfig(strategy="sample", n_best=2, seed=2, max_len_a=0.0, max_len_b=7),
]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.strategy)
@pytest.mark.parametrize("use_cache", [True, False])
def test_an_ensemble_of_one_or_of_copies_is_the_model(config: DecodeConfig, use_cache: bool) -> None:
    model = random_model(vocab=12, seed=3)
    src = pad(sources_of_mixed_lengths(count=4))
    config = config.replace(use_cache=use_cache)
    expected = decode_batch(model, src, config)
    for ensemble in (Ensemble([model]), Ensemble([model, copy.deepcopy(model)])):
        got = decode_batch(ensemble, src, config)
        assert [[h.tokens for h in hyps] for hyps in got] == [[h.tokens for h in hyps] for hyps in expected]
        for hyps, want in zip(got, expected, strict=True):
            for h, w in zip(hyps, want, strict=True):
                assert h.log_probs == pytest.approx(w.log_probs, abs=1e-5)


def test_two_models_average_their_probabilities_at_every_step() -> None:
    a, b = random_model(vocab=12, seed=1), random_model(vocab=12, seed=2, d_model=16, d_ff=32, num_decoder_layers=1)
    sources = sources_of_mixed_lengths(count=3)
    hyps = decode_batch(Ensemble([a, b]), pad(sources), DecodeConfig(strategy="greedy", max_len_a=0.0, max_len_b=6))
    for source, [h] in zip(sources, hyps, strict=True):
        generated = with_eos(h)
        pa = torch.tensor(teacher_forced_log_probs(a, source, generated)).exp()
        pb = torch.tensor(teacher_forced_log_probs(b, source, generated)).exp()
        assert h.log_probs == pytest.approx(((pa + pb) / 2).log().tolist(), abs=1e-5)


def test_an_ensemble_needs_shared_vocabularies() -> None:
    with pytest.raises(ConfigError, match="must share their vocabularies"):
        Ensemble([random_model(vocab=12), random_model(vocab=14)])
    with pytest.raises(ConfigError, match="at least one model"):
        Ensemble([])


def test_cli_checkpoints_repeated_decode_as_an_ensemble(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    from dotformer.checkpoint import save_checkpoint
    from dotformer.cli import main
    from dotformer.data.tokenize.tokenizer_files import train_tokenizer

    symbols = train_tokenizer("symbol", ["a0 a1 a2 a3 a4 a5 a6 a7"])
    a, b = random_model(vocab=12, seed=1), random_model(vocab=12, seed=2, d_model=16, d_ff=32)
    save_checkpoint(tmp_path / "a", a, symbols, symbols, {"task": "synthetic"})
    save_checkpoint(tmp_path / "b", b, symbols, symbols, {"task": "synthetic"})
    argv = ["translate", "--strategy", "greedy", "--max-len-b", "5", "--output-format", "json", "a1 a2"]
    assert main([argv[0], "--checkpoint", str(tmp_path / "a"), "--checkpoint", str(tmp_path / "b"), *argv[1:]]) == 0
    import json

    hypothesis = json.loads(capsys.readouterr().out)["hypotheses"][0]
    src = pad([[5, 6, 2]])
    [[expected]] = decode_batch(Ensemble([a, b]), src, DecodeConfig(strategy="greedy", max_len_a=0.0, max_len_b=8))
    assert hypothesis["token_ids"] == expected.tokens
    other = train_tokenizer("symbol", ["b0 b1 b2 b3 b4 b5 b6 b7"])
    save_checkpoint(tmp_path / "c", b, other, other, {"task": "synthetic"})
    assert main([argv[0], "--checkpoint", str(tmp_path / "a"), "--checkpoint", str(tmp_path / "c"), *argv[1:]]) == 2
    assert "must share their tokenizers" in capsys.readouterr().err


def test_api_load_of_a_list_is_an_ensemble(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import dotformer
    from dotformer.checkpoint import save_checkpoint
    from dotformer.data.tokenize.tokenizer_files import train_tokenizer

    symbols = train_tokenizer("symbol", ["a0 a1 a2 a3 a4 a5 a6 a7"])
    save_checkpoint(tmp_path / "a", random_model(vocab=12, seed=1), symbols, symbols, {"task": "synthetic"})
    single = dotformer.load(tmp_path / "a", device="cpu", engine="torch")  # the search an ensemble runs
    pair = dotformer.load([tmp_path / "a"] * 2, device="cpu")
    assert isinstance(pair.model, Ensemble)
    texts = ["a1 a2", "a3", "a4 a5 a6"]
    assert pair.translate(texts, n_best=2, max_len_b=5) == single.translate(texts, n_best=2, max_len_b=5)
    aligned = pair.translate(texts, max_len_b=5, alignments=True, attention=True)
    assert [r.hypotheses[0].alignment for r in aligned] == [
        r.hypotheses[0].alignment for r in single.translate(texts, max_len_b=5, alignments=True)
    ]


def test_serve_takes_repeated_checkpoints_as_an_ensemble(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import dotformer.api
    import dotformer.api.serve
    from dotformer.checkpoint import save_checkpoint
    from dotformer.cli import main
    from dotformer.data.tokenize.tokenizer_files import train_tokenizer

    symbols = train_tokenizer("symbol", ["a0 a1 a2 a3 a4 a5 a6 a7"])
    save_checkpoint(tmp_path / "a", random_model(vocab=12, seed=1), symbols, symbols, {"task": "synthetic"})
    served = []
    server_class = dotformer.api.serve.TranslationServer
    monkeypatch.setattr(server_class, "run", lambda server, announce: served.append(server.translator))
    checkpoint = str(tmp_path / "a")
    assert main(["serve", "--checkpoint", checkpoint, "--checkpoint", checkpoint, "--port", "0"]) == 0
    assert main(["serve", "--checkpoint", checkpoint, "--port", "0"]) == 0
    assert isinstance(served[0].model, Ensemble) and not isinstance(served[1].model, Ensemble)
