"""The explorer's data: attention maps as JSON, and the page with its data embedded."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from dotformer.explore.page import DATA_PLACEHOLDER, PAGE_TEMPLATE
from dotformer.plots.attention import AttentionMaps

MAX_TEXT_CHARS = 1000  # longest input the explorer accepts (serve mode); longer inputs are refused, not cut


def rounded(values: np.ndarray, digits: int = 4) -> list[Any]:
    """A float array as nested lists rounded to ``digits`` decimals (keeps the page small)."""
    return np.round(values.astype(np.float64), digits).tolist()


def maps_to_json(maps: AttentionMaps, digits: int = 4) -> dict[str, Any]:
    """One example for the page: texts, token labels, sizes, and the three kinds of (L, H, rows, cols) maps."""
    return {
        "source": maps.source_text,
        "output": maps.output_text,
        "src_tokens": maps.src_tokens,
        "tgt_tokens": maps.tgt_tokens,
        "out_tokens": maps.out_tokens,
        "layers": maps.num_layers,
        "heads": maps.num_heads,
        "maps": {
            "encoder": rounded(maps.encoder, digits),
            "decoder_self": rounded(maps.decoder_self, digits),
            "cross": rounded(maps.cross, digits),
        },
    }


def build_page(examples: Sequence[dict[str, Any]], mode: Literal["serve", "static"], title: str = "") -> str:
    """The HTML page with ``{"mode", "title", "examples"}`` embedded as JSON (``</`` escaped for the script tag)."""
    payload = json.dumps({"mode": mode, "title": title, "examples": list(examples)}, ensure_ascii=False)
    payload = payload.replace("</", "<\\/")  # a "</script>" inside a token must not end the script element
    return PAGE_TEMPLATE.replace(DATA_PLACEHOLDER, payload)


def model_title(loaded: Any) -> str:
    """A one-line description of a loaded checkpoint for the page header."""
    config = loaded.model.config
    where = getattr(loaded, "path", "")
    return (
        f"checkpoint {where}: d_model={config.d_model}, heads={config.num_heads}, "
        f"layers={config.num_encoder_layers}+{config.num_decoder_layers}"
    )


def write_page(loaded: Any, texts: Sequence[str], path: str | Path) -> Path:
    """Decode every text, embed the attention maps in a static page and write it to ``path``.

    Raises:
        ConfigError: no texts. DataError: a text has no tokens.
    """
    from dotformer.errors import ConfigError
    from dotformer.plots.attention import attention_weights

    if not texts:
        raise ConfigError("the static page needs at least one example text (--text)")
    examples = [maps_to_json(attention_weights(loaded, text)) for text in texts]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(build_page(examples, "static", model_title(loaded)), encoding="utf-8")
    return path
