"""Looking inside attention: the lesson's worked example step by step, and an explorer page for a checkpoint.

* :mod:`dotformer.explore.explain` (``dotformer explain``): the lesson's worked attention example, or your own Q, K
  and V, printed step by step with the library's own attention function.
* The explorer (``dotformer explore``): a page to look inside a checkpoint: type an input (and a reference to
  force-decode), see the model's output with each token's probability and its alternatives, every layer and head at
  once, one map in detail, the head view, and two inputs side by side. :func:`write_page` writes a self-contained
  static HTML file with precomputed examples; :class:`ExplorerServer` serves the page on 127.0.0.1
  with a JSON endpoint that runs the model (:mod:`~dotformer.explore.data`, :mod:`~dotformer.explore.page`,
  :mod:`~dotformer.explore.server`).
"""

from dotformer.explore.data import build_page, example_json, examples_json, maps_to_json, write_page
from dotformer.explore.server import ExplorerServer

__all__ = ["ExplorerServer", "build_page", "example_json", "examples_json", "maps_to_json", "write_page"]
