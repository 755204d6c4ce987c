import json

import numpy as np
import pytest

from sentcl.analysis.report import ModelAnalysis
from sentcl.config import ConfigError
from sentcl.reproduction import load_plan, reproduce
from sentcl.reproduction.claims import judge
from sentcl.reproduction.pipeline import Stage, read_stage
from tests.conftest import SENTENCES

ARCHITECTURE = {
    "model_type": "bert", "num_hidden_layers": 1, "hidden_size": 32, "num_attention_heads": 2,
    "intermediate_size": 64, "max_position_embeddings": 64,
}  # fmt: skip


def write(path, data):
    path.write_text(json.dumps(data))  # JSON is YAML
    return path


@pytest.fixture
def setup(tmp_path, tiny_model_dir, stsb_data_dir):
    """A tiny pre-training recipe, two method recipes (unsup on sentences, sup on NLI triplets), a plan."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(SENTENCES * 4) + "\n")
    nli = tmp_path / "nli.csv"
    rows = [f"{SENTENCES[i]},{SENTENCES[(i + 1) % 12]},{SENTENCES[(i + 5) % 12]}" for i in range(12)]
    nli.write_text("sent0,sent1,hard_neg\n" + "\n".join(rows) + "\n")
    pretrain = write(
        tmp_path / "pretrain.yaml",
        {
            "model": {"architecture": ARCHITECTURE, "tokenizer": str(tiny_model_dir)},
            "data": {"train_files": [str(corpus)], "max_length": 16, "eval_sentences": 6},
            "training": {"batch_size": 8, "learning_rate": 3e-3, "max_steps": 4, "eval_steps": 4,
                         "logging_steps": 2, "seed": 5},
        },
    )  # fmt: skip
    unsup = write(
        tmp_path / "unsup.yaml",
        {"model": {"name_or_path": "x", "pooler": "cls", "mlp_only_train": True},
         "data": {"train_file": str(corpus), "max_length": 16}, "objective": {"name": "simcse"}},
    )  # fmt: skip
    sup = write(
        tmp_path / "sup.yaml",
        {"model": {"name_or_path": "x", "pooler": "cls"}, "data": {"train_file": str(nli), "max_length": 16},
         "objective": {"name": "simcse", "hard_negative_weight": 1.0}},
    )  # fmt: skip
    intro = tmp_path / "intro.md"
    intro.write_text("Tiny plan for the tests.\n")
    plan = {
        "output_dir": str(tmp_path / "out"),
        "report": str(tmp_path / "docs" / "reproduction.md"),
        "images": str(tmp_path / "docs" / "images"),
        "intro": str(intro),
        "fit_on": str(corpus),
        "budget": {"training.max_steps": 4, "training.batch_size": 4, "training.learning_rate": 1e-3,
                   "training.eval_steps": 2, "training.eval_at_start": True, "training.seed": 3},
        "encoders": {"raw": {"pretrain": str(pretrain), "baselines": ["avg_first_last", "cls_before_pooler"],
                             "postprocess": ["whitening", "abtt"]}},
        "methods": {"unsup SimCSE": {"recipe": str(unsup), "role": "unsup"},
                    "sup SimCSE": {"recipe": str(sup), "role": "sup"}},
    }  # fmt: skip
    return tmp_path, plan, stsb_data_dir


def test_plan_runs_end_to_end_then_only_redoes_what_changed(setup):
    tmp_path, plan, data_dir = setup
    plan_path = write(tmp_path / "plan.yaml", plan)
    report, outcomes = reproduce(plan_path, str(data_dir))
    assert [o.action for o in outcomes] == ["ran"] * len(outcomes)
    names = [o.name for o in outcomes]
    assert names[0] == "pretrain raw" and sum(n.startswith("train") for n in names) == 2
    assert sum(n.startswith("measure") for n in names) == 6  # 2 poolers, 2 post-processors, 2 methods
    text = report.read_text()
    assert "Tiny plan for the tests." in text and "| claim | rule | here |" in text
    for label in ("avg_first_last + whitening", "cls_before_pooler", "unsup SimCSE", "sup SimCSE"):
        assert f"| {label} |" in text
    assert "Whitening improves uniformity but hurts alignment" in text
    flow = next(line for line in text.splitlines() if line.startswith("| Flow improves uniformity"))
    assert flow.endswith("| not measured |")
    for figure in (
        "raw_align_uniform.png",
        "raw_spectrum.png",
        "raw_cosine_density.png",
        "raw_pretraining.png",
    ):
        assert (tmp_path / "docs" / "images" / figure).stat().st_size > 1000
    row = json.loads((tmp_path / "out" / "rows" / "raw" / "unsup-simcse" / "row.json").read_text())
    assert [p[0] for p in row["trajectory"]] == [0, 2, 4]  # eval at start, then every 2 steps

    _, again = reproduce(plan_path, str(data_dir))
    assert [o.action for o in again] == ["cached"] * len(again)

    plan["budget"]["training.max_steps"] = 6  # only the trained methods and their rows change
    _, changed = reproduce(write(tmp_path / "plan.yaml", plan), str(data_dir))
    ran = {o.name for o in changed if o.action == "ran"}
    assert ran == {
        "train unsup SimCSE from raw", "train sup SimCSE from raw",
        "measure raw: unsup SimCSE", "measure raw: sup SimCSE",
    }  # fmt: skip
    row = json.loads((tmp_path / "out" / "rows" / "raw" / "unsup-simcse" / "row.json").read_text())
    assert [p[0] for p in row["trajectory"]] == [0, 2, 4, 6]


def test_stage_resumes_an_interrupted_run_of_the_same_key_and_wipes_another_key(tmp_path):
    folder = tmp_path / "stage"
    outcomes = []
    with pytest.raises(RuntimeError), Stage(folder, "k1", "s", outcomes) as stage:
        assert stage.needed and not stage.resume
        (folder / "checkpoint").mkdir()
        raise RuntimeError("killed")
    assert read_stage(folder) == {"key": "k1", "name": "s", "done": False}
    with Stage(folder, "k1", "s", outcomes) as stage:
        assert stage.needed and stage.resume and (folder / "checkpoint").is_dir()
    assert read_stage(folder)["done"] is True and outcomes[-1].action == "resumed"
    with Stage(folder, "k1", "s", outcomes) as stage:
        assert not stage.needed
    (folder / "checkpoint" / "old").write_text("x")
    with Stage(folder, "k2", "s", outcomes) as stage:
        assert stage.needed and not stage.resume and not (folder / "checkpoint").exists()


def test_plan_errors_name_the_file_and_key(setup):
    tmp_path, plan, _ = setup
    bad = json.loads(json.dumps(plan))
    bad["encoders"]["raw"]["baselines"] = ["max"]
    with pytest.raises(ConfigError, match=r"plan.yaml: encoders.raw.baselines: 'max' is not one of"):
        load_plan(write(tmp_path / "plan.yaml", bad))
    bad = json.loads(json.dumps(plan))
    bad["methods"]["unsup SimCSE"]["recipe"] = "missing.yaml"
    with pytest.raises(ConfigError, match=r"methods.unsup SimCSE.recipe: missing.yaml not found"):
        load_plan(write(tmp_path / "plan.yaml", bad))
    bad = json.loads(json.dumps(plan))
    bad["encoders"]["raw"]["model"] = "somewhere"
    with pytest.raises(ConfigError, match=r"encoders.raw: give exactly one of pretrain"):
        load_plan(write(tmp_path / "plan.yaml", bad))
    bad = json.loads(json.dumps(plan)) | {"budgett": {}}
    with pytest.raises(ConfigError, match=r"plan.yaml: budgett: unknown key"):
        load_plan(write(tmp_path / "plan.yaml", bad))
    bad = json.loads(json.dumps(plan))
    bad["encoders"]["raw"]["methods"] = ["DCLR"]
    with pytest.raises(ConfigError, match=r"encoders.raw.methods: 'DCLR' is not defined under methods"):
        load_plan(write(tmp_path / "plan.yaml", bad))


def analysis(label, spearman, align, uniform, avg_cos, sv10, rank):
    spectrum = {"avg_cos_random": avg_cos, "sv10": sv10, "effective_rank": rank}
    return ModelAnalysis(label, spearman, align, uniform, spectrum, np.ones(3), np.zeros(3), np.zeros(3))


def test_claims_follow_their_rules_and_missing_rows_are_not_measured():
    raw = analysis("raw", 50.0, 0.10, -1.0, 0.8, 0.05, 20.0)
    unsup = analysis("unsup", 70.0, 0.12, -2.5, 0.2, 0.30, 90.0)
    sup = analysis("sup", 75.0, 0.09, -2.0, 0.3, 0.25, 80.0)
    whitening = analysis("whitening", 60.0, 0.40, -3.5, 0.0, 0.90, 200.0)
    verdicts = {v.claim.split(":")[0]: v.holds for v in judge(raw, unsup, sup, whitening, None)}
    assert verdicts["The raw MLM encoder is anisotropic"] is True
    assert verdicts["Unsup SimCSE improves uniformity while keeping alignment"] is True
    assert verdicts["Whitening improves uniformity but hurts alignment"] is True
    assert verdicts["Flow improves uniformity but hurts alignment"] is None
    assert verdicts["Supervised SimCSE improves alignment further"] is True
    assert verdicts["STS order of the paper"] is None  # flow is missing
    worse = analysis("unsup", 40.0, 0.30, -2.5, 0.2, 0.30, 90.0)  # alignment lost, STS fell
    verdicts = {v.claim: v.holds for v in judge(raw, worse, sup, whitening, None)}
    assert verdicts["Unsup SimCSE improves uniformity while keeping alignment"] is False
    assert verdicts["Unsup SimCSE raises STS"] is False
