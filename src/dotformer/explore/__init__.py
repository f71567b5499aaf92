"""A page to look inside a checkpoint: type an input, see the model's output, pick a layer and a head, see the
attention map.

* :func:`write_page` writes a self-contained static HTML file with precomputed examples;
* :func:`serve` / :class:`ExplorerServer` serve the page on 127.0.0.1 with a JSON endpoint that runs the model.
"""

from dotformer.explore.data import build_page, maps_to_json, write_page
from dotformer.explore.server import ExplorerServer, serve

__all__ = ["ExplorerServer", "build_page", "maps_to_json", "serve", "write_page"]
