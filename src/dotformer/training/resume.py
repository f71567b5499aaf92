"""Starting from a checkpoint: resuming a run exactly (``--resume``: weights, optimizer, scaler, counters, data
position, random generators) and starting a fresh run from another run's weights (``--init-from``); the checks both
make, and the metrics log trimmed back to the resumed step."""

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
from torch import Tensor

from dotformer import checkpoint as ckpt
from dotformer.checkpoint.adapters import LORA_KEY, base_reference, full_weights, load_adapted, load_base
from dotformer.errors import CheckpointError, DataError
from dotformer.lora import is_adapted
from dotformer.training.ctc import ctc_head_of
from dotformer.training.distributed import DistContext
from dotformer.training.ema import load_trained_weights
from dotformer.training.progress import count
from dotformer.training.state import Setup, TrainState

if TYPE_CHECKING:
    from dotformer.data.tokenize.tokenizers import Tokenizer

FINE_TUNABLE = ("dropout", "attention_dropout", "activation_dropout")  # ModelConfig fields --init-from may change
HEAD_FIELDS = ("head", "num_labels", "pooling")  # an encoder fine-tuned for labels takes a fresh head of its own
HEAD_TENSORS = ("classifier.",)  # the names of that head's tensors (dotformer.heads)


def restore(setup: Setup, state: TrainState) -> None:
    """Load weights, optimizer, scaler, RNG states, counters and data position from the run's newest checkpoint (and
    the moving average of the weights, with the trained weights saved beside it: :func:`restore_average`).

    Raises:
        CheckpointError: nothing to resume, damaged files, another model config or vocabulary, another number
            of processes or other data.
    """
    assert setup.run_dir is not None
    run_dir, context, model_config = setup.run_dir, setup.context, setup.model.config
    path, skipped = ckpt.choose_resume_checkpoint(run_dir)
    saved_info = ckpt.read_json(path / ckpt.CONFIG_FILE)
    saved_config = ckpt.model_config_of(saved_info, path / ckpt.CONFIG_FILE)
    if saved_config != model_config:
        diff = sorted(k for k, v in saved_config.to_dict().items() if model_config.to_dict()[k] != v)
        raise CheckpointError(
            f"cannot resume from {path}: its model config differs in {', '.join(diff)} (see {path / ckpt.CONFIG_FILE})"
        )
    for name, tokenizer in (
        (ckpt.SRC_TOKENIZER_FILE, setup.data.src_tokenizer),
        (ckpt.TGT_TOKENIZER_FILE, setup.data.tgt_tokenizer),
    ):
        check_same_vocabulary(tokenizer, ckpt.load_tokenizer_file(path / name), path / name)
    load_resumed_weights(setup, path, saved_info)
    saved = ckpt.load_train_state(path)
    where = path / ckpt.TRAIN_STATE_JSON
    try:
        world_size = int(saved["world_size"])
        if world_size != context.world_size:
            raise CheckpointError(
                f"cannot resume from {path}: it was written by {world_size} processes, this run has "
                f"{context.world_size} (the data position and dropout RNG are per process)"
            )
        try:
            setup.stream.epoch, setup.stream.index = setup.stream.sampler.load_state_dict(saved["data"])
        except DataError as exc:
            raise CheckpointError(f"cannot resume from {path}: {exc}") from None
        setup.optimizer.load_state_dict(saved["optimizer"])
        if setup.recipe.scaler is not None and saved.get("scaler"):
            setup.recipe.scaler.load_state_dict(saved["scaler"])
        state.step, state.seconds, state.tokens = int(saved["step"]), float(saved["seconds"]), int(saved["tokens"])
        best = saved["best_valid_loss"]
        state.best_loss = math.inf if best is None else float(best)
        state.best_perplexity, state.best_step = saved["best_valid_perplexity"], saved["best_step"]
        saved_metric = saved.get("best_metric", "loss")  # checkpoints of older versions chose by loss
        state.best_score = saved.get("best_score", best) if saved_metric == "loss" else saved.get("best_score")
        state.evals_without_gain = int(saved.get("evals_without_improvement", 0))
        set_rng_state(saved["rng"], context)
        restore_average(setup, saved.get("raw_weights"), path / ckpt.TRAIN_STATE_TENSORS)
    except (KeyError, IndexError, TypeError) as exc:
        raise CheckpointError(f"{where} is incomplete or corrupted: {exc!r}") from None
    except ValueError as exc:  # e.g. optimizer state of other shapes
        if isinstance(exc, CheckpointError):
            raise
        raise CheckpointError(f"{where} does not fit this model: {exc}") from None
    state.last_checkpoint = path
    state.saved_step = state.step
    if context.is_main:
        _say_what_changed(setup, state, path, skipped, saved_metric)


def restore_average(setup: Setup, raw: dict[str, Tensor] | None, source: Path) -> None:
    """After a checkpoint's weights are loaded: a run with a moving average of the weights (``setup.average``,
    :mod:`~dotformer.training.ema`) takes them as its average, and the model takes the trained weights saved beside
    them (``raw``: None when the checkpoint's run kept no average, whose weights are the trained ones).

    Raises:
        CheckpointError: ``raw`` lacks a trained parameter or holds one of another shape.
    """
    if setup.average is not None:
        setup.average.reset(setup.model)
    if raw is not None:
        load_trained_weights(setup.model, raw, str(source))


def load_resumed_weights(setup: Setup, path: Path, info: dict[str, Any]) -> None:
    """The weights of the checkpoint ``path`` (``info``: its config.json) into the run's model; an adapted run's
    adapters onto their base (:mod:`dotformer.checkpoint.adapters`), whose reference its next checkpoints keep.

    Raises:
        CheckpointError: adapters where the run has none or the other way round, or other adapters than the run's.
    """
    has_head, saved_head = ctc_head_of(setup.model) is not None, _trained_with_ctc(info)
    if has_head != saved_head:
        raise CheckpointError(
            f"cannot resume from {path}: it was trained {'with' if saved_head else 'without'} a CTC head, and this "
            f"run asks for {'one' if has_head else 'none'} (--ctc-weight)"
        )
    adapted, saved_adapted = is_adapted(setup.model), LORA_KEY in info
    if adapted != saved_adapted:
        raise CheckpointError(
            f"cannot resume from {path}: it was trained {'with' if saved_adapted else 'without'} LoRA adapters, and "
            f"this run asks for {'them' if adapted else 'none'} (--lora-rank)"
        )
    if not adapted:
        ckpt.load_weights_into(setup.model, path / ckpt.MODEL_FILE)
        return
    try:
        load_adapted(setup.model, path, info)
    except CheckpointError as exc:
        raise CheckpointError(f"cannot resume: {exc}") from None
    setup.info[LORA_KEY] = info[LORA_KEY]


def _trained_with_ctc(info: dict[str, Any]) -> bool:
    """Whether a checkpoint's config.json says its run trained a CTC head (its recipe's ctc_weight)."""
    train = info.get("train") if isinstance(info.get("train"), dict) else {}
    weight = train.get("ctc_weight", 0.0)
    return isinstance(weight, (int, float)) and weight > 0


def _say_what_changed(setup: Setup, state: TrainState, path: Path, skipped: list[str], saved_metric: str) -> None:
    """Rank 0's warnings on resuming: damaged newer checkpoints skipped, another best_metric, metrics lines removed."""
    assert setup.run_dir is not None
    if skipped:
        warnings.warn(
            f"{'; '.join(skipped)}; resuming from {path} (step {state.step:,})", ckpt.CheckpointWarning, stacklevel=4
        )
    if saved_metric != setup.config.best_metric and state.best_score is not None:
        warnings.warn(
            f"best/ was chosen by valid {saved_metric} up to step {state.step:,}; from now on by "
            f"{setup.config.best_metric}: the next validation pass becomes the best one",
            ckpt.CheckpointWarning,
            stacklevel=4,
        )
        state.best_score, state.evals_without_gain = None, 0
    dropped = trim_metrics_log(setup.run_dir / "metrics.jsonl", state.step)
    if dropped:
        warnings.warn(
            f"{setup.run_dir / 'metrics.jsonl'}: removed {count(dropped, 'line')} logged after step {state.step:,} "
            f"(those steps run again from {path})",
            ckpt.CheckpointWarning,
            stacklevel=4,
        )


def initialise_from(setup: Setup, path: Path) -> None:
    """Copy the weights of the checkpoint ``path`` into the model (fine-tuning; optimizer and schedule fresh) and
    record it as ``init_from`` in ``setup.info``. A model whose head differs from the checkpoint's (an encoder's
    classifier on a masked language model or an imported BERT) takes every weight but the head's, which starts as
    initialised. A model with LoRA adapters takes them into its frozen tensors (the adapters start as initialised)
    and records ``path`` as their base (``setup.info["lora"]``); an adapted checkpoint gives its merged weights. A
    CTC head (``--ctc-weight``, :mod:`~dotformer.training.ctc`) starts as initialised; the checkpoint's is left out.

    Raises:
        CheckpointError: a damaged checkpoint, another model config (dropout rates and the head aside) or another
            vocabulary; the message names the checkpoint's value and this run's.
    """
    path, info, config = ckpt.open_checkpoint(path)
    saved = config.to_dict()
    ours = setup.model.config.to_dict()
    free = (*FINE_TUNABLE, *HEAD_FIELDS)
    diff = [f"{k} {saved[k]!r} there, {ours[k]!r} here" for k in ours if k not in free and saved[k] != ours[k]]
    if diff:
        raise CheckpointError(
            f"cannot initialise from {path}: its model config differs from this run's: {'; '.join(diff)} "
            f"(see {path / ckpt.CONFIG_FILE})"
        )
    for name, tokenizer, side in (
        (ckpt.SRC_TOKENIZER_FILE, setup.data.src_tokenizer, "source"),
        (ckpt.TGT_TOKENIZER_FILE, setup.data.tgt_tokenizer, "target"),
    ):
        saved_tokenizer = ckpt.load_tokenizer_file(path / name)
        try:
            check_same_vocabulary(tokenizer, saved_tokenizer, path / name)
        except CheckpointError as exc:
            raise CheckpointError(f"cannot initialise from {path}: {side} {exc}") from None
    fresh_head = any(saved[k] != ours[k] for k in HEAD_FIELDS)
    if is_adapted(setup.model) or LORA_KEY in info:  # the frozen weights; an adapted checkpoint's merged
        load_base(setup.model, full_weights(path), path, head=not fresh_head)
    else:
        fresh = (*(HEAD_TENSORS if fresh_head else ()), *ckpt.TRAINING_ONLY)  # a CTC head starts afresh
        ckpt.load_weights_into(setup.model, path / ckpt.MODEL_FILE, fresh=fresh)
    if is_adapted(setup.model):  # its checkpoints save the adapters with a reference to this base
        setup.info[LORA_KEY] = base_reference(setup.model, path)
    setup.info["init_from"] = str(path)


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


def set_rng_state(saved: dict[str, Any], context: DistContext) -> None:
    """Inverse of :func:`dotformer.training.saving.rng_state`; each rank takes its own torch states."""
    torch.set_rng_state(_as_byte_tensor(saved["torch"][context.rank]))
    if saved.get("cuda") is not None and context.device.type == "cuda":
        torch.cuda.set_rng_state(_as_byte_tensor(saved["cuda"][context.rank]), context.device)
    version, internal, gauss = saved["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = saved["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))


def _as_byte_tensor(value: Tensor) -> Tensor:
    return value.to(dtype=torch.uint8, device="cpu").contiguous()
