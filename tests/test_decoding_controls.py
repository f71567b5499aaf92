"""Minimum length and target prefixes through the Python API and ``dotformer translate``, on hand-set scores."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import torch
from decoding_support import random_model, set_logits_checkpoint

import dotformer
from dotformer.checkpoint import save_checkpoint
from dotformer.cli import main
from dotformer.data.tokenize.tokenizer_files import train_tokenizer
from dotformer.data.tokenize.tokenizers import EOS_ID
from dotformer.errors import ConfigError, ShapeError

SYMBOLS = "a0 a1 a2 a3 a4 a5 a6 a7"  # ids 4..11 in this order
# Hand-set scores: the generator ignores the decoder and its bias is these logits, so every step's distribution is
# log_softmax(SCORES): EOS first, then a3 (id 7), then a6 (id 10).
SCORES = [0.0, 0.0, 4.0, 0.0, 0.0, 0.0, 0.0, 3.0, 0.0, 0.0, 2.0, 0.0]
LOG_P = torch.tensor(SCORES).log_softmax(-1).tolist()


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return set_logits_checkpoint(tmp_path_factory.mktemp("set_scores") / "checkpoint", SCORES, SYMBOLS)


@pytest.mark.parametrize("strategy", ["greedy", "beam", "sample"])
def test_api_min_len_holds_the_end_back(checkpoint: Path, strategy: str) -> None:
    translator = dotformer.load(checkpoint, device="cpu")
    options = {"top_k": 1} if strategy == "sample" else {}
    assert translator.translate("a1 a2", strategy=strategy, **options) == ""
    assert translator.translate("a1 a2", strategy=strategy, min_len_b=2, **options) == "a3 a3"
    # floor(1.0 · 3 + 1) = 4: the source "a1 a2" has 3 tokens with its EOS
    assert translator.translate("a1 a2", strategy=strategy, min_len_a=1.0, min_len_b=1, **options) == "a3 a3 a3 a3"


@pytest.mark.parametrize("strategy", ["greedy", "beam", "sample"])
def test_api_prefix_is_forced_scored_and_kept(checkpoint: Path, strategy: str) -> None:
    translator = dotformer.load(checkpoint, device="cpu")
    options = {"top_k": 1} if strategy == "sample" else {}
    result = translator.translate("a1", strategy=strategy, prefix="a5 a0", details=True, **options)
    assert result.text == "a5 a0"
    assert result.hypotheses[0].log_probs == pytest.approx([LOG_P[9], LOG_P[4], LOG_P[EOS_ID]])
    texts = translator.translate(["a1", "a2", ""], strategy=strategy, prefix=["a7", None, "a1"], min_len_b=2, **options)
    assert texts == ["a7 a3", "a3 a3", "a1 a3"]  # an empty source with a prefix is decoded


def test_api_prefix_mistakes_are_clear_errors(checkpoint: Path) -> None:
    translator = dotformer.load(checkpoint, device="cpu")
    with pytest.raises(TypeError, match="one string or None per text"):
        translator.translate(["a1", "a2"], prefix="a1")
    with pytest.raises(TypeError, match="2 prefixes for 1 texts"):
        translator.translate(["a1"], prefix=["a1", "a2"])
    with pytest.raises(ShapeError, match="input 1: its prefix has 3 tokens"):
        translator.translate("a1", prefix="a1 a2 a3", max_len_a=0.0, max_len_b=3)


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_cli_min_len(checkpoint: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run_cli(capsys, "translate", "--checkpoint", str(checkpoint), "--min-len", "3", "a1", "a2 a3")
    assert status == 0 and out == "a3 a3 a3\na3 a3 a3\n"
    status, out, _ = run_cli(
        capsys, "translate", "--checkpoint", str(checkpoint), "--min-len-a", "1", "--min-len", "0", "a1", "a2 a3"
    )
    assert status == 0 and out == "a3 a3\na3 a3 a3\n"


def test_cli_inline_prefix_and_prefix_file(
    checkpoint: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inputs = tmp_path / "inputs.txt"
    inputs.write_text("a1 ||| a7 a0\na2\n", encoding="utf-8")
    status, out, _ = run_cli(
        capsys, "translate", "--checkpoint", str(checkpoint), "--inline-prefix", "--input", str(inputs)
    )
    assert status == 0 and out == "a7 a0\n\n"
    prefixes = tmp_path / "prefixes.txt"
    prefixes.write_text("a6\n\n", encoding="utf-8")
    status, out, _ = run_cli(
        capsys,
        "translate",
        "--checkpoint",
        str(checkpoint),
        "--prefix-file",
        str(prefixes),
        "--strategy",
        "greedy",
        "a1",
        "a2",
    )
    assert status == 0 and out == "a6\n\n"
    status, out, err = run_cli(
        capsys, "translate", "--checkpoint", str(checkpoint), "--prefix-file", str(prefixes), "a1"
    )
    assert status == 2 and "has 2 line(s) for 1 input(s)" in err and len(err.strip().splitlines()) == 1
    status, out, err = run_cli(
        capsys, "translate", "--checkpoint", str(checkpoint), "--prefix-file", str(prefixes), "a1", "a2", "a3"
    )
    assert status == 2 and "input 3: no prefix for this input" in err


@pytest.mark.parametrize(
    "bad, problem",
    [
        ("a2 ||| a7 ||| a0", "holds 2 '|||'"),
        ("a2|||a7", "holds '|||' without a space"),
        ("a2 |||a7", "holds '|||' without"),
    ],
)
def test_a_malformed_inline_prefix_line_is_one_error_naming_it(
    checkpoint: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path, bad: str, problem: str
) -> None:
    """Not read as a source with unknown symbols: the outputs of the lines before it are written, then one line."""
    inputs = tmp_path / "inputs.txt"
    inputs.write_text(f"a1 ||| a7 a0\n{bad}\na3\n", encoding="utf-8")
    argv = ["translate", "--checkpoint", str(checkpoint), "--inline-prefix", "--input", str(inputs)]
    status, out, err = run_cli(capsys, *argv)
    assert status == 2 and out == "a7 a0\n" and len(err.strip().splitlines()) == 1
    assert f"{inputs}:2: the line {problem}" in err and "<unk>" not in err


UNKNOWN_PREFIX = "3 prefix symbol(s) are not in the target vocabulary and were read as <unk>: QQ, ZZ"


def test_prefix_symbols_outside_the_vocabulary_are_warned_about(
    checkpoint: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from dotformer.api.endpoint import translate_request
    from dotformer.decoding.inputs import UnknownTokenWarning

    translator = dotformer.load(checkpoint, device="cpu")
    with pytest.warns(UnknownTokenWarning) as caught:
        translator.translate(["a1", "a2", "a3"], prefix=["a5 QQ", "ZZ QQ", None])
    assert [str(w.message) for w in caught] == [UNKNOWN_PREFIX]
    inputs = tmp_path / "inputs.txt"
    inputs.write_text("a1 ||| a7 QQ\na2 ||| ZZ QQ\na3\n", encoding="utf-8")
    status, out, err = run_cli(
        capsys, "translate", "--checkpoint", str(checkpoint), "--inline-prefix", "--input", str(inputs)
    )
    assert status == 0 and err == f"dotformer translate: warning: {UNKNOWN_PREFIX}\n"
    request = {"texts": ["a1", "a2 b9"], "prefix": ["K ZZ", "a5"], "strategy": "greedy"}
    reply = asyncio.run(translate_request(translator, request))
    assert [t["unknown_symbols"] for t in reply["translations"]] == [2, 1]  # the prefix's, the text's


@pytest.fixture(scope="module")
def random_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    symbols = train_tokenizer("symbol", [SYMBOLS])
    path = tmp_path_factory.mktemp("random") / "checkpoint"
    model = random_model(vocab=12, seed=4, generator_bias=True)
    with torch.no_grad():
        model.generator.bias[3] = -100.0  # no <unk> in the outputs, so their texts give back their tokens
    save_checkpoint(path, model, symbols, symbols, {"task": "synthetic"})
    return path


@pytest.mark.parametrize("layer", [-1, 0])
def test_alignments_are_the_argmax_of_the_head_averaged_cross_attention(random_checkpoint: Path, layer: int) -> None:
    from dotformer.decoding.attention_maps import attention_weights

    translator = dotformer.load(random_checkpoint, device="cpu")
    texts = ["a1 a2 a3", "a4 a0", "a7"]
    results = translator.translate(texts, n_best=2, max_len_b=6, alignments=True, alignment_layer=layer)
    for text, result in zip(texts, results, strict=True):
        for hyp in result.hypotheses:
            maps = attention_weights(translator.checkpoint, text, target=hyp.text)
            mean = torch.tensor(maps.cross[layer]).mean(dim=0)  # (T, S), over the heads
            if mean.size(1) > 1:
                mean[:, -1] = float("-inf")  # the source's EOS is not an alignment target
            expected = [(int(mean[j].argmax()), j) for j in range(len(hyp.tokens))]
            assert hyp.alignment == expected


def test_alignment_lines_and_json(random_checkpoint: Path, capsys: pytest.CaptureFixture[str]) -> None:
    translator = dotformer.load(random_checkpoint, device="cpu")
    expected = translator.translate(["a1 a2", "a3"], max_len_b=3, alignments=True)
    status, out, _ = run_cli(
        capsys, "translate", "--checkpoint", str(random_checkpoint), "--max-len-b", "3", "--alignments", "a1 a2", "a3"
    )
    lines = out.splitlines()
    assert status == 0 and lines[0::2] == [r.text for r in expected]
    assert lines[1::2] == [
        f"A-{i}\t" + " ".join(f"{s}-{t}" for s, t in r.hypotheses[0].alignment) for i, r in enumerate(expected)
    ]
    status, out, _ = run_cli(
        capsys,
        "translate",
        "--checkpoint",
        str(random_checkpoint),
        "--max-len-b",
        "3",
        "--alignments",
        "--output-format",
        "json",
        "a1 a2",
    )
    import json

    assert json.loads(out)["hypotheses"][0]["alignment"] == [list(p) for p in expected[0].hypotheses[0].alignment]
    status, _, err = run_cli(
        capsys, "translate", "--checkpoint", str(random_checkpoint), "--alignments", "--alignment-layer", "2", "a1"
    )
    assert status == 2 and "alignment layer 2 does not exist: this model has 2 decoder layers" in err


def test_replace_unk_copies_the_aligned_source_symbol(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scores = [0.0, 0.0, 4.0, 3.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]  # EOS first, then <unk> (id 3)
    checkpoint = set_logits_checkpoint(tmp_path / "unk", scores, SYMBOLS)
    translator = dotformer.load(checkpoint, device="cpu")
    plain = translator.translate("a1 a2 a4", min_len_b=2, details=True, alignments=True)
    assert plain.hypotheses[0].tokens == [3, 3] and plain.text == ""  # <unk> is not written
    sources = ["a1", "a2", "a4"]
    replaced = translator.translate("a1 a2 a4", min_len_b=2, replace_unk=True)
    assert replaced == " ".join(sources[s] for s, _ in plain.hypotheses[0].alignment)
    status, out, _ = run_cli(
        capsys, "translate", "--checkpoint", str(checkpoint), "--min-len", "2", "--replace-unk", "a1 a2 a4"
    )
    assert status == 0 and out == replaced + "\n"


# -- length limits: capped at the model's positions, nothing done for a limit that is not reached --------------------


@pytest.fixture(scope="module")
def short_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random model with sinusoidal positions built for 12 tokens (max_len = 12): it never ends an output early."""
    symbols = train_tokenizer("symbol", [SYMBOLS])
    path = tmp_path_factory.mktemp("short") / "checkpoint"
    model = random_model(vocab=12, seed=4, generator_bias=True, max_len=12)
    with torch.no_grad():
        model.generator.bias[EOS_ID] = -100.0  # never the end of sentence
    save_checkpoint(path, model, symbols, symbols, {"task": "synthetic"})
    return path


@pytest.mark.parametrize("strategy", ["greedy", "beam", "sample"])
def test_max_len_b_is_capped_at_the_models_positions(short_checkpoint: Path, strategy: str) -> None:
    """max_len_b far above the positions gives what max_len_b = the positions gives: 12 tokens, cut."""
    translator = dotformer.load(short_checkpoint, device="cpu")
    capped = translator.translate("a1 a2", strategy=strategy, max_len_b=10**9, details=True)
    at_positions = translator.translate("a1 a2", strategy=strategy, max_len_b=12 - 3, details=True)  # 3 + 9 = 12
    assert len(capped.hypotheses[0].tokens) == 12 and not capped.finished
    assert [h.tokens for h in capped.hypotheses] == [h.tokens for h in at_positions.hypotheses]


@pytest.mark.parametrize("strategy", ["greedy", "beam"])
def test_decoding_work_does_not_grow_with_an_unreached_limit(
    checkpoint: Path, strategy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An output that ends at once takes the same decoder steps whatever the limit above the model's positions, and
    greedy decoding the same whatever the limit: no step, and no buffer, for a length it does not reach. Beam
    search's exact stopping bound divides the alive scores by the length penalty of the limit (a longer output could
    still overtake), so within the positions its steps grow with lp(limit) ∝ limit^α, and stop growing there."""
    from dotformer.decoding.incremental import IncrementalDecoder

    steps = []
    step = IncrementalDecoder.step

    def counted(self: IncrementalDecoder, tokens: torch.Tensor) -> torch.Tensor:
        steps.append(1)
        return step(self, tokens)

    monkeypatch.setattr(IncrementalDecoder, "step", counted)
    translator = dotformer.load(checkpoint, device="cpu", engine="torch")  # hand-set scores: EOS first (1024 positions)
    taken = []
    for max_len_b in (50, 1024, 10**9):
        steps.clear()
        assert translator.translate("a1 a2", strategy=strategy, max_len_b=max_len_b) == ""
        taken.append(len(steps))
    assert taken[1] == taken[2] <= 60 and (taken[0] == taken[1] if strategy == "greedy" else taken[0] <= taken[1])


def test_generate_keeps_no_buffer_of_the_token_limit() -> None:
    """generate() makes its tokens one by one: a limit of 10^12 tokens allocates nothing for them in advance."""
    from dotformer.decoding.config import generation_config
    from dotformer.decoding.generate import generate

    model = random_model(vocab=16, arch="decoder-only", num_encoder_layers=0)
    seen = []

    class EnoughError(Exception):
        pass

    def on_token(tokens: torch.Tensor) -> None:
        seen.append(int(tokens[0]))
        if len(seen) == 3:
            raise EnoughError

    with pytest.raises(EnoughError):
        generate(model, [5, 6], generation_config(10**12, "greedy"), window=8, on_token=on_token)
    assert len(seen) == 3


def test_zero_length_limits_are_refused_not_one_token(
    random_checkpoint: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    translator = dotformer.load(random_checkpoint, device="cpu")
    with pytest.raises(ConfigError, match="max_len_a and max_len_b are both 0"):
        translator.translate("a1 a2", max_len_a=0.0, max_len_b=0)
    status, out, err = run_cli(
        capsys, "translate", "--checkpoint", str(random_checkpoint), "--max-len-a", "0", "--max-len-b", "0", "a1"
    )
    assert status == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "--max-len-a and --max-len-b are both 0: that allows no decoding step" in err


def test_an_alignment_layer_out_of_range_is_refused_without_alignments(
    random_checkpoint: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    translator = dotformer.load(random_checkpoint, device="cpu")
    with pytest.raises(ConfigError, match="alignment layer 5 does not exist: this model has 2 decoder layers"):
        translator.translate("a1", alignment_layer=5)
    status, out, err = run_cli(
        capsys, "translate", "--checkpoint", str(random_checkpoint), "--alignment-layer", "5", "a1"
    )
    assert status == 2 and out == "" and "alignment layer 5 does not exist" in err and len(err.splitlines()) == 1
