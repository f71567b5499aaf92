"""The explorer's data: attention maps as JSON, and the page with its data embedded.

A translation model's example holds three kinds of map (encoder, decoder self, cross); a language model's (a
decoder-only checkpoint) holds its causal self-attention over the text only, "kinds" says which, and "lm" is true;
an encoder's (an encoder-only checkpoint: a masked language model, a classifier, a tagger) holds its self-attention
over the text only, and "encoder" is true.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from dotformer.decoding.attention_maps import ENCODER_MAP_KINDS as ENCODER_KINDS
from dotformer.decoding.attention_maps import LM_MAP_KINDS as LM_KINDS
from dotformer.decoding.attention_maps import (
    AttentionMaps,
    attention_weights,
    encoder_attention_weights,
    lm_attention_weights,
    token_label,
)
from dotformer.decoding.inputs import UnknownTokenWarning, encode_target, unknown_target_message
from dotformer.errors import ConfigError
from dotformer.explore.page import DATA_PLACEHOLDER, page_template

MAX_TEXT_CHARS = 1000  # longest input the explorer accepts (serve mode); longer inputs are refused, not cut
TOP_K = 5  # alternatives listed per output position
PROB_DIGITS = 6  # decimals of the probabilities on the page
UNK_LABEL = "<unk>"
MAP_KINDS = ("cross", "encoder", "decoder_self")  # a translation model's maps, in the page's order


def rounded(values: np.ndarray, digits: int = 4) -> list[Any]:
    """A float array as nested lists rounded to ``digits`` decimals (keeps the page small)."""
    return np.round(values.astype(np.float64), digits).tolist()


def softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise softmax of a (T, V) float array, in float64 (the model's distribution over the next token)."""
    shifted = logits.astype(np.float64) - logits.max(axis=-1, keepdims=True)
    weights = np.exp(shifted)
    return weights / weights.sum(axis=-1, keepdims=True)


def token_steps(maps: AttentionMaps, tgt_tokenizer: Any, k: int = TOP_K) -> list[dict[str, Any]]:
    """Per decoder position: the token it predicts (or is scored on, when forced), its probability, the top k.

    Returns:
        T dicts ``{"token": label, "id": int, "p": float, "top": [[label, p], ...]}``, with ``p`` the softmax of
        ``maps.logits`` (natural exponent, over the whole target vocabulary) rounded to PROB_DIGITS decimals; ``top``
        is the k most probable tokens, most probable first. Empty when the maps carry no logits.
    """

    if maps.logits is None or not maps.next_ids:
        return []
    probs = softmax(maps.logits)  # (T, V)
    k = min(k, probs.shape[-1])
    steps = []
    for row, token_id in zip(probs, maps.next_ids, strict=True):
        top = np.argsort(-row, kind="stable")[:k]
        steps.append(
            {
                "token": token_label(tgt_tokenizer, int(token_id)),
                "id": int(token_id),
                "p": round(float(row[token_id]), PROB_DIGITS),
                "top": [[token_label(tgt_tokenizer, int(i)), round(float(row[i]), PROB_DIGITS)] for i in top],
            }
        )
    return steps


def unknown_warning(maps: AttentionMaps, reference_symbols: Sequence[str] = ()) -> str:
    """The line the CLI warns with when source (or forced reference) symbols are outside the vocabulary, or "".

    ``reference_symbols``: the forced reference's symbols outside the target vocabulary, named in the line.
    """
    unknown = maps.src_tokens.count(UNK_LABEL)
    lines = []
    if unknown:
        lines.append(
            f"{unknown} input symbol(s) are not in the source vocabulary and were read as {UNK_LABEL}: "
            "the output is not to be trusted"
        )
    reference = maps.tgt_tokens.count(UNK_LABEL) if maps.forced else 0
    if reference:
        names = f": {', '.join(dict.fromkeys(reference_symbols))}" if reference_symbols else ""
        lines.append(
            f"{reference} reference symbol(s) are not in the target vocabulary and were read as {UNK_LABEL}{names}"
        )
    return "; ".join(lines)


def maps_to_json(
    maps: AttentionMaps,
    digits: int = 4,
    tgt_tokenizer: Any = None,
    target: str | None = None,
    reference_unknown: Sequence[str] = (),
    kinds: Sequence[str] = MAP_KINDS,
) -> dict[str, Any]:
    """One example for the page: texts, token labels, sizes, the three kinds of (L, H, rows, cols) maps, the kinds
    the page offers, and (with ``tgt_tokenizer``) each position's probability and top-k alternatives.

    Args:
        maps: from :func:`dotformer.decoding.attention_maps.attention_weights`.
        digits: decimals of the attention weights.
        tgt_tokenizer: the checkpoint's target tokenizer, to name the top-k alternatives (None: no "steps").
        target: the reference text that was force-decoded (None: greedy decoding).
        reference_unknown: its symbols outside the target vocabulary (named in "warning").
        kinds: the map kinds the page offers (a language model: ``("decoder_self",)``, and "lm" is true; an
            encoder: ``("encoder",)``, and "encoder" is true).
    """
    return {
        "kinds": list(kinds),
        "lm": tuple(kinds) == LM_KINDS,
        "encoder": tuple(kinds) == ENCODER_KINDS,
        "source": maps.source_text,
        "output": maps.output_text,
        "forced": maps.forced,
        "target": target if maps.forced else None,
        "src_tokens": maps.src_tokens,
        "tgt_tokens": maps.tgt_tokens,
        "out_tokens": maps.out_tokens,
        "next_tokens": maps.labels("cross")[0],
        "layers": maps.num_layers,
        "heads": maps.num_heads,
        "unknown": maps.src_tokens.count(UNK_LABEL),
        "warning": unknown_warning(maps, reference_unknown),
        "steps": token_steps(maps, tgt_tokenizer) if tgt_tokenizer is not None else [],
        "maps": {
            "encoder": rounded(maps.encoder, digits),
            "decoder_self": rounded(maps.decoder_self, digits),
            "cross": rounded(maps.cross, digits),
        },
    }


def example_json(loaded: Any, text: str, target: str | None = None) -> dict[str, Any]:
    """The page's example for one input: decode it greedily (or force-decode ``target``) and describe it; a language
    model reads the text itself (its causal self-attention, and its likeliest next token at each position), and so
    does an encoder (its self-attention, and what its head reads: :func:`~dotformer.decoding.attention_maps
    .encoder_attention_weights`).

    Raises:
        DataError: the text has no tokens. ConfigError: a target for a language model or an encoder, or a text
            longer than its window.
    """

    if is_encoder(loaded):
        if target is not None:
            raise ConfigError("an encoder reads its text as it is: there is no reference to force-decode")
        return maps_to_json(encoder_attention_weights(loaded, text), kinds=ENCODER_KINDS)
    if is_language_model(loaded):
        if target is not None:
            raise ConfigError("a language model reads its text as it is: there is no reference to force-decode")
        maps = lm_attention_weights(loaded, text)
        return maps_to_json(maps, tgt_tokenizer=loaded.tgt_tokenizer, kinds=LM_KINDS)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnknownTokenWarning)  # the page shows it: the example's "warning"
        maps = attention_weights(loaded, text, target=target)
    unknown = encode_target(loaded, target).unknown if target is not None else []
    return maps_to_json(maps, tgt_tokenizer=loaded.tgt_tokenizer, target=target, reference_unknown=unknown)


def is_language_model(loaded: Any) -> bool:
    """Whether a loaded checkpoint is a decoder-only language model."""
    return loaded.model.config.arch == "decoder-only"


def is_encoder(loaded: Any) -> bool:
    """Whether a loaded checkpoint is an encoder-only model (a masked language model, a classifier, a tagger)."""
    return loaded.model.config.arch == "encoder-only"


def build_page(
    examples: Sequence[dict[str, Any]],
    mode: Literal["serve", "static"],
    title: str = "",
    lm: bool = False,
    encoder: bool = False,
) -> str:
    """The HTML page with ``{"mode", "title", "lm", "encoder", "examples"}`` embedded as JSON (``</`` escaped for the
    script tag); ``lm``: the page explores a language model, ``encoder`` an encoder-only model (neither has a
    reference field)."""
    data = {"mode": mode, "title": title, "lm": lm, "encoder": encoder, "examples": list(examples)}
    payload = json.dumps(data, ensure_ascii=False)
    payload = payload.replace("</", "<\\/")  # a "</script>" inside a token must not end the script element
    return page_template().replace(DATA_PLACEHOLDER, payload)


def model_title(loaded: Any) -> str:
    """A one-line description of a loaded checkpoint for the page header."""
    config = loaded.model.config
    where = getattr(loaded, "path", "")
    if is_language_model(loaded):
        return (
            f"checkpoint {where}: a language model (decoder only), d_model={config.d_model}, "
            f"heads={config.num_heads}, layers={config.num_decoder_layers}"
        )
    if is_encoder(loaded):
        return (
            f"checkpoint {where}: an encoder (encoder only, head: {config.head}), d_model={config.d_model}, "
            f"heads={config.num_heads}, layers={config.num_encoder_layers}"
        )
    return (
        f"checkpoint {where}: d_model={config.d_model}, heads={config.num_heads}, "
        f"layers={config.num_encoder_layers}+{config.num_decoder_layers}"
    )


def examples_json(
    loaded: Any, texts: Sequence[str], targets: Sequence[str | None] | None = None
) -> list[dict[str, Any]]:
    """The page's examples: each text decoded greedily, or force-decoding the target at the same place.

    Args:
        targets: None (decode every text), or one reference per text (None or "" decodes that text); each is
            normalised as the checkpoint's training targets were (stress digits stripped where the run stripped them).

    Warns:
        UnknownTokenWarning: once, naming the targets' symbols outside the target vocabulary (read as <unk>).

    Raises:
        ConfigError: targets given, but not one per text. DataError: a text has no tokens.
    """

    if targets is None:
        targets = [None] * len(texts)
    if len(targets) != len(texts):
        raise ConfigError(
            f"give one --target per --text ({len(texts)} text(s), {len(targets)} target(s)); '' decodes that text"
        )

    unknown = [symbol for target in targets if target for symbol in encode_target(loaded, target).unknown]
    if (message := unknown_target_message(unknown)) is not None:  # once for all the examples, as plot does
        warnings.warn(message, UnknownTokenWarning, stacklevel=2)
    return [example_json(loaded, text, target or None) for text, target in zip(texts, targets, strict=True)]


def write_page(
    loaded: Any, texts: Sequence[str], path: str | Path, targets: Sequence[str | None] | None = None
) -> Path:
    """Decode every text (or force-decode its target), embed the attention maps in a static page, write it to ``path``.

    Raises:
        ConfigError: no texts, or targets not one per text. DataError: a text has no tokens.
    """

    if not texts:
        raise ConfigError("the static page needs at least one example text (--text)")
    examples = examples_json(loaded, texts, targets)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    page = build_page(examples, "static", model_title(loaded), is_language_model(loaded), is_encoder(loaded))
    path.write_text(page, encoding="utf-8")
    return path
