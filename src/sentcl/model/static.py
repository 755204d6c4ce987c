"""A static encoder: a sentence is the mean of its tokens' vectors, one row per token id of a tokenizer.

The same model as sentence-transformers' ``StaticEmbedding`` and model2vec: the tokenizer's ids without its
special tokens, looked up in a table [V, D] and averaged (an ``EmbeddingBag`` in mean mode); how much a token
counts is in its row's length. No attention, no layers: on a CPU it encodes at the speed of tokenisation,
so ``encode`` takes the ids from tokie where tokie is checked to give the tokenizer's own (token_ids.py).

* **Start** (``vocabulary_distillation``, model2vec's recipe, Tulkens & van Dongen 2024): every token of the
  teacher's vocabulary through the teacher on its own (``[CLS] token [SEP]``, the teacher's pooler), PCA to
  ``dims`` dimensions, then each row scaled by SIF weights a / (a + p(token)), p from Zipf's law over the
  token's rank in the vocabulary (the ids' order); special and ``[unusedN]`` tokens get zero rows. Or
  ``random`` (N(0, 1/D) rows).
* **Training**: every objective that needs neither dropout views nor token states (distillation from a
  teacher's table, supervised pairs); the others are refused in one line (``token_states``,
  ``masked_lm_head``; dropout copies by the training loop).
* **Saved** as a folder sentence-transformers loads as a ``StaticEmbedding`` model (modules.json,
  ``0_StaticEmbedding/model.safetensors`` with ``embedding.weight``, its ``tokenizer.json``), plus the
  tokenizer at the top and ``sentcl_static.json`` for sentcl; ``StaticEncoder.load`` also reads
  sentence-transformers' own static folders (model2vec's ``embeddings`` key included).
"""

from __future__ import annotations

import copy
import json
import logging
import re
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer
from torch import nn
from tqdm.auto import tqdm
from transformers import AutoTokenizer

from sentcl.atomic_write import atomic_folder
from sentcl.config import ConfigError
from sentcl.embedder import PromptRoles, require_finite
from sentcl.encode_contract import LoadOptions, SentenceTransformersContract
from sentcl.model.backbone import (
    MODULE_DIR,
    STATIC_META,
    TOKENIZER_FILES,
    ModelLoadError,
    packaged_model_path,
    read_json_object,
    resolve_model_path,
    static_module_dir,
)
from sentcl.model.pooling import special_frame
from sentcl.model.token_ids import TokieIds

if TYPE_CHECKING:
    from typing_extensions import Unpack

logger = logging.getLogger(__name__)

MODULE_TYPE = "sentence_transformers.models.StaticEmbedding"
NORMALIZE_TYPE = "sentence_transformers.models.Normalize"
FORMAT_VERSION = 1
#: the fewest texts ``encode`` tokenises at once (2-core AMX Xeon, 10k wiki sentences, with tokie: 88k/s in
#: chunks of 64, 174-183k/s of 1,024, 241-261k/s of 4,096, 293-304k/s of 10,000; tokenizers alone: 17.5k/s
#: of 64, 32.9k/s of 4,096)
CHUNK = 8192
#: tokens model2vec leaves out of the vocabulary (BERT's placeholders); they get zero rows
UNUSED = re.compile(r"\[unused\d+\]")


class StaticEncoder(nn.Module, PromptRoles, SentenceTransformersContract):
    """Token vectors [V, D] and a tokenizer: ``encode`` as every sentcl model; ``embed(batch)`` to train."""

    pooler = "static"
    has_dropout = False
    special: torch.Tensor  # the tokenizer's special ids (a buffer): never part of a sentence's mean

    def __init__(self, vectors: torch.Tensor, tokenizer, source: str = "", init: str = ""):
        super().__init__()
        if not getattr(tokenizer, "is_fast", False):
            raise ModelLoadError(f"{source}: a static model needs a fast (Rust) tokenizer")
        self.embedding = nn.EmbeddingBag.from_pretrained(vectors.float(), freeze=False, mode="mean")
        self.tokenizer = tokenizer
        # the Rust tokenizer encode runs: no padding, no truncation (saved so for sentence-transformers)
        self.fast = Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())
        self.fast.no_padding()
        self.fast.no_truncation()
        self.token_ids = TokieIds.for_tokenizer(self.fast)  # the same ids, from tokie where checked equal
        self.register_buffer(
            "special", torch.tensor(sorted(set(tokenizer.all_special_ids)), dtype=torch.long)
        )
        self.source, self.init = source, init
        #: a sentence-transformers Normalize after the table (model2vec's ``normalize: true``): unit vectors
        self.normalize = False
        self.max_length = None  # type: ignore[assignment]  # every token counts, as in sentence-transformers
        self.prompts = {}
        self.frozen = False

    # ------------------------------------------------------------------ building
    @classmethod
    def from_config(cls, config) -> StaticEncoder:
        """The start of training from ``model:``: ``name_or_path`` a static folder (trained further), or a
        transformer whose vocabulary is distilled (``static_init: distill``) or only whose tokenizer is
        used (``random``), to ``static_dim`` dimensions."""
        folder = Path(resolve_model_path(config.name_or_path))
        if is_static_folder(folder):
            encoder = cls.load(config.name_or_path)
        elif config.static_init == "random":
            tokenizer = AutoTokenizer.from_pretrained(str(folder), trust_remote_code=False)
            generator = torch.Generator().manual_seed(0)
            vectors = (
                torch.randn(len(tokenizer), config.static_dim, generator=generator) / config.static_dim**0.5
            )
            encoder = cls(vectors, tokenizer, config.name_or_path, "random")
        else:
            from sentcl.model.encoder import SentenceEncoder  # the teacher: a transformer

            teacher = SentenceEncoder.load(config.name_or_path, allow_pickle=config.allow_pickle)
            vectors = vocabulary_distillation(teacher, config.static_dim, config.static_sif)
            encoder = cls(torch.from_numpy(vectors), teacher.tokenizer, config.name_or_path, "distill")
            encoder.prompts, encoder.similarity_fn_name = dict(teacher.prompts), teacher.similarity_fn_name
        if config.prompts:
            encoder.prompts = dict(config.prompts)
        return encoder

    @classmethod
    def load(
        cls,
        name_or_path: str,
        pooler: str | None = None,
        allow_pickle: bool = False,
        **options: Unpack[LoadOptions],
    ) -> StaticEncoder:
        """A folder ``save`` wrote, or a sentence-transformers folder whose first module is a
        ``StaticEmbedding`` (model2vec's table folded in as sentence-transformers folds it). The keyword
        arguments are sentence-transformers' constructor's (``configure``)."""
        if pooler not in (None, "static"):
            raise ModelLoadError(f"{name_or_path}: a static model has no pooler to choose ({pooler!r})")
        folder = Path(resolve_model_path(name_or_path))
        module = static_module_dir(folder)
        if module is None:
            raise ModelLoadError(f"{name_or_path}: not a static model (no {STATIC_META}, no StaticEmbedding)")
        later = [row.get("type") for row in read_json_list(folder / "modules.json")[1:]]
        normalize = len(later) == 1 and str(later[0]).endswith("Normalize")  # model2vec's normalize: true
        if later and not normalize:  # a Dense after the table: its vectors are not the table's mean
            raise ModelLoadError(
                f"{folder / 'modules.json'}: a static model followed by {', '.join(map(str, later))}; sentcl "
                "loads static models of one StaticEmbedding module"
            )
        weights_file = module / "model.safetensors"
        try:
            weights = load_file(str(weights_file))
        except (SafetensorError, OSError) as exc:
            raise ModelLoadError(f"{weights_file}: the token vectors cannot be read ({exc})") from None
        vectors = weights.get("embedding.weight")
        if vectors is None and "embeddings" in weights:
            vectors = weights["embeddings"].float()
            if "mapping" in weights:
                vectors = vectors[weights["mapping"].long()]
            if "weights" in weights:
                vectors = vectors * weights["weights"].float()[:, None]
        if vectors is None or vectors.ndim != 2:
            raise ModelLoadError(f"{weights_file}: no embedding.weight [V, D] table")
        if vectors.numel() == 0:
            raise ModelLoadError(
                f"{weights_file}: the token vector table is empty (shape {list(vectors.shape)})"
            )
        if not torch.isfinite(vectors).all():
            raise ModelLoadError(f"{weights_file}: the token vectors hold NaN or infinite values")
        if not vectors.any():
            raise ModelLoadError(f"{weights_file}: every token vector is zero; every text would encode to 0")
        meta = read_json_object(folder / STATIC_META) if (folder / STATIC_META).is_file() else {}
        recorded = meta.get("dimension")
        if recorded is not None and recorded != vectors.shape[1]:
            raise ModelLoadError(
                f"{folder / STATIC_META}: dimension {recorded!r}, but {weights_file} holds vectors of "
                f"{vectors.shape[1]}"
            )
        if not any((place / name).is_file() for place in (folder, module) for name in TOKENIZER_FILES):
            raise ModelLoadError(
                f"{folder}: no tokenizer files ({', '.join(TOKENIZER_FILES)}) beside the token vectors; a "
                f"static model needs the tokenizer its table is indexed by (tokenizer.json)"
            )
        try:
            tokenizer = AutoTokenizer.from_pretrained(
                str(folder if (folder / "tokenizer_config.json").is_file() else module),
                trust_remote_code=False,
            )
        except (OSError, ValueError) as exc:
            raise ModelLoadError(f"{folder}: the tokenizer cannot be loaded ({exc})") from None
        if not tokenizer.all_special_ids:  # a tokenizer.json alone (model2vec's): its special tokens named
            name_special_tokens(tokenizer)
        if len(tokenizer) > vectors.shape[0]:
            raise ModelLoadError(
                f"{weights_file}: {vectors.shape[0]} token vectors for a tokenizer of {len(tokenizer)} ids"
            )
        specials = sorted(i for i in set(tokenizer.all_special_ids) if i < vectors.shape[0])
        words = vectors.clone()
        words[specials] = 0
        if not words.any():  # a text's mean leaves the special tokens out: every text would encode to 0
            raise ModelLoadError(
                f"{weights_file}: every token vector but the special tokens' ({len(specials)}) is zero; "
                f"every text would encode to 0"
            )
        encoder = cls(vectors, tokenizer, str(folder.resolve()) if folder.exists() else name_or_path)
        encoder.init = str(meta.get("init", ""))
        encoder.prompts = dict(meta.get("prompts") or {})
        encoder.similarity_fn_name = meta.get("similarity_fn_name")
        encoder.default_prompt_name = meta.get("default_prompt_name")
        encoder.normalize = normalize
        return encoder.eval().configure(**options)

    # ------------------------------------------------------------------ the training path
    def _mean(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """[N, L] ids (with the tokenizer's special tokens, as the data collate them) → [N, D]: the mean of
        the real, non-special tokens' rows (zero for a text with none)."""
        keep = attention_mask.bool() & ~torch.isin(input_ids, self.special)
        weights = keep.to(self.embedding.weight.dtype)
        summed = torch.einsum("nl,nld->nd", weights, F.embedding(input_ids, self.embedding.weight))
        mean = summed / weights.sum(1, keepdim=True).clamp_min(1.0)
        return F.normalize(mean, dim=-1) if self.normalize else mean

    def embed(self, batch) -> torch.Tensor:
        ids, mask = batch.input_ids, batch.attention_mask
        size, views, length = ids.shape
        return self._mean(ids.reshape(size * views, length), mask.reshape(size * views, length)).reshape(
            size, views, -1
        )

    def forward(self, batch) -> torch.Tensor:
        return self.embed(batch)

    def embed_tokens(self, input_ids, attention_mask, with_states: bool = False):
        if with_states:
            self.token_states(input_ids, attention_mask)
        return self._mean(input_ids, attention_mask)

    encode_tokens = embed_tokens

    def token_states(self, input_ids, attention_mask, all_layers: bool = False):
        raise ConfigError("model.architecture static: a static model has no token states to train on")

    def masked_lm_head(self) -> nn.Module:
        raise ConfigError("model.architecture static: a static model has no masked-LM head")

    def causal_decoder(self) -> nn.Module:
        raise ConfigError("model.architecture static: a static model has no transformer to decode with")

    def freeze_input_embeddings(self) -> None:
        raise ConfigError(
            "model.architecture static: its token vectors are all it has; they cannot be frozen"
        )

    def unpads_training(self) -> bool:
        return False

    @property
    def output_dim(self) -> int:
        return int(self.embedding.embedding_dim)

    @property
    def dimension(self) -> int:
        return int(self.embedding.embedding_dim)

    @property
    def hidden_size(self) -> int:
        return int(self.embedding.embedding_dim)

    @property
    def initializer_range(self) -> float:
        return float(self.output_dim**-0.5)

    def frozen_copy(self) -> StaticEncoder:
        clone = copy.deepcopy(self)
        clone.requires_grad_(False)
        clone.frozen = True
        return clone.eval()

    def momentum_copy(self) -> StaticEncoder:
        clone = copy.deepcopy(self)
        clone.requires_grad_(False)
        return clone

    @torch.no_grad()
    def follow(self, source: StaticEncoder, momentum: float) -> None:
        for mine, theirs in zip(self.parameters(), source.parameters(), strict=True):
            mine.mul_(momentum).add_(theirs.detach(), alpha=1 - momentum)

    def train(self, mode: bool = True):
        return super().train(mode and not self.frozen)

    # ------------------------------------------------------------------ encoding
    def with_dtype(self, dtype: str):
        """fp32 is the only precision of a table lookup: ``auto`` and ``fp32`` take it, others are refused."""
        if dtype not in ("auto", "fp32", "none", "float32"):
            raise ConfigError(f"--dtype {dtype}: a static model runs in fp32 (a table lookup and a mean)")
        return self

    @property
    def device(self) -> torch.device:
        return self.embedding.weight.device

    def _place(self, device: str) -> None:
        from sentcl.hardware import resolve_device

        self.to(resolve_device(str(device), "device"))

    def _embed(
        self, sentences: list[str], batch_size: int, show_progress: bool | None, prompt_length: int = 0
    ) -> np.ndarray:
        """Texts → float32 [N, D], as sentence-transformers' StaticEmbedding computes them: the ids without
        special tokens, no length limit, one EmbeddingBag call per chunk. The vectors do not depend on
        the batch, so chunks are at least ``CHUNK`` texts: the tokenizer, the cost here, takes many at
        once."""
        out = np.empty((len(sentences), self.dimension), dtype=np.float32)
        size = max(batch_size, CHUNK)
        with torch.inference_mode():
            for start in tqdm(range(0, len(sentences), size), desc="Batches", disable=not show_progress):
                order, flat, lengths = self.token_ids(sentences[start : start + size])
                offsets = np.concatenate([[0], np.cumsum(lengths[:-1])]).astype(np.int64)
                vectors = self.embedding(
                    torch.from_numpy(flat).to(self.device), torch.from_numpy(offsets).to(self.device)
                )
                if self.normalize:
                    vectors = F.normalize(vectors, dim=-1)
                out[start + order] = vectors.float().cpu().numpy()
        return require_finite(out, sentences, self.source)

    # ------------------------------------------------------------------ saving
    def save(self, path: str | Path, overwrite: bool = False) -> Path:
        """A folder sentence-transformers loads (``SentenceTransformer(path)``: one StaticEmbedding module)
        and sentcl loads with its prompts; written atomically, replacing only sentcl's own folders unless
        ``overwrite``."""
        path = Path(path)
        with atomic_folder(path, "model", overwrite) as tmp:
            module = tmp / MODULE_DIR
            module.mkdir()
            weight = self.embedding.weight.detach().to("cpu").float().contiguous()
            save_file({"embedding.weight": weight}, str(module / "model.safetensors"))
            self.fast.save(str(module / "tokenizer.json"))
            self.tokenizer.save_pretrained(str(tmp))
            modules = [{"idx": 0, "name": "0", "path": MODULE_DIR, "type": MODULE_TYPE}]
            if self.normalize:  # sentence-transformers' Normalize keeps no files; its folder is there
                modules.append({"idx": 1, "name": "1", "path": "1_Normalize", "type": NORMALIZE_TYPE})
                (tmp / "1_Normalize").mkdir()
            st_config: dict[str, object] = {
                "prompts": self.prompts, "default_prompt_name": self.default_prompt_name,
            }  # fmt: skip
            if self.similarity_fn_name:
                st_config["similarity_fn_name"] = self.similarity_fn_name
            meta = {
                "format_version": FORMAT_VERSION, "pooler": "static", "dimension": self.dimension,
                "vocabulary": int(weight.shape[0]), "init": self.init, "source": self.source,
                "prompts": self.prompts, "similarity_fn_name": self.similarity_fn_name,
                "default_prompt_name": self.default_prompt_name,
            }  # fmt: skip
            for name, content in (
                ("modules.json", modules),
                ("config_sentence_transformers.json", st_config),
            ):
                (tmp / name).write_text(json.dumps(content, indent=2) + "\n", encoding="utf-8")
            (tmp / STATIC_META).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        return path


#: the roles of the usual special tokens, for a tokenizer that came as a tokenizer.json alone
SPECIAL_ROLES = {
    "[PAD]": "pad_token", "<pad>": "pad_token", "[UNK]": "unk_token", "<unk>": "unk_token",
    "[CLS]": "cls_token", "[SEP]": "sep_token", "[MASK]": "mask_token", "<mask>": "mask_token",
}  # fmt: skip


def name_special_tokens(tokenizer) -> None:
    """Give the tokens ``tokenizer.json`` marks special their roles (the padding one, ``[CLS]``…), as a
    ``tokenizer_config.json`` would: the training path pads with one and leaves them all out of a mean."""
    added = json.loads(tokenizer.backend_tokenizer.to_str()).get("added_tokens") or []
    special = [token["content"] for token in added if token.get("special")]
    roles = {SPECIAL_ROLES[content]: content for content in special if content in SPECIAL_ROLES}
    others = [content for content in special if content not in SPECIAL_ROLES]
    tokenizer.add_special_tokens(roles | ({"additional_special_tokens": others} if others else {}))


def is_static_folder(folder: str | Path) -> bool:
    return static_module_dir(Path(folder)) is not None


#: files beside a static model's module that it may have (prompts, the tokenizer at the top, sentcl's note)
TOP_FILES = (
    "config_sentence_transformers.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    STATIC_META,
)
#: files the module itself must have
MODULE_FILES = ("model.safetensors", "tokenizer.json")


def hub_constants():
    """huggingface_hub's settings as it reads them (HF_HUB_OFFLINE)."""
    from huggingface_hub import constants

    return constants


def hub_static_folder(name: str) -> Path | None:
    """A hub id whose repository is a static model (its ``modules.json``'s first module a
    ``StaticEmbedding``, as sentence-transformers', model2vec's and sentcl's static models are): the folder
    of its files, downloaded at one revision into sentcl's cache and checked against the hub's hashes
    (hub_files.py). ``None`` for a local path, a packaged model, or a repository without such a
    ``modules.json`` or out of reach (the transformer loader then says what is wrong). A static repository
    whose files cannot be had is one ``ModelLoadError`` naming the file."""
    from sentcl.hub_files import (
        HubFileCorruptError,
        HubFileError,
        HubTimeoutError,
        hub_file,
        hub_file_if_present,
        hub_timeout,
    )

    if name.count("/") != 1 or name.startswith((".", "/", "~")) or Path(name).expanduser().exists():
        return None  # not a hub id
    if packaged_model_path(name) is not None:
        return None
    if not hub_constants().HF_HUB_OFFLINE:
        hub_timeout()  # a bad SENTCL_HUB_TIMEOUT is its one line, not "not a static model" and a long wait
    try:
        modules = hub_file_if_present(name, "modules.json", repo_type="model")
    except (HubFileCorruptError, HubTimeoutError) as exc:  # said as it is, not as another loader's failure
        raise ModelLoadError(str(exc)) from None
    except HubFileError:
        return None
    if modules is None or (module := static_module_dir(modules.parent)) is None:
        return None
    folder, revision = modules.parent, modules.parent.name  # the snapshot folder is named by its commit
    inside = module.relative_to(folder)
    try:
        for file in MODULE_FILES:
            hub_file(name, (inside / file).as_posix(), repo_type="model", revision=revision)
        for file in TOP_FILES:
            hub_file_if_present(name, file, repo_type="model", revision=revision)
    except HubFileError as exc:
        raise ModelLoadError(str(exc)) from None
    return folder


@torch.no_grad()
def vocabulary_distillation(
    teacher, dims: int = 256, sif: float | None = 1e-4, batch_size: int = 512
) -> np.ndarray:
    """model2vec's start from ``teacher`` (a SentenceEncoder): [V, dims] float32, one row per token id.

    Each kept token alone between the tokenizer's special tokens, through the teacher with its own pooler
    (no head, no output modules: the token's vector as the teacher pools it); the kept rows centred and
    projected on their first ``dims`` principal components (``sklearn.decomposition.PCA``, no whitening;
    all components when ``dims`` ≥ the teacher's dimension); each row times a / (a + p), p ∝ 1 / (rank + 2)
    with rank the token's place among the kept ids (model2vec's Zipf estimate; ``sif`` None: no weights)."""
    from sklearn.decomposition import PCA

    tokenizer = teacher.tokenizer
    size = len(tokenizer)
    special = set(tokenizer.all_special_ids)
    names = tokenizer.convert_ids_to_tokens(list(range(size)))
    kept = [i for i, name in enumerate(names) if i not in special and not UNUSED.fullmatch(str(name))]
    prefix, suffix = special_frame(tokenizer)
    sequences = [[*prefix, i, *suffix] for i in kept]
    length = max(len(s) for s in sequences)
    pad = tokenizer.pad_token_id or 0
    was_training = teacher.training
    teacher.eval()
    pooled = []
    try:
        for start in tqdm(range(0, len(sequences), batch_size), desc="Vocabulary through the teacher"):
            chunk = sequences[start : start + batch_size]
            ids = torch.full((len(chunk), length), pad, dtype=torch.long)
            mask = torch.zeros_like(ids)
            for row, sequence in enumerate(chunk):
                ids[row, : len(sequence)] = torch.tensor(sequence)
                mask[row, : len(sequence)] = 1
            pooled.append(teacher._pool(ids.to(teacher.device), mask.to(teacher.device)).float().cpu())
    finally:
        teacher.train(was_training)
    vectors = torch.cat(pooled).numpy().astype(np.float64)
    components = min(dims, vectors.shape[1])
    if dims > vectors.shape[1]:
        logger.warning(
            "static_dim %d is beyond the teacher's %d dimensions: %d kept", dims, vectors.shape[1], components
        )
    reduced = PCA(n_components=components, svd_solver="full").fit_transform(vectors)
    if sif is not None:
        probability = 1.0 / np.arange(2, len(kept) + 2)
        probability /= probability.sum()
        reduced *= (sif / (sif + probability))[:, None]
    table = np.zeros((size, components), dtype=np.float32)
    table[kept] = reduced
    return table


def read_json_list(path: Path) -> list[dict]:
    """modules.json's rows ([] where there is none: a folder sentcl wrote has one module)."""
    if not path.is_file():
        return []
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, OSError) as exc:
        raise ModelLoadError(f"{path}: {exc}") from None
    return [row for row in rows if isinstance(row, dict)] if isinstance(rows, list) else []
