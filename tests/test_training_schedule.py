"""Learning-rate schedules: values at known steps (paper §5.3, Eq. 3)."""

from __future__ import annotations

import math

import pytest

from dotformer.errors import ConfigError
from dotformer.training.config import TrainConfig
from dotformer.training.schedule import constant_lr, cooldown_factor, inverse_sqrt_lr, learning_rate, noam_lr


def test_noam_known_values() -> None:
    # base model: d_model = 512, warmup = 4000
    assert noam_lr(0, 512, 4000) == 0.0
    assert noam_lr(1, 512, 4000) == pytest.approx(512**-0.5 * 4000**-1.5)  # 5.52e-8
    assert noam_lr(4000, 512, 4000) == pytest.approx(6.987712429686843e-4)  # the peak, (512 · 4000)^-0.5
    assert noam_lr(16000, 512, 4000) == pytest.approx(6.987712429686843e-4 / 2)  # 1/√step: 4× the steps, half
    assert noam_lr(2000, 512, 4000) == pytest.approx(6.987712429686843e-4 / 2)  # linear warmup: half-way, half
    assert noam_lr(100, 256, 50, scale=2.0) == pytest.approx(2 * 256**-0.5 * 100**-0.5)


def test_noam_peaks_at_warmup() -> None:
    values = [noam_lr(s, 64, 100) for s in range(1, 400)]
    assert max(range(len(values)), key=values.__getitem__) + 1 == 100


def test_inverse_sqrt_known_values() -> None:
    assert inverse_sqrt_lr(0, 1e-3, 10) == 0.0
    assert inverse_sqrt_lr(5, 1e-3, 10) == pytest.approx(5e-4)
    assert inverse_sqrt_lr(10, 1e-3, 10) == pytest.approx(1e-3)
    assert inverse_sqrt_lr(40, 1e-3, 10) == pytest.approx(5e-4)
    assert inverse_sqrt_lr(9, 1e-3, 0) == pytest.approx(1e-3 / 3)


def test_constant() -> None:
    assert constant_lr(5, 1e-3, 10) == pytest.approx(5e-4)
    assert constant_lr(500, 1e-3, 10) == pytest.approx(1e-3)


def test_learning_rate_dispatch() -> None:
    assert learning_rate(8, TrainConfig(warmup_steps=4), 16) == pytest.approx(16**-0.5 * 8**-0.5)
    cfg = TrainConfig(lr_schedule="inverse_sqrt", lr_peak=2e-3, warmup_steps=4)
    assert learning_rate(16, cfg, 16) == pytest.approx(1e-3)
    assert math.isfinite(learning_rate(1, TrainConfig(lr_schedule="constant", warmup_steps=0), 16))


def test_bad_arguments() -> None:
    with pytest.raises(ConfigError):
        noam_lr(-1, 512, 4000)
    with pytest.raises(ConfigError):
        TrainConfig(lr_schedule="noam", warmup_steps=0)
    with pytest.raises(ConfigError):
        TrainConfig(lr_schedule="exponential")  # type: ignore[arg-type]


def test_cooldown_factor_falls_linearly_over_the_final_fraction() -> None:
    assert cooldown_factor(1.0, 0.0) == cooldown_factor(0.0, 0.0) == 1.0  # no cooldown
    assert cooldown_factor(1.0, 0.2) == cooldown_factor(0.2, 0.2) == 1.0  # before and at its start
    assert cooldown_factor(0.1, 0.2) == pytest.approx(0.5)  # half-way through it
    assert cooldown_factor(0.05, 0.25) == pytest.approx(0.2)
    assert cooldown_factor(0.0, 0.2) == 0.0 and cooldown_factor(-0.01, 0.2) == 0.0  # at the end (and a clock past it)
    assert cooldown_factor(0.3, 1.0) == pytest.approx(0.3)  # the whole run: linear decay from the start
    for bad in (-0.1, 1.5):
        with pytest.raises(ConfigError, match="cooldown"):
            cooldown_factor(0.5, bad)
        with pytest.raises(ConfigError, match="lr_cooldown"):
            TrainConfig(lr_cooldown=bad)


@pytest.mark.parametrize("schedule", ["cosine", "linear"])
def test_cosine_and_linear_fall_from_the_peak_to_zero_at_the_end_of_the_budget(schedule: str) -> None:
    """HF's get_cosine_schedule_with_warmup / get_linear_schedule_with_warmup on a 100-step budget, 10 warmup
    steps: lr(step) = peak · step / 10 in the warmup, then peak · ½(1 + cos(π p)) or peak · (1 - p), with
    p = (step - 10) / 90."""
    from dotformer.training.schedule import decay_factor

    config = TrainConfig(lr_schedule=schedule, lr_peak=1e-3, warmup_steps=10, max_steps=100)

    def lr(step: int) -> float:  # as the loop computes it: the budget left after step - 1 steps
        return learning_rate(step, config, 64) * decay_factor(config, 1.0 - (step - 1) / 100)

    def expected(step: int) -> float:
        if step <= 10:
            return 1e-3 * step / 10
        p = (step - 1 - 10) / 90
        return 1e-3 * (0.5 * (1 + math.cos(math.pi * p)) if schedule == "cosine" else 1 - p)

    for step in (1, 5, 10, 11, 30, 55, 80, 100):
        assert lr(step) == pytest.approx(expected(step), rel=1e-12, abs=1e-15), step
    assert decay_factor(config, 0.0) == 0.0 and decay_factor(config, 1.0) == 1.0
    cooled = TrainConfig(lr_schedule=schedule, lr_peak=1e-3, warmup_steps=10, max_steps=100, lr_cooldown=0.5)
    assert decay_factor(cooled, 0.25) == pytest.approx(decay_factor(config, 0.25) * 0.5)  # a cooldown multiplies
