"""Tokenizers, text <-> token ids (no torch here): the interface and kinds (:mod:`~dotformer.data.tokenize.tokenizers`,
:mod:`~dotformer.data.tokenize.bpe`), existing files (:mod:`~dotformer.data.tokenize.pretrained`), training or reading
any (:mod:`~dotformer.data.tokenize.tokenizer_files`). Nothing is imported here."""
