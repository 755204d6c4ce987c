"""Run by torchrun, on any number of nodes: the parity cases of test_distributed.py on this rank's slice
(``python -m tests.training.node_parity MODEL_DIR OUT``; rank 0 saves the results to OUT)."""

import sys

import torch.distributed as dist

from tests.training.test_distributed import compute_cases


def main(model_dir: str, out: str) -> None:
    dist.init_process_group("gloo")  # torchrun's environment: the rendezvous's address, rank and world
    try:
        compute_cases(dist.get_rank(), dist.get_world_size(), model_dir, out)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:3])
