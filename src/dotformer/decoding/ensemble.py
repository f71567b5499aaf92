"""An ensemble of checkpoints decoded as one model: at every step, the average of the models' distributions.

    log P(y | prefix, X) = log( (1/M) Σ_m P_m(y | prefix, X) )        M models with the same vocabularies

(the average of the probabilities, computed from the log-probabilities with logsumexp, as fairseq ensembles; it is a
distribution again). Each model encodes the source itself and keeps its own key/value cache; the models may have any
sizes. Greedy, beam search and sampling take an :class:`Ensemble` wherever they take a model: the decoder of
:mod:`dotformer.decoding.incremental` runs one member per model. An ensemble of one model, or of copies of one model,
decodes exactly as that model does.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from dotformer.config import ModelConfig
from dotformer.errors import ConfigError
from dotformer.model import Transformer


class Ensemble(nn.Module):
    """M encoder-decoder models decoded together (see the module docstring).

    Attributes:
        models: the M models (an ``nn.ModuleList``: ``eval()`` and ``to()`` reach them all).

    Raises:
        ConfigError: no model, a model that is not an encoder-decoder, or vocabularies of different sizes.
    """

    def __init__(self, models: Sequence[Transformer]) -> None:
        super().__init__()
        if not models:
            raise ConfigError("an ensemble needs at least one model")
        first = models[0].config
        for i, model in enumerate(models):
            c = model.config
            if c.arch != "encoder-decoder":
                article = "an" if c.arch.startswith("encoder") else "a"
                raise ConfigError(
                    f"ensemble model {i} is {article} {c.arch} model; an ensemble decodes encoder-decoder models"
                )
            if (c.src_vocab_size, c.tgt_vocab_size) != (first.src_vocab_size, first.tgt_vocab_size):
                raise ConfigError(
                    f"ensemble model {i} has vocabularies of {c.src_vocab_size}/{c.tgt_vocab_size} tokens, model 0 "
                    f"{first.src_vocab_size}/{first.tgt_vocab_size}: the models must share their vocabularies"
                )
        self.models = nn.ModuleList(models)

    @property
    def config(self) -> ModelConfig:
        """The first model's config, for the vocabulary and the length limits (the shortest learned table of all)."""
        learned = [m.config.max_len for m in self.models if m.config.positional == "learned"]
        first = self.models[0].config
        return first.replace(positional="learned", max_len=min(learned)) if learned else first

    def source_mask(self, src: Tensor) -> Tensor:
        """The source padding mask (the same for every model): (B, 1, 1, S) bool."""
        return self.models[0].source_mask(src)


def average_log_probs(log_probs: Sequence[Tensor]) -> Tensor:
    """log of the mean of the M distributions: M tensors (N, V) float32 log-probabilities -> (N, V)."""
    if len(log_probs) == 1:
        return log_probs[0]
    return torch.stack(list(log_probs)).logsumexp(dim=0) - math.log(len(log_probs))  # (N, V)
