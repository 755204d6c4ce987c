"""Two CPU processes (gloo) on halves of a batch = one process on the whole batch: loss and gradients."""

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from sentcl.data import Batch
from sentcl.model import ModelConfig, SentenceEncoder
from sentcl.objectives import DebiasedSimCSE, DebiasedSimCSEConfig, NTXent, SimCSE, SimCSEConfig
from sentcl.training.distributed import DistributedContext, average_gradients, mean_over_ranks

WORLD = 2


def build(model_dir: str):
    torch.manual_seed(0)  # the MLP head's initialisation must match on every rank
    encoder = SentenceEncoder.from_config(ModelConfig(model_dir, pooler="cls")).eval()  # no dropout
    ids = torch.randint(5, 60, (8, 3, 7), generator=torch.Generator().manual_seed(1))
    return encoder, ids, torch.ones_like(ids)


def make_objective(name: str, alpha: float):
    if name == "debiased":  # the reference's symmetric form: both views of every rank are gathered
        return DebiasedSimCSE(DebiasedSimCSEConfig(temperature=0.5, class_prior=0.1))
    if name == "debiased-simcse-form":
        return DebiasedSimCSE(DebiasedSimCSEConfig(temperature=0.5, class_prior=0.1, symmetric=False))
    if name == "nt_xent":
        return NTXent()
    return SimCSE(SimCSEConfig(temperature=0.05, hard_negative_weight=alpha))


def step(encoder, ids, mask, views, alpha, name="simcse"):
    objective = make_objective(name, alpha)
    loss = objective.loss_from_embeddings(encoder(Batch(ids[:, :views], mask[:, :views], None))).loss
    loss.backward()
    return loss


#: (views, hard-negative weight α, objective): one spawn of two ranks computes every case
CASES = [(2, 1.0, "simcse"), (3, 2.0, "simcse"), (2, 1.0, "nt_xent"), (2, 1.0, "debiased"),
         (2, 1.0, "debiased-simcse-form")]  # fmt: skip


def compute_cases(rank: int, world: int, model_dir: str, out: str) -> None:
    """Every case's global loss and averaged gradients from this rank's slice of each batch (rank 0 saves
    them): the process group is already there, however it was launched."""
    torch.set_num_threads(1)
    context = DistributedContext(rank, world, rank)
    results = {}
    for views, alpha, name in CASES:
        encoder, ids, mask = build(model_dir)
        share = ids.shape[0] // world
        rows = slice(rank * share, (rank + 1) * share)
        loss = step(encoder, ids[rows], mask[rows], views, alpha, name)
        average_gradients(encoder, context)
        global_loss = mean_over_ranks(loss.item(), context)
        grads = {n: p.grad for n, p in encoder.named_parameters() if p.grad is not None}
        results[(views, alpha, name)] = {"loss": global_loss, "grads": grads}
    if rank == 0:
        torch.save(results, out)


def worker(rank: int, init_file: str, model_dir: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    try:
        compute_cases(rank, WORLD, model_dir, out)
    finally:
        dist.destroy_process_group()


def assert_equal_to_one_process(distributed: dict, model_dir, views, alpha, name) -> None:
    encoder, ids, mask = build(str(model_dir))
    loss = step(encoder, ids, mask, views, alpha, name)
    assert distributed["loss"] == pytest.approx(loss.item(), abs=1e-5)
    expected = {n: p.grad for n, p in encoder.named_parameters() if p.grad is not None}
    assert distributed["grads"].keys() == expected.keys()
    for parameter, grad in expected.items():
        torch.testing.assert_close(distributed["grads"][parameter], grad, atol=1e-5, rtol=1e-4, msg=parameter)


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory, tiny_model_dir):
    """Every case's loss and gradients from two gloo processes on halves of each batch (one spawn: the
    processes' start-up is most of the cost)."""
    folder = tmp_path_factory.mktemp("ranks")
    mp.spawn(worker, args=(str(folder / "init"), str(tiny_model_dir), str(folder / "rank0.pt")), nprocs=WORLD,
             join=True)  # fmt: skip
    return torch.load(folder / "rank0.pt")


@pytest.mark.parametrize("views,alpha,name", CASES)
def test_two_processes_equal_one_process_on_the_concatenated_batch(
    two_ranks, tiny_model_dir, views, alpha, name
):
    assert_equal_to_one_process(two_ranks[(views, alpha, name)], tiny_model_dir, views, alpha, name)


def test_two_nodes_on_loopback_equal_one_process(tmp_path, tiny_model_dir):
    """The documented multi-node launch (torchrun --nnodes 2 --rdzv-backend c10d), two "nodes" of one process
    each on this machine's loopback: the gathered negatives give one process's loss and gradients."""
    import os
    import socket
    import subprocess
    import sys
    from pathlib import Path

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    out = tmp_path / "rank0.pt"
    torchrun = Path(sys.executable).parent / "torchrun"
    command = [str(torchrun), "--nnodes=2", "--nproc-per-node=1", "--rdzv-backend=c10d",
               f"--rdzv-endpoint=127.0.0.1:{port}", f"--rdzv-id=sentcl-{port}",
               "-m", "tests.training.node_parity", str(tiny_model_dir), str(out)]  # fmt: skip
    root = Path(__file__).resolve().parents[2]
    env = os.environ | {"OMP_NUM_THREADS": "1"}
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    nodes = [subprocess.Popen(command, cwd=root, env=env, **pipes) for _ in range(2)]
    for node in nodes:
        _, err = node.communicate(timeout=240)
        assert node.returncode == 0, err[-3000:]
    results = torch.load(out)
    for views, alpha, name in CASES:
        assert_equal_to_one_process(results[(views, alpha, name)], tiny_model_dir, views, alpha, name)


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


def replica_worker(rank: int, init_file: str, out: str, perturb: bool) -> None:
    from sentcl.training.distributed import check_replicas

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    try:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
        if perturb and rank == 1:
            with torch.no_grad():
                model[1].bias[0] += 1e-7  # one float's last bits: still a different model
        drifted = check_replicas(model, DistributedContext(rank, WORLD, rank))
        torch.save(drifted, f"{out}.{rank}")
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("perturb", [False, True])
def test_replicas_that_differ_are_found_on_every_rank(tmp_path, perturb):
    out = str(tmp_path / "drifted")
    mp.spawn(replica_worker, args=(str(tmp_path / "init"), out, perturb), nprocs=WORLD, join=True)
    expected = ["1.bias"] if perturb else []
    assert torch.load(f"{out}.0") == expected and torch.load(f"{out}.1") == expected


@pytest.mark.parametrize("mode", ["F", "D"])
def test_torchrun_child_tuning_keeps_the_replicas_equal(tmp_path, tiny_model_dir, stsb_data_dir, mode):
    """Child-Tuning masks the averaged gradients: with per-rank masks (F's from per-rank seeds, D's from
    each rank's own Fisher slice) the replicas drift apart and the run stops at its first evaluation
    (require_equal_replicas); with the masks alike on every rank it trains to the end."""
    import json

    from tests.conftest import SENTENCES

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(SENTENCES * 2) + "\n")
    torchrun_train(
        tmp_path,
        f"model: {{name_or_path: {tiny_model_dir}, pooler: avg}}\n"
        f"data: {{train_file: {corpus}, max_length: 16}}\n"
        "training: {batch_size: 8, max_steps: 4, eval_steps: 2, logging_steps: 1, learning_rate: 1.0e-3, "
        f"eval_data_dir: {stsb_data_dir}, output_dir: {tmp_path / 'run'}, "
        f"child_tuning: {{mode: {mode}, reserve: 0.3, fisher_batches: 2}}}}\n",
    )
    records = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "eval" in r] == [2, 4]
