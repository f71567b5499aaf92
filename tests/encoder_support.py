"""Shared inputs of the encoder tasks' tests: words of two kinds (animals, places) among filler words, a sentence
drawn from them, and a tiny encoder config."""

from __future__ import annotations

import random

ANIMALS = ["cat", "dog", "horse", "bird", "fish", "cow", "sheep", "goat"]
PLACES = ["hill", "river", "city", "field", "road", "house", "sea", "town"]
FILLER = ["the", "a", "by", "near", "old", "small", "and", "with"]


def sentence(rng: random.Random, words: list[str]) -> str:
    """3 to 8 words drawn from ``FILLER`` and ``words``."""
    return " ".join(rng.choice(FILLER + words) for _ in range(rng.randint(3, 8)))


def encoder_toml(eval_every: int) -> str:
    """A tiny pre-LN encoder (2 layers, d_model 32) and a constant learning rate, validating every ``eval_every``
    steps (0: never)."""
    return f"""
[model]
preset = "tiny"
d_model = 32
num_heads = 2
d_ff = 64
num_encoder_layers = 2
dropout = 0.0
norm_first = true
positional = "learned"
[train]
max_tokens = 512
lr_schedule = "constant"
lr_peak = 3e-3
warmup_steps = 5
label_smoothing = 0.0
eval_every = {eval_every}
save_every = 0
log_every = 10
seed = 1
"""
