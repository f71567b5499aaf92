"""What an engine offers the commands, and the reference engine: the lesson's own decoder.

An engine decodes encoded sources (:class:`~dotformer.decoding.inputs.EncodedTexts`) with a
:class:`~dotformer.decoding.config.DecodeConfig` into :class:`~dotformer.decoding.results.Translation` lists, and scores
references teacher-forced (the perplexity of ``dotformer evaluate``). :class:`TorchEngine` does both with the
checkpoint's :class:`~dotformer.Transformer` (:func:`~dotformer.decoding.translate.decode_encoded`); the CTranslate2
engine (:class:`dotformer.engines.ct2_translate.CT2Translate`) does both with CTranslate2, tested equal to it.
:func:`~dotformer.decoding.evaluation.evaluate_pairs`, the Python API and the server call either one the same way.

This module imports torch only inside :class:`TorchEngine`'s methods, so the engines' common types load without it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

if TYPE_CHECKING:
    from dotformer.checkpoint import LoadedCheckpoint
    from dotformer.config import ModelConfig
    from dotformer.data.tokenizers import Tokenizer
    from dotformer.data.types import Pair
    from dotformer.decoding.config import DecodeConfig
    from dotformer.decoding.inputs import EncodedTexts
    from dotformer.decoding.results import Translation


class NLLResult(NamedTuple):
    """Teacher-forced negative log-likelihood of the references.

    Attributes:
        total_nll: summed NLL in nats over all target tokens (EOS included).
        num_tokens: number of target tokens scored.
    """

    total_nll: float
    num_tokens: int


class CheckpointLike(Protocol):
    """What an engine says about its checkpoint: a :class:`~dotformer.checkpoint.LoadedCheckpoint` or, without the
    model, a :class:`~dotformer.checkpoint.files.CheckpointFiles`."""

    path: Path
    config: ModelConfig
    info: dict[str, Any]
    src_tokenizer: Tokenizer
    tgt_tokenizer: Tokenizer

    @property
    def context_window(self) -> int:
        """The most tokens the model reads at once (a language model's block size, else ``max_len``)."""
        ...


class TranslationEngine(Protocol):
    """An engine that decodes an encoder-decoder checkpoint.

    Attributes:
        name: ``"torch"`` or ``"ctranslate2"``.
        checkpoint: the checkpoint it runs (its config, info and tokenizers).
    """

    name: str
    checkpoint: CheckpointLike

    def decode(
        self,
        encoded: EncodedTexts,
        config: DecodeConfig,
        batch_size: int,
        progress: bool | None,
        max_tokens: int | None,
        prefixes: Sequence[Sequence[int]] | None = None,
        scores: bool = True,
    ) -> list[list[Translation]]:
        """Decode encoded sources (see :func:`~dotformer.decoding.translate.decode_encoded`); ``max_tokens`` None is
        the engine's default batching; ``scores`` False may skip what only the scores need (the CTranslate2 engine's
        scoring pass: its hypotheses then carry the search's score and no log-probabilities)."""
        ...

    def reference_nll(self, pairs: Sequence[Pair], batch_size: int) -> NLLResult:
        """The summed teacher-forced NLL of each pair's target given its source (EOS included, no smoothing)."""
        ...


TokenCallback = Callable[[Any], None]  # called with the tokens of each generation step (its [0] is the first row's)


class GenerationEngine(Protocol):
    """An engine that continues prompts with a decoder-only checkpoint.

    Attributes:
        name: ``"torch"`` or ``"ctranslate2"``.
        checkpoint: the checkpoint it runs.
    """

    name: str
    checkpoint: CheckpointLike

    def generate(
        self, prompt: Sequence[int], config: DecodeConfig, window: int, on_token: TokenCallback | None = None
    ) -> list[list[int]]:
        """The new token ids of each continuation of ``prompt`` (see :func:`dotformer.decoding.generate.generate`)."""
        ...


class TorchEngine:
    """The lesson's decoder on a loaded checkpoint: the reference engine (:mod:`dotformer.decoding.translate` for an
    encoder-decoder, :mod:`dotformer.decoding.generate` for a language model)."""

    name = "torch"

    def __init__(self, checkpoint: LoadedCheckpoint) -> None:
        self.checkpoint = checkpoint

    def decode(
        self,
        encoded: EncodedTexts,
        config: DecodeConfig,
        batch_size: int,
        progress: bool | None,
        max_tokens: int | None,
        prefixes: Sequence[Sequence[int]] | None = None,
        scores: bool = True,
    ) -> list[list[Translation]]:
        """:func:`~dotformer.decoding.translate.decode_encoded` (``max_tokens`` None: :data:`~dotformer.decoding.order
        .DEFAULT_MAX_TOKENS`; its scores cost nothing extra, so ``scores`` is ignored)."""
        from dotformer.decoding.order import DEFAULT_MAX_TOKENS
        from dotformer.decoding.translate import decode_encoded

        tokens = DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens
        return decode_encoded(self.checkpoint, encoded, config, batch_size, progress, tokens, prefixes)

    def reference_nll(self, pairs: Sequence[Pair], batch_size: int) -> NLLResult:
        """Summed NLL of each pair's target given its source, teacher-forced (no label smoothing, eval mode), over
        batches of ``batch_size`` pairs sorted by length (:func:`dotformer.metrics.scoring.evaluate_loss`).

        Raises:
            DataError: no pairs.
        """
        from dotformer.data.batching import collate, encode_pairs, example_length
        from dotformer.decoding.order import length_sorted_batches
        from dotformer.errors import DataError
        from dotformer.metrics.scoring import evaluate_loss

        if not pairs:
            raise DataError("no pairs to score")
        loaded = self.checkpoint
        examples = encode_pairs(pairs, loaded.src_tokenizer, loaded.tgt_tokenizer)
        order = length_sorted_batches([example_length(e) for e in examples], batch_size)
        batches = [collate([examples[i] for i in batch], batch) for batch in order]
        result = evaluate_loss(loaded.model, batches, label_smoothing=0.0, pad_id=loaded.config.pad_id)
        return NLLResult(result.nll * result.num_tokens, result.num_tokens)

    def generate(
        self, prompt: Sequence[int], config: DecodeConfig, window: int, on_token: TokenCallback | None = None
    ) -> list[list[int]]:
        """The new ids of each continuation: :func:`dotformer.decoding.generate.generate` on the model."""
        from dotformer.decoding.generate import generate

        return [g.tokens for g in generate(self.checkpoint.model, prompt, config, window, on_token)]
