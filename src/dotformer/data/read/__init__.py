"""Reading sources (no torch here): pairs through one entry point (:mod:`~dotformer.data.read.corpora`: one module
per format or corpus, the shared types in :mod:`~dotformer.data.read.types`), running text
(:mod:`~dotformer.data.read.text_corpus`) and labelled texts (:mod:`~dotformer.data.read.labelled_reader`). Nothing
is imported here."""
