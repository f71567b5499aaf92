"""What an engine offers the commands: the protocols every engine implements, and what they return.

An engine decodes encoded sources (:class:`~dotformer.decoding.inputs.EncodedTexts`) with a
:class:`~dotformer.decoding.config.DecodeConfig` into :class:`~dotformer.decoding.results.Translation` lists, and scores
references teacher-forced (the perplexity of ``dotformer evaluate``). :class:`~dotformer.engines.torch.TorchEngine` does
both with the checkpoint's :class:`~dotformer.Transformer` (:func:`~dotformer.decoding.translate.decode_encoded`); the
CTranslate2 engine (:class:`dotformer.engines.ct2_translate.CT2Translate`) does both with CTranslate2, tested equal to
it.
:func:`~dotformer.decoding.evaluation.evaluate_pairs`, the Python API and the server call either one the same way.

This module does not import torch, so the engines' common types load without it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

if TYPE_CHECKING:
    from dotformer.config import ModelConfig
    from dotformer.data.read.types import Pair
    from dotformer.data.tokenize.tokenizers import Tokenizer
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
        batch_groups: how many groups of clients a server's calls take turns between (2 where a call's time grows
            about in proportion to its sentences, else 1; :class:`~dotformer.api.batcher.Batcher`, "Groups").
    """

    name: str
    checkpoint: CheckpointLike
    batch_groups: int

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
        batch_groups: as :class:`TranslationEngine`'s.
    """

    name: str
    checkpoint: CheckpointLike
    batch_groups: int

    def generate(
        self,
        prompt: Sequence[int],
        config: DecodeConfig,
        window: int,
        on_token: TokenCallback | None = None,
        stop_ids: Sequence[int] = (),
    ) -> list[list[int]]:
        """The new token ids of each continuation of ``prompt`` (see :func:`dotformer.decoding.generate.generate`;
        ``stop_ids``: an imported model's EOS ids, where its continuations end)."""
        ...

    def greedy_batch(
        self, prompts: Sequence[Sequence[int]], config: DecodeConfig, window: int, stop_ids: Sequence[int] = ()
    ) -> list[list[int]]:
        """The greedy continuation of each prompt (``config``: greedy, one continuation), each the one
        :meth:`generate` gives it alone (a server merges the greedy requests of several clients in one call)."""
        ...
