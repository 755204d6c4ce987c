"""One encode measurement of sentence-transformers 5.x at a documented fast CPU path, run by `make bench`
(benchmarks/bench.py) with benchmarks/peers/.venv's interpreter; prints one JSON line.

    python benchmarks/peers/encode_peer.py {onnx-int8|openvino|onnx} MODEL SENTENCES.txt STSB_DEV.csv BATCH

- onnx-int8: ``backend="onnx"``, then ``export_dynamic_quantized_onnx_model(model, CONFIG, ...)`` with the
  quantisation config its documentation names for the CPU ("avx512_vnni" where the CPU has VNNI, else
  "avx2"), loaded back from that file: the fastest ONNX path it documents;
- openvino: ``backend="openvino"`` (OpenVINO's own CPU plugin, fp32 weights; it picks bf16 kernels itself
  where the CPU has them);
- onnx: ``backend="onnx"``, fp32.

Each: STS-B dev Spearman (cosine, as its EmbeddingSimilarityEvaluator scores) and encode sentences/s over the
given sentences (a warm-up batch first).
"""

from __future__ import annotations

import csv
import json
import resource
import sys
import tempfile
import time
from pathlib import Path


def cpu_flags() -> set[str]:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def load(kind: str, model_path: str, tmp: Path):
    from sentence_transformers import SentenceTransformer

    if kind == "openvino":
        return SentenceTransformer(model_path, backend="openvino", device="cpu"), "OpenVINO fp32 weights"
    model = SentenceTransformer(model_path, backend="onnx", device="cpu")
    if kind == "onnx":
        return model, "ONNX Runtime fp32"
    from sentence_transformers import export_dynamic_quantized_onnx_model

    config = "avx512_vnni" if "avx512_vnni" in cpu_flags() else "avx2"
    local = tmp / "model"
    model.save_pretrained(str(local))
    export_dynamic_quantized_onnx_model(model, config, str(local))
    quantized = SentenceTransformer(
        str(local),
        backend="onnx",
        device="cpu",
        model_kwargs={"file_name": f"onnx/model_qint8_{config}.onnx"},
    )
    return quantized, f"ONNX Runtime dynamic int8 ({config})"


def main() -> None:
    kind, model_path, sentences_file, stsb_dev, batch = sys.argv[1:6]
    import numpy as np
    from scipy.stats import spearmanr

    sentences = Path(sentences_file).read_text(encoding="utf-8").splitlines()
    lines = Path(stsb_dev).read_text(encoding="utf-8").splitlines()
    rows = [r for r in csv.reader(lines, delimiter="\t", quoting=csv.QUOTE_NONE) if len(r) >= 7]
    with tempfile.TemporaryDirectory() as tmp:
        model, label = load(kind, model_path, Path(tmp))
        a = model.encode([r[5] for r in rows], batch_size=int(batch), normalize_embeddings=True)
        b = model.encode([r[6] for r in rows], batch_size=int(batch), normalize_embeddings=True)
        stsb = float(spearmanr((a * b).sum(1), np.array([float(r[4]) for r in rows]))[0]) * 100
        model.encode(sentences[:256], batch_size=int(batch))
        start = time.perf_counter()
        model.encode(sentences, batch_size=int(batch))
        seconds = time.perf_counter() - start
    print(json.dumps({
        "label": label, "sentences_per_s": len(sentences) / seconds, "stsb_dev": stsb,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }))  # fmt: skip


if __name__ == "__main__":
    main()
