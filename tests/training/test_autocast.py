"""training.autocast auto: the faster step measured here, recorded, the same on every rank, kept on resume."""

import json
import logging

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from sentcl.hardware import Hardware
from sentcl.model import ModelConfig, SentenceEncoder
from sentcl.training import autocast
from sentcl.training.contrastive import train
from sentcl.training.distributed import DistributedContext

from .test_contrastive import recipe
from .test_contrastive import wiki_file as wiki_file

NATIVE = Hardware("cpu", "AVX512", frozenset({"avx2", "avx512f", "avx512_bf16"}), True)
EMULATED = Hardware("cpu", "AVX2", frozenset({"avx2", "fma"}), True)
ONE = DistributedContext()


class StepClock:
    """A clock that moves only when the encoder's pass runs, by what ``seconds`` says for the precision that
    pass runs in."""

    def __init__(self, encoder, seconds: dict[str, float]):
        self.now, self.seconds, self.real = 0.0, seconds, encoder.embed_tokens
        encoder.embed_tokens = self.embed_tokens

    def embed_tokens(self, *args, **kwargs):
        self.now += self.seconds["bf16" if torch.is_autocast_enabled("cpu") else "fp32"]
        return self.real(*args, **kwargs)

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def encoder(tiny_model_dir):
    return SentenceEncoder.from_config(ModelConfig(str(tiny_model_dir), pooler="cls")).train()


@pytest.fixture(autouse=True)
def own_records(monkeypatch, tmp_path):
    """Each test its own records (a record of another test's shape would be reused)."""
    monkeypatch.setenv("SENTCL_CACHE", str(tmp_path / "cache"))


@pytest.fixture
def native(monkeypatch):
    monkeypatch.setattr(autocast, "detect", lambda device: NATIVE)


def fake_steps(monkeypatch, seconds: dict[str, float]) -> list[int]:
    timed: list[int] = []

    def time_steps(encoder, ids, mask, device, clock=None):
        timed.append(ids.shape[0])
        return dict(seconds)

    monkeypatch.setattr(autocast, "time_steps", time_steps)
    return timed


def test_the_faster_step_is_chosen_recorded_and_reused(encoder, native, monkeypatch):
    timed = fake_steps(monkeypatch, {"fp32": 0.20, "bf16": 0.10})
    assert autocast.choose("auto", encoder, torch.device("cpu"), ONE, 8)[0] == "bf16"
    assert autocast.choose("auto", encoder, torch.device("cpu"), ONE, 8)[0] == "bf16"  # the record
    assert timed == [8]
    fake_steps(monkeypatch, {"fp32": 0.10, "bf16": 0.20})
    chosen, why = autocast.choose("auto", encoder, torch.device("cpu"), ONE, 16)  # another shape: timed
    assert chosen == "fp32" and "fp32 100 ms" in why and "bf16 200 ms" in why and "16×" in why


def test_a_tie_and_a_small_gain_keep_fp32(encoder, native, monkeypatch):
    fake_steps(monkeypatch, {"fp32": 0.100, "bf16": 0.099})  # 1 %: within MARGIN
    assert autocast.choose("auto", encoder, torch.device("cpu"), ONE, 8)[0] == "fp32"


def test_emulated_bf16_and_a_named_precision_are_not_timed(encoder, monkeypatch):
    timed = fake_steps(monkeypatch, {"fp32": 1.0, "bf16": 0.1})
    monkeypatch.setattr(autocast, "detect", lambda device: EMULATED)
    chosen, why = autocast.choose("auto", encoder, torch.device("cpu"), ONE, 8)
    assert chosen == "fp32" and "no native bf16" in why
    assert autocast.choose("bf16", encoder, torch.device("cpu"), ONE, 8) == ("bf16", "as the recipe says")
    assert timed == []


def test_the_timing_reads_the_step_under_each_precision(encoder, native):
    ids, mask = autocast.probe_batch(encoder, 4, torch.device("cpu"))
    clock = StepClock(encoder, {"fp32": 0.3, "bf16": 0.1})
    seconds = autocast.time_steps(encoder, ids, mask, torch.device("cpu"), clock)
    assert seconds == {"fp32": pytest.approx(0.3), "bf16": pytest.approx(0.1)}


def test_the_probe_leaves_the_run_as_it_found_it(encoder):
    encoder.eval()
    ids, mask = autocast.probe_batch(encoder, 6, torch.device("cpu"))
    assert ids.shape[0] == 6 and ids.shape[1] <= encoder.max_length
    before = torch.get_rng_state()
    autocast.time_steps(encoder, ids, mask, torch.device("cpu"))
    assert torch.equal(torch.get_rng_state(), before)
    assert all(p.grad is None for p in encoder.parameters())
    assert not encoder.training


def test_a_run_keeps_its_choice_in_every_checkpoint_and_on_resume(
    tmp_path, tiny_model_dir, wiki_file, stsb_data_dir, native, monkeypatch, caplog
):
    run = tmp_path / "run"
    fake_steps(monkeypatch, {"fp32": 0.2, "bf16": 0.1})
    config = dict(max_steps=2, eval_steps=0, checkpoint_steps=2, autocast="auto")
    train(recipe(tiny_model_dir, wiki_file, run, stsb_data_dir, **config))
    assert json.loads((run / "checkpoint" / "state.json").read_text())["autocast"] == "bf16"
    assert json.loads((run / "summary.json").read_text())["autocast"] == "bf16"
    # the machine now times fp32 faster (another record): the resumed run computes as it started
    monkeypatch.setattr(autocast, "_measured", lambda *args: ("fp32", "timed again"))
    with caplog.at_level(logging.INFO, logger="sentcl.training.steps"):
        longer = config | {"max_steps": 4}
        train(recipe(tiny_model_dir, wiki_file, run, stsb_data_dir, **longer, resume=True))
    assert "training.autocast: bf16 (the run's choice at its start)" in caplog.text
    assert json.loads((run / "summary.json").read_text())["autocast"] == "bf16"


def rank_worker(rank: int, init_file: str, model_dir: str, out: str) -> None:
    """Each rank's clock says another precision is faster: every rank takes rank 0's."""
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    try:
        torch.set_num_threads(1)
        autocast.detect = lambda device: NATIVE  # type: ignore[assignment]
        faster = {"fp32": 0.1, "bf16": 0.2} if rank == 0 else {"fp32": 0.2, "bf16": 0.1}
        autocast.time_steps = lambda *args, **kwargs: faster  # type: ignore[assignment]
        encoder = SentenceEncoder.from_config(ModelConfig(model_dir, pooler="cls"))
        chosen = autocast.choose("auto", encoder, torch.device("cpu"), DistributedContext(rank, 2, rank), 4)
        torch.save(chosen, f"{out}.{rank}")
    finally:
        dist.destroy_process_group()


def test_every_rank_computes_in_rank_0s_choice(tmp_path, tiny_model_dir):
    out = str(tmp_path / "chosen")
    mp.spawn(rank_worker, args=(str(tmp_path / "init"), str(tiny_model_dir), out), nprocs=2, join=True)
    assert torch.load(f"{out}.0")[0] == torch.load(f"{out}.1")[0] == "fp32"
