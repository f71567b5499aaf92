"""Resume state: what a checkpoint holds besides the weights (counters, optimizer, scaler, data position, RNG
states), written with every checkpoint and read back exactly on ``--resume``; starting from another run's weights
(``--init-from``); and the helpers both need (metrics log trimming, vocabulary checks, the random generators)."""

from __future__ import annotations

import json
import math
import os
import random
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor, nn

from dotformer import checkpoint as ckpt
from dotformer.data.batching import BatchSampler, SamplerPosition
from dotformer.errors import CheckpointError, DataError
from dotformer.training.config import TrainConfig
from dotformer.training.distributed import DistContext, all_gather_tensor, barrier
from dotformer.training.step import EvalResult
from dotformer.training.stream import BatchStream

if TYPE_CHECKING:
    from dotformer.config import ModelConfig
    from dotformer.data.tokenizers import Tokenizer
    from dotformer.training.loop import TrainData

FINE_TUNABLE = ("dropout", "attention_dropout", "activation_dropout")  # ModelConfig fields --init-from may change


class ResumeState:
    """Saving and restoring a run: mixed into :func:`dotformer.training.loop.fit`'s trainer, which sets the
    attributes below (and ``elapsed()``)."""

    config: TrainConfig
    data: TrainData
    run_dir: Path | None
    info: dict[str, Any]  # extra JSON facts for every checkpoint's config.json
    context: DistContext
    model: nn.Module
    model_config: ModelConfig
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler | None
    sampler: BatchSampler
    stream: BatchStream
    # the counters a checkpoint saves
    step: int
    seconds: float
    tokens: int
    best_loss: float
    best_perplexity: float | None
    best_step: int | None
    best_score: float | None
    bad_evals: int
    last_valid: EvalResult | None
    last_checkpoint: Path | None
    saved_step: int | None

    def restore(self) -> None:
        """Load weights, optimizer, scaler, RNG states, counters and data position from the run's newest checkpoint.

        Raises:
            CheckpointError: nothing to resume, damaged files, another model config or vocabulary, another number
                of processes or other data.
        """
        assert self.run_dir is not None
        path, skipped = ckpt.choose_resume_checkpoint(self.run_dir)
        saved_config = ckpt.model_config_of(ckpt.read_json(path / ckpt.CONFIG_FILE), path / ckpt.CONFIG_FILE)
        if saved_config != self.model_config:
            diff = sorted(k for k, v in saved_config.to_dict().items() if self.model_config.to_dict()[k] != v)
            raise CheckpointError(
                f"cannot resume from {path}: its model config differs in {', '.join(diff)} "
                f"(see {path / ckpt.CONFIG_FILE})"
            )
        for name, tokenizer in (
            (ckpt.SRC_TOKENIZER_FILE, self.data.src_tokenizer),
            (ckpt.TGT_TOKENIZER_FILE, self.data.tgt_tokenizer),
        ):
            check_same_vocabulary(tokenizer, ckpt.load_tokenizer_file(path / name), path / name)
        ckpt.load_weights_into(self.model, path / ckpt.MODEL_FILE)
        state = ckpt.load_train_state(path)
        where = path / ckpt.TRAIN_STATE_JSON
        try:
            world_size = int(state["world_size"])
            if world_size != self.context.world_size:
                raise CheckpointError(
                    f"cannot resume from {path}: it was written by {world_size} processes, this run has "
                    f"{self.context.world_size} (the data position and dropout RNG are per process)"
                )
            try:
                self.stream.epoch, self.stream.index = self.sampler.load_state_dict(state["data"])
            except DataError as exc:
                raise CheckpointError(f"cannot resume from {path}: {exc}") from None
            self.optimizer.load_state_dict(state["optimizer"])
            if self.scaler is not None and state.get("scaler"):
                self.scaler.load_state_dict(state["scaler"])
            self.step, self.seconds, self.tokens = int(state["step"]), float(state["seconds"]), int(state["tokens"])
            best = state["best_valid_loss"]
            self.best_loss = math.inf if best is None else float(best)
            self.best_perplexity, self.best_step = state["best_valid_perplexity"], state["best_step"]
            saved_metric = state.get("best_metric", "loss")  # checkpoints of older versions chose by loss
            self.best_score = state.get("best_score", best) if saved_metric == "loss" else state.get("best_score")
            self.bad_evals = int(state.get("evals_without_improvement", 0))
            _set_rng_state(state["rng"], self.context)
        except (KeyError, IndexError, TypeError) as exc:
            raise CheckpointError(f"{where} is incomplete or corrupted: {exc!r}") from None
        except ValueError as exc:  # e.g. optimizer state of other shapes
            if isinstance(exc, CheckpointError):
                raise
            raise CheckpointError(f"{where} does not fit this model: {exc}") from None
        self.last_checkpoint = path
        self.saved_step = self.step
        if not self.context.is_main:
            return
        if skipped:
            warnings.warn(
                f"{'; '.join(skipped)}; resuming from {path} (step {self.step})", ckpt.CheckpointWarning, stacklevel=3
            )
        if saved_metric != self.config.best_metric and self.best_score is not None:
            warnings.warn(
                f"best/ was chosen by valid {saved_metric} up to step {self.step}; from now on by "
                f"{self.config.best_metric}: the next validation pass becomes the best one",
                ckpt.CheckpointWarning,
                stacklevel=3,
            )
            self.best_score, self.bad_evals = None, 0
        dropped = trim_metrics_log(self.run_dir / "metrics.jsonl", self.step)
        if dropped:
            warnings.warn(
                f"{self.run_dir / 'metrics.jsonl'}: removed {dropped} line(s) logged after step {self.step} "
                f"(those steps run again from {path})",
                ckpt.CheckpointWarning,
                stacklevel=3,
            )

    def initialise_from(self, path: Path) -> None:
        """Copy the weights of the checkpoint ``path`` into the model (fine-tuning; optimizer and schedule fresh).

        Raises:
            CheckpointError: a damaged checkpoint, another model config (dropout rates aside) or another vocabulary;
                the message names the checkpoint's value and this run's.
        """
        path = ckpt.resolve_checkpoint(path)
        ckpt.verify_checkpoint(path)
        saved = ckpt.model_config_of(ckpt.read_json(path / ckpt.CONFIG_FILE), path / ckpt.CONFIG_FILE).to_dict()
        ours = self.model_config.to_dict()
        diff = [
            f"{k} {saved[k]!r} there, {ours[k]!r} here" for k in ours if k not in FINE_TUNABLE and saved[k] != ours[k]
        ]
        if diff:
            raise CheckpointError(
                f"cannot initialise from {path}: its model config differs from this run's: {'; '.join(diff)} "
                f"(see {path / ckpt.CONFIG_FILE})"
            )
        for name, tokenizer, side in (
            (ckpt.SRC_TOKENIZER_FILE, self.data.src_tokenizer, "source"),
            (ckpt.TGT_TOKENIZER_FILE, self.data.tgt_tokenizer, "target"),
        ):
            saved_tokenizer = ckpt.load_tokenizer_file(path / name)
            try:
                check_same_vocabulary(tokenizer, saved_tokenizer, path / name)
            except CheckpointError as exc:
                raise CheckpointError(f"cannot initialise from {path}: {side} {exc}") from None
        ckpt.load_weights_into(self.model, path / ckpt.MODEL_FILE)
        self.info = {**self.info, "init_from": str(path)}

    def checkpoint_info(self) -> dict[str, Any]:
        from dotformer import __version__

        return {
            **self.info,
            "train": self.config.to_dict(),
            "step": self.step,
            "epoch": self.stream.epochs_done,
            "valid": None if self.last_valid is None else self.last_valid.__dict__,
            "dotformer_version": __version__,
        }

    def train_state(self) -> dict[str, Any]:
        """Everything besides the weights that exact resumption needs (collective: call on every rank)."""
        return {
            "step": self.step,
            "data": self.sampler.state_dict(SamplerPosition(self.stream.epoch, self.stream.index)),
            "seconds": self.elapsed(),
            "tokens": self.tokens,
            "best_valid_loss": None if math.isinf(self.best_loss) else self.best_loss,
            "best_valid_perplexity": self.best_perplexity,
            "best_step": self.best_step,
            "best_metric": self.config.best_metric,
            "best_score": self.best_score,
            "evals_without_improvement": self.bad_evals,
            "world_size": self.context.world_size,
            "optimizer": self.optimizer.state_dict(),
            "scaler": self.scaler.state_dict() if self.scaler is not None else None,
            "rng": _get_rng_state(self.context),
        }

    def save(self) -> None:
        """Write checkpoints/step_N, point last/ at it, drop old step checkpoints (rank 0 writes)."""
        state = self.train_state()  # every rank joins the RNG gather
        if self.run_dir is not None and self.context.is_main:
            path = self.run_dir / "checkpoints" / ckpt.step_dir_name(self.step)
            d = self.data
            ckpt.save_checkpoint(path, self.model, d.src_tokenizer, d.tgt_tokenizer, self.checkpoint_info(), state)
            ckpt.link_checkpoint(path, self.run_dir / "last")
            ckpt.prune_checkpoints(self.run_dir / "checkpoints", max(1, self.config.keep_last))
            self.last_checkpoint = path
        self.saved_step = self.step
        barrier(self.context)

    def save_best(self) -> None:
        if self.run_dir is None or not self.context.is_main:
            return
        d = self.data
        info = {**self.checkpoint_info(), "best": {"metric": self.config.best_metric, "score": self.best_score}}
        ckpt.save_checkpoint(self.run_dir / "best", self.model, d.src_tokenizer, d.tgt_tokenizer, info)


def trim_metrics_log(path: Path, step: int) -> int:
    """Remove the lines of a metrics.jsonl logged after ``step`` (and any line a crash left unfinished), so that a
    run resumed from the checkpoint of ``step`` logs those steps once. Rewritten atomically (temporary file,
    rename). Returns the number of lines removed (0: the file is left untouched)."""
    if not path.is_file():
        return 0
    kept, dropped = [], 0
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True):
        try:
            record = json.loads(line)
            keep = line.endswith("\n") and int(record["step"]) <= step
        except (ValueError, KeyError, TypeError):
            keep = False
        if keep:
            kept.append(line)
        else:
            dropped += 1
    if dropped:
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        with open(tmp, "w", encoding="utf-8") as f:
            f.writelines(kept)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    return dropped


def check_same_vocabulary(current: Tokenizer, saved: Tokenizer, path: Path) -> None:
    """Raise CheckpointError unless two tokenizers have the same tokens under the same ids."""
    if current.vocab_size != saved.vocab_size:
        raise CheckpointError(
            f"vocabulary mismatch: {path} has {saved.vocab_size} tokens, this run's tokenizer has {current.vocab_size}"
        )
    for i in range(current.vocab_size):
        if current.id_to_token(i) != saved.id_to_token(i):
            raise CheckpointError(
                f"vocabulary mismatch: token {i} is {saved.id_to_token(i)!r} in {path}, "
                f"{current.id_to_token(i)!r} in this run"
            )


# -- random number generators -----------------------------------------------------------------------------------------


def seed_everything(seed: int) -> None:
    """Seed torch (CPU and CUDA), Python's random and NumPy's global generator."""
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed % 2**32)


def _get_rng_state(context: DistContext) -> dict[str, Any]:
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


def _set_rng_state(state: dict[str, Any], context: DistContext) -> None:
    """Inverse of :func:`_get_rng_state`; each rank takes its own torch states."""
    torch.set_rng_state(_as_byte_tensor(state["torch"][context.rank]))
    if state.get("cuda") is not None and context.device.type == "cuda":
        torch.cuda.set_rng_state(_as_byte_tensor(state["cuda"][context.rank]), context.device)
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))


def _as_byte_tensor(value: Tensor) -> Tensor:
    return value.to(dtype=torch.uint8, device="cpu").contiguous()
