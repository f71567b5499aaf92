"""Tests of dotformer.explore.explain: the lesson's numbers, the library's function, a user's JSON problem."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dotformer import scaled_dot_product_attention
from dotformer.cli import main
from dotformer.errors import DataError, ShapeError
from dotformer.explore.explain import (
    AttentionInput,
    attention_steps,
    explain_json,
    explain_lesson,
    lesson_check,
    lesson_problem,
    parse_attention_json,
)


def by_hand(scores: list[float], values: list[list[float]]) -> tuple[list[float], list[float]]:
    """softmax and weighted sum written with math.exp, independent of torch."""
    exps = [math.exp(s) for s in scores]
    weights = [e / sum(exps) for e in exps]
    out = [sum(w * v[d] for w, v in zip(weights, values, strict=True)) for d in range(len(values[0]))]
    return weights, out


def test_lesson_numbers_are_the_scaled_ones() -> None:
    steps = attention_steps(lesson_problem())
    assert steps.scores[0].tolist() == [1.0, 0.0, 1.0]
    assert steps.sqrt_dk == pytest.approx(math.sqrt(2))
    weights, out = by_hand([1 / math.sqrt(2), 0.0, 1 / math.sqrt(2)], [[10, 0], [0, 10], [5, 5]])
    assert steps.weights[0].tolist() == pytest.approx(weights, abs=1e-15)
    assert steps.output[0].tolist() == pytest.approx(out, abs=1e-12)
    assert [round(w, 3) for w in weights] == [0.401, 0.198, 0.401]
    assert [round(o, 2) for o in out] == [6.02, 3.98]
    unscaled, unscaled_out = by_hand([1.0, 0.0, 1.0], [[10, 0], [0, 10], [5, 5]])
    assert steps.unscaled_weights[0].tolist() == pytest.approx(unscaled, abs=1e-15)
    assert [round(w, 3) for w in unscaled] == [0.422, 0.155, 0.422]
    check = lesson_check(steps)
    assert check.scaled_matches and not check.unscaled_matches
    assert check.unscaled_output == pytest.approx(unscaled_out)


def test_printed_weights_come_from_the_library_function() -> None:
    problem = lesson_problem()
    steps = attention_steps(problem)
    reference = scaled_dot_product_attention(problem.query, problem.key, problem.value)
    assert torch.equal(steps.weights, reference.weights)
    assert torch.equal(steps.output, reference.output)
    assert steps.max_difference < 1e-15


def test_explain_lesson_text() -> None:
    text = explain_lesson()
    for expected in ("Step 1", "Step 2", "Step 3", "Step 4", "0.7071", "[0.401, 0.198, 0.401]", "[6.017, 3.983]"):
        assert expected in text
    assert "SCALED scores" in text and "MATCHES" in text
    assert "0.422" in text  # the unscaled alternative is shown too


def test_user_problem_with_mask() -> None:
    problem = json.dumps({"Q": [[1, 0], [0, 1]], "K": [[1, 0], [0, 1], [1, 1]], "V": [[1], [2], [3]],
                          "mask": [[1, 0, 1], [False, False, False]]})  # fmt: skip
    parsed = parse_attention_json(problem)
    assert parsed.mask is not None and parsed.mask.tolist() == [[True, False, True], [False, False, False]]
    steps = attention_steps(parsed)
    assert steps.weights.tolist() == [[0.5, 0.0, 0.5], [0.0, 0.0, 0.0]]  # equal scores; an empty row gives zeros
    assert steps.output.tolist() == [[2.0], [0.0]]
    text = explain_json(problem)
    assert "-inf" in text and "never NaN" in text


def test_json_from_a_file_and_errors(tmp_path: Path) -> None:
    good = tmp_path / "qkv.json"
    good.write_text('{"Q": [[1, 2]], "K": [[1, 2]], "V": [[3, 4]]}')
    assert attention_steps(parse_attention_json(str(good))).output.tolist() == [[3.0, 4.0]]
    bad = tmp_path / "bad.json"
    bad.write_text('{\n"Q": [[1, 2]],\n"K": oops}')
    with pytest.raises(DataError, match=r"bad.json:3: not valid JSON"):
        parse_attention_json(str(bad))
    with pytest.raises(ShapeError, match="share d_k"):
        parse_attention_json('{"Q": [[1, 2]], "K": [[1, 2, 3]], "V": [[1]]}')
    with pytest.raises(ShapeError, match="one value per key"):
        parse_attention_json('{"Q": [[1]], "K": [[1], [2]], "V": [[1]]}')
    with pytest.raises(ShapeError, match="different lengths"):
        parse_attention_json('{"Q": [[1], [1, 2]], "K": [[1]], "V": [[1]]}')
    with pytest.raises(ShapeError, match="mask is"):
        parse_attention_json('{"Q": [[1]], "K": [[1]], "V": [[1]], "mask": [[1, 1]]}')
    with pytest.raises(DataError, match="not a finite number"):
        parse_attention_json('{"Q": [["a"]], "K": [[1]], "V": [[1]]}')
    with pytest.raises(DataError, match="missing V"):
        parse_attention_json('{"Q": [[1]], "K": [[1]]}')
    with pytest.raises(DataError, match="unknown key"):
        parse_attention_json('{"Q": [[1]], "K": [[1]], "V": [[1]], "W": 1}')
    with pytest.raises(DataError, match="neither JSON text"):
        parse_attention_json(str(tmp_path / "missing.json"))


matrices = st.integers(1, 4).flatmap(
    lambda t: st.tuples(st.just(t), st.integers(1, 4), st.integers(1, 3), st.integers(1, 3))
)


@settings(max_examples=40, deadline=None)
@given(sizes=matrices, seed=st.integers(0, 10_000))
def test_step_by_step_softmax_equals_the_library(sizes: tuple[int, int, int, int], seed: int) -> None:
    T, S, Dk, Dv = sizes
    generator = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(*shape, generator=generator, dtype=torch.float64) for shape in ((T, Dk), (S, Dk), (S, Dv)))
    mask = torch.rand(T, S, generator=generator) > 0.3
    steps = attention_steps(AttentionInput(q, k, v, mask))
    assert steps.max_difference < 1e-12
    torch.testing.assert_close(steps.scaled, q @ k.T / math.sqrt(Dk))
    sums = steps.weights.sum(-1)
    torch.testing.assert_close(sums, mask.any(-1).to(torch.float64))


def test_cli(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "attention"]) == 0
    assert "[0.401, 0.198, 0.401]" in capsys.readouterr().out
    assert main(["explain", "attention", "--json", '{"Q": [[1]], "K": [[1], [0]], "V": [[1], [3]]}']) == 0
    assert "Step 4" in capsys.readouterr().out
    assert main(["explain", "attention", "--json", '{"Q": [[1]], "K": [[1, 0]], "V": [[1]]}']) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("dotformer explain: error:") and "d_k" in err[0]
