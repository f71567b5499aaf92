"""Batches of prepared data, planned from the lengths with a (seed, epoch)-pure order, sharded by rank.

- :mod:`~dotformer.data.batch.batching`  pairs: ``Batch``, ``BatchSampler`` (token budget, length buckets,
  resumable positions), ``sampler_for`` (the examples' own sampler)
- :mod:`~dotformer.data.batch.blocks`    a language model's stream cut into contiguous blocks
- :mod:`~dotformer.data.batch.labelled`  an encoder's whole texts with their labels (or masked tokens)

Nothing is imported here.
"""
