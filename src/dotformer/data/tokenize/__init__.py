"""Tokenizers: text <-> token ids. No torch here.

- :mod:`~dotformer.data.tokenize.tokenizers`       the interface and the char and symbol kinds
- :mod:`~dotformer.data.tokenize.bpe`              byte-level BPE
- :mod:`~dotformer.data.tokenize.pretrained`       a Hugging Face ``tokenizer.json`` or a sentencepiece ``.model``
- :mod:`~dotformer.data.tokenize.tokenizer_files`  training any kind, reading any file back
- :mod:`~dotformer.data.tokenize.words`            which token of a tagged word carries its label

Nothing is imported here.
"""
