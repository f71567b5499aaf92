"""Moved to :mod:`dotformer.export.torch_nn`.

This old path still works, with a DeprecationWarning naming the new one (:mod:`dotformer._moved`).
"""

from dotformer import _moved

__getattr__ = _moved.forward(__name__)
