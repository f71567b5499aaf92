"""The reference engine: the lesson's own decoder on a loaded checkpoint.

It decodes with :mod:`dotformer.decoding.translate` (an encoder-decoder) or :mod:`dotformer.decoding.generate` (a
language model) and scores references with the validation pass of training
(:func:`dotformer.training.scoring.evaluate_loss`, without label smoothing); every other engine is tested equal to it.
Torch is imported only inside the methods.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from dotformer.decoding.engine import NLLResult, TokenCallback

if TYPE_CHECKING:
    from dotformer.checkpoint import LoadedCheckpoint
    from dotformer.data.read.types import Pair
    from dotformer.decoding.config import DecodeConfig
    from dotformer.decoding.inputs import EncodedTexts
    from dotformer.decoding.results import Translation


class TorchEngine:
    """The lesson's decoder on a loaded checkpoint: the reference engine (:mod:`dotformer.decoding.translate` for an
    encoder-decoder, :mod:`dotformer.decoding.generate` for a language model)."""

    name = "torch"
    batch_groups = 1  # a call's time grows slowly with its rows (each step's own work): a server waits for them all

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
        batches of ``batch_size`` pairs sorted by length (:func:`dotformer.training.scoring.evaluate_loss`).

        Raises:
            DataError: no pairs.
        """
        from dotformer.data.batch.batching import collate, encode_pairs, example_length
        from dotformer.decoding.order import length_sorted_batches
        from dotformer.errors import DataError
        from dotformer.training.scoring import evaluate_loss

        if not pairs:
            raise DataError("no pairs to score")
        loaded = self.checkpoint
        examples = encode_pairs(pairs, loaded.src_tokenizer, loaded.tgt_tokenizer)
        order = length_sorted_batches([example_length(e) for e in examples], batch_size)
        batches = [collate([examples[i] for i in batch], batch) for batch in order]
        result = evaluate_loss(loaded.model, batches, label_smoothing=0.0, pad_id=loaded.config.pad_id)
        return NLLResult(result.nll * result.num_tokens, result.num_tokens)

    def generate(
        self,
        prompt: Sequence[int],
        config: DecodeConfig,
        window: int,
        on_token: TokenCallback | None = None,
        stop_ids: Sequence[int] = (),
    ) -> list[list[int]]:
        """The new ids of each continuation: :func:`dotformer.decoding.generate.generate` on the model."""
        from dotformer.decoding.controls import controls_of
        from dotformer.decoding.generate import generate

        model, controls = self.checkpoint.model, controls_of(config, self.checkpoint.tgt_tokenizer)
        return [g.tokens for g in generate(model, prompt, config, window, on_token, stop_ids, controls)]

    def greedy_batch(
        self, prompts: Sequence[Sequence[int]], config: DecodeConfig, window: int, stop_ids: Sequence[int] = ()
    ) -> list[list[int]]:
        """The greedy continuation of each prompt (:meth:`generate` of each, one after another: the lesson's decoder
        continues one prompt at a time)."""
        return [self.generate(prompt, config, window, None, stop_ids)[0] for prompt in prompts]
