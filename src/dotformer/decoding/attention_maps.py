"""Attention maps of a trained model on one input: what each head of each layer looks at while it decodes.

:func:`attention_weights` decodes the input greedily with the model itself (or takes a given target), then runs the
encoder and the decoder once more over that output (teacher forcing on the model's own tokens) with
``need_weights=True`` and keeps three kinds of maps per layer and head:

* encoder self-attention (S × S): source token i reads source token j;
* decoder masked self-attention (T × T): target position i reads the earlier target positions j <= i;
* cross-attention (T × S): the decoder position that predicts output token i reads source token j (the alignment).

An encoder-only model (BERT's family) has one kind too, ``encoder`` (:func:`encoder_attention_weights`): every token
of the text reads every other, both sides, as the padding mask alone allows. A decoder-only model has one kind,
``decoder_self`` (:func:`lm_attention_weights`): each token of a text (the query
row) attends to itself and the tokens before it (the key columns), so every map is zero above the diagonal, the
lesson's causal mask made visible. The text is read as ``dotformer generate`` reads a prompt (a line end first: the
start of a line), and the row labels predicted are the model's most likely next tokens.

The maps are numbers; :mod:`dotformer.plots.attention` draws them, :mod:`dotformer.explore` shows them in a page and
:meth:`dotformer.api.Translator.translate` returns them (``attention=True``). Shapes follow the legend in
:mod:`dotformer.attention`; L = number of layers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, NamedTuple

import numpy as np
import torch

from dotformer.decoding.incremental import inference
from dotformer.decoding.inputs import encode_prompt, encode_with_masks, generated_text, text_rules
from dotformer.errors import ConfigError, DataError

MapKind = Literal["encoder", "decoder_self", "cross"]
MAP_KINDS: tuple[MapKind, ...] = ("encoder", "decoder_self", "cross")
LM_MAP_KINDS: tuple[MapKind, ...] = ("decoder_self",)  # the one kind of a decoder-only model
ENCODER_MAP_KINDS: tuple[MapKind, ...] = ("encoder",)  # the one kind of an encoder-only model
# Special token ids shared by every tokenizer (dotformer.data.tokenize.tokenizers): PAD=0, BOS=1, EOS=2, UNK=3.
SPECIAL_LABELS = ("<pad>", "<s>", "</s>", "<unk>")
PAD, BOS, EOS = 0, 1, 2


class AttentionMaps(NamedTuple):
    """Every attention weight of one source sentence and the model's greedy output for it.

    Attributes:
        source_text: the input text.
        output_text: the model's greedy output, detokenised; when forced, the normalised target with each symbol
            outside the target vocabulary shown as "<unk>".
        src_tokens: S labels: the source tokens, then "</s>".
        tgt_tokens: T labels of the decoder's input positions: "<s>", then the output tokens.
        out_tokens: T labels of ``next_ids``: when the model decoded, the token it predicts (argmax, PAD and BOS
            excluded as in greedy decoding) at each decoder position: the greedy output followed by "</s>" when
            decoding finished with EOS; when forced, the given output's tokens followed by "</s>" (the model's own
            argmax is in ``logits``).
        encoder: (L, H, S, S) float32 encoder self-attention weights (rows sum to 1).
        decoder_self: (L, H, T, T) float32 decoder self-attention weights (zero above the diagonal).
        cross: (L, H, T, S) float32 cross-attention weights.
        logits: (T, V) float32 generator logits at each decoder position (before greedy decoding's PAD/BOS mask);
            ``softmax`` of a row is the model's distribution over the next token.
        next_ids: T ids, the token each decoder position is read as predicting: the argmax of ``out_tokens`` when
            the model decoded, the given target followed by EOS when it was teacher-forced (``forced``).
        forced: True when ``target`` was given (forced decoding of a reference), False for greedy decoding.
    """

    source_text: str
    output_text: str
    src_tokens: list[str]
    tgt_tokens: list[str]
    out_tokens: list[str]
    encoder: np.ndarray
    decoder_self: np.ndarray
    cross: np.ndarray
    logits: np.ndarray | None = None
    next_ids: tuple[int, ...] = ()
    forced: bool = False

    @property
    def num_layers(self) -> int:
        """L, the number of layers (the same in encoder and decoder for plotting; see :func:`attention_weights`)."""
        return int(self.encoder.shape[0])

    @property
    def num_heads(self) -> int:
        """H, the number of heads per layer."""
        return int(self.encoder.shape[1])

    def kind(self, kind: MapKind) -> np.ndarray:
        """The (L, H, rows, cols) array of one map kind."""
        if kind not in MAP_KINDS:
            raise ConfigError(f"unknown attention map kind {kind!r}; choose one of {', '.join(MAP_KINDS)}")
        return {"encoder": self.encoder, "decoder_self": self.decoder_self, "cross": self.cross}[kind]

    def labels(self, kind: MapKind) -> tuple[list[str], list[str]]:
        """(row labels, column labels) of one map kind (cross rows: the token each position predicts, or is scored
        on under forced decoding)."""
        if kind == "encoder":
            return self.src_tokens, self.src_tokens
        if kind == "decoder_self":
            return self.tgt_tokens, self.tgt_tokens
        if self.forced:  # forced decoding: each row is scored on the reference token that follows, then EOS
            return [*self.tgt_tokens[1:], SPECIAL_LABELS[EOS]], self.src_tokens
        return self.out_tokens, self.src_tokens


SHOWN_LABELS = 5  # a classifier's output text: its likeliest labels with their probabilities
VISIBLE_WHITESPACE = str.maketrans({" ": "\u2423", "\t": "\u21e5", "\n": "\u21b5"})  # ␣ ⇥ ↵


def token_label(tokenizer: Any, token_id: int) -> str:
    """The printable label of one token id: special ids get their fixed names, and a token made of whitespace alone
    (a character model's space) shows it as a visible symbol (␣ for a space, ⇥ a tab, ↵ a line break), where it
    would be a blank axis label."""
    if 0 <= token_id < len(SPECIAL_LABELS):
        return SPECIAL_LABELS[token_id]
    label = str(tokenizer.id_to_token(token_id))
    return label.translate(VISIBLE_WHITESPACE) if label.isspace() else label


def greedy_output_ids(model: torch.nn.Module, src: torch.Tensor) -> list[int]:
    """The model's greedy output ids (no BOS/EOS) for a (1, S) source, with :func:`dotformer.decoding.greedy_decode`."""
    from dotformer.decoding import DecodeConfig, greedy_decode

    return list(greedy_decode(model, src, DecodeConfig(strategy="greedy"))[0][0].tokens)


def attention_weights(loaded: Any, text: str, target: str | None = None) -> AttentionMaps:
    """Decode ``text`` greedily with the model and return every attention map of that decoding.

    Args:
        loaded: a :class:`dotformer.checkpoint.LoadedCheckpoint` (anything with ``model``, ``src_tokenizer`` and
            ``tgt_tokenizer``) holding an encoder-decoder Transformer.
        text: the source text as a user wrote it; it is read exactly as ``dotformer translate`` reads it
            (:func:`dotformer.decoding.inputs.encode_sources`: e.g. lower case for a CMUdict model), and
            ``source_text`` of the result is that normalised text.
        target: teacher-force this target text instead of the model's greedy output (None: decode); it is
            normalised as the checkpoint's training targets were (:func:`dotformer.decoding.inputs.encode_target`:
            stress digits stripped for a CMUdict model trained with ``strip_stress``); a symbol outside the target
            vocabulary is read as <unk> (``output_text`` shows it so), never dropped.

    Returns:
        :class:`AttentionMaps` with arrays equal to ``model.encode(src, need_weights=True).self_weights`` and
        ``model.decode(tgt_in, memory, src_mask, need_weights=True)``'s weights for batch row 0, stacked over layers.

    Raises:
        DataError: the text is empty after tokenisation. ConfigError: the model is not an encoder-decoder.
        InputTooLongError: the text has more tokens than the model's ``max_len``.

    Warns:
        UnknownTokenWarning: symbols outside the source vocabulary, read as <unk> (the warning of ``translate``);
            and, once, target symbols outside the target vocabulary (the message names them).
    """
    model = loaded.model
    if getattr(model, "encoder", None) is None or getattr(model, "decoder", None) is None:
        raise ConfigError("attention maps need an encoder-decoder model (source, target and cross-attention)")
    from dotformer.decoding.inputs import (
        UnknownTokenWarning,
        default_max_input_length,
        encode_sources,
        encode_target,
        unknown_target_message,
        warn_unknown,
    )

    encoded = encode_sources(loaded, [text], default_max_input_length(model.config))  # normalised as translate does
    warn_unknown(encoded)
    text, src_ids = encoded.texts[0], encoded.ids[0][:-1]  # the text as the model reads it; ids without EOS
    if not src_ids:
        raise DataError(f"the input {text!r} has no tokens")
    device = next(model.parameters()).device
    src = torch.tensor([src_ids + [EOS]], dtype=torch.int64, device=device)  # (1, S)
    forced = encode_target(loaded, target) if target is not None else None  # normalised as the training targets
    if forced is not None and (message := unknown_target_message(forced.unknown)) is not None:
        import warnings

        warnings.warn(message, UnknownTokenWarning, stacklevel=2)
    out_ids = greedy_output_ids(model, src) if forced is None else forced.ids
    tgt_in = torch.tensor([[BOS, *out_ids]], dtype=torch.int64, device=device)  # (1, T)

    with inference(model):
        src_mask = model.source_mask(src)  # (1, 1, 1, S)
        encoded = model.encode(src, src_mask, need_weights=True)
        decoded = model.decode(tgt_in, encoded.memory, src_mask=src_mask, need_weights=True)
        raw_logits = model.generator(decoded.hidden)[0].float()  # (T, V)
        logits = raw_logits.clone()
        logits[:, [PAD, BOS]] = -torch.inf  # as greedy decoding: never PAD or BOS
        predicted = logits.argmax(dim=-1).tolist()  # (T,)

    next_ids = predicted if forced is None else [*out_ids, EOS]  # forced: the given output, never the argmax

    def stack(weights: Sequence[torch.Tensor]) -> np.ndarray:
        return torch.stack([w[0] for w in weights]).float().cpu().numpy()  # (L, H, rows, cols)

    return AttentionMaps(
        source_text=text,
        output_text=loaded.tgt_tokenizer.decode(out_ids) if forced is None else forced.text,
        src_tokens=[token_label(loaded.src_tokenizer, i) for i in src[0].tolist()],
        tgt_tokens=[token_label(loaded.tgt_tokenizer, i) for i in tgt_in[0].tolist()],
        out_tokens=[token_label(loaded.tgt_tokenizer, i) for i in next_ids],
        encoder=stack(encoded.self_weights),
        decoder_self=stack(decoded.self_weights),
        cross=stack(decoded.cross_weights),
        logits=raw_logits.cpu().numpy(),
        next_ids=tuple(next_ids),
        forced=target is not None,
    )


def lm_attention_weights(loaded: Any, text: str) -> AttentionMaps:
    """Every causal self-attention map of a decoder-only model over ``text`` (teacher-forced, one pass).

    Args:
        loaded: a :class:`dotformer.checkpoint.LoadedCheckpoint` of a language model.
        text: the text to read, as ``generate`` reads a prompt (:func:`~dotformer.decoding.inputs.encode_prompt`
            with the checkpoint's text rules): a line end first and its line breaks as line ends; for an imported
            model, BOS first when its family adds one and the line breaks as its tokenizer encodes them.

    Returns:
        :class:`AttentionMaps`: ``decoder_self`` (L, H, T, T) float32 equal to
        ``model.decode(ids, need_weights=True).self_weights`` (row 0, stacked over layers); ``encoder`` (L, H, 0, 0)
        and ``cross`` (L, H, T, 0) empty; ``out_tokens`` the argmax next token at each position.

    Raises:
        ConfigError: the model is not decoder-only, or the text is longer than its window. DataError: no tokens (an
            empty text, for a model that adds no BOS).
    """
    model = loaded.model
    if model.config.arch != "decoder-only":
        raise ConfigError(f"language-model attention maps need a decoder-only model, this one is {model.config.arch}")
    tokenizer, rules = loaded.tgt_tokenizer, text_rules(loaded.info)
    ids = encode_prompt(tokenizer, text, rules)
    if not ids:
        raise DataError(f"the text {text!r} has no tokens")
    window = loaded.context_window
    if len(ids) > window:
        first = " (a line end first)" if rules.lines else " (BOS first)" if rules.add_bos else ""
        raise ConfigError(f"the text has {len(ids)} tokens{first}; this model reads at most {window}")
    device = next(model.parameters()).device
    tgt = torch.tensor([ids], dtype=torch.int64, device=device)  # (1, T)
    with inference(model):
        decoded = model.decode(tgt, need_weights=True)
        logits = model.generator(decoded.hidden)[0].float()  # (T, V)
    maps = torch.stack([w[0] for w in decoded.self_weights]).float().cpu().numpy()  # (L, H, T, T)
    L, H, T, _ = maps.shape
    predicted = logits.argmax(dim=-1).tolist()
    labels = [token_label(tokenizer, i) for i in ids]
    return AttentionMaps(
        source_text=text,
        output_text=text + generated_text(tokenizer, predicted[-1:], rules),  # the text and its likeliest next token
        src_tokens=[],
        tgt_tokens=labels,
        out_tokens=[token_label(tokenizer, i) for i in predicted],
        encoder=np.zeros((L, H, 0, 0), dtype=np.float32),
        decoder_self=maps,
        cross=np.zeros((L, H, T, 0), dtype=np.float32),
        logits=logits.cpu().numpy(),
        next_ids=tuple(predicted),
    )


def encoder_attention_weights(loaded: Any, text: str) -> AttentionMaps:
    """Every self-attention map of an encoder-only model over ``text`` (one pass), and what its head reads there.

    The text is read as ``dotformer classify`` and masked-language-model training read it, ``[BOS] ids [EOS]``; a
    mask token written in the text (``<mask>``, or an imported BERT's ``[MASK]``) is the model's to fill.

    Args:
        loaded: a :class:`dotformer.checkpoint.LoadedCheckpoint` of an encoder-only model (any head).
        text: the text to read.

    Returns:
        :class:`AttentionMaps`: ``encoder`` (L, H, S, S) float32 equal to ``model.encode(ids, need_weights=True)``'s
        ``self_weights`` (row 0, stacked over layers), rows summing to 1 and no zero above the diagonal (no causal
        mask); ``decoder_self`` (L, H, 0, 0) and ``cross`` (L, H, 0, S) empty; ``src_tokens`` the S token labels.
        ``out_tokens`` and ``output_text`` by head: a masked language model's likeliest token at each position, and
        the text with each mask token filled by it; a tagger's likeliest label at each position, and each token with
        its label; a classifier's label of the text and its probability (``out_tokens`` empty).

    Raises:
        ConfigError: the model is not encoder-only, or the text is longer than it reads. DataError: the text has no
            tokens.
    """
    model = loaded.model
    if model.config.arch != "encoder-only":
        raise ConfigError(f"encoder attention maps need an encoder-only model, this one is {model.config.arch}")
    tokenizer = loaded.src_tokenizer
    ids = encode_with_masks(tokenizer, text) if text.strip() else []  # "<mask>" or "[MASK]": the mask token
    if not ids:
        raise DataError(f"the input {text!r} has no tokens")
    if len(ids) + 2 > model.config.max_len:
        room = model.config.max_len
        raise ConfigError(f"the text has {len(ids) + 2} tokens (BOS and EOS included); this model reads at most {room}")
    device = next(model.parameters()).device
    src = torch.tensor([[BOS, *ids, EOS]], dtype=torch.int64, device=device)  # (1, S)
    with inference(model):
        encoded = model.encode(src, model.source_mask(src), need_weights=True)
        scores = model.head_scores(encoded.memory, src)[0].float()  # (S, V), (S, C) or (C,)
    maps = torch.stack([w[0] for w in encoded.self_weights]).float().cpu().numpy()  # (L, H, S, S)
    L, H, S, _ = maps.shape
    labels = [token_label(tokenizer, i) for i in src[0].tolist()]
    head = model.config.head
    if head in ("sequence", "token"):
        names = [str(name) for name in loaded.info.get("labels") or range(model.config.num_labels)]
        probabilities = scores.softmax(dim=-1)
        if head == "sequence":  # (C,): the labels by probability, the likeliest first (the first SHOWN_LABELS)
            ranked = probabilities.argsort(descending=True).tolist()
            shown = [f"{names[i]} ({float(probabilities[i]):.3f})" for i in ranked[:SHOWN_LABELS]]
            more = f"; {len(ranked) - SHOWN_LABELS} more" if len(ranked) > SHOWN_LABELS else ""
            out_tokens, output_text = [], "; ".join(shown) + more
        else:  # (S, C): a label at every position; BOS and EOS carry none
            out_tokens = [names[int(i)] for i in probabilities.argmax(dim=-1).tolist()]
            pairs = zip(labels[1:-1], out_tokens[1:-1], strict=True)
            output_text = " ".join(f"{token}/{label}" for token, label in pairs)
    else:  # the generator: a masked language model's likeliest token at every position
        predicted = scores.argmax(dim=-1).tolist()  # (S,)
        out_tokens = [token_label(tokenizer, i) for i in predicted]
        mask_id = tokenizer.mask_id
        filled = [p if i == mask_id else i for i, p in zip(ids, predicted[1:-1], strict=True)]
        output_text = tokenizer.decode(filled) if mask_id in ids else text
    return AttentionMaps(
        source_text=text,
        output_text=output_text,
        src_tokens=labels,
        tgt_tokens=[],
        out_tokens=out_tokens,
        encoder=maps,
        decoder_self=np.zeros((L, H, 0, 0), dtype=np.float32),
        cross=np.zeros((L, H, 0, S), dtype=np.float32),
    )
