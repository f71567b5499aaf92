"""Export a trained dotformer :class:`~dotformer.model.Transformer` to other inference engines.

* :mod:`dotformer.export.marian`: copy the weights into a Hugging Face ``MarianMTModel`` (same architecture: post-LN,
  sinusoidal positions, scaled embeddings), so that ``generate`` and the HF ecosystem can run the model.
* :mod:`dotformer.export.ct2`: write a CTranslate2 model directory (float32, or int8 and friends at load time).

Both need optional packages (``pip install -e ".[bench]"``); they are imported inside the functions that use them.
"""
