"""Sentence embeddings from an encoder: pool the encoder's memory into one vector per text.

    vectors = dotformer.load("runs/bert").embed(["a sentence", "another"], pooling="mean", normalize=True)  # (N, D)

The encoder reads each text as the model was trained to read it, and its memory (B, S, D) is pooled over the real
tokens of each row:

* **mean** pooling: the average of the memory rows of the text's real tokens, padding excluded,
  ``e = Σ_s m_s · keep_s / Σ_s keep_s`` (the special tokens the model reads count as real tokens, as in HF's
  ``attention_mask``);
* **cls** pooling: the first token's row, ``e = m_0``.

With ``normalize`` each vector is divided by its L2 norm (``e / max(‖e‖₂, 1e-12)``, so a zero vector stays zero), and
the dot product of two vectors is then their cosine similarity.

Defaults. An imported sentence-transformers model carries its own modules' settings (its ``Pooling`` module's mode and
whether a ``Normalize`` module follows, :func:`dotformer.imports.bert.sentence_transformers_modules`): left unset,
``pooling`` and ``normalize`` are those, as sentence-transformers applies them (:func:`embedding_settings`); any other
model pools by mean and does not normalise. ``normalize=False`` opts out of a model's Normalize.

Inputs. An encoder-only model (an imported BERT) reads ``[BOS] ids [EOS]``, BERT's ``[CLS] ... [SEP]``
(:func:`dotformer.imports.bert.bert_inputs`), so its CLS pooling is BERT's ``[CLS]`` vector; an encoder-decoder
model's encoder reads ``ids [EOS]``, the source it was trained on (:func:`dotformer.decoding.inputs.encode_sources`),
so its first token is the text's first token. A decoder-only model has no encoder and is refused. Texts are
normalised as the checkpoint's training sources were, and batched longest first by padded tokens
(:func:`dotformer.decoding.order.length_sorted_batches`); padding never reaches a vector, so a text's vector does
not depend on the texts batched with it (up to float rounding).

Long texts are cut as sentence-transformers cuts them: to ``max_seq_length`` tokens, special tokens included (an
imported sentence-transformers model's own, read from its ``sentence_bert_config.json``; else the model's
``max_len``), the first tokens kept and the last special token closing the text; one
:class:`~dotformer.decoding.inputs.TruncationWarning` per call says how many were cut. Pooling is
:func:`dotformer.heads.pool`, the classifier's.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from dotformer.data.tokenize.tokenizers import BOS_ID, PAD_ID
from dotformer.errors import ConfigError

if TYPE_CHECKING:
    import numpy as np

    from dotformer.decoding.inputs import EncodedTexts

POOLINGS: tuple[str, ...] = ("mean", "cls")  # the heads' poolings (dotformer.heads.pool), mean first: the default
NORM_EPS = 1e-12  # the smallest norm divided by in L2 normalisation (torch.nn.functional.normalize's default)


def embedding_settings(loaded: Any, pooling: str | None = None, normalize: bool | None = None) -> tuple[str, bool]:
    """The pooling and normalisation to embed with: those given, else the model's own (an imported
    sentence-transformers model's ``info["sentence_embedding"]``), else mean pooling without normalisation.

    Raises:
        ConfigError: an unknown pooling.
    """
    own = loaded.info.get("sentence_embedding") or {}
    chosen = pooling if pooling is not None else own.get("pooling", POOLINGS[0])
    if chosen not in POOLINGS:
        raise ConfigError(f"pooling {chosen!r} is not one of {', '.join(POOLINGS)}")
    return chosen, bool(normalize if normalize is not None else own.get("normalize", False))


def embedding_inputs(loaded: Any, texts: Sequence[str], max_seq_length: int | None = None) -> tuple[EncodedTexts, int]:
    """The texts as the encoder reads them (module docstring): ``[BOS] ids [EOS]`` for an encoder-only model,
    ``ids [EOS]`` for an encoder-decoder one, each cut to ``max_seq_length`` tokens (special tokens included) as
    sentence-transformers cuts them: the first tokens are kept, and the last special token closes the text.

    Args:
        loaded: a :class:`~dotformer.checkpoint.LoadedCheckpoint` (model, src_tokenizer, info, path).
        texts: the inputs as the user wrote them (normalised here as the training sources were).
        max_seq_length: the most tokens a text keeps, or None for no limit.

    Returns:
        (the encoded texts, how many of them were cut).
    """
    from dotformer.data.tokenize.tokenizers import EOS_ID
    from dotformer.decoding.inputs import encode_sources

    encoded = encode_sources(loaded, texts, None)
    ids = encoded.ids
    if loaded.model.config.arch == "encoder-only":
        ids = [[BOS_ID, *row] for row in ids]
    cut = 0
    if max_seq_length is not None:
        cut = sum(len(row) > max_seq_length for row in ids)
        ids = [row if len(row) <= max_seq_length else [*row[: max_seq_length - 1], EOS_ID] for row in ids]
    return encoded._replace(ids=ids), cut


def max_seq_length_of(loaded: Any, max_seq_length: int | None = None) -> int:
    """The most tokens (special tokens included) a text keeps: ``max_seq_length``, else the checkpoint's (an
    imported sentence-transformers model's ``sentence_bert_config.json``), else the model's ``max_len``.

    Raises:
        ConfigError: not an integer of at least 2 (a special token and one more), or above a learned positional
            table's ``max_len``.
    """
    from dotformer.decoding.inputs import check_max_input_length

    limit = max_seq_length if max_seq_length is not None else loaded.info.get("max_seq_length")
    limit = check_max_input_length(loaded.model.config, limit, "max_seq_length")
    if limit < 2:
        raise ConfigError(f"max_seq_length must be at least 2 tokens (the special tokens and one more), got {limit}")
    return limit


def embed_texts(
    loaded: Any,
    texts: Sequence[str],
    pooling: str | None = None,
    normalize: bool | None = None,
    batch_size: int = 64,
    max_tokens: int | None = None,
    max_seq_length: int | None = None,
) -> np.ndarray:
    """One vector per text: the encoder's memory pooled over the text's real tokens (module docstring).

    Args:
        loaded: a :class:`~dotformer.checkpoint.LoadedCheckpoint` with an encoder (encoder-only or
            encoder-decoder).
        texts: the inputs; an empty text is read as the special tokens alone.
        pooling: "mean" (over the real tokens, padding excluded) or "cls" (the first token); None: the model's own
            (:func:`embedding_settings`), else mean.
        normalize: divide each vector by its L2 norm; None: if the model has a Normalize module.
        batch_size: most texts encoded together. max_tokens: most padded tokens per batch (default
            :data:`~dotformer.decoding.order.DEFAULT_MAX_TOKENS`); a longer text is encoded alone.
        max_seq_length: most tokens (special tokens included) a text keeps; a longer one is cut there, as
            sentence-transformers cuts it (None: :func:`max_seq_length_of`).

    Returns:
        (N, D) float32 numpy array, row i for ``texts[i]`` (N = 0 for no texts).

    Raises:
        ConfigError: an unknown pooling, a decoder-only model, a bad batch size or ``max_seq_length``.

    Warns:
        UnknownTokenWarning: once per call when texts hold symbols outside the source vocabulary (an emoji read as
            ``[UNK]``). TruncationWarning: once per call when texts were cut to ``max_seq_length``.
    """
    import numpy as np
    import torch

    from dotformer.decoding.inputs import TruncationWarning, warn_unknown
    from dotformer.decoding.order import DEFAULT_MAX_TOKENS, length_sorted_batches
    from dotformer.decoding.translate import model_device, pad_batch
    from dotformer.heads import pool

    pooling, normalize = embedding_settings(loaded, pooling, normalize)
    if loaded.model.config.arch == "decoder-only":
        raise ConfigError(
            f"{loaded.path}: a decoder-only model has no encoder to embed with; use an encoder-only checkpoint "
            "(dotformer import --from bert) or an encoder-decoder one"
        )
    if not texts:
        return np.zeros((0, loaded.model.config.d_model), dtype=np.float32)
    limit = max_seq_length_of(loaded, max_seq_length)
    encoded, cut = embedding_inputs(loaded, texts, limit)
    warn_unknown(encoded, stacklevel=4)
    if cut:
        warnings.warn(
            f"{cut} of {len(texts)} input(s) had more than {limit} tokens (special tokens included) and were cut to "
            f"max_seq_length = {limit}, as sentence-transformers cuts them",
            TruncationWarning,
            stacklevel=4,
        )
    model, ids = loaded.model, encoded.ids
    device = model_device(model)
    vectors = torch.zeros(len(ids), model.config.d_model, dtype=torch.float32)  # (N, D)
    tokens = DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens
    with torch.inference_mode():
        for batch in length_sorted_batches([len(row) for row in ids], batch_size, tokens):
            src = pad_batch([ids[i] for i in batch], device)  # (B, S)
            memory = model.encode(src).memory  # (B, S, D)
            vectors[batch] = pool(memory.float(), src != PAD_ID, pooling).cpu()  # (B, D) float32
    if normalize:
        vectors = vectors / vectors.norm(dim=-1, keepdim=True).clamp(min=NORM_EPS)  # e / max(‖e‖₂, ε); 0 stays 0
    return np.ascontiguousarray(vectors.numpy(), dtype=np.float32)
