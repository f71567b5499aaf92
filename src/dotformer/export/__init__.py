"""Export a trained dotformer :class:`~dotformer.model.Transformer` to other inference engines.

* :mod:`dotformer.export.marian`: copy the weights into a Hugging Face ``MarianMTModel`` (same architecture: post-LN,
  sinusoidal positions, scaled embeddings), so that ``generate`` and the HF ecosystem can run the model;
  :func:`~dotformer.export.marian.save_marian` writes it as a directory ``from_pretrained`` reads back.
* :mod:`dotformer.export.ct2`: write a CTranslate2 model directory (float32, or int8 and friends at load time);
  :mod:`dotformer.export.ct2_lm`: a language model as CTranslate2's decoder-only model (``ctranslate2.Generator``).
* :mod:`dotformer.export.onnx`: an encoder graph and an incremental decoder-step graph (with its key/value cache as
  inputs and outputs), and :class:`~dotformer.export.onnx.OnnxTranslator` to run them with onnxruntime.
* :mod:`dotformer.export.torch_nn`: weights to and from PyTorch's own ``torch.nn.Transformer`` and
  ``torch.nn.MultiheadAttention``, in memory, both ways (the tests check dotformer against PyTorch with it).
* :mod:`dotformer.export.checkpoint`: what ``dotformer export --to ct2|marian|onnx CHECKPOINT OUT`` runs (the model
  plus the checkpoint's tokenizer files). :mod:`dotformer.export.outdir`: outputs are never written over existing files.

Every exporter and importer walks one map of dotformer's parameters (:mod:`dotformer.export.params`: the roles of
each kind of layer, each engine a table of its names for them, one :class:`~dotformer.export.params.Converter` walk).
The reverse direction (HF Marian and BERT directories into checkpoints) is :mod:`dotformer.imports`. The engines are
optional packages (``pip install -e ".[bench]"``, ``".[onnx]"``); they are imported inside the functions that use them.
"""
