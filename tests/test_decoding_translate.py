"""translate() (text in, text out) and the evaluation helpers, on a tiny copy model with a symbol tokenizer."""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from decoding_support import random_model, single_thread
from scripted_model import copy_model

from dotformer.checkpoint import LoadedCheckpoint
from dotformer.data.read.types import Pair
from dotformer.data.tokenize.tokenizer_files import train_tokenizer
from dotformer.data.tokenize.tokenizers import EOS_ID
from dotformer.decoding import DecodeConfig
from dotformer.decoding.evaluation import Evaluation, format_evaluation, group_references, sample_sources
from dotformer.decoding.inputs import (
    InputTooLongError,
    UnknownTokenWarning,
    encode_sources,
    encode_texts,
    source_normaliser,
)
from dotformer.decoding.order import length_sorted_batches
from dotformer.decoding.translate import pad_batch, translate
from dotformer.errors import ConfigError, ShapeError

SYMBOLS = "a0 a1 a2 a3 a4 a5 a6 a7"


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    with single_thread():
        yield


def loaded_copy_model() -> LoadedCheckpoint:
    tokenizer = train_tokenizer("symbol", [SYMBOLS])
    model = copy_model()
    return LoadedCheckpoint(model, model.config, tokenizer, tokenizer, {"task": "synthetic"}, Path("."))


def test_translate_returns_texts_in_input_order_whatever_the_batching() -> None:
    loaded = loaded_copy_model()
    texts = ["a1 a2 a3 a4 a5", "a7", "a2 a2 a0", "", "a6 a5 a4 a3", "a0 a1"]
    for batch_size in (1, 2, 64):
        outputs = translate(loaded, texts, DecodeConfig(strategy="greedy"), batch_size=batch_size)
        assert [o[0].text for o in outputs] == texts
        assert all(o[0].finished for o in outputs)


def test_translate_n_best_keeps_hypotheses_with_text() -> None:
    (hyps,) = translate(loaded_copy_model(), ["a3 a1"], DecodeConfig(beam_size=4, n_best=3))
    assert len(hyps) == 3 and hyps[0].text == "a3 a1" and hyps[0].tokens == [7, 5]
    assert hyps[0].score > hyps[1].score > hyps[2].score


def test_unknown_symbols_warn_once_and_are_read_as_unk() -> None:
    with pytest.warns(UnknownTokenWarning, match=r"3 input symbol\(s\) in 2 of 3 input\(s\).*input 1") as record:
        outputs = translate(loaded_copy_model(), ["zz a1", "a2", "a3 yy yy"], DecodeConfig(strategy="greedy"))
    assert len([w for w in record if w.category is UnknownTokenWarning]) == 1
    assert len(outputs) == 3
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        translate(loaded_copy_model(), ["a1 a2"], DecodeConfig(strategy="greedy"))  # no warning without unknowns


def test_progress_bar_goes_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    translate(loaded_copy_model(), ["a1", "a2"], DecodeConfig(strategy="greedy"), progress=True)
    captured = capsys.readouterr()
    assert captured.out == "" and "2/2" in captured.err
    translate(loaded_copy_model(), ["a1", "a2"], DecodeConfig(strategy="greedy"))  # small inputs: no bar
    assert capsys.readouterr().err == ""


def test_the_default_bar_is_for_a_terminal_only(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    module = importlib.import_module("dotformer.decoding.order")  # where the default is decided

    monkeypatch.setattr(module, "PROGRESS_THRESHOLD", 2)
    translate(loaded_copy_model(), ["a1", "a2"], DecodeConfig(strategy="greedy"))  # stderr is captured: no tty
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(module, "_is_terminal", lambda stream: True)
    translate(loaded_copy_model(), ["a1", "a2"], DecodeConfig(strategy="greedy"))
    assert "2/2" in capsys.readouterr().err


def test_an_input_too_long_for_a_learned_table_is_named() -> None:
    tokenizer = train_tokenizer("symbol", [SYMBOLS])
    model = random_model(vocab=12, positional="learned", max_len=8)
    loaded = LoadedCheckpoint(model, model.config, tokenizer, tokenizer, {}, Path("."))
    with pytest.raises(ShapeError, match=r"input 2 has 9 tokens .* at most 8"):
        translate(loaded, ["a1", "a1 " * 8, "a2"])


def test_encoding_helpers() -> None:
    tokenizer = train_tokenizer("symbol", [SYMBOLS])
    encoded = encode_texts(["a0 a1", "zz", ""], tokenizer)
    assert encoded.ids == [[4, 5, EOS_ID], [3, EOS_ID], [EOS_ID]]
    assert encoded.unknown == 1 and encoded.texts_with_unknown == [1]
    assert pad_batch([[4, 2], [5, 6, 2]]).tolist() == [[4, 2, 0], [5, 6, 2]]
    assert length_sorted_batches([1, 5, 3, 5, 2], 2) == [[1, 3], [2, 4], [0]]
    with pytest.raises(ConfigError):
        length_sorted_batches([1], 0)
    assert source_normaliser({"dataset": "cmudict"})("Read(2) ") == "read"
    assert source_normaliser({"dataset": "bible"})("Read") == "Read"


def test_references_are_grouped_by_source_in_order() -> None:
    pairs = [Pair("read", "R EH1 D"), Pair("cat", "K AE1 T"), Pair("read", "R IY1 D")]
    grouped = group_references(pairs)
    assert grouped.sources == ["read", "cat"]
    assert grouped.references == [["R EH1 D", "R IY1 D"], ["K AE1 T"]]
    assert sample_sources(pairs, 1) in ([pairs[0], pairs[2]], [pairs[1]])  # a word keeps all its pronunciations
    assert sample_sources(pairs, None) == pairs


def test_format_evaluation_table() -> None:
    table = format_evaluation(Evaluation("g2p", {"wer": 12.345, "perplexity": 1.5}))
    assert table.splitlines() == [  # no stress-stripped WER: the data held no stress digits, so no "stress kept"
        "| metric     |  value |",
        "|------------|-------:|",
        "| WER        | 12.35% |",
        "| perplexity |   1.50 |",
    ]
    stressed = format_evaluation(Evaluation("g2p", {"wer": 12.345, "wer_no_stress": 10.0}))
    assert stressed.splitlines()[2:] == ["| WER, stress kept     | 12.35% |", "| WER, stress stripped | 10.00% |"]


# -- one long input does not pad a batch; the shared input path of translate, the API, plots and the explorer --------


@pytest.mark.parametrize("max_tokens", [None, 1, 7, 20, 1000])
def test_length_sorted_batches_respect_sentences_and_tokens(max_tokens: int | None) -> None:
    import random

    rng = random.Random(max_tokens or 0)
    lengths = [rng.randint(1, 12) for _ in range(50)] + [400]
    batches = length_sorted_batches(lengths, 8, max_tokens)
    assert sorted(i for batch in batches for i in batch) == list(range(len(lengths)))  # each index exactly once
    for batch in batches:
        assert 1 <= len(batch) <= 8
        assert [lengths[i] for i in batch] == sorted((lengths[i] for i in batch), reverse=True)
        if max_tokens is not None and len(batch) > 1:
            assert len(batch) * max(lengths[i] for i in batch) <= max_tokens
    if max_tokens is not None and max_tokens < 400 * 2:
        assert [50] in batches  # the long one alone
    with pytest.raises(ConfigError, match="max_tokens"):
        length_sorted_batches([1], 2, 0)


def test_one_long_input_is_decoded_alone_and_outputs_do_not_change(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    module = sys.modules["dotformer.decoding.translate"]  # the package's name `translate` is the function
    shapes: list[tuple[int, int]] = []
    real = module.decode_batch

    def recording(model, src, config, prefix=None, controls=None):  # type: ignore[no-untyped-def]
        shapes.append(tuple(src.shape))
        return real(model, src, config, prefix, controls)

    monkeypatch.setattr(module, "decode_batch", recording)
    loaded = loaded_copy_model()
    texts = ["a1 a2", "a3", " ".join(["a4"] * 40), "a5 a6 a7", "a0"]
    config = DecodeConfig(strategy="greedy", max_len_a=0.0, max_len_b=8)
    budgeted = translate(loaded, texts, config, batch_size=64, max_tokens=16)
    assert shapes == [(1, 41), (4, 4)]  # the 41-token input alone; the others padded to 4, not to 41
    shapes.clear()
    unbounded = translate(loaded, texts, config, batch_size=64, max_tokens=None)
    assert shapes == [(5, 41)]
    assert [o[0].text for o in budgeted] == [o[0].text for o in unbounded]
    assert [o[0].text for o in budgeted][:2] == ["a1 a2", "a3"]


def test_encode_sources_normalises_like_the_training_data_and_counts_unknowns() -> None:
    tokenizer = train_tokenizer("char", ["transformer"])
    loaded = LoadedCheckpoint(
        copy_model(), copy_model().config, tokenizer, tokenizer, {"dataset": "cmudict"}, Path(".")
    )
    encoded = encode_sources(loaded, ["Transformer", "TRANS4", " art(2)"])
    assert encoded.texts == ["transformer", "trans4", "art"]
    assert encoded.ids[0] == [*tokenizer.encode("transformer"), EOS_ID]
    assert encoded.unknown_counts == [0, 1, 0] and encoded.unknown == 1 and encoded.texts_with_unknown == [1]
    with pytest.raises(InputTooLongError, match="input 2 has 7 tokens") as caught:
        encode_sources(loaded, ["art", "trans4"], max_len=6)
    assert (caught.value.index, caught.value.length, caught.value.limit) == (1, 7, 6)
    assert isinstance(caught.value, ShapeError) and isinstance(caught.value, ValueError)


def test_plot_attention_reads_input_as_translate_does() -> None:
    from dotformer.decoding.attention_maps import attention_weights

    letters = "transformer"
    tokenizer = train_tokenizer("char", [letters])
    model = random_model(vocab=12, src_vocab_size=4 + len(set(letters)))
    loaded = LoadedCheckpoint(model, model.config, tokenizer, tokenizer, {"dataset": "cmudict"}, Path("."))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no unknown-symbol warning: "T" is read as "t"
        upper, lower = attention_weights(loaded, "Transformer"), attention_weights(loaded, "transformer")
    assert upper.source_text == "transformer" and "<unk>" not in upper.src_tokens
    assert upper.src_tokens == lower.src_tokens and upper.output_text == lower.output_text
    assert (upper.cross == lower.cross).all() and (upper.encoder == lower.encoder).all()
    expected = [o[0].text for o in translate(loaded, ["Transformer"], DecodeConfig(strategy="greedy"))]
    assert upper.output_text == expected[0]  # greedy decoding of the same ids
    with pytest.warns(UnknownTokenWarning, match=r"1 input symbol\(s\) in 1 of 1 input\(s\).*'trans!'"):
        maps = attention_weights(loaded, "Trans!")
    assert maps.src_tokens.count("<unk>") == 1


@pytest.mark.parametrize("strategy", ["greedy", "beam"])
def test_empty_and_blank_sources_give_empty_outputs_without_the_model(
    monkeypatch: pytest.MonkeyPatch, strategy: str
) -> None:
    import sys

    module = sys.modules["dotformer.decoding.translate"]
    rows: list[list[list[int]]] = []
    real = module.decode_batch

    def recording(model, src, config, prefix=None, controls=None):  # type: ignore[no-untyped-def]
        rows.append(src.tolist())
        return real(model, src, config, prefix, controls)

    monkeypatch.setattr(module, "decode_batch", recording)
    tokenizer = train_tokenizer("char", ["cat dog"])
    model = random_model(vocab=12)  # a random model: a real decode of [EOS] gives a long, made-up output
    loaded = LoadedCheckpoint(model, model.config, tokenizer, tokenizer, {}, Path("."))
    (real_empty,) = real(model, pad_batch([[EOS_ID]]), DecodeConfig(strategy="greedy"))
    assert real_empty[0].tokens  # so the test would fail if "" were given to the model
    texts = ["cat", "", "   ", "\t", "dog"]
    config = DecodeConfig(strategy=strategy, n_best=2 if strategy == "beam" else 1, max_len_b=5)  # type: ignore[arg-type]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the spaces are not <unk>
        outputs = translate(loaded, texts, config)
    for i in (1, 2, 3):
        assert len(outputs[i]) == 1
        (hyp,) = outputs[i]
        assert (hyp.text, hyp.tokens, hyp.score, hyp.finished) == ("", [], 0.0, True)
    assert outputs[0][0].score < 0 and outputs[4][0].score < 0  # the others decoded by the model
    assert sorted(r for batch in rows for r in batch) == sorted(
        [[*tokenizer.encode("cat"), EOS_ID], [*tokenizer.encode("dog"), EOS_ID]]
    )
    encoded = encode_sources(loaded, ["  ", "c a"])
    assert encoded.ids[0] == [EOS_ID] and encoded.unknown_counts == [0, 0]


def test_every_entry_point_decodes_in_batches_of_the_same_default_size() -> None:
    """The library, the API, validation during training and the CLI share one default batch size."""
    import inspect

    from dotformer.cli import build_parser
    from dotformer.decoding.evaluation import evaluate_pairs
    from dotformer.decoding.options import DecodeRequest
    from dotformer.decoding.order import DEFAULT_BATCH_SIZE
    from dotformer.decoding.translate import decode_encoded
    from dotformer.training.selection import validation_score

    functions = (translate, decode_encoded, evaluate_pairs, DecodeRequest, validation_score)
    defaults = {f.__qualname__: inspect.signature(f).parameters["batch_size"].default for f in functions}
    assert defaults == dict.fromkeys(defaults, DEFAULT_BATCH_SIZE)
    for command in ("translate", "evaluate"):
        args = build_parser().parse_args([command, "--checkpoint", "x"])
        assert args.batch_size == DEFAULT_BATCH_SIZE, command
