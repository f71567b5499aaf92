"""Reading sources: pairs, running text and labelled texts, from files, named corpora and the hub. No torch here.

- :mod:`~dotformer.data.read.types`     ``Pair``, ``Corpus``, ``CorpusOptions`` and the helpers every reader uses
- :mod:`~dotformer.data.read.textio`    strict UTF-8 line reading with FILE:LINE errors (shared by the file readers)
- :mod:`~dotformer.data.read.corpora`   ``load_pairs(spec, options) -> Corpus`` and ``open_pairs``: the one entry
  point of pairs, which picks one of: :mod:`~dotformer.data.read.tsv` (TSV/CSV files),
  :mod:`~dotformer.data.read.parallel` (line-aligned files, "train.es,train.en"), :mod:`~dotformer.data.read.cmudict`
  (English word -> ARPAbet phones), :mod:`~dotformer.data.read.bible` (Spanish -> English verses from SWORD modules,
  their markup stripped by :mod:`~dotformer.data.read.osis`), :mod:`~dotformer.data.read.hf_datasets` (Hugging
  Face ``datasets``), :mod:`~dotformer.data.read.synthetic` (copy and reverse)
- :mod:`~dotformer.data.read.text_corpus`      running text of a language model
- :mod:`~dotformer.data.read.labelled_reader`  texts with labels of a classifier or a tagger

Nothing is imported here.
"""
