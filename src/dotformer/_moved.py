"""Old module paths, kept working for a while: each name looked up there warns and comes from its new module.

The top of the package holds the lesson; tooling lives in subpackages. A module that left the top keeps its old
path as a file of three lines::

    from dotformer import _moved

    __getattr__ = _moved.forward(__name__)

so ``from dotformer.interop import to_torch_transformer`` still works: it gives the very object of the new module,
with a :class:`DeprecationWarning` naming the new path. Nothing is imported, registered or warned about until a
name is looked up (PEP 562's module ``__getattr__``). :data:`MOVED` is the one list of what moved where.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable
from typing import Any

REMOVED_IN = "0.3"  # the version whose release drops the old paths

# old module -> new module
MOVED: dict[str, str] = {
    "dotformer.explain": "dotformer.explore.explain",
    "dotformer.extras": "dotformer.errors",
    "dotformer.interop": "dotformer.export.torch_nn",
    "dotformer.quantization": "dotformer.decoding.quantization",
    "dotformer.scoring": "dotformer.metrics.scoring",
    "dotformer.serve": "dotformer.api.serve",
}


def forward(old: str) -> Callable[[str], Any]:
    """The module ``__getattr__`` of the old path ``old`` (a key of :data:`MOVED`).

    It returns ``name`` from the new module and warns that ``old`` moved; dunder names other than ``__all__`` (which
    the import system and ``inspect`` look up) are not forwarded.
    """
    new = MOVED[old]

    def forwarded(name: str) -> Any:
        if name.startswith("__") and name != "__all__":
            raise AttributeError(f"module {old!r} has no attribute {name!r}")
        module = importlib.import_module(new)
        if name == "__all__":
            value = getattr(module, "__all__", [n for n in vars(module) if not n.startswith("_")])
        else:
            value = getattr(module, name)  # AttributeError: not a name of the new module either
        warnings.warn(
            f"{old} has moved to {new}: import {name} from {new} (the old path goes in dotformer {REMOVED_IN})",
            DeprecationWarning,
            stacklevel=2,
        )
        return value

    return forwarded
