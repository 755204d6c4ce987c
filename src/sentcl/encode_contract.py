"""sentence-transformers' ``encode()`` contract, written once for every sentcl encoder (the PyTorch
``SentenceEncoder``, the ONNX ``OnnxEncoder``), so a user of sentence-transformers switches without surprises.

What ``SentenceTransformer.encode`` (6.x) does, sentcl's ``encode`` does (tests/test_encode_contract.py runs
the same calls on both and compares):

* one string → one vector ``[D]``; a list (tuple, array of strings) → ``[N, D]``; an empty list → shape
  ``(0,)`` (a list ``[]`` with ``convert_to_numpy=False``, an empty tensor with ``convert_to_tensor``);
* ``prompt_name`` / ``prompt`` (the prompt wins when both are given, with a warning), else the model's
  ``default_prompt_name``; every model's ``prompts`` hold ``query`` and ``document``, empty unless it sets
  them;
* ``truncate_dim`` (the model's ``truncate_dim`` by default) keeps the first dimensions, then
  ``normalize_embeddings`` scales each vector to unit length, then ``precision`` (float32, int8, uint8,
  binary, ubinary) quantizes, int8 / uint8 with ranges from the vectors themselves;
* ``convert_to_tensor`` gives one tensor, ``convert_to_numpy`` (default) one array, neither a list of tensors;
* ``device`` runs the model there; a list of devices (``["cpu", "cpu"]``, ``["cuda:0", "cuda:1"]``) encodes in
  one worker process per entry, as does ``pool`` (``start_multi_process_pool`` / ``stop_multi_process_pool``),
  on the engine of ``sentcl encode --device cpu,cpu`` (encode_pool.py); ``chunk_size`` as theirs;
* a model in float16 (``half()``) gives float16 vectors, one in bfloat16 (``bfloat16()``) float32 arrays and
  bfloat16 tensors, as theirs; ``batch_size``, ``show_progress_bar`` as theirs;
* ``similarity`` / ``similarity_pairwise`` take embeddings (sentcl also takes texts) and use
  ``similarity_fn_name`` (cosine, dot, euclidean, manhattan: a negative distance), returning a tensor;
* ``get_sentence_embedding_dimension`` / ``get_embedding_dimension``, ``max_seq_length``, ``tokenize``;
* ``load(path, device=, truncate_dim=, prompts=, default_prompt_name=, similarity_fn_name=)`` as their
  constructor takes them (``configure``).

sentcl's own keyword names stay: ``normalize`` (= ``normalize_embeddings``) and ``show_progress``
(= ``show_progress_bar``). Where sentcl refuses what sentence-transformers lets pass, it says so: an unknown
keyword, ``output_value`` other than sentence embeddings, a ``truncate_dim`` below 1, a non-text input.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np
import torch

from sentcl.embedder import DOCUMENT, QUERY, check_prompts, prompt_text, unit_rows
from sentcl.errors import UserError
from sentcl.search.quantization import EMBEDDING_PRECISIONS, quantize

SIMILARITY_FUNCTIONS = ("cosine", "dot", "euclidean", "manhattan")


class LoadOptions(TypedDict, total=False):
    """What sentence-transformers' constructor sets beside the model, as every sentcl ``load`` takes it."""

    device: str | None
    truncate_dim: int | None
    prompts: dict[str, str] | None
    default_prompt_name: str | None
    similarity_fn_name: str | None


class EncodeArgumentError(UserError, ValueError):
    """An argument of ``encode`` / ``similarity`` that sentcl cannot honour; the message names it."""


def as_texts(sentences) -> tuple[list[str], bool]:
    """(the texts, whether one text was given) for what ``encode`` accepts; an EncodeArgumentError names the
    first item that is not a text."""
    if isinstance(sentences, str):
        return [sentences], True
    if isinstance(sentences, np.ndarray):
        sentences = sentences.tolist()
    if not isinstance(sentences, Iterable) or isinstance(sentences, (bytes, dict)):
        raise EncodeArgumentError(f"encode takes a text or a list of texts, not {type(sentences).__name__}")
    texts = list(sentences)
    for position, text in enumerate(texts):
        if not isinstance(text, str):
            raise EncodeArgumentError(
                f"encode: item {position} is {type(text).__name__}, not a text (sentcl encodes texts only)"
            )
    return texts, False


def similarity_matrix(a, b, name: str) -> torch.Tensor:
    """[N, M] scores of every row of ``a`` with every row of ``b`` under ``name`` (a 1-D input is one row)."""
    x, y = _rows(a), _rows(b)
    if name == "cosine":
        return torch.nn.functional.normalize(x, dim=-1) @ torch.nn.functional.normalize(y, dim=-1).T
    if name == "dot":
        return x @ y.T
    return -torch.cdist(x, y, p=2.0 if name == "euclidean" else 1.0)


def similarity_pairs(a, b, name: str) -> torch.Tensor:
    """[N] scores of row i of ``a`` with row i of ``b`` under ``name``."""
    x, y = _rows(a), _rows(b)
    if x.shape != y.shape:
        raise EncodeArgumentError(f"similarity_pairwise: {list(x.shape)} and {list(y.shape)} rows differ")
    if name == "cosine":
        return (torch.nn.functional.normalize(x, dim=-1) * torch.nn.functional.normalize(y, dim=-1)).sum(-1)
    if name == "dot":
        return (x * y).sum(-1)
    if name == "euclidean":
        return -torch.linalg.vector_norm(x - y, dim=-1)
    return -(x - y).abs().sum(-1)


def _rows(value) -> torch.Tensor:
    if isinstance(value, list) and value and all(isinstance(v, torch.Tensor) for v in value):
        value = torch.stack(value)
    tensor = torch.as_tensor(np.asarray(value) if isinstance(value, list) else value)
    if not tensor.is_floating_point() or tensor.dtype in (torch.float16, torch.bfloat16):
        tensor = tensor.float()
    return tensor.unsqueeze(0) if tensor.dim() == 1 else tensor


class SentenceTransformersContract:
    """``encode`` and its companions as sentence-transformers has them. A subclass gives ``dimension``,
    ``max_length``, ``tokenizer``, ``prompts``, ``source`` and ``_embed(texts, batch_size, show_progress) →
    float32 [N, D]`` (the model's own vectors, its output modules applied), and ``_place(device)``."""

    #: the dimension ``encode`` truncates to by default (sentence-transformers' ``truncate_dim``)
    truncate_dim: int | None = None
    #: the prompt ``encode`` puts before texts when it is given neither a prompt nor a prompt name
    default_prompt_name: str | None = None
    _max_batch_tokens: int | None = None
    #: ``encode`` takes ``prompt=``: role paths hand the prompt over instead of gluing it to the text, so a
    #: pooling with ``include_prompt`` false leaves it out (embedder.encode_with_prompt)
    takes_prompt = True
    _similarity_fn_name: str | None = None
    _prompts: dict[str, str]

    if TYPE_CHECKING:  # what a subclass gives

        @property
        def dimension(self) -> int: ...

        source: str | None
        tokenizer: Any

        def _place(self, device: str) -> None: ...

        def _embed(
            self, sentences: list[str], batch_size: int, show_progress: bool | None, prompt_length: int = 0
        ) -> np.ndarray: ...

    # ------------------------------------------------------------------------------------- encode
    def encode(
        self,
        sentences: str | Sequence[str],
        prompt_name: str | None = None,
        prompt: str | None = None,
        batch_size: int = 128,
        show_progress_bar: bool | None = None,
        output_value: str | None = "sentence_embedding",
        precision: str = "float32",
        convert_to_numpy: bool = True,
        convert_to_tensor: bool = False,
        device: str | None = None,
        normalize_embeddings: bool = False,
        truncate_dim: int | None = None,
        *,
        normalize: bool | None = None,
        show_progress: bool | None = None,
        pool=None,
        chunk_size: int | None = None,
        **unknown,
    ):
        """Texts → vectors, as ``SentenceTransformer.encode`` returns them (this module's docstring)."""
        where = self.source or "encode"
        if unknown:
            raise EncodeArgumentError(f"encode: unknown keyword(s) {', '.join(sorted(unknown))}")
        if output_value != "sentence_embedding":
            raise EncodeArgumentError(
                f"encode: output_value {output_value!r}: sentcl returns sentence embeddings only"
            )
        if precision not in EMBEDDING_PRECISIONS:
            raise EncodeArgumentError(
                f"encode: precision {precision!r} is not one of {', '.join(EMBEDDING_PRECISIONS)}"
            )
        _require_positive(batch_size, "encode: batch_size")
        normalize_embeddings = _either(normalize_embeddings, normalize, "normalize_embeddings", "normalize")
        show_progress_bar = _either(show_progress_bar, show_progress, "show_progress_bar", "show_progress")
        truncate_dim = self.truncate_dim if truncate_dim is None else truncate_dim
        if truncate_dim is not None:
            _require_positive(truncate_dim, "encode: truncate_dim")
        texts, single = as_texts(sentences)
        if prompt is None and prompt_name is None:
            prompt_name = self.default_prompt_name
        before = prompt_text(self.prompts, prompt_name, prompt, where)
        if chunk_size is not None:
            _require_positive(chunk_size, "encode: chunk_size")
        devices = list(device) if isinstance(device, (list, tuple)) else None
        if device is not None and devices is None:
            self._place(device)
        out_dtype = self._output_dtype()
        if texts:
            prefixed, skip = [before + t for t in texts], self._prompt_length(before)
            if pool is not None:
                vectors = pool.embed(prefixed, batch_size, skip, chunk_size, show_progress_bar)
            elif devices is not None:
                started = self.start_multi_process_pool(devices)
                try:
                    vectors = started.embed(prefixed, batch_size, skip, chunk_size, show_progress_bar)
                finally:
                    started.close()
            else:
                vectors = self._embed(prefixed, batch_size, show_progress_bar, skip)
            if truncate_dim is not None:
                vectors = vectors[:, :truncate_dim]
            if normalize_embeddings:
                vectors = unit_rows(vectors)
            vectors = np.ascontiguousarray(vectors)
            if precision != "float32":
                vectors = quantize(vectors, precision)
        result: Any
        as_tensor = precision == "float32" and out_dtype != torch.float32
        if not texts:
            result = torch.tensor([]) if convert_to_tensor else np.array([]) if convert_to_numpy else []
        elif convert_to_tensor or not convert_to_numpy:
            tensor = torch.from_numpy(vectors).to(out_dtype) if as_tensor else torch.from_numpy(vectors)
            result = tensor if convert_to_tensor else list(tensor)
        else:  # numpy has no bfloat16: theirs is float32 then
            result = vectors.astype(np.float16) if as_tensor and out_dtype == torch.float16 else vectors
        return result[0] if single else result

    def _output_dtype(self) -> torch.dtype:
        """The dtype of the model's weights where it has them (``half()``, ``bfloat16()``), else float32."""
        parameters = getattr(self, "parameters", None)
        if parameters is None:
            return torch.float32
        for parameter in parameters():
            if parameter.is_floating_point():
                return parameter.dtype
        return torch.float32

    # ------------------------------------------------------------------- sentence-transformers' own
    @property
    def prompts(self) -> dict[str, str]:
        """name → the text put before sentences; ``query`` and ``document`` are always there (empty unless
        the model sets them), as in sentence-transformers."""
        return self._prompts

    @prompts.setter
    def prompts(self, value: dict[str, str] | None) -> None:
        object.__setattr__(self, "_prompts", {QUERY: "", DOCUMENT: ""} | dict(value or {}))

    def configure(
        self,
        device: str | None = None,
        truncate_dim: int | None = None,
        prompts: dict[str, str] | None = None,
        default_prompt_name: str | None = None,
        similarity_fn_name: str | None = None,
    ):
        """What sentence-transformers' constructor sets beside the model: the device, the default
        ``truncate_dim``, prompts (over the saved ones), the default prompt and the similarity function."""
        if truncate_dim is not None:
            _require_positive(truncate_dim, "truncate_dim")
        if prompts is not None:
            self.prompts = self.prompts | check_prompts(prompts, "prompts")
        if default_prompt_name is not None:
            if default_prompt_name not in self.prompts:
                known = ", ".join(sorted(self.prompts))
                raise EncodeArgumentError(
                    f"default_prompt_name {default_prompt_name!r} is not one of the model's prompts ({known})"
                )
            self.default_prompt_name = default_prompt_name
        if similarity_fn_name is not None:
            self.similarity_fn_name = similarity_fn_name
        if truncate_dim is not None:
            self.truncate_dim = truncate_dim
        if device is not None:
            self._place(device)
        return self

    def start_multi_process_pool(self, target_devices: Sequence[str] | None = None):
        """Worker processes, one per device (default: 4 CPU processes, as theirs), each holding this model;
        ``encode(texts, pool=pool)`` uses them, ``stop_multi_process_pool(pool)`` ends them."""
        from sentcl.encode_pool import EncodePool

        if target_devices is None:
            count = torch.cuda.device_count() if torch.cuda.is_available() else 0
            target_devices = [f"cuda:{i}" for i in range(count)] or ["cpu"] * 4
        return EncodePool(self, list(target_devices))

    @staticmethod
    def stop_multi_process_pool(pool) -> None:
        pool.close()

    def _pool_payload(self):
        """What a worker process gets to hold this model: the model itself (pickled), by default."""
        return self

    def _prompt_length(self, prompt: str) -> int:
        """How many first tokens of a text the pooling leaves out: none unless the model's Pooling has
        ``include_prompt`` false and a prompt is given; then the prompt's tokens with the special tokens
        before them (sentence-transformers' ``prompt_length``: the prompt tokenised, less a special token at
        its end)."""
        if not prompt or getattr(self, "include_prompt", True):
            return 0
        ids = list(self.tokenizer(prompt)["input_ids"])
        if ids and ids[-1] in set(getattr(self.tokenizer, "all_special_ids", ())):
            ids = ids[:-1]
        return len(ids)

    # ------------------------------------------------------------------------------- similarity
    @property
    def similarity_fn_name(self) -> str:
        """The similarity ``similarity`` uses: cosine unless the model or the user set another."""
        return self._similarity_fn_name or "cosine"

    @similarity_fn_name.setter
    def similarity_fn_name(self, value: str | None) -> None:
        value = getattr(value, "value", value)  # sentence-transformers' SimilarityFunction enum
        if value is not None and value not in SIMILARITY_FUNCTIONS:
            raise EncodeArgumentError(
                f"similarity_fn_name {value!r} is not one of {', '.join(SIMILARITY_FUNCTIONS)}"
            )
        self._similarity_fn_name = value

    def similarity(self, a, b, batch_size: int = 128) -> torch.Tensor:
        """Scores [N, M] of every item of ``a`` with every item of ``b``: embeddings (an array, a tensor, a
        list of either; 1-D is one row) or texts (encoded first)."""
        x, y = (self._embeddings_of(v, batch_size) for v in (a, b))
        return similarity_matrix(x, y, self.similarity_fn_name)

    def similarity_pairwise(self, a, b, batch_size: int = 128) -> torch.Tensor:
        """Scores [N] of item i of ``a`` with item i of ``b`` (embeddings or texts)."""
        x, y = (self._embeddings_of(v, batch_size) for v in (a, b))
        return similarity_pairs(x, y, self.similarity_fn_name)

    def _embeddings_of(self, value, batch_size: int):
        texts = isinstance(value, str) or (
            isinstance(value, (list, tuple)) and len(value) > 0 and all(isinstance(v, str) for v in value)
        )
        return self.encode(value, batch_size=batch_size) if texts else value

    # -------------------------------------------------------------------------------- the rest
    def get_sentence_embedding_dimension(self) -> int:
        """The vectors' dimension (after ``truncate_dim``), as sentence-transformers names it."""
        return min(self.dimension, self.truncate_dim or self.dimension)

    def get_embedding_dimension(self) -> int:
        return self.get_sentence_embedding_dimension()

    @property
    def max_seq_length(self) -> int:
        """Tokens per text (special tokens included); longer texts are truncated."""
        return self.max_length

    @max_seq_length.setter
    def max_seq_length(self, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 2:
            raise EncodeArgumentError(f"max_seq_length must be an integer ≥ 2, got {value!r}")
        self.max_length = value

    @property
    def max_batch_tokens(self) -> int | None:
        """sentcl's own: a batch of ``encode`` also holds at most this many tokens with its padding (rows ×
        its longest text), so long texts go in smaller batches (memory bounded by tokens, not by rows);
        None (the default): ``batch_size`` rows whatever their length. The vectors do not change."""
        return self._max_batch_tokens

    @max_batch_tokens.setter
    def max_batch_tokens(self, value: int | None) -> None:
        if value is not None:
            _require_positive(value, "max_batch_tokens")
        object.__setattr__(self, "_max_batch_tokens", value)

    def tokenize(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        """The padded token tensors ``texts`` encode with (``input_ids``, ``attention_mask``, …)."""
        texts, _ = as_texts(texts)
        return dict(
            self.tokenizer(
                texts, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt"
            )
        )


def _require_positive(value, what: str) -> None:
    """An EncodeArgumentError naming ``what`` unless ``value`` is an integer ≥ 1 (a bool is not one)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise EncodeArgumentError(f"{what} must be a positive integer, got {value!r}")


def _either(theirs, ours, their_name: str, our_name: str):
    """sentence-transformers' keyword and sentcl's alias for it: the one given (both only when they agree)."""
    if ours is None:
        return theirs
    if theirs not in (None, False) and theirs != ours:
        raise EncodeArgumentError(f"encode: {their_name}={theirs!r} and {our_name}={ours!r} disagree")
    return ours
