"""Optional parts of sentcl, each an extra of the package, and the one line a user gets without one.

The core install trains, evaluates and analyses; what only one feature needs is an extra
(``pip install 'sentcl[NAME]'``): ``onnx`` (``export --onnx``, ``--dtype int8``), ``parquet`` (Parquet
training files), ``datasets`` (folders written by ``datasets``' ``save_to_disk``), ``index`` (faiss:
``index`` / ``search``), ``serve`` (the HTTP API), ``cline`` (CLINE's WordNet views), ``all`` (every one).
Depends on nothing else in sentcl.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from sentcl.errors import UserError


class MissingExtraError(UserError, ImportError):
    """A feature's optional dependency is not installed; the message names the pip command."""


def require(module: str, extra: str, feature: str) -> ModuleType:
    """``import module``, or one MissingExtraError naming the extra that installs it. Only a missing
    module is translated: a module that is there but fails to import raises as it is."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        top = module.split(".")[0]
        if exc.name is not None and exc.name.split(".")[0] != top:
            raise  # the module is there; something it imports is not: its own error says which
        raise MissingExtraError(
            f"{feature} needs {top}, which is not installed: pip install 'sentcl[{extra}]'"
        ) from None
