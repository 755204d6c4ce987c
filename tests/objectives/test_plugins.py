"""An objective from another installed package (an entry point of the group ``sentcl.objectives``) trains,
resumes bit-identically and is listed by ``sentcl train --help``, with no edit to sentcl (issue 56)."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import textwrap

import pytest
import torch
from safetensors.torch import load_file

from sentcl import objectives
from sentcl.training.contrastive import train
from sentcl.training.recipe import recipe_from_dict
from tests.conftest import SENTENCES
from tests.training.crash import crash_after_a_checkpoint

TOY = '''
"""A toy objective outside sentcl: SimCSE's InfoNCE with its temperature halved."""
from dataclasses import dataclass

from sentcl.objectives import ContrastiveObjective
from sentcl.objectives.simcse import SimCSEConfig, info_nce_loss
from sentcl.objectives.base import ObjectiveOutput


@dataclass
class ToyConfig(SimCSEConfig):
    halve: bool = True


class Toy(ContrastiveObjective):
    config: ToyConfig

    def loss_from_embeddings(self, embeddings, batch) -> ObjectiveOutput:
        temperature = self.config.temperature / (2 if self.config.halve else 1)
        loss = info_nce_loss(embeddings[:, 0], embeddings[:, 1], temperature=temperature)
        return ObjectiveOutput(loss=loss, terms={"toy": loss.detach()})


ENTRY = (Toy, ToyConfig)
'''


@pytest.fixture
def installed_toy(tmp_path, monkeypatch):
    """A package ``toy_objective`` on sys.path with its dist-info declaring the entry point, as ``pip
    install`` leaves one; REGISTRY as it was afterwards."""
    site = tmp_path / "site"
    (site / "toy_objective-0.1.dist-info").mkdir(parents=True)
    (site / "toy_objective.py").write_text(textwrap.dedent(TOY))
    (site / "toy_objective-0.1.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: toy-objective\nVersion: 0.1\n"
    )
    (site / "toy_objective-0.1.dist-info" / "entry_points.txt").write_text(
        "[sentcl.objectives]\ntoy = toy_objective:ENTRY\n"
    )
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("PYTHONPATH", str(site))
    importlib.invalidate_caches()
    before = dict(objectives.REGISTRY)
    assert objectives.load_plugins() == ["toy"]
    yield site
    objectives.REGISTRY.clear()
    objectives.REGISTRY.update(before)


def test_an_objective_from_another_package_trains_and_resumes_exactly(
    installed_toy, tmp_path, tiny_model_dir, monkeypatch
):

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(SENTENCES * 2) + "\n")

    def run(folder, **training):
        return train(recipe_from_dict({
            "model": {"name_or_path": str(tiny_model_dir), "pooler": "avg"},
            "data": {"train_file": str(corpus), "max_length": 16},
            "objective": {"name": "toy", "halve": True},
            "training": {"output_dir": str(folder), "batch_size": 4, "learning_rate": 1e-3, "max_steps": 4,
                         "eval_steps": 0, "checkpoint_steps": 2, "seed": 3, **training},
        }))  # fmt: skip

    assert run(tmp_path / "straight").steps == 4
    logged = [json.loads(line) for line in (tmp_path / "straight" / "metrics.jsonl").read_text().splitlines()]
    assert all("toy" in record for record in logged if "loss" in record)  # its named term is logged
    with crash_after_a_checkpoint(monkeypatch):
        run(tmp_path / "half")
    run(tmp_path / "half", resume=True)
    straight = load_file(str(tmp_path / "straight" / "model" / "model.safetensors"))
    resumed = load_file(str(tmp_path / "half" / "model" / "model.safetensors"))
    assert all(torch.equal(straight[name], resumed[name]) for name in straight)


def test_train_help_lists_it(installed_toy):
    code = "import sys; from sentcl.cli.main import main; sys.exit(main(['train', '-h']))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    from sentcl.objectives import REGISTRY

    own = [name for name in REGISTRY if name != "toy"]  # sentcl's own, then the installed package's
    assert "objectives (objective.name):" in out and out.rstrip().endswith(f"{own[-1]}, toy")


def test_a_plugin_that_is_not_a_pair_is_a_warning_not_a_crash(tmp_path, monkeypatch, caplog):
    site = tmp_path / "site"
    (site / "bad_objective-0.1.dist-info").mkdir(parents=True)
    (site / "bad_objective.py").write_text("ENTRY = 42\n")
    (site / "bad_objective-0.1.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: bad-objective\nVersion: 0.1\n"
    )
    (site / "bad_objective-0.1.dist-info" / "entry_points.txt").write_text(
        "[sentcl.objectives]\nbad = bad_objective:ENTRY\n"
    )
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    with caplog.at_level("WARNING", logger="sentcl.objectives"):
        assert objectives.load_plugins() == []
    assert (
        "objective bad (bad_objective:ENTRY) is not loaded" in caplog.text
        and "bad" not in objectives.REGISTRY
    )
