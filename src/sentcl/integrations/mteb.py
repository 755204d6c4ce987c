"""Any sentcl model — a run folder, a saved model, a hub id, an ONNX export — as an encoder ``mteb`` evaluates
(its ``EncoderProtocol``). Installed with ``pip install 'sentcl[mteb]'``.

    import mteb
    from sentcl.integrations.mteb import MTEBEncoder
    model = MTEBEncoder("runs/unsup")                       # or MTEBEncoder("runs/unsup-onnx")
    results = mteb.evaluate(model, mteb.get_benchmark("MTEB(eng, v2)"))   # online: mteb downloads the tasks

mteb passes each batch's texts and, for retrieval, whether they are queries or documents: the model's own
``query`` / ``document`` prompt is applied then (sentence-transformers' behaviour); other tasks encode the
texts as they are. Similarity is cosine. The precision is the one a user chooses (``dtype``, default fp32 so
that a score does not depend on the machine).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sentcl.embedder import DOCUMENT, QUERY, for_role
from sentcl.extras import require
from sentcl.model import for_inference, load_encoder


class MTEBEncoder:
    def __init__(
        self,
        model_name: str,
        revision: str | None = None,
        *,
        device: str | None = None,
        dtype: str = "fp32",
        batch_size: int = 128,
        pooler: str | None = None,
        **kwargs: Any,
    ) -> None:
        models = require("mteb.models", "mteb", "the mteb encoder")
        self.model = for_inference(load_encoder(model_name, pooler=pooler), dtype, device=device or "auto")
        self.batch_size = batch_size
        name = model_name if "/" in model_name else f"local/{model_name}"
        self.mteb_model_meta = models.ModelMeta.create_empty(
            overwrites={
                "name": name, "revision": revision or "local", "embed_dim": self.model.dimension,
                "similarity_fn_name": self.model.similarity_fn_name, "max_tokens": self.model.max_length,
            }
        )  # fmt: skip

    def encode(
        self, inputs, *, task_metadata=None, hf_split=None, hf_subset=None, prompt_type=None, **kwargs
    ):
        """mteb's call: the vectors of every text in its batches, in order; queries and documents with the
        model's prompt for them where it has one. A text or a list of texts is encoded as
        ``SentenceTransformer.encode`` encodes it, with its keywords (sentcl/encode_contract.py)."""
        if isinstance(inputs, str) or (
            isinstance(inputs, (list, tuple)) and all(isinstance(t, str) for t in inputs)
        ):
            return self.model.encode(inputs, **{"batch_size": self.batch_size, **kwargs})
        texts = [text for batch in inputs for text in batch["text"]]
        role = getattr(prompt_type, "value", prompt_type)
        embedder = for_role(self.model, role) if role in (QUERY, DOCUMENT) else self.model
        return np.asarray(embedder.encode(texts, batch_size=self.batch_size), dtype=np.float32)

    def similarity(self, embeddings1, embeddings2) -> np.ndarray:
        """Scores under the model's similarity function (cosine unless it names another), as an array."""
        return self.model.similarity(embeddings1, embeddings2).numpy()

    def similarity_pairwise(self, embeddings1, embeddings2) -> np.ndarray:
        return self.model.similarity_pairwise(embeddings1, embeddings2).numpy()


def main_scores(result) -> dict[str, dict[str, list[float]]]:
    """``mteb.evaluate``'s result as task → split → the main score of each of its subsets."""
    return {
        task.task_name: {split: [row["main_score"] for row in rows] for split, rows in task.scores.items()}
        for task in result.task_results
    }
