"""The data path: raw pairs or text -> corpus -> split -> tokenizer -> prepared token arrays -> batches.

Read the subpackages in this order:

1. :mod:`dotformer.data.read`      every source behind one function (``load_pairs(spec, options) -> Corpus``, or
   ``open_pairs`` a block at a time), one module per format or corpus; running text and labelled texts
2. :mod:`dotformer.data.tokenize`  char, symbol and byte-level BPE tokenizers with PAD/BOS/EOS/UNK = 0/1/2/3, and
   existing tokenizer files
3. :mod:`dotformer.data.prepared`  data prepared once, memory-mapped by every run and rank: splits, ragged token
   arrays on disk, one class per data kind (pairs, running text, labelled texts) over one skeleton, the cache
4. :mod:`dotformer.data.batch`     batches planned from the lengths: a token budget and length buckets for pairs,
   contiguous blocks for a language model, whole texts for an encoder

:mod:`dotformer.data.config` holds the frozen data configs. Nothing is imported here: import the module you need
(``from dotformer.data.read.corpora import load_pairs``), so that ``import dotformer.data`` stays free of heavy
dependencies (pysword, datasets, tokenizers). Only :mod:`~dotformer.data.batch` imports torch.
"""
