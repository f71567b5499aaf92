"""Data prepared once, memory-mapped by every run and rank: one class per data kind, one shared skeleton.

- :mod:`~dotformer.data.prepared.layout`     the directory's layout, its report, what every kind's handle shares
- :mod:`~dotformer.data.prepared.skeleton`   :class:`~dotformer.data.prepared.skeleton.DataKind`: the fingerprint of
  a kind's inputs and settings, and ``prepare``: check, read, split, tokenizers, encode, report, finish (the passes)
- :mod:`~dotformer.data.prepared.pair_kind`      pairs (translation, G2P, copy/reverse)
- :mod:`~dotformer.data.prepared.text_kind`      running text (a language model, a masked language model)
- :mod:`~dotformer.data.prepared.labelled_kind`  labelled texts (a classifier, a tagger)
- :mod:`~dotformer.data.prepared.kinds`      the table of kinds: the kind of a data config, ``prepare``,
  ``open_prepared``
- :mod:`~dotformer.data.prepared.fingerprint`, :mod:`~dotformer.data.prepared.writing`,
  :mod:`~dotformer.data.prepared.cache`: input files and fingerprints, writing a directory atomically, the cache

Nothing is imported here. No torch here.
"""
