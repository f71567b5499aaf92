"""The lesson's worked attention example, step by step, with the library's own attention function.

    scores  = Q · Kᵀ                      every query against every key
    scaled  = scores / √d_k               keeps the variance near 1 (paper §3.2.1)
    weights = softmax(scaled) by row      masked keys get weight 0
    output  = weights · V                 each output row is a blend of the value rows

The first two steps are written out here so they can be printed; the weights and the output printed are those
returned by :func:`dotformer.scaled_dot_product_attention`, and the step-by-step softmax is checked against them.

The lesson prints ``scores = [1, 0, 1]`` for the first query and then ``weights ≈ [0.401, 0.198, 0.401]``,
``out ≈ [6.02, 3.98]``. Those weights are softmax of the SCALED scores [1, 0, 1] / √2; softmax of the unscaled scores
would be [0.422, 0.155, 0.422] (out ≈ [6.33, 3.67]). :func:`lesson_check` computes both and says which one matches.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch import Tensor

from dotformer.attention import scaled_dot_product_attention
from dotformer.errors import DataError, ShapeError

# The lesson's example (section 2): three tokens with d_k = d_v = 2, K = Q.
LESSON_Q = ((1.0, 0.0), (0.0, 1.0), (1.0, 1.0))
LESSON_K = LESSON_Q
LESSON_V = ((10.0, 0.0), (0.0, 10.0), (5.0, 5.0))
# What the lesson prints for the first query (token 1), rounded as printed.
LESSON_WEIGHTS = (0.401, 0.198, 0.401)
LESSON_OUTPUT = (6.02, 3.98)


class AttentionInput(NamedTuple):
    """A small attention problem.

    Attributes:
        query: (T, Dk) float64 Q. key: (S, Dk) float64 K. value: (S, Dv) float64 V.
        mask: (T, S) bool, True = may attend, or None (everything allowed).
    """

    query: Tensor
    key: Tensor
    value: Tensor
    mask: Tensor | None


class AttentionSteps(NamedTuple):
    """Every intermediate of softmax(Q·Kᵀ/√d_k)·V for one problem (all float64).

    Attributes:
        problem: the inputs.
        scores: (T, S) Q·Kᵀ.
        sqrt_dk: √d_k, the scale.
        scaled: (T, S) scores / √d_k.
        step_weights: (T, S) softmax of ``scaled`` by row, masked keys excluded, computed here step by step.
        weights: (T, S) the weights returned by :func:`dotformer.scaled_dot_product_attention`.
        output: (T, Dv) the output returned by :func:`dotformer.scaled_dot_product_attention`.
        unscaled_weights: (T, S) softmax of the unscaled ``scores`` (what one gets without the √d_k), for comparison.
        unscaled_output: (T, Dv) unscaled_weights · V.
    """

    problem: AttentionInput
    scores: Tensor
    sqrt_dk: float
    scaled: Tensor
    step_weights: Tensor
    weights: Tensor
    output: Tensor
    unscaled_weights: Tensor
    unscaled_output: Tensor

    @property
    def max_difference(self) -> float:
        """Largest |step-by-step weight - library weight|: the two computations agree when it is ~1e-16."""
        return float((self.step_weights - self.weights).abs().max()) if self.weights.numel() else 0.0


def lesson_problem() -> AttentionInput:
    """The lesson's Q, K, V (no mask)."""
    as_tensor = lambda rows: torch.tensor(rows, dtype=torch.float64)  # noqa: E731
    return AttentionInput(as_tensor(LESSON_Q), as_tensor(LESSON_K), as_tensor(LESSON_V), None)


def masked_softmax(scores: Tensor, mask: Tensor | None) -> Tensor:
    """Row-wise softmax of (T, S) scores over the allowed keys; rows with no allowed key are all zero."""
    if mask is None:
        return torch.softmax(scores, dim=-1)  # (T, S)
    filled = scores.masked_fill(~mask, -math.inf)  # (T, S)
    row_max = filled.amax(dim=-1, keepdim=True)  # (T, 1), -inf on rows with no allowed key
    row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
    exp = torch.exp(filled - row_max)  # (T, S), exp(-inf) = 0 on masked keys
    total = exp.sum(dim=-1, keepdim=True)  # (T, 1)
    return torch.where(total > 0, exp / total, torch.zeros_like(exp))  # (T, S)


def attention_steps(problem: AttentionInput) -> AttentionSteps:
    """Compute every step of scaled dot-product attention for one (Q, K, V[, mask]) problem (paper §3.2.1).

    Shapes: Q (T, Dk), K (S, Dk), V (S, Dv), mask (T, S). All float64.

    Raises:
        ShapeError: the shapes do not fit together (checked by the library function).
    """
    q, k, v, mask = problem
    attended = scaled_dot_product_attention(q, k, v, mask=mask)  # the library's own computation
    assert attended.weights is not None
    scores = q @ k.T  # (T, S)
    sqrt_dk = math.sqrt(q.size(-1))
    scaled = scores / sqrt_dk  # (T, S)
    unscaled_weights = masked_softmax(scores, mask)  # (T, S)
    return AttentionSteps(
        problem=problem,
        scores=scores,
        sqrt_dk=sqrt_dk,
        scaled=scaled,
        step_weights=masked_softmax(scaled, mask),
        weights=attended.weights,
        output=attended.output,
        unscaled_weights=unscaled_weights,
        unscaled_output=unscaled_weights @ v,
    )


class LessonCheck(NamedTuple):
    """Which computation reproduces the numbers printed in the lesson (first query, 3 decimals / 2 decimals).

    Attributes:
        scaled_matches: softmax(Q·Kᵀ/√d_k) rounds to the lesson's weights and output.
        unscaled_matches: softmax(Q·Kᵀ) does.
        scaled_weights, unscaled_weights: the first query's weights each way (S,).
        scaled_output, unscaled_output: the first query's output each way (Dv,).
    """

    scaled_matches: bool
    unscaled_matches: bool
    scaled_weights: list[float]
    unscaled_weights: list[float]
    scaled_output: list[float]
    unscaled_output: list[float]


def lesson_check(steps: AttentionSteps) -> LessonCheck:
    """Compare the first row of ``steps`` (the lesson's problem) with the lesson's printed numbers."""

    def matches(weights: Tensor, output: Tensor) -> bool:
        w_ok = all(abs(round(float(a), 3) - b) < 1e-9 for a, b in zip(weights, LESSON_WEIGHTS, strict=True))
        o_ok = all(abs(round(float(a), 2) - b) < 1e-9 for a, b in zip(output, LESSON_OUTPUT, strict=True))
        return w_ok and o_ok

    return LessonCheck(
        scaled_matches=matches(steps.weights[0], steps.output[0]),
        unscaled_matches=matches(steps.unscaled_weights[0], steps.unscaled_output[0]),
        scaled_weights=steps.weights[0].tolist(),
        unscaled_weights=steps.unscaled_weights[0].tolist(),
        scaled_output=steps.output[0].tolist(),
        unscaled_output=steps.unscaled_output[0].tolist(),
    )


# -- reading a user's problem -------------------------------------------------------------------------------------


def read_json_argument(argument: str) -> tuple[Any, str]:
    """Parse ``argument`` as JSON text, or as the path of a JSON file; return (value, where it came from).

    Raises:
        DataError: not valid JSON (naming FILE:LINE for a file), or neither JSON text nor an existing file.
    """
    stripped = argument.strip()
    if stripped.startswith(("{", "[")):
        source, text = "the --json text", stripped
    else:
        path = Path(argument)
        if not path.is_file():
            raise DataError(f"--json: {argument!r} is neither JSON text (starting with '{{') nor an existing file")
        source, text = str(path), path.read_text(encoding="utf-8")
    try:
        return json.loads(text), source
    except json.JSONDecodeError as exc:
        raise DataError(f"{source}:{exc.lineno}: not valid JSON ({exc.msg} at column {exc.colno})") from None


def matrix(value: Any, name: str, source: str, boolean: bool = False) -> Tensor:
    """A JSON list of equal-length lists of numbers (or booleans / 0-1 for a mask) as a 2-D tensor.

    Raises:
        ShapeError: not a non-empty rectangular 2-D list. DataError: a non-number or non-finite entry.
    """
    if not isinstance(value, list) or not value or not all(isinstance(row, list) and row for row in value):
        raise ShapeError(f"{source}: {name} must be a non-empty list of non-empty rows, e.g. [[1, 0], [0, 1]]")
    widths = {len(row) for row in value}
    if len(widths) != 1:
        raise ShapeError(f"{source}: the rows of {name} have different lengths {sorted(widths)}")
    for i, row in enumerate(value):
        for j, x in enumerate(row):
            if boolean:
                if not (isinstance(x, bool) or x in (0, 1)):
                    raise DataError(f"{source}: {name}[{i}][{j}] = {x!r}; a mask holds true/false (or 1/0)")
            elif isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
                raise DataError(f"{source}: {name}[{i}][{j}] = {x!r} is not a finite number")
    if boolean:
        return torch.tensor([[bool(x) for x in row] for row in value], dtype=torch.bool)
    return torch.tensor(value, dtype=torch.float64)


def parse_attention_json(argument: str) -> AttentionInput:
    """Read {"Q": [[..]], "K": [[..]], "V": [[..]], "mask": [[..]] (optional)} from JSON text or a JSON file.

    Q is (T, Dk), K is (S, Dk), V is (S, Dv), mask is (T, S) with true = may attend.

    Raises:
        DataError: bad JSON, missing or unknown keys, non-numbers. ShapeError: shapes that do not fit together.
    """
    value, source = read_json_argument(argument)
    if not isinstance(value, dict):
        raise DataError(f'{source}: expected a JSON object {{"Q": ..., "K": ..., "V": ...}}')
    missing = [key for key in ("Q", "K", "V") if key not in value]
    unknown = sorted(set(value) - {"Q", "K", "V", "mask"})
    if missing or unknown:
        problems = [f"missing {', '.join(missing)}"] if missing else []
        problems += [f"unknown key(s) {', '.join(unknown)}"] if unknown else []
        raise DataError(f"{source}: {'; '.join(problems)} (expected Q, K, V and an optional mask)")
    q, k, v = (matrix(value[key], key, source) for key in ("Q", "K", "V"))
    mask = matrix(value["mask"], "mask", source, boolean=True) if value.get("mask") is not None else None
    if q.size(1) != k.size(1):
        raise ShapeError(f"{source}: Q is {tuple(q.shape)} and K is {tuple(k.shape)}: they must share d_k (columns)")
    if k.size(0) != v.size(0):
        raise ShapeError(f"{source}: K has {k.size(0)} rows and V has {v.size(0)}: one value per key")
    if mask is not None and tuple(mask.shape) != (q.size(0), k.size(0)):
        expected = (q.size(0), k.size(0))
        raise ShapeError(f"{source}: mask is {tuple(mask.shape)}, expected (rows of Q, rows of K) = {expected}")
    return AttentionInput(q, k, v, mask)


# -- printing ---------------------------------------------------------------------------------------------------------


def format_matrix(values: Tensor, digits: int = 3, mask: Tensor | None = None, indent: str = "    ") -> str:
    """Rows of a 2-D tensor as aligned text; masked cells print as "-inf"."""
    cells = [
        ["-inf" if mask is not None and not bool(mask[i, j]) else f"{float(x):.{digits}f}" for j, x in enumerate(row)]
        for i, row in enumerate(values)
    ]
    width = max(len(c) for row in cells for c in row)
    return "\n".join(indent + "[" + ", ".join(c.rjust(width) for c in row) + "]" for row in cells)


def format_steps(steps: AttentionSteps, title: str) -> str:
    """A readable step-by-step account of one attention computation."""
    q, k, v, mask = steps.problem
    lines = [title, "=" * len(title), ""]
    lines += ["Q (queries, T × d_k):", format_matrix(q, 2), "K (keys, S × d_k):", format_matrix(k, 2)]
    lines += ["V (values, S × d_v):", format_matrix(v, 2)]
    if mask is not None:
        lines += ["mask (T × S, 1 = may attend):", format_matrix(mask.to(torch.float64), 0)]
    lines += ["", "Step 1  scores = Q · Kᵀ   (row i: query i against every key)"]
    first = " + ".join(f"({float(a):g})({float(b):g})" for a, b in zip(q[0], k[0], strict=True))
    lines += [f"    e.g. q₁·k₁ = {first} = {float(steps.scores[0, 0]):g}", format_matrix(steps.scores)]
    masked_note = "; masked keys shown as -inf" if mask is not None else ""
    lines += ["", f"Step 2  scaled = scores / √d_k = scores / {steps.sqrt_dk:.4f}   (d_k = {q.size(1)}{masked_note})"]
    lines += [format_matrix(steps.scaled, 4, mask)]
    lines += ["", "Step 3  weights = softmax(scaled) along each row   (from dotformer.scaled_dot_product_attention)"]
    lines += [format_matrix(steps.weights, 3)]
    sums = ", ".join(f"{float(s):.3f}" for s in steps.weights.sum(dim=-1))
    lines += [f"    row sums: {sums}"]
    lines += [f"    the step-by-step softmax above agrees with the library to {steps.max_difference:.1e}"]
    if mask is not None and not bool(mask.any(dim=-1).all()):
        lines += ["    a row whose mask allows no key gets all-zero weights and a zero output (never NaN)"]
    lines += ["", "Step 4  output = weights · V   (from dotformer.scaled_dot_product_attention)"]
    terms = " + ".join(f"{float(w):.3f}·{[round(float(x), 2) for x in v[j]]}" for j, w in enumerate(steps.weights[0]))
    lines += [f"    out₁ = {terms}", format_matrix(steps.output, 3)]
    lines += ["", "Without the scaling (softmax of the raw scores) the weights would be:"]
    lines += [format_matrix(steps.unscaled_weights, 3), "    and the output:", format_matrix(steps.unscaled_output, 3)]
    return "\n".join(lines)


def format_lesson_check(check: LessonCheck) -> str:
    """One honest paragraph on which computation the lesson's printed numbers come from."""
    printed = f"weights ≈ {list(LESSON_WEIGHTS)}, out ≈ {list(LESSON_OUTPUT)}"

    def numbers(weights: list[float], output: list[float]) -> str:
        return f"[{', '.join(f'{x:.3f}' for x in weights)}] → [{', '.join(f'{x:.2f}' for x in output)}]"

    scaled = numbers(check.scaled_weights, check.scaled_output)
    unscaled = numbers(check.unscaled_weights, check.unscaled_output)
    lines = [
        "Which numbers does the lesson print?",
        f"    the lesson, first query: scores = [1, 0, 1], then {printed}",
        f"    softmax(scores / √2) : {scaled}   {'MATCHES' if check.scaled_matches else 'does not match'}",
        f"    softmax(scores)      : {unscaled}   {'MATCHES' if check.unscaled_matches else 'does not match'}",
    ]
    if check.scaled_matches and not check.unscaled_matches:
        lines.append(
            "    The lesson's weights and output are those of the SCALED scores (divided by √d_k = √2), although it "
            "prints the unscaled scores [1, 0, 1] just before them."
        )
    elif check.unscaled_matches and not check.scaled_matches:
        lines.append("    The lesson's numbers are those of the UNSCALED scores (no division by √d_k).")
    else:
        lines.append("    Neither computation reproduces the lesson's numbers exactly.")
    return "\n".join(lines)


def explain_lesson() -> str:
    """The full text printed by ``dotformer explain attention`` without arguments."""
    steps = attention_steps(lesson_problem())
    title = "Scaled dot-product attention, the lesson's worked example (paper §3.2.1, Eq. 1)"
    return format_steps(steps, title) + "\n\n" + format_lesson_check(lesson_check(steps))


def explain_json(argument: str) -> str:
    """The text printed by ``dotformer explain attention --json FILE_OR_STRING``.

    Raises:
        DataError, ShapeError: see :func:`parse_attention_json`.
    """
    steps = attention_steps(parse_attention_json(argument))
    return format_steps(steps, "Scaled dot-product attention on your Q, K, V (paper §3.2.1, Eq. 1)")
