"""Import models from other libraries' files into dotformer checkpoints (the reverse of :mod:`dotformer.export`).

* :mod:`dotformer.imports.marian`: a local Hugging Face Marian directory (``config.json``, ``model.safetensors``,
  ``source.spm`` / ``target.spm``, ``vocab.json``) -> an encoder-decoder checkpoint for ``translate``, ``evaluate``,
  ``explore`` and ``serve``.
* :mod:`dotformer.imports.bert`: a BERT-family encoder (``model.safetensors`` + WordPiece ``tokenizer.json``) -> an
  encoder-only checkpoint whose memory is BERT's last hidden state.

Weights are read from safetensors only: a ``pytorch_model.bin`` (a pickle, which can run code when loaded) is refused.
"""
