"""Does ONNX Runtime's int8 path encode faster than fp32 on this CPU? (sentcl's own int8 path is
``--dtype int8``, model/onnx.py; this probe exports the mean-pooled backbone by hand to compare the three.)

    python benchmarks/onnx_int8_probe.py [--sentences 2000]

all-MiniLM-L6-v2 with mean pooling is exported to ONNX (``torch.onnx.export``), quantised with ONNX
Runtime's dynamic int8 (per-channel int8 weights, ``quantize_dynamic``), and both graphs run in ONNX
Runtime (2 threads, all graph optimisations) on the same wiki sentences, sorted by token length in batches
of 64 — the way sentcl encodes — beside sentcl's own fp32 ``encode``. Each is timed twice, alternating.
It prints sentences/s and the lowest cosine between each path's vectors and sentcl's.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import BATCH, model_path, wiki

from sentcl.model import SentenceEncoder


class MeanPooled(torch.nn.Module):
    def __init__(self, backbone: torch.nn.Module):
        super().__init__()
        self.backbone = backbone

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        states = self.backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        mask = attention_mask.unsqueeze(-1).to(states.dtype)
        return (states * mask).sum(1) / mask.sum(1).clamp(min=1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=2000)
    args = parser.parse_args()
    try:
        import onnxruntime as ort
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError:
        print("this probe needs `pip install onnxruntime onnx` (not sentcl dependencies)", file=sys.stderr)
        return 2
    encoder = SentenceEncoder.load(model_path(), pooler="avg").eval()
    sentences = wiki(20_000, args.sentences)
    tokens = encoder.tokenizer(sentences, truncation=True, max_length=encoder.max_length)["input_ids"]
    order = np.argsort([-len(t) for t in tokens], kind="stable")
    with tempfile.TemporaryDirectory() as tmp:
        fp32, int8 = Path(tmp) / "fp32.onnx", Path(tmp) / "int8.onnx"
        example = (torch.ones(2, 8, dtype=torch.long), torch.ones(2, 8, dtype=torch.long))
        axes = {"input_ids": {0: "n", 1: "l"}, "attention_mask": {0: "n", 1: "l"}, "vectors": {0: "n"}}
        torch.onnx.export(
            MeanPooled(encoder.backbone), example, str(fp32), input_names=["input_ids", "attention_mask"],
            output_names=["vectors"], dynamic_axes=axes, opset_version=17, dynamo=False,
        )  # fmt: skip
        quantize_dynamic(str(fp32), str(int8), weight_type=QuantType.QInt8, per_channel=True)
        options = ort.SessionOptions()
        options.intra_op_num_threads = torch.get_num_threads()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        sessions = {
            name: ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
            for name, path in (("onnxruntime fp32", fp32), ("onnxruntime int8", int8))
        }

        def run(session) -> np.ndarray:
            out = np.empty((len(sentences), encoder.dimension), dtype=np.float32)
            for start in range(0, len(order), BATCH):
                rows = order[start : start + BATCH]
                length = max(len(tokens[i]) for i in rows)
                ids = np.zeros((len(rows), length), dtype=np.int64)
                mask = np.zeros_like(ids)
                for r, i in enumerate(rows):
                    ids[r, : len(tokens[i])], mask[r, : len(tokens[i])] = tokens[i], 1
                out[rows] = session.run(None, {"input_ids": ids, "attention_mask": mask})[0]
            return out

        paths = {"sentcl fp32": lambda: encoder.encode(sentences, batch_size=BATCH, show_progress=False)}
        paths |= {name: (lambda s=session: run(s)) for name, session in sessions.items()}
        reference = paths["sentcl fp32"]()
        for name, path in paths.items():
            vectors = path()
            cosine = (
                (vectors * reference).sum(1)
                / np.linalg.norm(vectors, axis=1)
                / np.linalg.norm(reference, axis=1)
            )
            print(f"{name}: lowest cosine to sentcl fp32 {cosine.min():.4f}")
        rates: dict[str, list[float]] = {name: [] for name in paths}
        for _ in range(2):
            for name, path in paths.items():
                start = time.perf_counter()
                path()
                rates[name].append(len(sentences) / (time.perf_counter() - start))
        for name, values in rates.items():
            print(
                f"{name}: {max(values):.1f} sentences/s (best of 2: {', '.join(f'{v:.1f}' for v in values)})"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
