"""The records of :func:`dotformer.training.loop.fit`: :class:`TrainData`, what it is given to train on;
:class:`TrainState`, where the run stands (what a checkpoint saves besides the weights, optimizer and data
position); and :class:`Setup`, what it trains with (fixed for the whole call)."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from dotformer.data.batch.batching import Batch, EncodedPair
from dotformer.data.batch.blocks import TokenStream
from dotformer.data.batch.labelled import LabelledExamples
from dotformer.data.prepared.arrays import PairArrays
from dotformer.data.tokenize.tokenizers import Tokenizer
from dotformer.training.best_metrics import DECODING_METRICS, ValidFigures
from dotformer.training.config import TrainConfig
from dotformer.training.distributed import DistContext
from dotformer.training.ema import WeightAverage
from dotformer.training.objective import NEXT_TOKEN, Objective
from dotformer.training.step import StepRecipe
from dotformer.training.stream import BatchStream

if TYPE_CHECKING:
    from dotformer.data.read.types import Pair
    from dotformer.training.scoring import EvalResult


@dataclass
class TrainData:
    """The encoded examples and tokenizers that :func:`fit` trains on.

    Attributes:
        train: the training pairs as arrays (a split of :class:`~dotformer.data.prepared.PreparedPairs`, memory-
            mapped; or a list of ``dotformer.data.batch.batching.encode_pairs``), a language model's text
            (:class:`~dotformer.data.batch.blocks.TokenStream`: batched in contiguous blocks), or an encoder's examples
            (:class:`~dotformer.data.batch.labelled.LabelledExamples`, views of prepared arrays).
        valid: the validation pairs, or text (may be empty: no validation).
        src_tokenizer, tgt_tokenizer: saved with every checkpoint.
        valid_pairs: the validation pairs as text, for a decoding ``best_metric`` (None: rebuilt from ``valid``
            by detokenising its ids, which loses symbols read as UNK).
        objective: what the model learns from them (:mod:`~dotformer.training.objective`): the next token for
            pairs and text, masked tokens or labels for an encoder's examples.
        best_metrics: the best metrics a run on them may choose ``best/`` by (:mod:`~dotformer.training.best_metrics`):
            the loss, and what the task offers (pairs: the decoding metrics; a classifier, a tagger: its figures).
        figures: the task's own figures of each validation pass beside the loss (a classifier's or a tagger's
            accuracy and macro-F1), logged and printed, and the best metrics among them; None: the loss only.
    """

    train: PairArrays | Sequence[EncodedPair] | TokenStream | LabelledExamples
    valid: PairArrays | Sequence[EncodedPair] | TokenStream | LabelledExamples
    src_tokenizer: Tokenizer
    tgt_tokenizer: Tokenizer
    valid_pairs: Sequence[Pair] | None = None
    objective: Objective = NEXT_TOKEN
    best_metrics: tuple[str, ...] = ("loss", *DECODING_METRICS)
    figures: ValidFigures | None = None


@dataclass
class TrainState:
    """Where a run stands. The counters of the runs resumed from are restored; the data position is the
    :class:`~dotformer.training.stream.BatchStream`'s (epoch, index), saved beside these."""

    step: int = 0  # optimizer steps done, those of the runs resumed from included
    tokens: int = 0  # target tokens trained on, in all
    seconds: float = 0.0  # training seconds of the runs resumed from (this call's are counted from `started`)
    started: float = field(default_factory=time.monotonic)  # time.monotonic() when this call's training began
    train_loss: float = math.nan  # label-smoothed loss of the newest step of this call (nan: none yet)
    best_loss: float = math.inf  # valid loss of the best validation pass (inf: none yet)
    best_perplexity: float | None = None  # valid perplexity of the best pass
    best_step: int | None = None  # the step of the best pass
    best_score: float | None = None  # config.best_metric at the best pass (what picks best/)
    evals_without_gain: int = 0  # validation passes since the best one (early stopping after config.patience)
    last_valid: EvalResult | None = None  # the newest validation pass
    evaluated_step: int | None = None  # the step of the newest validation pass
    saved_step: int | None = None  # the step of the newest checkpoint
    last_checkpoint: Path | None = None  # the newest checkpoint written or resumed from (rank 0 knows it)
    signal: int | None = None  # SIGINT/SIGTERM received: save and stop after the current step

    def elapsed(self) -> float:
        """Training seconds of the whole run: those of the runs resumed from plus this call's."""
        return self.seconds + time.monotonic() - self.started


@dataclass(frozen=True)
class Setup:
    """What one :func:`~dotformer.training.loop.fit` call trains with; set up before the first step."""

    model: nn.Module  # the Transformer, on its device (not the DDP or compiled wrapper the steps run through)
    optimizer: torch.optim.Optimizer  # Adam (training.optim); its learning rate is set before every step
    recipe: StepRecipe  # loss, clipping, precision and ranks of train_step
    config: TrainConfig  # the recipe and budgets
    data: TrainData  # examples and tokenizers
    stream: BatchStream  # the training batches, with the data position
    valid_batches: Sequence[Batch]  # this rank's validation batches (collated when a pass reads them)
    decode_pairs: list[Pair]  # the validation pairs decoded for a decoding best_metric (empty for "loss")
    run_dir: Path | None  # checkpoints, best/, last/ and metrics.jsonl (None: nothing written)
    info: dict[str, Any]  # extra JSON facts for every checkpoint's config.json ("init_from" is added here)
    average: WeightAverage | None = None  # the weights' moving average (config.ema_decay > 0), validated and saved

    @property
    def context(self) -> DistContext:
        """This process's place among the ranks."""
        return self.recipe.context
