"""What each CPU speed-up of a SimCSE training step buys, measured on the same batches in one process.

    python benchmarks/step_ablation.py [--steps 8] [--compile]

1. dropout masks alone: forward + backward of ``nn.functional.dropout`` against sentcl's
   ``fast_dropout`` (model/dropout.py) on the two shapes a MiniLM step masks (hidden states of the real
   tokens, attention maps), median of 30 alternating calls;
2. whole training steps (forward, backward, fused AdamW) of unsupervised SimCSE on all-MiniLM-L6-v2, batch
   64 × 2 views, max length 32, wiki sentences: padded + torch dropout (sentcl before), unpadded + torch
   dropout, unpadded + fast dropout (sentcl's default on the CPU), and with ``--compile`` the default
   step with each layer's dense blocks compiled by inductor (the element-wise work fused). The models take
   turns on each batch; the first step of each (compilation included) is dropped and the median reported;
3. where the default step's time goes (``torch.profiler``, 3 steps): the share of the matrix products
   and the GFLOP/s they reach, against the machine's matmul ceiling measured in the same process — the
   bound on the fraction of the FLOP limit any step with these products can reach.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import BATCH, MAX_LENGTH, model_path, part_ceiling, wiki

from sentcl.data import ContrastiveDataset, Records
from sentcl.model import ModelConfig, SentenceEncoder
from sentcl.model.dropout import fast_dropout
from sentcl.objectives import SimCSE, SimCSEConfig

VARIANTS = {
    "padded, torch dropout": {"unpad": False, "fast_dropout": False},
    "unpadded, torch dropout": {"unpad": True, "fast_dropout": False},
    "unpadded, fast dropout (default)": {"unpad": True, "fast_dropout": True},
}


def dropout_masks() -> None:
    shapes = {"hidden [2,900 tokens, 384]": (2900, 384), "attention [128, 12, 32, 32]": (128, 12, 32, 32)}
    for label, shape in shapes.items():
        times: dict[str, list[float]] = {"torch": [], "fast": []}
        for _ in range(30):
            for name, function in (("torch", torch.nn.functional.dropout), ("fast", fast_dropout)):
                x = torch.randn(shape, requires_grad=True)
                start = time.perf_counter()
                function(x, 0.1).sum().backward()
                times[name].append(time.perf_counter() - start)
        torch_ms, fast_ms = (statistics.median(times[n]) * 1e3 for n in ("torch", "fast"))
        print(f"dropout {label}: torch {torch_ms:.2f} ms, fast {fast_ms:.2f} ms ({torch_ms / fast_ms:.2f}×)")


COMPILED = "unpadded, fast dropout, dense blocks compiled (inductor)"


def compile_dense_blocks(encoder: SentenceEncoder) -> SentenceEncoder:
    """``torch.compile`` (inductor, dynamic shapes: the packed token count changes every batch) of each
    BERT layer's three dense blocks — Linear + GELU, and Linear + dropout + residual + LayerNorm twice — the
    element-wise work a fused step would fold into its neighbours. The whole encoder does not compile here
    (dynamo stops with an AssertionError on torch 2.13 / Python 3.11)."""
    for layer in encoder.backbone.encoder.layer:
        layer.intermediate = torch.compile(layer.intermediate, dynamic=True)
        layer.output = torch.compile(layer.output, dynamic=True)
        layer.attention.output = torch.compile(layer.attention.output, dynamic=True)
    return encoder


def training_steps(steps: int, compiled: bool = False) -> None:
    models = {}
    variants = dict(VARIANTS) | ({COMPILED: VARIANTS["unpadded, fast dropout (default)"]} if compiled else {})
    for label, options in variants.items():
        encoder = SentenceEncoder.from_config(ModelConfig(model_path(), pooler="avg", **options)).train()
        if label == COMPILED:
            encoder = compile_dense_blocks(encoder)
        models[label] = (encoder, torch.optim.AdamW(encoder.parameters(), lr=3e-5, fused=True))
    sentences = wiki(0, BATCH * steps)
    records = Records("pool", [(s,) for s in sentences], list(range(1, len(sentences) + 1)))
    dataset = ContrastiveDataset(records, models[next(iter(VARIANTS))][0].tokenizer, MAX_LENGTH)
    objective = SimCSE(SimCSEConfig(temperature=0.05))
    times: dict[str, list[float]] = {label: [] for label in variants}
    real = []
    for step in range(steps):
        batch = dataset.collate([dataset[i] for i in range(BATCH * step, BATCH * (step + 1))])
        real.append(float(batch.attention_mask.float().mean()))
        for label, (encoder, optimizer) in models.items():
            start = time.perf_counter()
            objective.loss_from_embeddings(encoder(batch)).loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            times[label].append(time.perf_counter() - start)
    print(f"training steps ({steps - 1} timed, real tokens {statistics.mean(real):.0%} of the padded batch):")
    base = statistics.median(times[next(iter(VARIANTS))][1:])
    for label, values in times.items():
        median = statistics.median(values[1:])
        print(f"  {label}: {median:.2f} s/step, {BATCH / median:.1f} sentences/s, {base / median:.2f}×")
    encoder, optimizer = models["unpadded, fast dropout (default)"]
    profile_step(encoder, optimizer, dataset, objective)


MATMULS = ("aten::mm", "aten::addmm", "aten::bmm")


def profile_step(encoder, optimizer, dataset, objective) -> None:
    from torch.profiler import ProfilerActivity, profile
    from torch.utils.flop_counter import FlopCounterMode

    ceiling = part_ceiling("cpu")["gflops"]
    batches = [dataset.collate([dataset[i] for i in range(BATCH * s, BATCH * (s + 1))]) for s in range(3)]
    flops = 0
    for batch in batches:  # counted outside the profile: the counter slows the step down
        with FlopCounterMode(display=False) as counter:
            objective.loss_from_embeddings(encoder(batch)).loss.backward()
        optimizer.zero_grad(set_to_none=True)
        flops += counter.get_total_flops()
    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        for batch in batches:
            objective.loss_from_embeddings(encoder(batch)).loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    events = profiler.key_averages()
    total = sum(e.self_cpu_time_total for e in events) / 1e6
    matmul = sum(e.self_cpu_time_total for e in events if e.key in MATMULS) / 1e6
    top = sorted((e for e in events if e.key not in MATMULS), key=lambda e: -e.self_cpu_time_total)[:6]
    print(
        f"default step, profiled: matrix products {matmul / total:.0%} of the time at "
        f"{flops / matmul / 1e9:.1f} GFLOP/s (ceiling {ceiling:.1f}: {flops / matmul / 1e9 / ceiling:.2f}); "
        f"the whole step at {flops / total / 1e9 / ceiling:.2f} of the ceiling"
    )
    print("  the rest: " + ", ".join(f"{e.key} {e.self_cpu_time_total / 1e6 / total:.1%}" for e in top))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument(
        "--compile", action="store_true", help="add the default step with compiled dense blocks"
    )
    args = parser.parse_args()
    torch.manual_seed(0)
    dropout_masks()
    training_steps(args.steps, args.compile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
