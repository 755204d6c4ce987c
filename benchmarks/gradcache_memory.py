"""GradCache vs the plain batch on all-MiniLM-L6-v2: activation bytes autograd holds at peak, and time.

    python benchmarks/gradcache_memory.py [--batch 128] [--chunk 16] [--repeats 3]

Activation memory is measured as the peak bytes of tensors saved for backward (a deterministic count,
independent of the allocator); time is the median of --repeats steps. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

from sentcl.data import Batch
from sentcl.model import ModelConfig, SentenceEncoder
from sentcl.objectives import SimCSE
from sentcl.training.gradcache import forward_backward


class SavedTensorMeter:
    def __init__(self):
        self.live = self.peak = 0

    def pack(self, tensor):
        meter = self

        class Held:
            def __init__(self):
                self.tensor, self.bytes = tensor, tensor.numel() * tensor.element_size()
                meter.live += self.bytes
                meter.peak = max(meter.peak, meter.live)

            def __del__(self):
                meter.live -= self.bytes

        return Held()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--chunk", type=int, default=16)
    parser.add_argument("--length", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    encoder = SentenceEncoder.from_config(ModelConfig("sentence-transformers/all-MiniLM-L6-v2", pooler="avg"))
    encoder.train()
    ids = torch.randint(1000, 20000, (args.batch, 2, args.length), generator=torch.Generator().manual_seed(0))
    batch = Batch(ids, torch.ones_like(ids), torch.arange(args.batch))
    print(f"command: python {' '.join(sys.argv)}")
    threads = torch.get_num_threads()
    print(f"all-MiniLM-L6-v2, batch {args.batch} x 2 views x {args.length} tokens, {threads} threads\n")
    print("| mode | peak saved activations (MiB) | seconds per step (median) |\n|---|---|---|")
    for label, chunk in (("plain", 0), (f"GradCache, chunk {args.chunk}", args.chunk)):
        meter = SavedTensorMeter()
        with torch.autograd.graph.saved_tensors_hooks(meter.pack, lambda held: held.tensor):
            forward_backward(encoder, SimCSE(), batch, chunk)
        times = []
        for _ in range(args.repeats):
            encoder.zero_grad()
            started = time.perf_counter()
            forward_backward(encoder, SimCSE(), batch, chunk)
            times.append(time.perf_counter() - started)
        print(f"| {label} | {meter.peak / 2**20:.1f} | {statistics.median(times):.2f} |")


if __name__ == "__main__":
    main()
