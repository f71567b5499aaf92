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
        TrainConfig(lr_schedule="cosine")  # type: ignore[arg-type]


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
