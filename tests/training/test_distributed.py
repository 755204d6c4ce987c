"""Two CPU processes (gloo) on halves of a batch = one process on the whole batch: loss and gradients."""

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from sentcl.data import Batch
from sentcl.model import ModelConfig, SentenceEncoder
from sentcl.objectives import InfoNCE, InfoNCEConfig
from sentcl.training.distributed import DistributedContext, average_gradients, mean_over_ranks

WORLD = 2


def build(model_dir: str):
    torch.manual_seed(0)  # the MLP head's initialisation must match on every rank
    encoder = SentenceEncoder.from_config(ModelConfig(model_dir, pooler="cls")).eval()  # no dropout
    ids = torch.randint(5, 60, (8, 3, 7), generator=torch.Generator().manual_seed(1))
    return encoder, ids, torch.ones_like(ids)


def step(encoder, ids, mask, views, alpha):
    objective = InfoNCE(InfoNCEConfig(temperature=0.05, hard_negative_weight=alpha))
    loss = objective.loss_from_embeddings(encoder(Batch(ids[:, :views], mask[:, :views], None))).loss
    loss.backward()
    return loss


def worker(rank: int, init_file: str, model_dir: str, out: str, views: int, alpha: float) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    try:
        torch.set_num_threads(1)
        context = DistributedContext(rank, WORLD, rank)
        encoder, ids, mask = build(model_dir)
        half = ids.shape[0] // WORLD
        rows = slice(rank * half, (rank + 1) * half)
        loss = step(encoder, ids[rows], mask[rows], views, alpha)
        average_gradients(encoder, context)
        global_loss = mean_over_ranks(loss.item(), context)
        if rank == 0:
            grads = {n: p.grad for n, p in encoder.named_parameters() if p.grad is not None}
            torch.save({"loss": global_loss, "grads": grads}, out)
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("views,alpha", [(2, 1.0), (3, 2.0)])
def test_two_processes_equal_one_process_on_the_concatenated_batch(tmp_path, tiny_model_dir, views, alpha):
    out = tmp_path / "rank0.pt"
    args = (str(tmp_path / "init"), str(tiny_model_dir), str(out), views, alpha)
    mp.spawn(worker, args=args, nprocs=WORLD, join=True)
    distributed = torch.load(out)

    encoder, ids, mask = build(str(tiny_model_dir))
    loss = step(encoder, ids, mask, views, alpha)
    assert distributed["loss"] == pytest.approx(loss.item(), abs=1e-5)
    expected = {n: p.grad for n, p in encoder.named_parameters() if p.grad is not None}
    assert distributed["grads"].keys() == expected.keys()
    for name, grad in expected.items():
        torch.testing.assert_close(distributed["grads"][name], grad, atol=1e-5, rtol=1e-4, msg=name)


def torchrun_train(tmp_path, recipe_text: str):
    import os
    import subprocess
    import sys
    from pathlib import Path

    recipe = tmp_path / "r.yaml"
    recipe.write_text(recipe_text)
    torchrun = Path(sys.executable).parent / "torchrun"
    command = [str(torchrun), "--standalone", "--nproc_per_node=2", "-m", "sentcl.cli.main", "-q", "train",
               str(recipe)]  # fmt: skip
    done = subprocess.run(
        command, env=os.environ | {"OMP_NUM_THREADS": "1"}, timeout=180, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_torchrun_two_cpu_processes_train_and_save_once(tmp_path, tiny_model_dir, stsb_data_dir):
    import json

    from tests.conftest import SENTENCES

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(SENTENCES * 2) + "\n")
    torchrun_train(
        tmp_path,
        f"model: {{name_or_path: {tiny_model_dir}, pooler: avg}}\n"
        f"data: {{train_file: {corpus}, max_length: 16}}\n"
        "training: {batch_size: 8, max_steps: 4, eval_steps: 2, logging_steps: 1, "
        f"eval_data_dir: {stsb_data_dir}, output_dir: {tmp_path / 'run'}}}\n",
    )
    records = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "loss" in r] == [1, 2, 3, 4]  # rank 0 logs, once per step
    assert [r["step"] for r in records if "eval" in r] == [2, 4]
    assert (tmp_path / "run" / "model" / "model.safetensors").is_file()


@pytest.mark.parametrize("streaming", [False, True])
def test_torchrun_a_short_last_batch_is_split_evenly(tmp_path, tiny_model_dir, streaming):
    """27 rows in batches of 8 on 2 ranks: three full batches, then the last 3 rows, which cannot be split
    into equal slices (the ranks gather equal-sized embeddings): each rank takes 1, one row is left out."""
    import json

    from tests.conftest import SENTENCES

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(SENTENCES * 2 + SENTENCES[:3]) + "\n")
    done = torchrun_train(
        tmp_path,
        f"model: {{name_or_path: {tiny_model_dir}, pooler: avg}}\n"
        f"data: {{train_file: {corpus}, max_length: 16, streaming: {str(streaming).lower()}}}\n"
        "training: {batch_size: 8, epochs: 2, eval_steps: 0, logging_steps: 1, "
        f"output_dir: {tmp_path / 'run'}}}\n",
    )
    records = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "loss" in r] == list(range(1, 9))  # 4 batches an epoch
    assert "1 of the 3 examples" in done.stderr
