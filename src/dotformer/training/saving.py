"""Saving a run: a checkpoint of the newest step (weights, tokenizers, config, and everything exact resumption needs:
counters, optimizer, scaler, data position, random generators), ``best/`` at a new best validation pass."""

from __future__ import annotations

import math
import random
from typing import Any

import numpy as np
import torch

from dotformer import __version__
from dotformer import checkpoint as ckpt
from dotformer.data.batch.batching import SamplerPosition
from dotformer.training.distributed import DistContext, all_gather_tensor, barrier
from dotformer.training.ema import averaged_weights
from dotformer.training.state import Setup, TrainState


def save(setup: Setup, state: TrainState) -> None:
    """Write checkpoints/step_N, point last/ at it, drop old step checkpoints (rank 0 writes; collective: call on
    every rank). With a moving average of the weights (``setup.average``) the checkpoint's weights are the average,
    and its training state holds the trained weights (``raw_weights``) that exact resumption continues from."""
    saved = saved_state(setup, state)  # every rank joins the RNG gather
    if setup.run_dir is not None and setup.context.is_main:
        path = setup.run_dir / "checkpoints" / ckpt.step_dir_name(state.step)
        d = setup.data
        with averaged_weights(setup.average, setup.model) as raw:  # the average saved; the trained weights beside it
            if raw is not None:
                saved["raw_weights"] = raw
            info = checkpoint_info(setup, state)
            ckpt.save_checkpoint(path, setup.model, d.src_tokenizer, d.tgt_tokenizer, info, saved)
        ckpt.link_checkpoint(path, setup.run_dir / "last")
        ckpt.prune_checkpoints(setup.run_dir / "checkpoints", max(1, setup.config.keep_last))
        state.last_checkpoint = path
    state.saved_step = state.step
    barrier(setup.context)


def save_best(setup: Setup, state: TrainState) -> None:
    """Write best/: the weights of the best validation pass, with the metric and score that chose it (rank 0)."""
    if setup.run_dir is None or not setup.context.is_main:
        return
    d = setup.data
    best = {"metric": setup.config.best_metric, "score": state.best_score}
    info = {**checkpoint_info(setup, state), "best": best}
    ckpt.save_checkpoint(setup.run_dir / "best", setup.model, d.src_tokenizer, d.tgt_tokenizer, info)


def checkpoint_info(setup: Setup, state: TrainState) -> dict[str, Any]:
    """The JSON facts of a checkpoint's config.json: the run's info, the recipe, step, epoch, the newest pass."""

    return {
        **setup.info,
        "train": setup.config.to_dict(),
        "step": state.step,
        "epoch": setup.stream.epochs_done,
        "valid": None if state.last_valid is None else state.last_valid.__dict__,
        "dotformer_version": __version__,
    }


def saved_state(setup: Setup, state: TrainState) -> dict[str, Any]:
    """Everything besides the weights that exact resumption needs (collective: call on every rank)."""
    stream, context = setup.stream, setup.context
    scaler = setup.recipe.scaler
    return {
        "step": state.step,
        "data": stream.sampler.state_dict(SamplerPosition(stream.epoch, stream.index)),
        "seconds": state.elapsed(),
        "tokens": state.tokens,
        "best_valid_loss": None if math.isinf(state.best_loss) else state.best_loss,
        "best_valid_perplexity": state.best_perplexity,
        "best_step": state.best_step,
        "best_metric": setup.config.best_metric,
        "best_score": state.best_score,
        "evals_without_improvement": state.evals_without_gain,
        "world_size": context.world_size,
        "optimizer": setup.optimizer.state_dict(),
        "scaler": scaler.state_dict() if scaler is not None else None,
        "rng": rng_state(context),
    }


def seed_everything(seed: int) -> None:
    """Seed torch (CPU and CUDA), Python's random and NumPy's global generator."""
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed % 2**32)


def rng_state(context: DistContext) -> dict[str, Any]:
    """The generators' states: torch CPU (and CUDA) per rank as uint8 tensors; Python and NumPy as lists (rank 0)."""
    torch_states = all_gather_tensor(torch.get_rng_state(), context)
    cuda_states = None
    if context.device.type == "cuda":
        cuda_states = all_gather_tensor(torch.cuda.get_rng_state(context.device), context)
    version, internal, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "torch": torch_states,
        "cuda": cuda_states,
        "python": [version, list(internal), gauss],
        "numpy": [name, [int(k) for k in keys], int(pos), int(has_gauss), float(cached)],
    }
