import json

import numpy as np
import pytest
import torch

from sentcl.config import ConfigError
from sentcl.data import Batch, DataError
from sentcl.evaluation import STSEvaluator
from sentcl.model import SentenceEncoder
from sentcl.objectives import REGISTRY, ObjectiveOutput, SimCSE
from sentcl.training import TrainingError, recipe_from_dict, train
from tests.conftest import SENTENCES
from tests.training.crash import crash_after_a_checkpoint


def recipe(tiny_model_dir, train_file, output_dir, data_dir, **training):
    return recipe_from_dict(
        {
            "model": {"name_or_path": str(tiny_model_dir), "pooler": "cls", "mlp_only_train": True},
            "data": {"train_file": str(train_file), "max_length": 16},
            "objective": {"name": "simcse", "temperature": 0.05},
            "training": {
                "output_dir": str(output_dir),
                "batch_size": 4,
                "learning_rate": 1e-3,
                "max_steps": 6,
                "eval_steps": 3,
                "eval_at_start": True,
                "eval_data_dir": str(data_dir),
                "logging_steps": 2,
                "seed": 7,
            }
            | training,
        }
    )


@pytest.fixture
def wiki_file(tmp_path):
    path = tmp_path / "wiki.txt"
    path.write_text("\n".join(SENTENCES * 2) + "\n\n")
    return path


def test_unsupervised_run_writes_best_model_log_and_summary(
    tmp_path, tiny_model_dir, wiki_file, stsb_data_dir
):
    result = train(recipe(tiny_model_dir, wiki_file, tmp_path / "run", stsb_data_dir))
    out = tmp_path / "run"
    assert result.steps == 6
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in records if "eval" in r]
    assert [r["step"] for r in evals] == [0, 3, 6]
    assert [r["step"] for r in records if "loss" in r] == [2, 4, 6]
    assert all(r["lr"] >= 0 for r in records if "lr" in r)
    # real tokens per logging window (2 steps × 4 sentences × 2 views, no padding counted)
    assert all(16 < r["tokens"] < 2 * 4 * 2 * 16 for r in records if "loss" in r)
    for r in evals:  # each evaluation leaves a point of the run's alignment–uniformity trajectory
        assert {"align", "uniform", "avg_cos_random", "effective_rank"} <= set(r["geometry"])
    trained = {r["step"]: r["eval"]["stsb_dev_spearman"] for r in evals if r["step"] > 0}
    assert result.best_step == max(trained, key=trained.get)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["best_step"] == result.best_step
    assert summary["initial_metrics"]["stsb_dev_spearman"] == evals[0]["eval"]["stsb_dev_spearman"]
    assert (out / "config.yaml").is_file()
    reloaded = SentenceEncoder.load(str(out))
    assert reloaded.pooler == "cls" and reloaded.head is not None and reloaded.head.train_only


def test_same_seed_same_weights(tmp_path, tiny_model_dir, wiki_file, stsb_data_dir):
    runs = []
    for name in ("a", "b"):
        train(recipe(tiny_model_dir, wiki_file, tmp_path / name, stsb_data_dir, eval_steps=0))
        runs.append(SentenceEncoder.load(str(tmp_path / name)).encode(SENTENCES))
    assert (runs[0] == runs[1]).all()


def test_supervised_triplets_train(tmp_path, tiny_model_dir, stsb_data_dir):
    path = tmp_path / "nli.csv"
    rows = [f"{SENTENCES[i]},{SENTENCES[(i + 1) % 12]},{SENTENCES[(i + 5) % 12]}" for i in range(12)]
    path.write_text("sent0,sent1,hard_neg\n" + "\n".join(rows) + "\n")
    result = train(recipe(tiny_model_dir, path, tmp_path / "sup", stsb_data_dir, max_steps=3))
    assert result.steps == 3 and result.best_metrics is not None


def test_non_empty_output_dir_is_refused(tmp_path, tiny_model_dir, wiki_file, stsb_data_dir):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "precious.txt").write_text("keep me")
    with pytest.raises(ConfigError, match=r"is not empty"):
        train(recipe(tiny_model_dir, wiki_file, tmp_path / "run", stsb_data_dir))
    assert (tmp_path / "run" / "precious.txt").read_text() == "keep me"


def test_non_finite_loss_stops_with_step_and_source_lines(
    tmp_path, tiny_model_dir, wiki_file, stsb_data_dir, monkeypatch
):
    class Exploding(SimCSE):
        def loss_from_embeddings(self, embeddings, batch=None):
            return ObjectiveOutput(loss=embeddings.sum() * float("nan"))

    monkeypatch.setitem(REGISTRY, "simcse", (Exploding, REGISTRY["simcse"][1]))
    with pytest.raises(TrainingError, match=r"step 1: loss is nan \(batch from .*wiki\.txt lines \[\d+"):
        train(recipe(tiny_model_dir, wiki_file, tmp_path / "run", stsb_data_dir, eval_at_start=False))
    assert not (tmp_path / "run" / "model").exists()


def test_bad_training_file_fails_before_any_step(tmp_path, tiny_model_dir, stsb_data_dir):
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\nc\n")
    with pytest.raises(Exception, match=r"bad\.csv:2"):
        train(recipe(tiny_model_dir, bad, tmp_path / "run", stsb_data_dir))
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_gradient_reaches_backbone_and_head(tiny_model_dir):
    encoder = SentenceEncoder.load(str(tiny_model_dir), pooler="avg")
    ids = torch.randint(5, 50, (3, 2, 6))
    loss = SimCSE(None, encoder.train())(Batch(ids, torch.ones_like(ids), torch.arange(3))).loss
    loss.backward()
    assert encoder.backbone.embeddings.word_embeddings.weight.grad.abs().sum() > 0


def test_eval_task_with_missing_files_fails_before_training(
    tmp_path, tiny_model_dir, wiki_file, stsb_data_dir
):
    with pytest.raises(ConfigError, match=r"training.eval_task: 'sts' cannot be evaluated: no STS12"):
        train(recipe(tiny_model_dir, wiki_file, tmp_path / "run", stsb_data_dir, eval_task="sts"))
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_gradcache_run_trains(tmp_path, tiny_model_dir, wiki_file, stsb_data_dir):
    result = train(recipe(tiny_model_dir, wiki_file, tmp_path / "gc", stsb_data_dir, gradcache_chunk=2))
    assert result.steps == 6 and result.best_metrics is not None


OBJECTIVES = {
    "nt_xent": ({"name": "nt_xent"}, {}),
    "moco": ({"name": "moco", "queue_size": 8}, {"n_views": 1}),
    "align_uniform": ({"name": "align_uniform", "info_nce_weight": 0.5}, {}),
    "dclr": ({"name": "dclr", "complementary_model": "start"}, {}),
    "vascl": ({"name": "vascl", "topk": 2}, {}),
    "simcse+mlm": ({"name": "simcse", "mlm_weight": 0.1}, {}),
    "tacl": ({"name": "tacl"}, {"n_views": 1}),
    "simcse+group_by_length": ({"name": "simcse"}, {"group_by_length": True}),
    "sg_opt": ({"name": "sg_opt", "projection_size": 16}, {"n_views": 1}),
    "sg": ({"name": "sg_opt", "projection_size": 16, "optimised": False}, {"n_views": 1}),
    "cline": ({"name": "cline", "mlm_weight": 0.5}, {"augment": "wordnet"}),
    "ease": ({"name": "ease"}, {"text_columns": 1, "n_views": 2}, {}, "ease"),
    "ease+gradcache": ({"name": "ease"}, {"text_columns": 1, "n_views": 2}, {"gradcache_chunk": 2}, "ease"),
    "moco+gradcache": ({"name": "moco", "queue_size": 8}, {"n_views": 1}, {"gradcache_chunk": 2}),
    "dclr+gradcache": ({"name": "dclr", "complementary_model": "start"}, {}, {"gradcache_chunk": 2}),
    "sg_opt+gradcache": ({"name": "sg_opt", "projection_size": 16}, {"n_views": 1}, {"gradcache_chunk": 2}),
    "simcse+streaming": ({"name": "simcse"}, {"streaming": True, "shuffle_buffer": 5}),
    "ease+streaming": ({"name": "ease"}, {"text_columns": 1, "n_views": 2, "streaming": True}, {}, "ease"),
    "simcse+child_tuning_F": ({"name": "simcse"}, {}, {"child_tuning": {"mode": "F", "reserve": 0.3}}),
    "simcse+child_tuning_D": ({"name": "simcse"}, {}, {"child_tuning": {"mode": "D", "fisher_batches": 2}}),
    # the teacher is the tiny model itself (TEACHER is replaced by its folder)
    "distillation": ({"name": "distillation", "teacher": "TEACHER", "listwise": "listmle"}, {}),
    "distillation+gradcache": (
        {"name": "distillation", "teacher": "TEACHER", "listwise": "listnet"},
        {},
        {"gradcache_chunk": 2},
    ),
    # pair rankers on NLI triplets (anchor, entailment, contradiction)
    "cosent": ({"name": "cosent"}, {"header": True}, {}, "nli"),
    "angle": ({"name": "angle"}, {"header": True}, {}, "nli"),
    "angle+gradcache": ({"name": "angle"}, {"header": True}, {"gradcache_chunk": 2}, "nli"),
    "esimcse": ({"name": "esimcse", "queue_size": 6}, {"n_views": 1}),
    # the domain methods: one view each (TSDAE damages it, Contrastive Tension's two copies encode it)
    "tsdae": ({"name": "tsdae"}, {"n_views": 1}),
    "contrastive_tension": ({"name": "contrastive_tension"}, {"n_views": 1}),
    "cropping": ({"name": "cropping"}, {"n_views": 1}),
    # PromptBERT trains the prompt pooler
    "promptbert": ({"name": "promptbert"}, {"n_views": 1}, {}, "prompt"),
    "promptbert+sup": (
        {"name": "promptbert", "supervised": True},
        {"header": True},
        {},
        "nli",
        "prompt",
        "prompt_head",
    ),
}


# every registered objective runs, with its defaults unless a case above sets it up (a new objective is
# checked for exact resume without touching this file)
OBJECTIVES |= {
    name: ({"name": name}, {})
    for name in REGISTRY
    if not any(case[0]["name"] == name for case in OBJECTIVES.values())
}


def case_data(tmp_path, wiki_file, special: list, sentences: list[str]):
    """(the training file, the pooler) a case of OBJECTIVES needs: EASE's entity rows, NLI triplets for
    the pair rankers, the prompt pooler for PromptBERT, else the wiki sentences and mean pooling."""
    pooler = "prompt" if "prompt" in special else "avg"
    if "ease" in special:
        return ease_rows(tmp_path / "ease.tsv", sentences), pooler
    if "nli" in special:
        path, n = tmp_path / "nli.csv", len(sentences)
        rows = [f"{sentences[i]},{sentences[(i + 1) % n]},{sentences[(i + 5) % n]}" for i in range(n)]
        path.write_text("sent0,sent1,hard_neg\n" + "\n".join(rows) + "\n")
        return path, pooler
    return wiki_file, pooler


def ease_rows(path, sentences):
    """(sentence, entity, hard-negative entity) rows, EASE's data."""
    entities = ["Dog", "Cat", "Ball", "Book", "Car", "Music"]
    path.write_text(
        "".join(f"{s}\t{entities[i % 6]}\t{entities[(i + 1) % 6]}\n" for i, s in enumerate(sentences))
    )
    return path


@pytest.mark.parametrize("method", list(OBJECTIVES))
def test_every_objective_trains_checkpoints_and_resumes_exactly(
    tmp_path, tiny_model_dir, wiki_file, method, monkeypatch
):

    objective, data, *extra = OBJECTIVES[method]
    wiki_file, pooler = case_data(tmp_path, wiki_file, extra[1:], SENTENCES * 2)
    model = {"name_or_path": str(tiny_model_dir), "pooler": pooler}
    if "prompt_head" in extra[1:]:  # supervised PromptBERT as its recipe reads it: the head, denoised
        model |= {"prompt_head": True, "prompt_denoise": True}
    if objective.get("teacher") == "TEACHER":
        objective = objective | {"teacher": str(tiny_model_dir)}
        monkeypatch.setenv("SENTCL_CACHE", str(tmp_path / "cache"))  # the teacher's table is cached there

    def run(folder, **training):
        training |= extra[0] if extra else {}
        config = {
            "model": model,
            "data": {"train_file": str(wiki_file), "max_length": 16, **data},
            "objective": objective,
            "training": {"output_dir": str(folder), "batch_size": 4, "learning_rate": 1e-3, "max_steps": 4,
                         "eval_steps": 0, "checkpoint_steps": 2, "seed": 3, **training},
        }  # fmt: skip
        return train(recipe_from_dict(config))

    straight = run(tmp_path / "straight")
    assert straight.steps == 4
    losses = [json.loads(x) for x in (tmp_path / "straight" / "metrics.jsonl").read_text().splitlines()]
    assert all(torch.isfinite(torch.tensor(r["loss"])) for r in losses)
    with crash_after_a_checkpoint(monkeypatch):  # the process dies right after the step-2 checkpoint
        run(tmp_path / "half")
    run(tmp_path / "half", resume=True)  # the objective's state (key encoder, queue, MLM head) included
    a = SentenceEncoder.load(str(tmp_path / "straight"))
    b = SentenceEncoder.load(str(tmp_path / "half"))
    for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert torch.equal(x, y), name


def test_gradcache_is_refused_for_objectives_with_their_own_passes(tmp_path, tiny_model_dir, wiki_file):
    config = {
        "model": {"name_or_path": str(tiny_model_dir), "pooler": "avg"},
        "data": {"train_file": str(wiki_file)},
        "objective": {"name": "tacl"},
        "training": {"output_dir": str(tmp_path / "r"), "batch_size": 4, "max_steps": 1, "eval_steps": 0,
                     "gradcache_chunk": 2},
    }  # fmt: skip
    with pytest.raises(ConfigError, match="gradcache_chunk"):
        train(recipe_from_dict(config))


def test_the_start_model_is_a_candidate_when_asked(
    tmp_path, tiny_model_dir, wiki_file, stsb_data_dir, monkeypatch
):
    """start_is_candidate: a run whose training never beats step 0 keeps the starting model."""

    scores = iter([50.0, 40.0, 45.0])  # step 0, 3, 6: training only makes it worse
    monkeypatch.setattr(STSEvaluator, "__call__", lambda self, embedder: {self.primary: next(scores)})
    config = recipe(
        tiny_model_dir,
        wiki_file,
        tmp_path / "run",
        stsb_data_dir,
        start_is_candidate=True,
        log_geometry=False,
    )
    start = SentenceEncoder.from_config(config.model)
    result = train(config)
    assert result.best_step == 0 and result.best_metrics == result.initial_metrics
    kept = SentenceEncoder.load(str(tmp_path / "run"))
    probe = SENTENCES[:4]
    assert np.allclose(kept.encode(probe), start.eval().encode(probe), atol=1e-5)


def test_start_is_candidate_needs_an_evaluation_at_start(tmp_path, tiny_model_dir, wiki_file, stsb_data_dir):
    with pytest.raises(ConfigError, match="start_is_candidate: needs eval_at_start"):
        recipe(
            tiny_model_dir,
            wiki_file,
            tmp_path / "r",
            stsb_data_dir,
            start_is_candidate=True,
            eval_at_start=False,
        )


def _tree(folder):
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_diverged_run_saves_nothing_and_stops_with_one_line(
    tmp_path, tiny_model_dir, wiki_file, stsb_data_dir
):
    """lr 1e6: the weights leave the finite numbers after a step; no NaN model becomes "the best"."""
    config = recipe(
        tiny_model_dir, wiki_file, tmp_path / "run", stsb_data_dir,
        learning_rate=1e6, eval_steps=1, checkpoint_steps=1,
    )  # fmt: skip
    with pytest.raises(TrainingError, match=r"^step \d+: .*nothing is saved, the last saved model") as error:
        train(config)
    assert "\n" not in str(error.value)
    assert not (tmp_path / "run" / "model").exists() and not (tmp_path / "run" / "checkpoint").exists()


def test_what_was_saved_before_a_divergence_is_untouched(
    tmp_path, tiny_model_dir, wiki_file, stsb_data_dir, monkeypatch
):
    import sentcl.training.steps as loop_module

    run = tmp_path / "run"
    train(
        recipe(tiny_model_dir, wiki_file, run, stsb_data_dir, max_steps=4, eval_steps=2, checkpoint_steps=2)
    )
    before = {name: _tree(run / name) for name in ("model", "checkpoint")}
    real = loop_module.forward_backward

    calls = []

    def diverging_step(objective, batch, chunk=0):  # step 6 overflows: its weights turn NaN
        output = real(objective, batch, chunk)
        calls.append(1)
        for parameter in objective.encoder.parameters():
            if parameter.grad is not None and len(calls) == 2:
                parameter.grad.fill_(float("inf"))
        return output

    monkeypatch.setattr(loop_module, "forward_backward", diverging_step)
    resumed = recipe(
        tiny_model_dir,
        wiki_file,
        run,
        stsb_data_dir,
        max_steps=8,
        eval_steps=2,
        checkpoint_steps=2,
        resume=True,
    )
    with pytest.raises(
        TrainingError,
        match=r"^step 6: .*NaN or infinite values.*the last saved model and checkpoint are untouched",
    ):
        train(resumed)
    assert {name: _tree(run / name) for name in ("model", "checkpoint")} == before


def test_a_start_that_fails_on_its_inputs_writes_nothing_and_a_plain_rerun_works(
    tmp_path, tiny_model_dir, wiki_file, stsb_data_dir
):
    run = tmp_path / "run"
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\nc\n")
    config = recipe(tiny_model_dir, bad, run, stsb_data_dir, max_steps=2, eval_steps=0)
    with pytest.raises(DataError, match=r"bad\.csv:2: 1 field"):
        train(config)
    assert not run.exists() or not any(run.iterdir())
    assert train(recipe(tiny_model_dir, wiki_file, run, stsb_data_dir, max_steps=2, eval_steps=0)).steps == 2


def test_resume_before_the_first_checkpoint_starts_from_step_zero_and_stale_temps_go(
    tmp_path, tiny_model_dir, wiki_file, stsb_data_dir
):
    import yaml

    run = tmp_path / "run"
    run.mkdir()
    config = recipe(tiny_model_dir, wiki_file, run, stsb_data_dir, max_steps=2, eval_steps=0, resume=True)
    (run / "config.yaml").write_text(yaml.safe_dump(config.to_dict()))  # killed before its first checkpoint
    (run / ".checkpoint.tmp-abc12_xy").mkdir()  # the names tempfile gives atomic_write's siblings
    (run / ".checkpoint.tmp-abc12_xy" / "model.safetensors").write_bytes(b"x" * 100)
    (run / ".summary.json.tmp-k3j9x0qz").write_text("{")
    (run / ".notes.tmp-mine").write_text("the user's")  # alike, but not a sibling of what the run writes
    (run / ".model.tmp-drafts").mkdir()  # alike, but not tempfile's 8 characters
    result = train(
        recipe(tiny_model_dir, wiki_file, run, stsb_data_dir, max_steps=2, eval_steps=0, resume=True)
    )
    assert result.steps == 2
    hidden = sorted(p.name for p in run.iterdir() if p.name.startswith("."))
    assert hidden == [".model.tmp-drafts", ".notes.tmp-mine"]  # and the run's lock is gone with the run
    assert (run / ".notes.tmp-mine").read_text() == "the user's"


def test_autocast_auto_says_which_precision_and_why(
    tmp_path, tiny_model_dir, wiki_file, stsb_data_dir, caplog
):
    """On this machine, whatever it is: emulated bf16 → fp32 by the flag; native → the measured step."""
    import logging

    from sentcl.hardware import detect

    with caplog.at_level(logging.INFO, logger="sentcl.training.steps"):
        train(recipe(tiny_model_dir, wiki_file, tmp_path / "run", stsb_data_dir, max_steps=1, eval_steps=0,
                     autocast="auto"))  # fmt: skip
    line = next(r.getMessage() for r in caplog.records if "training.autocast auto" in r.getMessage())
    chosen = json.loads((tmp_path / "run" / "summary.json").read_text())["autocast"]
    if detect("cpu").native_bf16:
        assert line.startswith(f"training.autocast auto: {chosen} (the faster training step here: fp32 ")
    else:
        assert chosen == "fp32" and "no native bf16" in line
        assert line.startswith("training.autocast auto: fp32 (")


def test_a_recipe_of_an_earlier_version_keeps_its_precision(
    tmp_path, tiny_model_dir, wiki_file, stsb_data_dir
):
    """config.yaml files and recipes say none / bfloat16: read as fp32 / bf16, written in the new names."""
    import yaml

    old = recipe(tiny_model_dir, wiki_file, tmp_path / "run", stsb_data_dir, max_steps=1, eval_steps=0,
                 autocast="none")  # fmt: skip
    assert old.training.autocast == "fp32"
    train(old)
    assert yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["training"]["autocast"] == "fp32"
    with pytest.raises(ConfigError, match=r"training.autocast: 'int8' is not one of fp32, bf16, auto"):
        recipe(tiny_model_dir, wiki_file, tmp_path / "x", stsb_data_dir, autocast="int8")


@pytest.mark.parametrize("name", ["metrics.jsonl", "summary.json", "model"])
def test_a_link_where_the_run_writes_is_refused_and_the_file_outside_is_untouched(
    name, tmp_path, tiny_model_dir, wiki_file, stsb_data_dir, capsys
):
    """``--overwrite`` into a folder where metrics.jsonl (or another entry the run writes) is a symbolic link:
    writing through it would overwrite a file outside the run folder."""
    run, outside = tmp_path / "run", tmp_path / "precious.txt"
    run.mkdir()
    outside.write_text("keep me")
    (run / name).symlink_to(outside)
    config = recipe(tiny_model_dir, wiki_file, run, stsb_data_dir, max_steps=2, overwrite_output_dir=True)
    with pytest.raises(ConfigError, match=rf"{name} is a symbolic link"):
        train(config)
    assert outside.read_text() == "keep me" and sorted(p.name for p in run.iterdir()) == [name]


def test_metrics_log_never_writes_through_a_link(tmp_path):
    from sentcl.training.metrics_log import MetricsLog

    outside = tmp_path / "precious.txt"
    outside.write_text("keep me")
    (tmp_path / "metrics.jsonl").symlink_to(outside)
    with pytest.raises(ConfigError, match="a symbolic link"):
        MetricsLog(tmp_path / "metrics.jsonl")
    assert outside.read_text() == "keep me"


def test_two_runs_never_write_into_one_folder(tmp_path, tiny_model_dir, wiki_file, stsb_data_dir):
    """A run holds a lock on its folder; a second run into it is one line naming the first run's process."""
    import os

    from sentcl.training.run import LOCK, acquire_lock

    run = tmp_path / "run"
    held = acquire_lock(run)  # the first run, still writing
    try:
        config = recipe(tiny_model_dir, wiki_file, run, stsb_data_dir, max_steps=2, eval_steps=0,
                        overwrite_output_dir=True)  # fmt: skip
        with pytest.raises(ConfigError, match=rf"being written by another sentcl run \(pid {os.getpid()}\)"):
            train(config)
        assert sorted(p.name for p in run.iterdir()) == [LOCK]  # nothing of the second run
    finally:
        held.close()
    fresh = recipe(tiny_model_dir, wiki_file, run, stsb_data_dir, max_steps=2, eval_steps=0)
    assert train(fresh).steps == 2  # the lock alone does not make the folder "not empty"


def test_overwrite_replaces_the_previous_run_whole(tmp_path, tiny_model_dir, wiki_file, stsb_data_dir):
    """A previous run's checkpoint is never resumed by an --overwrite run (a 2-step recipe once reported 6
    steps), and an --overwrite run that fails leaves no old model beside its new config.yaml."""
    run = tmp_path / "run"
    train(
        recipe(tiny_model_dir, wiki_file, run, stsb_data_dir, max_steps=6, eval_steps=3, checkpoint_steps=3)
    )
    (run / "notes.txt").write_text("mine")
    again = recipe(tiny_model_dir, wiki_file, run, stsb_data_dir, max_steps=2, eval_steps=0,
                   overwrite_output_dir=True)  # fmt: skip
    assert train(again).steps == 2 and not (run / "checkpoint").exists()
    diverging = recipe(tiny_model_dir, wiki_file, run, stsb_data_dir, learning_rate=1e6, eval_steps=1,
                       overwrite_output_dir=True)  # fmt: skip
    with pytest.raises(TrainingError):
        train(diverging)
    assert not (run / "model").exists() and not (run / "summary.json").exists()
    assert (run / "notes.txt").read_text() == "mine"  # not the run's: kept


def test_overwrite_keeps_the_users_files_inside_the_runs_folders(
    tmp_path, tiny_model_dir, wiki_file, stsb_data_dir
):
    """Issue 70 item 2: --overwrite removed OUTPUT/model whole, with a user's file in it; only what sentcl
    wrote there may go (its marker lists it), and a tracker folder sentcl did not make is left as found."""
    run = tmp_path / "run"
    train(recipe(tiny_model_dir, wiki_file, run, stsb_data_dir, max_steps=2, eval_steps=0))
    (run / "model" / "mine.txt").write_text("mine")
    (run / "tensorboard").mkdir()
    (run / "tensorboard" / "notes.txt").write_text("not sentcl's")
    again = recipe(tiny_model_dir, wiki_file, run, stsb_data_dir, max_steps=2, eval_steps=0,
                   overwrite_output_dir=True, learning_rate=1e6)  # fmt: skip
    with pytest.raises(TrainingError):  # fails: the previous model is gone, the user's file is not
        train(again)
    assert sorted(p.name for p in (run / "model").iterdir()) == ["mine.txt"]
    assert (run / "tensorboard" / "notes.txt").read_text() == "not sentcl's"
    train(recipe(tiny_model_dir, wiki_file, run, stsb_data_dir, max_steps=2, eval_steps=0,
                 overwrite_output_dir=True))  # fmt: skip
    assert (run / "model" / "mine.txt").read_text() == "mine" and (run / "model" / "config.json").is_file()


def test_resume_refuses_a_changed_recipe(tmp_path, tiny_model_dir, wiki_file, stsb_data_dir):
    run = tmp_path / "run"
    train(
        recipe(tiny_model_dir, wiki_file, run, stsb_data_dir, max_steps=4, eval_steps=2, checkpoint_steps=2)
    )
    changed = recipe(tiny_model_dir, wiki_file, run, stsb_data_dir, max_steps=4, eval_steps=2,
                     checkpoint_steps=2, learning_rate=1e-5, resume=True)  # fmt: skip
    with pytest.raises(ConfigError, match=r"training.learning_rate \(the run: 0.001, now: 1e-05\)") as error:
        train(changed)
    assert "\n" not in str(error.value)
    other_file = tmp_path / "other.txt"
    other_file.write_text("\n".join(SENTENCES) + "\n")
    moved = recipe(tiny_model_dir, other_file, run, stsb_data_dir, max_steps=4, eval_steps=2,
                   checkpoint_steps=2, resume=True)  # fmt: skip
    with pytest.raises(ConfigError, match=r"data.train_file"):
        train(moved)
    same = recipe(tiny_model_dir, wiki_file, run, stsb_data_dir, max_steps=4, eval_steps=2,
                  checkpoint_steps=2, resume=True, report_to=[])  # fmt: skip
    assert train(same).steps == 4


@pytest.mark.parametrize(
    ("section", "key", "value", "message"),
    [
        ("training", "seed", -1, r"training\.seed: must be in \[0, 2\*\*32\), got -1"),
        ("training", "seed", 2**32, r"training\.seed: must be in \[0, 2\*\*32\)"),
        ("training", "device", "gpu", r"training\.device: 'gpu' is not a device"),
        ("objective", "name", ["simcse", "moco"], r"objective\.name: \['simcse', 'moco'\] is not one of"),
    ],
)
def test_settings_that_were_tracebacks_are_config_errors(
    tmp_path, tiny_model_dir, section, key, value, message
):
    data = {"model": {"name_or_path": str(tiny_model_dir)}, "data": {"train_file": "t.txt"}}
    data[section] = {key: value}
    with pytest.raises(ConfigError, match=message):
        recipe_from_dict(data)


@pytest.mark.skipif(torch.cuda.is_available(), reason="asks for CUDA on a machine without it")
def test_a_device_this_machine_lacks_is_refused_before_anything_is_written(
    tmp_path, tiny_model_dir, wiki_file, stsb_data_dir
):
    run = tmp_path / "run"
    config = recipe(tiny_model_dir, wiki_file, run, stsb_data_dir, device="cuda", max_steps=2)
    with pytest.raises(ConfigError, match=r"training\.device: cuda, but .*; use auto or cpu"):
        train(config)
    assert not run.exists()


def test_an_output_that_is_a_file_and_a_checkpoint_that_is_a_file_are_refused(
    tmp_path, tiny_model_dir, wiki_file, stsb_data_dir
):
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    with pytest.raises(ConfigError, match=r"notes\.txt is a file; a run writes a folder"):
        train(recipe(tiny_model_dir, wiki_file, notes, stsb_data_dir, max_steps=2))
    assert notes.read_text() == "mine"
    run = tmp_path / "run"
    train(recipe(tiny_model_dir, wiki_file, run, stsb_data_dir, max_steps=2, eval_steps=0))
    (run / "checkpoint").write_text("not a checkpoint")  # resume would silently start at step 0
    before = _tree(run)
    with pytest.raises(ConfigError, match=r"--resume: .*checkpoint is not a checkpoint folder"):
        train(recipe(tiny_model_dir, wiki_file, run, stsb_data_dir, max_steps=2, eval_steps=0, resume=True))
    assert _tree(run) == before


def test_a_max_length_beyond_the_models_positions_is_refused_before_training(
    tmp_path, tiny_model_dir, stsb_data_dir
):
    long = tmp_path / "long.txt"  # a line longer than the tiny model's 64 positions
    long.write_text("\n".join(SENTENCES) + "\n" + " ".join(["dog"] * 300) + "\n")
    config = recipe(tiny_model_dir, long, tmp_path / "run", stsb_data_dir, max_steps=2)
    config.data.max_length = 200
    with pytest.raises(ConfigError, match=r"data\.max_length: 200 is beyond the model's 64 positions"):
        train(config)
    assert not (tmp_path / "run").exists()


def test_evaluations_in_the_runs_eval_dtype_and_the_encoder_back_in_fp32(
    tmp_path, tiny_model_dir, wiki_file, stsb_data_dir, monkeypatch
):
    from sentcl.model import SentenceEncoder

    seen = []
    real = SentenceEncoder.encode

    def spy(self, *args, **kwargs):
        seen.append(self.inference_autocast)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(SentenceEncoder, "encode", spy)
    result = train(recipe(tiny_model_dir, wiki_file, tmp_path / "run", stsb_data_dir, eval_dtype="bf16",
                          max_steps=2, eval_steps=2))  # fmt: skip
    assert seen and all(dtype is torch.bfloat16 for dtype in seen)
    assert result.best_metrics is not None
    assert SentenceEncoder.load(str(tmp_path / "run")).inference_autocast is None
    with pytest.raises(ConfigError, match=r"training\.eval_dtype: 'int8' is not one of fp32, bf16, auto"):
        recipe(tiny_model_dir, wiki_file, tmp_path / "x", stsb_data_dir, eval_dtype="int8")


def test_a_view_count_the_objective_cannot_take_is_refused_when_the_recipe_is_read(
    tmp_path, tiny_model_dir, wiki_file, stsb_data_dir
):
    """Before any data is read or the start evaluated (on a large corpus that took minutes): one line."""
    config = {
        "model": {"name_or_path": str(tiny_model_dir)}, "data": {"train_file": str(wiki_file), "n_views": 1},
        "training": {"output_dir": str(tmp_path / "r")},
    }  # fmt: skip
    with pytest.raises(ConfigError, match=r"^data\.n_views: simcse takes 2 or 3 views per example, not 1$"):
        recipe_from_dict(config | {"objective": {"name": "simcse"}})
    with pytest.raises(ConfigError, match=r"^data\.n_views: dclr takes 2 views per example, not 3$"):
        recipe_from_dict(config | {"data": {"train_file": "x", "n_views": 3}, "objective": {"name": "dclr"}})
    assert recipe_from_dict(config | {"objective": {"name": "moco"}}).data.n_views == 1  # its own view
