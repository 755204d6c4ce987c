"""Every role path against sentence-transformers' encode_query / encode_document, on all-MiniLM-L6-v2.

For each sentence-transformers Pooling mode × include_prompt, a model saved by sentence-transformers with a
query prompt and a document prompt; sentcl loads it and encodes the same texts by every path that applies a
role's prompt: ``encode_query`` / ``encode_document``, what an index, a search, retrieval evaluation and
mining encode with (``for_role`` over ``Batched``), the server's ``embed``, and the ONNX export. Prints the
largest absolute difference to sentence-transformers per row (unit vectors for the server, as it serves them).

    python benchmarks/prompt_roles.py [--texts 64]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
from sentence_transformers import SentenceTransformer
from sentence_transformers.base import modules as st_modules
from sentence_transformers.sentence_transformer.modules import Pooling

from sentcl.embedder import DOCUMENT, QUERY, Batched, for_role, unit_rows
from sentcl.evaluation.sts_data import read_stsb_split
from sentcl.model import SentenceEncoder
from sentcl.model.backbone import packaged_model_path
from sentcl.model.onnx import OnnxEncoder, export_onnx
from sentcl.serving.server import create_app

MODES = ["cls", "mean", "max", "mean_sqrt_len_tokens", "weightedmean", "lasttoken"]
PROMPTS = {QUERY: "query: ", DOCUMENT: "passage: "}
METHODS = {QUERY: "encode_query", DOCUMENT: "encode_document"}


def texts_of(count: int) -> list[str]:
    import os

    pairs = read_stsb_split(Path(os.environ["SENTCL_DATA"]) / "stsb" / "senteval" / "sts-dev.csv", "dev")
    return [s for pair in zip(pairs.sentences1, pairs.sentences2, strict=True) for s in pair][:count]


def rows(folder: Path, texts: list[str], work: Path) -> dict[str, float]:
    peer = SentenceTransformer(str(folder), device="cpu")
    ours = SentenceEncoder.load(str(folder))
    onnx = OnnxEncoder.load(export_onnx(ours, work / "onnx"))
    service = create_app(Batched(ours, 32), model_name="m", dimension=ours.dimension).state.service
    found = {}
    for role, method in METHODS.items():
        theirs = getattr(peer, method)(texts)
        paths = {
            method: getattr(ours, method)(texts),
            "index / search / evaluate (for_role)": for_role(Batched(ours, 32), role).encode(texts),
            f"onnx {method}": getattr(onnx, method)(texts),
        }
        for name, vectors in paths.items():
            found[f"{role}: {name}"] = float(np.abs(vectors - theirs).max())
        served = service.embed(texts, prompt=ours.prompts[role])
        found[f"{role}: serve"] = float(np.abs(served - unit_rows(theirs)).max())
    return found


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--texts", type=int, default=64)
    args = parser.parse_args()
    base = packaged_model_path("sentence-transformers/all-MiniLM-L6-v2")
    texts = texts_of(args.texts)
    print("| Pooling mode | include_prompt | role: path | max abs diff |\n|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for mode in MODES:
            for include_prompt in (True, False):
                transformer = st_modules.Transformer(str(base), max_seq_length=256)
                pooling = Pooling(transformer.get_embedding_dimension(), mode, include_prompt=include_prompt)
                folder = Path(tmp) / f"{mode}-{include_prompt}"
                SentenceTransformer(modules=[transformer, pooling], prompts=PROMPTS).save(str(folder))
                for name, diff in rows(folder, texts, folder / "work").items():
                    print(f"| {mode} | {include_prompt} | {name} | {diff:.2e} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
