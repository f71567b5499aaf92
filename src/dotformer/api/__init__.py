"""Using a trained model: from Python (``dotformer.load(path).translate(texts)``) and over HTTP (``dotformer serve``).

* :mod:`dotformer.api.translator`  :func:`load`, :class:`Translator` and :class:`TranslationResult` (re-exported
  here, and as ``dotformer.load``, ``dotformer.Translator``)
* :mod:`dotformer.api.serve`       ``POST /api/translate``: the same decoding behind a local HTTP endpoint
  (:mod:`dotformer.api.endpoint` checks a request, :mod:`dotformer.api.turns` queues it for the model,
  :mod:`dotformer.api.web` speaks HTTP on aiohttp, as ``dotformer explore`` does too)

Both are thin layers over :mod:`dotformer.decoding`, so the API, the server and ``dotformer translate`` give the same
outputs for the same settings.
"""

from dotformer.api.translator import (
    DTYPES,
    ArgumentTypeError,
    Dtype,
    TranslationResult,
    Translator,
    load,
    load_checkpoint_for_decoding,
    load_ensemble_for_decoding,
    resolve_device,
)

__all__ = [
    "DTYPES",
    "ArgumentTypeError",
    "Dtype",
    "TranslationResult",
    "Translator",
    "load",
    "load_checkpoint_for_decoding",
    "load_ensemble_for_decoding",
    "resolve_device",
]
