"""The decoding controls (repetition penalty, no-repeat n-grams, end tokens, suppressed sequences): each processor on
hand-built logits, against the formula and transformers' own processors; their effect on every search of a model whose
logits are set by hand; every surface taking them; bad values as one line."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from decoding_support import set_logits_checkpoint

import dotformer
from dotformer.cli import main
from dotformer.decoding import DecodeConfig
from dotformer.decoding.controls import (
    Controls,
    block_repeated_ngrams,
    penalize_repetition,
    suppress_sequences,
)
from dotformer.decoding.generate import generate
from dotformer.errors import ConfigError

SYMBOLS = "a0 a1 a2 a3 a4 a5 a6 a7"  # ids 4..11 in this order
# Hand-set logits: the generator ignores the decoder and its bias is these, so every step's logits are SCORES: EOS
# first (4), then a3 (id 7, 3), then a6 (id 10, 2), the other symbols 0, <unk> (id 3) -5.
SCORES = [0.0, 0.0, 4.0, -5.0, 0.0, 0.0, 0.0, 3.0, 0.0, 0.0, 2.0, 0.0]
NEG_INF = float("-inf")


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return set_logits_checkpoint(tmp_path_factory.mktemp("set_logits") / "checkpoint", SCORES, SYMBOLS)


# -- the processors, on hand-built logits ---------------------------------------------------------------------------


def test_repetition_penalty_divides_positive_logits_and_multiplies_negative_ones() -> None:
    logits = torch.tensor([[2.0, -1.0, 0.5, 3.0], [2.0, -1.0, 0.5, 3.0]])
    history = torch.tensor([[0, 1, 1], [3, 3, 3]])  # a repeated token is penalised once
    expected = torch.tensor([[1.0, -2.0, 0.5, 3.0], [2.0, -1.0, 0.5, 1.5]])
    assert torch.equal(penalize_repetition(logits, history, 2.0), expected)
    assert torch.equal(penalize_repetition(logits, history, 1.0), logits)
    assert torch.equal(penalize_repetition(logits, history[:, :0], 2.0), logits)  # nothing produced yet


@pytest.mark.parametrize("penalty", [0.5, 1.3, 2.0])
def test_repetition_penalty_is_transformers(penalty: float) -> None:
    transformers = pytest.importorskip("transformers")
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 9, generator=g)
    history = torch.randint(0, 9, (3, 5), generator=g)
    theirs = transformers.RepetitionPenaltyLogitsProcessor(penalty)(history, logits.clone())
    assert torch.equal(penalize_repetition(logits, history, penalty), theirs)


def test_no_repeat_ngram_blocks_the_token_that_would_repeat_an_ngram() -> None:
    logits = torch.zeros(1, 8)
    history = torch.tensor([[4, 5, 6, 4, 5]])
    blocked = {
        n: torch.isinf(block_repeated_ngrams(logits, history, n)[0]).nonzero().flatten().tolist() for n in range(4)
    }
    assert blocked == {0: [], 1: [4, 5, 6], 2: [6], 3: [6]}  # 3: "4 5" was followed by 6
    assert block_repeated_ngrams(logits, history[:, :2], 3).isfinite().all()  # shorter than n: nothing to repeat


@pytest.mark.parametrize("size", [1, 2, 3])
def test_no_repeat_ngram_is_transformers(size: int) -> None:
    transformers = pytest.importorskip("transformers")
    g = torch.Generator().manual_seed(size)
    logits = torch.randn(4, 6, generator=g)
    history = torch.randint(0, 3, (4, 7), generator=g)  # few symbols: many repeats
    theirs = transformers.NoRepeatNGramLogitsProcessor(size)(history, logits.clone())
    assert torch.equal(block_repeated_ngrams(logits, history, size), theirs)


def test_suppressed_tokens_never_and_sequences_never_completed() -> None:
    logits = torch.zeros(2, 6)
    history = torch.tensor([[1, 2], [2, 1]])
    out = suppress_sequences(logits, history, [(4,), (1, 2, 5), (1, 3)])
    assert torch.isinf(out[0]).nonzero().flatten().tolist() == [4, 5]  # ends with "1 2": "1 2 5" not completed
    assert torch.isinf(out[1]).nonzero().flatten().tolist() == [3, 4]  # ends with 1: "1 3" not completed
    out = suppress_sequences(logits, torch.tensor([[1, 2], [0, 1]]), [(1, 2, 5)])
    assert torch.isinf(out[0]).nonzero().flatten().tolist() == [5] and out[1].isfinite().all()


def test_controls_give_the_searchs_scores_and_the_models_log_probabilities() -> None:
    logits = torch.tensor([[0.0, 0.0, 2.0, -1.0, 0.5]])  # PAD, BOS, then three tokens
    history = torch.tensor([[2]])
    scores, log_probs = Controls(repetition_penalty=2.0).scores(logits, history)
    assert torch.allclose(scores, torch.tensor([[NEG_INF, NEG_INF, 1.0, -1.0, 0.5]]).log_softmax(-1))
    assert torch.allclose(log_probs, logits.log_softmax(-1))
    same, model = Controls().scores(logits, history)
    assert same is model and torch.equal(model, logits.log_softmax(-1))


# -- their effect on every search ------------------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", ["greedy", "beam", "sample"])
def test_repetition_penalty_on_every_search(checkpoint: Path, strategy: str) -> None:
    translator = dotformer.load(checkpoint, device="cpu", engine="torch")
    options = {"top_k": 1} if strategy == "sample" else {}
    assert translator.translate("a1", strategy=strategy, min_len_b=3, **options) == "a3 a3 a3"
    # a3: 3 -> 1.5 once produced, below a6's 2; then a6: 2 -> 1, below a3's 1.5
    assert translator.translate("a1", strategy=strategy, min_len_b=3, repetition_penalty=2.0, **options) == "a3 a6 a3"


@pytest.mark.parametrize("strategy", ["greedy", "beam", "sample"])
def test_no_repeated_bigram_and_no_suppressed_token(checkpoint: Path, strategy: str) -> None:
    translator = dotformer.load(checkpoint, device="cpu", engine="torch")
    options = {"top_k": 1} if strategy == "sample" else {}
    result = translator.translate("a1", strategy=strategy, min_len_b=8, no_repeat_ngram_size=2, details=True, **options)
    tokens = result.hypotheses[0].tokens
    bigrams = list(zip(tokens, tokens[1:], strict=False))  # a3 a3 a6 a3, then a3 and a6 follow a3 already: a0
    assert len(tokens) == 8 and len(set(bigrams)) == len(bigrams) and tokens[:2] == [7, 7]
    if strategy == "greedy":
        assert tokens[:5] == [7, 7, 10, 7, 4]
    assert translator.translate("a1", strategy=strategy, min_len_b=3, suppress="a3", **options) == "a6 a6 a6"
    # the sequence "a3 a3" is never completed; a3 alone still is
    assert translator.translate("a1", strategy=strategy, min_len_b=3, suppress=["a3 a3"], **options) == "a3 a6 a3"


@pytest.mark.parametrize("strategy", ["greedy", "beam", "sample"])
def test_an_end_token_ends_the_output_and_is_left_out(checkpoint: Path, strategy: str) -> None:
    translator = dotformer.load(checkpoint, device="cpu", engine="torch")
    options = {"top_k": 1} if strategy == "sample" else {}
    # </s> suppressed: a3 (3), then a3 at 1.5 loses to a6 (2), which ends the output
    result = translator.translate(
        "a1", strategy=strategy, suppress="</s>", repetition_penalty=2.0, end_token="a6", details=True, **options
    )
    assert result.text == "a3" and result.hypotheses[0].finished
    logp = torch.tensor(SCORES).log_softmax(-1)
    assert result.hypotheses[0].log_probs == pytest.approx([float(logp[7]), float(logp[10])])  # the model's
    held = translator.translate("a1", strategy=strategy, suppress="</s>", end_token="a3", min_len_b=2, **options)
    assert held == "a6 a6"  # the minimum length holds the end token back too, as it holds EOS


def test_language_model_generation_reads_the_new_tokens_only(checkpoint: Path) -> None:
    from dotformer import ModelConfig, Transformer
    from dotformer.decoding.config import generation_config

    torch.manual_seed(0)
    config = ModelConfig(
        arch="decoder-only", src_vocab_size=12, tgt_vocab_size=12, d_model=16, num_heads=2, d_ff=32,
        num_encoder_layers=0, num_decoder_layers=1, dropout=0.0, max_len=32, generator_bias=True, tie_output=False,
    )  # fmt: skip
    model = Transformer(config).eval()
    with torch.no_grad():
        model.generator.weight.zero_()
        model.generator.bias.copy_(torch.tensor(SCORES))
    greedy = generation_config(6, "greedy", length_penalty=0.0)
    assert generate(model, [7, 7], greedy)[0].tokens == [2] * 6  # EOS: a line end, run on across lines
    penalised = generate(model, [10, 10], greedy, controls=Controls(repetition_penalty=8.0, end_ids=(10,)))
    assert penalised[0].tokens == [2, 7]  # the prompt's a6 does not count: a6 ends the text after EOS and a3 fall


# -- the surfaces and their errors -------------------------------------------------------------------------------------


def test_the_cli_takes_repeated_and_comma_separated_tokens(
    checkpoint: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["translate", "--checkpoint", str(checkpoint), "--engine", "torch", "--strategy", "greedy", "a1"]
    assert main([*argv, "--min-len", "3", "--suppress", "a3", "--suppress", "a0,a1"]) == 0
    assert capsys.readouterr().out == "a6 a6 a6\n"
    assert (
        main([*argv, "--suppress", "</s>", "--end-token", "a7", "--end-token", "a0,a6", "--repetition-penalty", "2"])
        == 0
    )
    assert capsys.readouterr().out == "a3\n"
    assert main([*argv, "--min-len", "8", "--no-repeat-ngram-size", "1"]) == 0
    tokens = capsys.readouterr().out.split()
    assert len(tokens) == 8 and len(set(tokens)) == 8


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--repetition-penalty", "-1"], "--repetition-penalty must be a number from 1e-06 to 1e+06 (1 = off), got -1"),
        (["--repetition-penalty", "0"], "--repetition-penalty must be a number from 1e-06 to 1e+06"),
        (["--no-repeat-ngram-size", "-2"], "--no-repeat-ngram-size must be a non-negative integer (0 = off), got -2"),
        (["--end-token", "zz"], "--end-token: 'zz' is not a token of the model's target vocabulary"),
        (["--suppress", "a1 qq"], "--suppress: 'qq' is not a token of the model's target vocabulary"),
    ],
)
def test_bad_values_are_one_line(
    checkpoint: Path, capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    for engine in ("torch", "auto"):
        status = main(["translate", "--checkpoint", str(checkpoint), "--engine", engine, *flags, "a1"])
        err = capsys.readouterr().err
        assert status == 2 and message in err and len(err.strip().splitlines()) == 1


def test_the_api_checks_the_controls(checkpoint: Path) -> None:
    translator = dotformer.load(checkpoint, device="cpu", engine="torch")
    with pytest.raises(ConfigError, match="repetition_penalty must be a number from 1e-06 to 1e"):
        translator.translate("a1", repetition_penalty=float("nan"))
    with pytest.raises(ConfigError, match="suppress must be tokens or sequences of tokens"):
        translator.translate("a1", suppress=[3])
    assert DecodeConfig(end_token="a1, a2", suppress="a1 a2,a3").end_token == ("a1", "a2")
    assert DecodeConfig(suppress="a1 a2,a3").suppress == (("a1", "a2"), ("a3",))
    assert DecodeConfig(end_token=",").end_token == (",",)


def test_has_controls_tells_a_config_with_any_control_from_one_without():
    """A greedy generate request shares an engine call with other clients' only without controls (the server's
    rule): the check reads every control of the options table."""
    from dotformer.decoding import DecodeConfig
    from dotformer.decoding.options import has_controls

    assert not has_controls(DecodeConfig())
    assert not has_controls(DecodeConfig(repetition_penalty=1.0, no_repeat_ngram_size=0))
    assert has_controls(DecodeConfig(repetition_penalty=1.3))
    assert has_controls(DecodeConfig(no_repeat_ngram_size=2))
    assert has_controls(DecodeConfig(end_token=("a",)))
    assert has_controls(DecodeConfig(suppress=(("a", "b"),)))


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        # a penalty whose divisor or factor takes a logit past float32's range: inf and NaN scores, not outputs
        (["--repetition-penalty", "1e-40"], "--repetition-penalty must be a number from 1e-06 to 1e+06 (1 = off)"),
        (["--repetition-penalty", "1e7"], "--repetition-penalty must be a number from 1e-06 to 1e+06"),
        # an integer past 64 bits: no int64 tensor, no CTranslate2 argument holds it
        (["--no-repeat-ngram-size", "1" + "0" * 22], "--no-repeat-ngram-size must be at most 2**63 - 1 (0 = off)"),
        (["--min-len", "1" + "0" * 22], "--min-len must be at most 2**63 - 1, got 1" + "0" * 22),
        (["--max-len-b", "1" + "0" * 22], "--max-len-b must be at most 2**63 - 1"),
        (["--strategy", "sample", "--top-k", "1" + "0" * 22], "--top-k must be at most 2**63 - 1 (0 = off)"),
        # an empty token is a mistake, never silently no token
        (["--end-token", ""], "--end-token: an empty token in ''"),
        (["--suppress", "a1,,a2"], "--suppress: an empty token in 'a1,,a2'"),
        (["--suppress", "a1", "--suppress", "a2,"], "--suppress: an empty token in 'a2,'"),
    ],
)
@pytest.mark.parametrize("engine", ["torch", "ctranslate2"])
def test_out_of_range_values_are_one_line_on_each_engine(
    checkpoint: Path, capsys: pytest.CaptureFixture[str], flags: list[str], message: str, engine: str
) -> None:
    if engine == "ctranslate2":
        pytest.importorskip("ctranslate2")
    status = main(["translate", "--checkpoint", str(checkpoint), "--engine", engine, *flags, "a1"])
    err = capsys.readouterr().err
    assert status == 2 and message in err and len(err.strip().splitlines()) == 1


def test_the_api_refuses_empty_tokens_and_huge_counts(checkpoint: Path) -> None:
    translator = dotformer.load(checkpoint, device="cpu", engine="torch")
    with pytest.raises(ConfigError, match="end_token: an empty token in 'a1,'"):
        translator.translate("a1", end_token="a1,")
    with pytest.raises(ConfigError, match="suppress: an empty token in ''"):
        translator.translate("a1", suppress="")
    with pytest.raises(ConfigError, match="no_repeat_ngram_size must be at most 2\\*\\*63 - 1"):
        translator.translate("a1", no_repeat_ngram_size=2**64)
    assert DecodeConfig(suppress=[]).suppress == () and DecodeConfig(end_token=()).end_token == ()  # none, said so


@pytest.mark.parametrize("engine", ["torch", "ctranslate2"])
def test_a_minimum_beyond_the_maximum_is_cut_to_it(checkpoint: Path, engine: str) -> None:
    """The maximum length wins over the minimum, however large (a huge --min-len-a included), on either engine:
    the end is forbidden throughout and the output is cut at the maximum."""
    if engine == "ctranslate2":
        pytest.importorskip("ctranslate2")
    assert (
        DecodeConfig(min_len_a=1e300, max_len_b=5).min_output_length(3) == 8 == DecodeConfig().max_output_length(3) - 45
    )
    assert DecodeConfig(max_len_a=1e308).max_output_length(3) == 2**63 - 1  # inf, as a count
    translator = dotformer.load(checkpoint, device="cpu", engine=engine)
    for least in (dict(min_len_a=1e300), dict(min_len_b=2**63 - 1), dict(min_len_b=7)):
        [result] = translator.translate(["a1"], strategy="greedy", max_len_b=5, details=True, **least)
        assert result.text == " ".join(["a3"] * 7) and not result.hypotheses[0].finished, least  # 1 x 2 + 5 steps


def test_the_end_of_sentence_as_an_end_token_runs_on_ctranslate2_with_beam_search(checkpoint: Path) -> None:
    """</s> ends every output on either engine: as an end token it asks nothing of the torch engine."""
    pytest.importorskip("ctranslate2")
    from dotformer.engines.choice import torch_only_fields

    assert torch_only_fields(DecodeConfig(end_token=("</s>",))) == []
    assert torch_only_fields(DecodeConfig(end_token=("</s>", "a3"))) == ["end_token"]
    strict = dotformer.load(checkpoint, device="cpu", engine="ctranslate2")
    reference = dotformer.load(checkpoint, device="cpu", engine="torch")
    assert strict.translate(["a1", "a2 a3"], end_token="</s>") == reference.translate(["a1", "a2 a3"])


def test_the_processed_scores_leave_pad_and_bos_out_of_the_softmax() -> None:
    """With a processor set, the search's scores are a distribution over the tokens a search may produce (PAD and BOS
    never are: out of the softmax, as CTranslate2 suppresses them); the model's log-probabilities stay untouched; a row
    whose every token is forbidden is all -inf, never NaN."""
    logits = torch.tensor([SCORES, SCORES])
    history = torch.tensor([[7, 10, 7], [4, 7, 10]])
    controls = Controls(no_repeat_ngram_size=1, suppress=((5,), (6,), (8,), (9,), (11,), (3,), (2,)))
    scores, log_probs = controls.scores(logits, history)
    assert torch.equal(log_probs, logits.log_softmax(-1))
    kept = logits[0].clone()
    kept[[0, 1, 2, 3, 5, 6, 7, 8, 9, 10, 11]] = NEG_INF  # row 0: a0 (id 4) alone is left
    assert torch.equal(scores[0], kept.log_softmax(-1)) and float(scores[0, 4]) == 0.0
    assert torch.equal(scores[1], torch.full((12,), NEG_INF))  # row 1 saw a0, a3, a6: nothing is left
    plain = Controls(repetition_penalty=2.0).scores(logits, history)[0]
    allowed = [i for i in range(12) if i not in (0, 1)]
    assert float(plain[0, allowed].exp().sum()) == pytest.approx(1.0) and plain[0, :2].eq(NEG_INF).all()


@pytest.mark.parametrize("command", ["translate", "evaluate"])
def test_an_unknown_token_is_named_before_the_engine_is_chosen(
    checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """An end token that is no token is that, on every engine: not "runs on the torch engine only" first."""
    pytest.importorskip("ctranslate2")
    (tmp_path / "pairs.tsv").write_text("a1\ta3\n")
    where = ["a1"] if command == "translate" else ["--data", str(tmp_path / "pairs.tsv")]
    argv = [command, "--checkpoint", str(checkpoint), "--engine", "ctranslate2", "--end-token", "zz", *where]
    assert main(argv) == 2
    assert capsys.readouterr().err.strip() == (
        f"dotformer {command}: error: --end-token: 'zz' is not a token of the model's target vocabulary"
    )
    strict = dotformer.load(checkpoint, device="cpu", engine="ctranslate2")
    with pytest.raises(ConfigError, match="suppress: 'qq' is not a token"):
        strict.translate("a1", suppress="qq", end_token="a3")
