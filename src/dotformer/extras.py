"""Moved to :mod:`dotformer.errors`.

This old path still works, with a DeprecationWarning naming the new one (:mod:`dotformer._moved`).
"""

from dotformer import _moved

__getattr__ = _moved.forward(__name__)
