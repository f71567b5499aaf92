"""Batches of prepared data planned from the lengths, (seed, epoch)-pure, sharded by rank: pairs by a token budget
(:mod:`~dotformer.data.batch.batching`), a language model's blocks (:mod:`~dotformer.data.batch.blocks`), an encoder's
whole texts (:mod:`~dotformer.data.batch.labelled`). Nothing is imported here."""
