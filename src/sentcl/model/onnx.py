"""The encoder as an ONNX graph run by ONNX Runtime: sentcl's int8 path and ``sentcl export --onnx``.

``export_onnx(encoder, folder, int8)`` writes the *embedding path* (backbone → pooler → the head where it
is used for encoding; no dropout) as ``model.onnx`` with dynamic batch and length, beside the tokenizer
and ``sentcl_onnx.json`` (pooler, dimension, max length, precision, source). With ``int8`` the graph is
quantised by ONNX Runtime's dynamic quantisation: int8 weights per output channel, activations quantised
per call, so the products run on the CPU's int8 kernels (VNNI / AMX where the CPU has them).

``OnnxEncoder.load(folder)`` is an ``Embedder`` (``encode``) with the attributes the commands use
(``pooler``, ``dimension``, ``max_length``, ``tokenizer``, ``source``); ``model/inference.py``'s
``load_encoder`` picks it for a folder holding ``model.onnx`` and ``SentenceEncoder`` otherwise, so
evaluation, encoding, indexing and the server take either. This replaces torch's ``quantize_dynamic``
(``torch.ao.quantization``), which torch marks deprecated.
"""

from __future__ import annotations

import json
import logging
import tempfile
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from transformers import AutoTokenizer

from sentcl.atomic_write import atomic_folder
from sentcl.config import ConfigError
from sentcl.data.collate import sorted_batches
from sentcl.embedder import PromptError, PromptRoles, check_prompts, require_finite
from sentcl.encode_contract import SIMILARITY_FUNCTIONS, LoadOptions, SentenceTransformersContract
from sentcl.extras import require
from sentcl.model.backbone import TOKENIZER_FILES, ModelLoadError, read_json_object
from sentcl.model.pooling import exclude_prompt

if TYPE_CHECKING:
    from typing_extensions import Unpack

logger = logging.getLogger(__name__)

ONNX_FILE = "model.onnx"
ONNX_META = "sentcl_onnx.json"
#: torch's exporter writes opset 18 and older only by converting down, which fails on some graphs
#: (all-MiniLM-L6-v2: onnx's converter asserts and prints a traceback, the model stays at 18 while the
#: metadata said 17); 18 is what it writes, and ONNX Runtime reads it from 1.14 on
OPSET = 18


class _EmbeddingPath(torch.nn.Module):
    def __init__(self, encoder):
        super().__init__()
        self.encoder = encoder

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.encoder.encode_tokens(input_ids, attention_mask)


def onnx_refusal(encoder) -> str | None:
    """Why ``encoder``'s embedding path has no ONNX graph, or None where it has one."""
    if getattr(encoder, "pooler", None) == "prompt":  # its splice into the template is a loop over rows
        return "pooler 'prompt' reads each sentence in a template, which sentcl does not export to ONNX"
    return None


def export_onnx(encoder, folder: str | Path, int8: bool = False, overwrite: bool = False) -> Path:
    """Write ``encoder``'s embedding path to ``folder`` (atomically: a failed export leaves nothing; a folder
    sentcl did not write is replaced only with ``overwrite``)."""
    reason = onnx_refusal(encoder)
    if reason is not None:
        raise ConfigError(f"{encoder.source}: {reason}")
    for module in ("onnx", "onnxscript"):  # the exporter needs both: one line naming the extra if missing
        require(module, "onnx", "ONNX export")

    folder = Path(folder)
    was_training, device = encoder.training, encoder.device
    encoder.eval().to("cpu")
    try:
        with atomic_folder(folder, "onnx", overwrite) as tmp, torch.no_grad():
            example = (torch.ones(2, 8, dtype=torch.long), torch.ones(2, 8, dtype=torch.long))
            rows, length = torch.export.Dim("rows"), torch.export.Dim("length", max=encoder.max_length)
            shapes = {"input_ids": {0: rows, 1: length}, "attention_mask": {0: rows, 1: length}}
            graph = tmp / ("fp32.onnx" if int8 else ONNX_FILE)
            with warnings.catch_warnings():  # torch's exporter talks about itself: two axes share a name
                warnings.filterwarnings("ignore", message=".*axis name", category=UserWarning)  # (intended)
                warnings.filterwarnings("ignore", message=".*LeafSpec", category=FutureWarning)  # its pytree
                program = torch.onnx.export(
                    _EmbeddingPath(encoder).eval(), example, input_names=["input_ids", "attention_mask"],
                    output_names=["embeddings"], dynamic_shapes=shapes, opset_version=OPSET, dynamo=True,
                    external_data=False, verbose=False,
                )  # fmt: skip
                assert program is not None  # dynamo=True returns the program
                # torch's stack traces and fx names, per node: two thirds of a small graph's file, and
                # nothing ONNX Runtime reads
                for node in program.model.graph.all_nodes():
                    node.metadata_props.clear()
                program.save(str(graph))
            if int8:
                quantization = require("onnxruntime.quantization", "onnx", "int8 export")
                QuantType, quantize_dynamic = quantization.QuantType, quantization.quantize_dynamic  # noqa: N806

                quantize_dynamic(
                    str(graph), str(tmp / ONNX_FILE), weight_type=QuantType.QInt8, per_channel=True
                )
                graph.unlink()
            encoder.tokenizer.save_pretrained(str(tmp))
            meta = {
                "pooler": encoder.pooler,
                "dimension": encoder.dimension,
                "max_seq_length": encoder.max_length,
                "precision": "int8" if int8 else "fp32",
                "source": encoder.source,
                "opset": OPSET,
                "prompts": encoder.prompts,
                "similarity_fn_name": encoder.similarity_fn_name,
                "include_prompt": encoder.include_prompt,  # false: the graph reads the mask's NOT_POOLED
                "default_prompt_name": encoder.default_prompt_name,
                "modules": [module.kind for module in encoder.output_modules],  # in the graph
            }
            (tmp / ONNX_META).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    finally:
        encoder.to(device).train(was_training)
    return folder


class OnnxEncoder(PromptRoles, SentenceTransformersContract):
    """An exported encoder in ONNX Runtime: ``encode(texts) → float32 [N, D]`` like ``SentenceEncoder``."""

    def __init__(self, session, tokenizer, meta: dict, source: str):
        self.session, self.tokenizer, self.meta = session, tokenizer, meta
        self.pooler = meta["pooler"]
        self._dimension = int(meta["dimension"])
        self.max_length = int(meta["max_seq_length"])
        self.precision = meta["precision"]
        self.source = source
        self.prompts = dict(meta.get("prompts") or {})  # checked by _check_meta
        self.similarity_fn_name = meta.get("similarity_fn_name")  # checked by _check_meta
        self.include_prompt = meta.get("include_prompt", True)  # checked by _check_meta
        self.default_prompt_name = meta.get("default_prompt_name")
        #: the folder it was loaded from (what a worker process of a pool loads); None once it is gone
        self.folder: str | None = None

    @property
    def dimension(self) -> int:
        return self._dimension

    @classmethod
    def load(
        cls,
        folder: str | Path,
        threads: int | None = None,
        **options: Unpack[LoadOptions],
    ) -> OnnxEncoder:
        """An exported folder in ONNX Runtime; the keyword arguments are sentence-transformers'
        constructor's (``configure``)."""
        ort = require("onnxruntime", "onnx", "an ONNX model")
        folder = Path(folder)
        meta_file = folder / ONNX_META
        if not (folder / ONNX_FILE).is_file() or not meta_file.is_file():
            raise ModelLoadError(
                f"{folder}: no {ONNX_FILE} with its {ONNX_META} (made by sentcl export --onnx)"
            )
        try:
            meta = read_json_object(meta_file, object)
        except ValueError as exc:
            raise ModelLoadError(str(exc)) from None
        _check_meta(meta, meta_file)
        if not any((folder / name).is_file() for name in TOKENIZER_FILES):
            raise ModelLoadError(
                f"{folder}: no tokenizer files beside {ONNX_FILE} ({', '.join(TOKENIZER_FILES)})"
            )
        session_options = ort.SessionOptions()
        session_options.intra_op_num_threads = threads or torch.get_num_threads()
        session_options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        try:
            session = ort.InferenceSession(
                str(folder / ONNX_FILE), session_options, providers=["CPUExecutionProvider"]
            )
            tokenizer = AutoTokenizer.from_pretrained(str(folder), trust_remote_code=False)
        except Exception as exc:  # onnxruntime and the tokenizer classes raise their own exception types
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ModelLoadError(f"{folder}: the ONNX export cannot be loaded ({reason})") from None
        encoder = cls(session, tokenizer, meta, str(folder.resolve()))
        encoder.check()
        encoder.folder = str(folder.resolve())
        return encoder.configure(**options)

    def check(self) -> None:
        """One short sentence through the graph: the graph's inputs and outputs are the ones sentcl exports,
        its vectors have the dimension the folder records, and they are finite (ModelLoadError otherwise)."""
        names = (
            sorted(i.name for i in self.session.get_inputs()),
            [o.name for o in self.session.get_outputs()],
        )
        if names != (["attention_mask", "input_ids"], ["embeddings"]):
            raise ModelLoadError(f"{self.source}: not a graph sentcl exported (inputs and outputs {names})")
        try:
            batch = next(sorted_batches(self.tokenizer, ["a probe sentence."], self.max_length, 1))[1]
            feeds = {
                "input_ids": batch.input_ids[:, 0].numpy(),
                "attention_mask": batch.attention_mask[:, 0].numpy(),
            }
            vectors = self.session.run(["embeddings"], feeds)[0]
        except Exception as exc:  # onnxruntime's own types
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ModelLoadError(f"{self.source}: the ONNX graph does not run ({reason})") from None
        if vectors.ndim != 2 or vectors.shape[1] != self.dimension:
            raise ModelLoadError(
                f"{self.source}: the graph gives vectors of shape {list(vectors.shape[1:])}, but {ONNX_META} "
                f"says {self.dimension} dimensions"
            )
        if not np.isfinite(vectors).all():
            raise ModelLoadError(
                f"{self.source}: the graph gives NaN or infinite values; the export is broken"
            )

    @classmethod
    def from_encoder(cls, encoder, int8: bool = True) -> OnnxEncoder:
        """``encoder`` exported and loaded (through a temporary folder: the session holds the graph)."""
        with tempfile.TemporaryDirectory(prefix="sentcl-onnx-") as tmp:
            loaded = cls.load(export_onnx(encoder, Path(tmp) / "model", int8=int8))
        loaded.source = encoder.source
        return loaded

    def _pool_payload(self):
        """A session cannot be pickled: a worker process loads the folder (this loader and its folder)."""
        if self.folder is None or not Path(self.folder).is_dir():
            raise ConfigError(
                f"{self.source}: an ONNX model made in memory has no folder for worker processes to load; "
                f"export it (sentcl export --onnx) and load that folder"
            )
        return (type(self).load, str(self.folder))

    def _place(self, device) -> None:
        if str(device) not in ("cpu", "auto"):
            raise ConfigError(f"device {device}: ONNX Runtime runs sentcl's ONNX and int8 models on the CPU")

    def _embed(
        self, sentences: list[str], batch_size: int, show_progress: bool | None, prompt_length: int = 0
    ) -> np.ndarray:
        """Texts → float32 [N, D], batched by token length as ``SentenceEncoder`` batches them; the
        contract's ``encode`` (sentcl/encode_contract.py) shapes what it returns. A prompt the pooling leaves
        out is marked in the mask, which the graph of such a model reads (model/pooling.py)."""
        out = np.empty((len(sentences), self.dimension), dtype=np.float32)
        for idx, batch in sorted_batches(
            self.tokenizer, sentences, self.max_length, batch_size, show_progress, self.max_batch_tokens
        ):
            feeds = {
                "input_ids": batch.input_ids[:, 0].numpy(),
                "attention_mask": exclude_prompt(batch.attention_mask[:, 0], prompt_length).numpy(),
            }
            out[idx] = self.session.run(["embeddings"], feeds)[0]
        return require_finite(out, sentences, self.source)


def _check_meta(meta, path: Path) -> None:
    if not isinstance(meta, dict):
        raise ModelLoadError(f"{path}: expected a JSON object")
    for key, kind in (("pooler", str), ("dimension", int), ("max_seq_length", int), ("precision", str)):
        value = meta.get(key)
        if not isinstance(value, kind) or isinstance(value, bool) or (isinstance(value, int) and value < 1):
            raise ModelLoadError(f"{path}: {key} is {value!r}, not a valid {kind.__name__}")
    named = meta.get("similarity_fn_name")
    if named not in (None, *SIMILARITY_FUNCTIONS):
        raise ModelLoadError(
            f"{path}: similarity_fn_name {named!r} is not one of {', '.join(SIMILARITY_FUNCTIONS)}"
        )
    if not isinstance(meta.get("include_prompt", True), bool):
        raise ModelLoadError(f"{path}: include_prompt {meta['include_prompt']!r} is not true or false")
    try:
        check_prompts(meta.get("prompts"), str(path))
    except PromptError as exc:
        raise ModelLoadError(str(exc)) from None
