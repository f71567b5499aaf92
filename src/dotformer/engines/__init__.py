"""Engines behind the commands: what runs a checkpoint's decoding for translate, evaluate, generate and serve.

* ``torch``: the lesson's own decoder (:mod:`dotformer.decoding`) in :mod:`~dotformer.engines.torch`, the reference
  every other engine is tested against;
* ``ctranslate2``: CTranslate2's C++ ``Translator`` (encoder-decoder) or ``Generator`` (language model), on a copy of
  the checkpoint converted by :mod:`dotformer.export.ct2` on first use and cached beside it;
* ``auto`` (the default): CTranslate2 when it is installed and runs the model and every requested option, else torch.

Both engines read the same decoding options (:mod:`dotformer.decoding.options`) and return the same results
(:class:`~dotformer.decoding.results.Translation`), tested equal: greedy outputs alike, beam outputs alike but for
rare near-ties, scores within 1e-3. An option one engine lacks (an ensemble, attention maps, another alignment layer)
makes ``auto`` choose torch, and ``ctranslate2`` refuse it in one line naming it.

Read in this order:

1. :mod:`~dotformer.engines.torch`          the reference engine: the lesson's decoder on a loaded checkpoint
2. :mod:`~dotformer.engines.choice`         which engine runs: the names, the rules, what CTranslate2 lacks
3. :mod:`~dotformer.engines.cache`          the converted copy, keyed by the checkpoint's fingerprint, atomic
4. :mod:`~dotformer.engines.ct2_translate`  dotformer's decoding options on a CTranslate2 ``Translator``
5. :mod:`~dotformer.engines.ct2_generate`   language models on a CTranslate2 ``Generator``
6. :mod:`~dotformer.engines.load`           a checkpoint opened on CTranslate2: its copy and the runner for its kind

Nothing here imports torch, except the torch engine's methods and a first conversion (:mod:`~dotformer.engines.cache`),
so a command on a cached CTranslate2 model starts without it.
"""
