import json
import logging
import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from sentcl.analysis.report import ModelAnalysis
from sentcl.config import ConfigError
from sentcl.hardware import describe_machine
from sentcl_reproduction import load_plan, reproduce
from sentcl_reproduction.claims import Measured, judge
from sentcl_reproduction.pipeline import Candidate, Stage, choose, read_stage
from tests.conftest import SENTENCES

ARCHITECTURE = {
    "model_type": "bert", "num_hidden_layers": 1, "hidden_size": 32, "num_attention_heads": 2,
    "intermediate_size": 64, "max_position_embeddings": 64,
}  # fmt: skip


def write(path, data):
    # YAML, not JSON: JSON writes 1e-05, which YAML 1.1 reads as a string
    path.write_text(yaml.safe_dump(data, sort_keys=False))
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
    dclr = write(
        tmp_path / "dclr.yaml",
        {"model": {"name_or_path": "x", "pooler": "avg"},
         "data": {"train_file": str(corpus), "max_length": 16},
         "objective": {"name": "dclr", "complementary_model": "start"}},
    )  # fmt: skip
    intro = tmp_path / "intro.md"
    intro.write_text("Tiny plan for the tests.\n")
    plan = {
        "output_dir": str(tmp_path / "out"),
        "report": str(tmp_path / "docs" / "reproduction.md"),
        "images": str(tmp_path / "docs" / "images"),
        "intro": str(intro),
        "fit_on": str(corpus),
        "budget": {"training.max_steps": 4, "training.batch_size": 4, "training.eval_steps": 2,
                   "training.eval_at_start": True, "training.start_is_candidate": True},
        "search": {"training.learning_rate": [1e-3, 1e-2]},
        "extend": {"training.learning_rate": [3e-2]},
        "results": str(tmp_path / "results"),
        "seeds": [3, 4],
        "poolers": {"cls+mlp": {"model.pooler": "cls", "model.mlp_only_train": True},
                    "avg": {"model.pooler": "avg", "model.mlp_only_train": False}},
        "encoders": {"raw": {"pretrain": str(pretrain), "baselines": ["avg_first_last", "cls_before_pooler"],
                             "postprocess": ["whitening", "abtt"],
                             "postprocess_on": ["avg_first_last", "cls_before_pooler"]}},
        "methods": {"unsup SimCSE": {"recipe": str(unsup), "role": "unsup", "poolers": ["cls+mlp", "avg"]},
                    "sup SimCSE": {"recipe": str(sup), "role": "sup"},
                    "DCLR": {"recipe": str(dclr),
                             "overrides": {"objective.complementary_model": {"model_of": "unsup SimCSE"}}}},
    }  # fmt: skip
    return tmp_path, plan, stsb_data_dir


def test_plan_runs_end_to_end_then_only_redoes_what_changed(setup, caplog):
    tmp_path, plan, data_dir = setup
    plan_path = write(tmp_path / "plan.yaml", plan)
    report, outcomes = reproduce(plan_path, str(data_dir))
    assert [o.action for o in outcomes] == ["ran"] * len(outcomes)
    names = [o.name for o in outcomes]
    trained = [n for n in names if n.startswith("train")]
    text = report.read_text()
    grown = text.count("(grown)")  # lr 0.03 where 0.01, the grid's largest, was a method's choice
    # unsup: 2 poolers × 2 lr + 1 more seed; sup and DCLR: 2 lr + 1 more seed; plus the grown settings
    assert names[0] == "pretrain raw" and len(trained) == 5 + 3 + 3 + grown
    assert sum("seed 4" in n for n in trained) == 3
    assert (
        sum(n.startswith("measure") for n in names) == 2 + 2 * 2 + 3 * 2
    )  # 2 poolers, 2 post-processors on each of 2 baselines, 3 × 2 seeds
    assert "Tiny plan for the tests." in text and "| claim | rule | here |" in text
    assert "### The search each method got" in text and text.count("| ✔ |") == 3
    assert "| method | chosen setting | inside the grid | inside the run |" in text
    for line in text.splitlines():  # a grown setting is tried only where the grid's largest was chosen
        if "(grown)" in line:
            method = line.split(" | ")[0].strip("| ")
            assert any(m.startswith(f"| {method} | ") and "lr 0.01 |" in m for m in text.splitlines())
    assert (tmp_path / "docs" / "images" / "raw_leaderboard.png").stat().st_size > 1000
    for label in ("avg_first_last + whitening", "cls_before_pooler", "unsup SimCSE", "sup SimCSE", "DCLR"):
        assert f"| {label} |" in text
    unsup_line = next(
        line for line in text.splitlines() if line.startswith("| unsup SimCSE | ") and "| 2 |" in line
    )
    assert unsup_line.count(" ± ") >= 2  # STS-B dev and train: mean ± std over the 2 seeds
    assert "Whitening improves uniformity but hurts alignment" in text
    # rows keep their STS-B train pairs, so the paired bootstrap runs on them; every row has a band
    arrays = np.load(tmp_path / "out" / "rows" / "raw" / "unsup-simcse" / "seed-3" / "arrays.npz")
    assert arrays["train_cosines"].shape == arrays["train_gold"].shape and len(arrays["train_gold"]) > 2
    assert "### Which differences are real" in text and "The pairs here are STS-B dev's" not in text
    banded = [line for line in text.splitlines() if line.startswith(("| 1 | ", "| 2 | ", "| 3 | "))]
    assert any("| unsup SimCSE | " in line and "pairs " in line for line in banded)
    flow = next(line for line in text.splitlines() if line.startswith("| Flow improves uniformity"))
    assert flow.endswith("| not measured |")
    for figure in (
        "raw_align_uniform.png",
        "raw_spectrum.png",
        "raw_cosine_density.png",
        "raw_pretraining.png",
    ):
        assert (tmp_path / "docs" / "images" / figure).stat().st_size > 1000

    # the chosen setting is the candidate with the best STS-B dev, and DCLR's complementary model is its model
    runs = tmp_path / "out" / "runs" / "raw" / "unsup-simcse"
    summaries = {
        folder.parent.name: json.loads((folder / "summary.json").read_text())
        for folder in runs.glob("*/seed-3")
    }
    assert len(summaries) in (4, 5)  # 2 poolers × 2 lr, and a grown lr where 0.01 was the choice
    best = max(summaries, key=lambda k: summaries[k]["best_metrics"]["stsb_dev_spearman"])
    assert (runs / best / "seed-4" / "summary.json").is_file()
    assert sum((runs / k / "seed-4").exists() for k in summaries) == 1
    dclr_configs = list((tmp_path / "out" / "runs" / "raw" / "dclr").glob("*/seed-*/config.yaml"))
    assert len(dclr_configs) in (3, 4)  # 2 lr + 1 more seed, and a grown lr where 0.01 was the choice
    for config in dclr_configs:
        assert yaml.safe_load(config.read_text())["objective"]["complementary_model"] == str(
            runs / best / "seed-3"
        )
    row = json.loads((tmp_path / "out" / "rows" / "raw" / "unsup-simcse" / "seed-3" / "row.json").read_text())
    assert [p[0] for p in row["trajectory"]] == [0, 2, 4]  # eval at start, then every 2 steps

    _, again = reproduce(plan_path, str(data_dir))
    assert [o.action for o in again] == ["cached"] * len(again)

    # the committed results: small files only, and a fresh checkout regenerates the report from them
    results = tmp_path / "results"
    kept = {p.suffix for p in results.rglob("*") if p.is_file()}
    assert kept <= {".json", ".npz", ".yaml", ".jsonl", ".png"} and not list(results.rglob("*.safetensors"))
    fresh = plan | {"output_dir": str(tmp_path / "fresh"), "report": str(tmp_path / "docs" / "fresh.md")}
    fresh_report, from_results = reproduce(write(tmp_path / "fresh.yaml", fresh), str(data_dir))
    assert [o.action for o in from_results] == ["cached"] * len(from_results)
    tables = [r.read_text().split("## Stages and time")[0].split("\n", 3)[3] for r in (report, fresh_report)]
    assert tables[0] == tables[1]
    assert not list((tmp_path / "fresh").rglob("*.safetensors"))
    fresh["fit_max"] = 50  # the post-processed rows change; they need the encoder's weights, made again
    committed = (results / "encoders" / "raw" / "stage.json").read_text()
    with caplog.at_level(logging.INFO, logger="sentcl_reproduction.pipeline"):
        _, refit = reproduce(write(tmp_path / "fresh.yaml", fresh), str(data_dir))
    ran = [o.name for o in refit if o.action == "ran"]
    assert ran[0] == "pretrain raw" and all("+" in n for n in ran[1:]) and len(ran) == 1 + 4
    assert "run again for its weights, it scores as the committed run did" in caplog.text  # same machine
    # the record of the run the rows measured stays, in the results and beside the new weights
    assert (results / "encoders" / "raw" / "stage.json").read_text() == committed
    assert (tmp_path / "fresh" / "encoders" / "raw" / "stage.json").read_text() == committed

    plan["budget"]["training.max_steps"] = 6  # only the trained methods and their rows change
    _, changed = reproduce(write(tmp_path / "plan.yaml", plan), str(data_dir))
    ran = {o.name for o in changed if o.action == "ran"}
    assert not any(n.startswith(("pretrain", "measure raw: avg", "measure raw: cls")) for n in ran)
    assert sum(n.startswith("train") for n in ran) >= 11
    row = json.loads((tmp_path / "out" / "rows" / "raw" / "unsup-simcse" / "seed-3" / "row.json").read_text())
    assert [p[0] for p in row["trajectory"]] == [0, 2, 4, 6]


def test_weights_made_again_that_score_differently_are_warned_about(tmp_path, caplog):
    from sentcl_reproduction.pipeline import _check_regenerated

    before = {"best_metrics.stsb_dev_spearman": 82.68, "initial_metrics.stsb_dev_spearman": 81.61}
    with caplog.at_level(logging.INFO, logger="sentcl_reproduction.pipeline"):
        _check_regenerated(tmp_path, before, before | {"best_metrics.stsb_dev_spearman": 82.71})
        assert "scores as the committed run did" in caplog.text and "WARNING" not in caplog.text
        _check_regenerated(tmp_path, before, before | {"best_metrics.stsb_dev_spearman": 82.40})
    warning = next(r for r in caplog.records if r.levelno == logging.WARNING).getMessage()
    assert str(tmp_path) in warning and "best_metrics.stsb_dev_spearman 82.6800 → 82.4000" in warning
    assert "initial_metrics" not in warning


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
    bad["encoders"]["raw"]["baselines"] = ["median"]
    with pytest.raises(ConfigError, match=r"plan.yaml: encoders.raw.baselines: 'median' is not one of"):
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
    bad["encoders"]["raw"]["methods"] = ["VaSCL"]
    with pytest.raises(ConfigError, match=r"encoders.raw.methods: 'VaSCL' is not defined under methods"):
        load_plan(write(tmp_path / "plan.yaml", bad))
    bad = json.loads(json.dumps(plan))
    bad["encoders"]["raw"]["methods"] = ["DCLR", "unsup SimCSE"]
    with pytest.raises(
        ConfigError, match=r"'DCLR' uses the model of 'unsup SimCSE'; list 'unsup SimCSE' before"
    ):
        load_plan(write(tmp_path / "plan.yaml", bad))
    bad = json.loads(json.dumps(plan))
    bad["methods"]["sup SimCSE"]["poolers"] = ["max"]
    with pytest.raises(ConfigError, match=r"methods.sup SimCSE.poolers: 'max' is not defined under poolers"):
        load_plan(write(tmp_path / "plan.yaml", bad))
    for key, value, message in (
        ("seeds", [1, 1], "seeds: a seed appears twice"),
        ("seeds", [], "seeds: expected a non-empty list"),
        (
            "search",
            {"training.learning_rate": []},
            "search.training.learning_rate: expected a non-empty list",
        ),
        (
            "extend",
            {"training.learning_rate": [3e-3]},  # inside the grid [1e-3, 1e-2]
            "extend.training.learning_rate: expected distinct numbers outside the search's range",
        ),
    ):
        with pytest.raises(ConfigError, match=message):
            load_plan(write(tmp_path / "plan.yaml", json.loads(json.dumps(plan)) | {key: value}))


def test_the_candidates_are_every_pooler_times_the_grid(setup):
    tmp_path, plan, _ = setup
    loaded = load_plan(write(tmp_path / "plan.yaml", plan))
    candidates = loaded.candidates(loaded.methods["unsup SimCSE"])
    assert [label for label, _ in candidates] == [
        "cls+mlp, lr 0.001", "cls+mlp, lr 0.01", "avg, lr 0.001", "avg, lr 0.01",
    ]  # fmt: skip
    assert candidates[3][1] == {
        "model.pooler": "avg",
        "model.mlp_only_train": False,
        "training.learning_rate": 0.01,
    }
    assert [label for label, _ in loaded.candidates(loaded.methods["sup SimCSE"])] == ["lr 0.001", "lr 0.01"]


@pytest.mark.parametrize(
    "score, tried, edge",
    [
        (lambda lr: -abs(math.log10(lr) + 4), [1e-3, 1e-2, 1e-4, 1e-5], {}),  # the optimum below the grid
        (lambda lr: lr, [1e-3, 1e-2, 3e-2], {"training.learning_rate": "largest"}),
        (lambda lr: -lr, [1e-3, 1e-2, 1e-4, 1e-5], {"training.learning_rate": "smallest"}),
        (None, [1e-3, 1e-2, 1e-4, 1e-5], {}),  # nothing beats the start: smaller steps while there are any
    ],
)
def test_the_grid_grows_at_the_end_that_holds_the_choice(setup, monkeypatch, score, tried, edge):
    from sentcl_reproduction import pipeline

    tmp_path, plan, _ = setup
    plan["extend"] = {"training.learning_rate": [1e-5, 1e-4, 3e-2]}
    plan["methods"]["sup SimCSE"].pop("role")
    loaded = load_plan(write(tmp_path / "plan.yaml", plan))

    def candidate(label, overrides, run_dir, key, pooler="", extension=False):
        lr = overrides["training.learning_rate"]
        best, step = (50.0, 0) if score is None else (60.0 + score(lr), 4)
        return Candidate(label, overrides, run_dir, key, best, step, 50.0, pooler, 4, "fp32", extension)

    monkeypatch.setattr(pipeline, "train_run", lambda *args: "key")
    monkeypatch.setattr(pipeline, "read_candidate", candidate)
    spec = loaded.encoders[0]
    search, runs = pipeline.search_method(
        loaded, spec, loaded.methods["sup SimCSE"], "model", "k", {}, tmp_path, []
    )
    assert [c.overrides["training.learning_rate"] for c in search.candidates] == tried
    assert search.at_edge == edge and len(runs) == 2
    assert [c.extension for c in search.candidates] == [False, False] + [True] * (len(tried) - 2)
    if score is not None and not edge:
        assert search.best.overrides["training.learning_rate"] == 1e-4  # inside what was tried


def test_an_encoders_budget_goes_over_the_plans_for_its_methods_only(setup, monkeypatch):
    """A weak encoder's methods may train longer: its ``budget`` reaches their recipes (and keys); an
    encoder without one trains under the plan's budget with the same key as before it existed."""
    from contextlib import nullcontext
    from types import SimpleNamespace

    from sentcl_reproduction import pipeline

    tmp_path, plan, _ = setup
    plan["encoders"]["weak"] = {"model": "x", "budget": {"training.max_steps": 9}}
    loaded = load_plan(write(tmp_path / "plan.yaml", plan))
    assert [e.budget for e in loaded.encoders] == [{}, {"training.max_steps": 9}]
    seen = []

    def key(kind, recipe, upstream):
        seen.append(recipe["training"]["max_steps"])
        return f"key-{len(seen)}"

    monkeypatch.setattr(pipeline, "stage_key", key)
    monkeypatch.setattr(pipeline, "Stage", lambda *a: nullcontext(SimpleNamespace(needed=False)))
    method = loaded.methods["sup SimCSE"]
    for spec in loaded.encoders:
        pipeline.train_run(
            loaded, method, {}, 3, "m", [], tmp_path / spec.name, "n", tmp_path, [], spec.budget
        )
    assert seen == [4, 9]
    plan["encoders"]["weak"]["budget"] = ["training.max_steps=9"]
    with pytest.raises(ConfigError, match=r"encoders\.weak\.budget"):
        load_plan(write(tmp_path / "plan.yaml", plan))


def test_the_choice_is_the_best_dev_and_never_a_nan():
    def candidate(best):
        return Candidate("c", {}, Path(), "k", best, 0, None)

    assert choose([candidate(50.0), candidate(float("nan")), candidate(60.0), candidate(60.0)]) == 2
    assert choose([candidate(float("nan")), candidate(10.0)]) == 1


def measured(label, train, align, uniform, avg_cos, sv10, rank, dev=None):
    spectrum = {"avg_cos_random": avg_cos, "sv10": sv10, "effective_rank": rank}
    dev = train if dev is None else dev
    a = ModelAnalysis(label, dev, align, uniform, spectrum, np.ones(3), np.zeros(3), np.zeros(3))
    return Measured(label, a, dev, train, pooler="avg")


def test_claims_follow_their_rules_and_missing_rows_are_not_measured():
    raw = measured("raw", 50.0, 0.10, -1.0, 0.8, 0.05, 20.0)
    unsup = measured("unsup", 70.0, 0.12, -2.5, 0.2, 0.30, 90.0)
    sup = measured("sup", 75.0, 0.09, -2.0, 0.3, 0.25, 80.0)
    whitening = measured("whitening", 60.0, 0.40, -3.5, 0.0, 0.90, 200.0)
    verdicts = {
        v.claim.split(":")[0]: v.holds
        for v in judge(raw, raw, unsup, sup, whitening, None, raw, unsup_same=unsup, sup_same=sup)
    }
    assert verdicts["The raw MLM encoder is anisotropic"] is True
    assert verdicts["Unsup SimCSE improves uniformity while keeping alignment"] is True
    assert verdicts["Whitening improves uniformity but hurts alignment"] is True
    assert verdicts["Flow improves uniformity but hurts alignment"] is None
    assert verdicts["Supervised SimCSE improves alignment further"] is True
    assert verdicts["STS order of the paper"] is None  # flow is missing
    assert verdicts["Unsup SimCSE beats post-processing"] is None  # no post_best given
    worse = measured("unsup", 40.0, 0.30, -2.5, 0.2, 0.30, 90.0)  # alignment lost, STS fell
    verdicts = {v.claim: v.holds for v in judge(raw, raw, worse, sup, whitening, None, raw)}
    assert verdicts["Unsup SimCSE improves uniformity while keeping alignment"] is False
    assert verdicts["Unsup SimCSE raises STS"] is False


def test_sts_claims_use_the_train_split_and_each_sides_best():
    """A higher dev (the split every choice was made on) does not make a claim hold: train decides."""
    same = measured("cls_before_pooler", 30.0, 0.10, -1.0, 0.8, 0.05, 20.0)
    best = measured("avg", 60.0, 0.10, -1.0, 0.8, 0.05, 20.0)
    unsup = measured("unsup", 55.0, 0.12, -2.5, 0.2, 0.30, 90.0, dev=80.0)
    verdicts = {v.claim: v for v in judge(same, best, unsup, None, None, None, best)}
    assert verdicts["Unsup SimCSE raises STS"].holds is False  # 55 < the raw side's best 60, dev aside
    assert "STS-B train 60.00" in verdicts["Unsup SimCSE raises STS"].evidence
    assert verdicts["Unsup SimCSE improves uniformity while keeping alignment"].holds is True


def test_a_method_that_kept_its_start_judges_nothing():
    """A row that is the start encoder cannot show what the method does: not judged, with the reason."""
    raw = measured("raw", 50.0, 0.10, -1.0, 0.8, 0.05, 20.0)
    unsup = measured("unsup", 50.0, 0.10, -1.0, 0.8, 0.05, 20.0)
    unsup.kept_start = True
    whitening = measured("whitening", 60.0, 0.40, -3.5, 0.0, 0.90, 200.0)
    verdicts = {v.claim: v for v in judge(raw, raw, unsup, None, whitening, None, raw)}
    assert verdicts["Unsup SimCSE raises STS"].holds is None
    assert "never beat its starting model" in verdicts["Unsup SimCSE raises STS"].evidence
    assert verdicts["Whitening improves uniformity but hurts alignment"].holds is True


def test_the_sts_order_starts_from_the_baseline_post_processing_was_fitted_on():
    base = measured("avg", 60.0, 0.06, -1.2, 0.66, 0.09, 198.0)
    best = measured("cls", 72.0, 0.02, -0.5, 0.88, 0.05, 143.0)  # a better raw pooler does not break it
    flow = measured("flow", 69.0, 0.40, -3.9, 0.02, 0.56, 326.0)
    whitening = measured("whitening", 68.0, 0.44, -3.9, 0.01, 0.57, 358.0)
    unsup = measured("unsup", 75.0, 0.17, -2.6, 0.33, 0.19, 263.0)
    sup = measured("sup", 80.0, 0.22, -3.5, 0.09, 0.38, 295.0)
    verdicts = {v.claim.split(":")[0]: v.holds for v in judge(best, best, unsup, sup, whitening, flow, base)}
    assert verdicts["STS order of the paper"] is True


def test_post_processing_is_judged_against_its_strongest_row_and_alignment_under_one_pooler():
    raw = measured("raw", 50.0, 0.10, -1.0, 0.8, 0.05, 20.0)
    unsup = measured("unsup", 70.0, 0.12, -2.5, 0.2, 0.30, 90.0)
    sup = measured("sup", 75.0, 0.09, -2.0, 0.3, 0.25, 80.0)
    weak = measured("avg_first_last + whitening", 60.0, 0.40, -3.5, 0.0, 0.90, 200.0)
    strong = measured("cls_before_pooler + flow", 72.0, 0.40, -3.5, 0.0, 0.90, 200.0)
    verdicts = {v.claim: v for v in judge(raw, raw, unsup, sup, weak, weak, raw, post_best=strong)}
    beats = verdicts["Unsup SimCSE beats post-processing"]
    assert beats.holds is False and "cls_before_pooler + flow" in beats.evidence  # 70 < 72, not 70 > 60
    # the chosen rows differ in pooler: the claim reads the rows given under one pooler, not the chosen ones
    unsup_avg = measured("unsup [avg]", 65.0, 0.30, -2.5, 0.2, 0.30, 90.0)
    sup_avg = measured("sup [avg]", 72.0, 0.35, -2.0, 0.3, 0.25, 80.0)
    verdicts = {
        v.claim: v
        for v in judge(raw, raw, unsup, sup, weak, weak, raw, unsup_same=unsup_avg, sup_same=sup_avg)
    }
    alignment = verdicts["Supervised SimCSE improves alignment further"]
    assert alignment.holds is False and "their chosen poolers differ" in alignment.rule
    assert "sup [avg]" in alignment.evidence


def test_the_leaderboard_draws_each_methods_own_start():
    """A method tested with avg is drawn against the avg start, not only against the best raw pooler's."""
    from types import SimpleNamespace

    from sentcl_reproduction.document import _leaderboard

    def line(m, kind):
        return m, [SimpleNamespace(row=SimpleNamespace(kind=kind))]

    def at(label, train, pooler):
        m = measured(label, train, 0.1, -1.0, 0.8, 0.05, 20.0)
        m.pooler = pooler
        return m

    cls, avg = at("cls_before_pooler", 72.6, "cls_before_pooler"), at("avg", 60.4, "avg")
    unsup, tacl = at("unsup SimCSE", 76.6, "cls_before_pooler"), at("TaCL", 60.5, "avg")
    post = at("cls_before_pooler + abtt", 71.9, "cls_before_pooler")
    lines = [line(cls, "baseline"), line(avg, "baseline"), line(post, "postprocess"),
             line(unsup, "method"), line(tacl, "method")]  # fmt: skip
    roles = {"raw_best": cls, "post_base": avg, "post_best": post}
    bars, references = _leaderboard(lines, roles)
    assert [b[0] for b in bars] == ["unsup SimCSE [cls_before_pooler]", "TaCL [avg]"]
    # avg is both a method's start and the first-last baseline here: drawn once, as a start
    assert references == [
        ("start (cls_before_pooler)", 72.6),
        ("start (avg)", 60.4),
        ("best post-processed (cls_before_pooler + abtt)", 71.9),
    ]
    bars, references = _leaderboard(lines[:4], roles)  # one pooler among the methods: no pooler in labels
    assert [b[0] for b in bars] == ["unsup SimCSE"]
    assert [r[0] for r in references] == [
        "start (cls_before_pooler)", "first-last avg (avg)", "best post-processed (cls_before_pooler + abtt)"
    ]  # fmt: skip


def test_a_plan_cut_short_keeps_what_it_finished_in_the_results(setup):
    """A reproduction stopped part-way (here: a method whose recipe fails) has already copied every finished
    stage into the results folder; a fresh checkout takes them and runs only what is left."""
    tmp_path, plan, data_dir = setup
    broken = write(tmp_path / "broken.yaml", {"model": {"name_or_path": "x"}, "objective": {"name": "nope"}})
    plan["methods"] = {
        "unsup SimCSE": plan["methods"]["unsup SimCSE"] | {"poolers": ["avg"]},
        "broken": {"recipe": str(broken)},
    }
    plan["extend"] = {}
    with pytest.raises(ConfigError):
        reproduce(write(tmp_path / "plan.yaml", plan), str(data_dir))
    results = tmp_path / "results"
    kept = sorted(
        str(p.parent.relative_to(results)) for p in results.rglob("stage.json") if "rows" not in p.parts
    )
    assert kept == [
        "encoders/raw",
        "runs/raw/unsup-simcse/avg-lr-0-001/seed-3",
        "runs/raw/unsup-simcse/avg-lr-0-01/seed-3",
        "runs/raw/unsup-simcse/avg-lr-0-01/seed-4",
    ] or kept == [
        "encoders/raw",
        "runs/raw/unsup-simcse/avg-lr-0-001/seed-3",
        "runs/raw/unsup-simcse/avg-lr-0-001/seed-4",
        "runs/raw/unsup-simcse/avg-lr-0-01/seed-3",
    ]
    assert not list(results.rglob("*.safetensors"))
    record = json.loads((results / "encoders" / "raw" / "stage.json").read_text())
    assert record["done"] and record["machine"].startswith(describe_machine().split(",")[0])  # who ran it
    assert json.loads((results / ".sentcl-folder.json").read_text())["entries"] == [
        "encoders",
        "rows",
        "runs",
    ]
    measured = sorted(str(p.parent.relative_to(results / "rows")) for p in results.rglob("rows/**/row.json"))
    assert len(measured) == 2 + 2 * 2 + 2  # the baselines, the post-processed rows, unsup SimCSE's two seeds

    del plan["methods"]["broken"]
    fresh = plan | {"output_dir": str(tmp_path / "fresh")}
    _, outcomes = reproduce(write(tmp_path / "fresh.yaml", fresh), str(data_dir))
    ran = [o.name for o in outcomes if o.action == "ran"]
    assert all(o.machine == describe_machine() for o in outcomes)  # the committed stages say where they ran
    assert ran == []  # every model it trained was measured before the failure: nothing is trained again


def test_report_only_runs_nothing_and_names_what_it_leaves_out(setup):
    """``--report-only`` writes the report from the stages done so far: the methods not run yet are named,
    nothing is trained or measured, and the committed results keep every stage (none is trimmed)."""
    tmp_path, plan, data_dir = setup
    plan["extend"] = {}
    full = json.loads(json.dumps(plan))
    plan["methods"] = {"unsup SimCSE": plan["methods"]["unsup SimCSE"] | {"poolers": ["avg"]}}
    reproduce(write(tmp_path / "plan.yaml", plan), str(data_dir))
    results = tmp_path / "results"
    before = sorted(str(p.relative_to(results)) for p in results.rglob("*") if p.is_file())
    stages = sorted(str(p.relative_to(tmp_path / "out")) for p in (tmp_path / "out").rglob("stage.json"))

    full["methods"]["unsup SimCSE"]["poolers"] = ["avg"]
    report, outcomes = reproduce(write(tmp_path / "full.yaml", full), str(data_dir), report_only=True)
    assert outcomes and all(o.action == "cached" for o in outcomes)
    out = tmp_path / "out"
    assert sorted(str(p.relative_to(out)) for p in out.rglob("stage.json")) == stages
    assert sorted(str(p.relative_to(results)) for p in results.rglob("*") if p.is_file()) == before
    text = report.read_text()
    assert "**Unfinished.**" in text and "The stages done so far:" in text
    assert "- `raw`: sup SimCSE (first stage not done: train sup SimCSE [lr 0.001] seed 3 from raw)" in text
    assert "- `raw`: DCLR (first stage not done: train DCLR [lr 0.001] seed 3 from raw)" in text
    assert "| unsup SimCSE |" in text and text.count("| sup SimCSE |") == 1  # the paper's row, none measured
    assert "| sup SimCSE | 81.57 | no row (not in the plan, or not run yet) |" in text

    elsewhere = full | {"output_dir": str(tmp_path / "other"), "results": None}  # not even the encoder
    report, outcomes = reproduce(write(tmp_path / "other.yaml", elsewhere), str(data_dir), report_only=True)
    assert outcomes == [] and not (tmp_path / "other").exists()
    text = report.read_text()
    assert "- `raw`: the encoder (first stage not done: pretrain raw)" in text
    assert "- `raw`: not run yet." in text

    _, outcomes = reproduce(write(tmp_path / "full.yaml", full), str(data_dir))  # the full run does the rest
    ran = {o.name.split(" [")[0] for o in outcomes if o.action == "ran"}
    assert ran >= {"train sup SimCSE", "train DCLR"} and "pretrain raw" not in ran


def test_a_row_is_measured_again_when_the_evaluation_data_it_can_see_changes(
    tmp_path, tiny_model_dir, stsb_data_dir
):
    """Rows stored before the data folder gained a task are measured again (the model is not retrained):
    the task's column appears; a second run on the same data measures nothing."""
    from types import SimpleNamespace

    from sentcl_reproduction.pipeline import Row, measure_rows
    from tests.conftest import stsb_rows, write_stsb

    plan = SimpleNamespace(
        report_only=False, results=None, output_dir=tmp_path / "out", fit_on=None, fit_max=None
    )
    row = Row(
        "tiny", "avg", "baseline", str(tiny_model_dir), pooler="avg", folder=tmp_path / "out" / "rows" / "avg"
    )

    def run() -> tuple[list, dict]:
        outcomes: list = []
        result = measure_rows(plan, [row], stsb_data_dir, outcomes)[0]
        return [o.action for o in outcomes], result.sts

    actions, sts = run()
    assert actions == ["ran"] and "STS-B (table)" not in sts
    assert run()[0] == ["cached"]
    write_stsb(stsb_data_dir / "stsb" / "senteval", "test", stsb_rows(18))  # the table's STS-B column
    actions, sts = run()
    assert actions == ["ran"] and "STS-B (table)" in sts
    assert run()[0] == ["cached"]
    (stsb_data_dir / "stsb" / "senteval" / "sts-test.csv").write_text(
        (stsb_data_dir / "stsb" / "senteval" / "sts-test.csv").read_text().replace("\t4.", "\t3."),
        encoding="utf-8",
    )  # the same task, other scores: measured again
    assert run()[0] == ["ran"]


def test_a_row_stored_without_its_datas_fingerprint_is_judged_by_the_tasks_it_found(tmp_path):
    from sentcl_reproduction.pipeline import measured_on_other_data

    seen = dict.fromkeys(
        ["STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark test", "SICKRelatedness"]
    )
    seen |= {"STSBenchmark dev": "a", "STSBenchmark train": "b"}
    missing = {
        t: "absent" for t in ("STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness")
    }
    (tmp_path / "row.json").write_text(json.dumps({"missing": missing}))
    assert measured_on_other_data(tmp_path, seen) is None  # the committed rows' case: nothing to redo
    assert "now there: SICKRelatedness" in measured_on_other_data(tmp_path, seen | {"SICKRelatedness": "c"})


def seeded(label, trains, align=0.1, dev=None):
    """A trained row with one value per seed (its geometry the same in every seed)."""
    row = measured(label, float(np.mean(trains)), align, -2.0, 0.3, 0.2, 100.0, dev=dev)
    row.exact = False
    row.seed_values = {"train": list(trains), "align": [align] * len(trains), "uniform": [-2.0] * len(trains)}
    row.seeds = len(trains)
    return row


def test_a_claim_is_not_distinguishable_when_the_seeds_cannot_tell_its_sides_apart():
    raw = measured("raw", 70.0, 0.10, -1.0, 0.8, 0.05, 20.0)
    close = seeded("unsup", [69.0, 71.5, 72.0])  # mean 70.83: above raw, but not beyond the seeds' spread
    verdict = {v.claim: v for v in judge(raw, raw, close, None, None, None, raw)}["Unsup SimCSE raises STS"]
    assert (
        verdict.holds is None
        and verdict.undecided
        and verdict.outcome == "not distinguishable at this budget"
    )
    assert "seeds +0.83 [" in verdict.evidence
    far = seeded("unsup", [74.0, 74.5, 75.0])
    assert {v.claim: v.holds for v in judge(raw, raw, far, None, None, None, raw)}["Unsup SimCSE raises STS"]
    below = seeded("unsup", [60.0, 60.5, 61.0])
    verdict = {v.claim: v for v in judge(raw, raw, below, None, None, None, raw)}["Unsup SimCSE raises STS"]
    assert verdict.holds is False and verdict.outcome == "**fails**"


def test_the_pair_bootstrap_must_agree_for_an_sts_claim_to_hold():
    from sentcl.evaluation.significance import Difference

    raw = measured("raw", 70.0, 0.10, -1.0, 0.8, 0.05, 20.0)
    far = seeded("unsup", [74.0, 74.5, 75.0])

    def undecided_pairs(left, right):
        return Difference(0.5, -0.3, 1.3)

    verdicts = {v.claim: v for v in judge(raw, raw, far, None, None, None, raw, pairs=undecided_pairs)}
    raises = verdicts["Unsup SimCSE raises STS"]
    assert raises.undecided and "pairs +0.50 [-0.30, +1.30]" in raises.evidence
    # geometry is measured on fixed sentences: the pair bootstrap is for STS only
    assert verdicts["Unsup SimCSE improves uniformity while keeping alignment"].holds is True


def test_leaderboard_bands_group_rows_the_intervals_cannot_tell_apart():
    from types import SimpleNamespace

    from sentcl_reproduction.document import PairEvidence, leaderboard_bands

    rows = [
        seeded("a", [80.0, 80.2, 79.8]),
        seeded("b", [79.6, 79.9, 79.5]),  # 0.33 below a: within the seeds' noise? a's spread is small
        seeded("c", [75.0, 75.1, 74.9]),
        measured("raw", 60.0, 0.10, -1.0, 0.8, 0.05, 20.0),
    ]
    lines = [(m, [SimpleNamespace(row=SimpleNamespace(kind="method"))]) for m in rows]
    banded = leaderboard_bands(lines, PairEvidence("", None, []))
    bands = {m.label: band for m, band, _ in banded}
    assert [m.label for m, _, _ in banded] == ["a", "b", "c", "raw"]
    assert bands["c"] > bands["b"] and bands["raw"] > bands["c"]
    assert banded[-1][2] == " | "  # the last row has no next row


def test_ditto_and_a_method_that_claims_to_beat_sup_simcse_get_rows_and_verdicts(setup):
    tmp_path, plan, data_dir = setup
    angle = json.loads(json.dumps(yaml.safe_load(Path(plan["methods"]["sup SimCSE"]["recipe"]).read_text())))
    angle["objective"] = {"name": "angle"}
    plan["methods"] = {
        "sup SimCSE": plan["methods"]["sup SimCSE"],
        "AnglE": {"recipe": str(write(tmp_path / "angle.yaml", angle)), "beats": "sup"},
    }
    plan["encoders"]["raw"] |= {
        "baselines": ["cls_before_pooler", "ditto"],
        "postprocess_on": ["cls_before_pooler"],
    }
    report, _ = reproduce(write(tmp_path / "plan.yaml", plan), str(data_dir))
    text = report.read_text()
    row = json.loads((tmp_path / "out" / "rows" / "raw" / "ditto" / "row.json").read_text())
    assert row["row"]["pooler"].startswith("ditto-")  # the head STS-B dev chose, recorded with the row
    for claim in ("AnglE beats supervised SimCSE", "Ditto beats the raw encoder's best pooler",
                  "Post-processing beats Ditto"):  # fmt: skip
        line = next(line for line in text.splitlines() if line.startswith(f"| {claim} |"))
        assert not line.endswith("| not measured |")
    bad = json.loads(json.dumps(plan))
    bad["methods"]["AnglE"]["beats"] = "everyone"
    with pytest.raises(ConfigError, match=r"methods.AnglE.beats: 'everyone' is not one of unsup, sup"):
        load_plan(write(tmp_path / "plan.yaml", bad))
    bad["methods"]["AnglE"]["beats"] = "sup"
    bad["encoders"]["raw"]["postprocess_on"] = ["ditto"]
    with pytest.raises(ConfigError, match=r"postprocess_on: ditto is a row of its own"):
        load_plan(write(tmp_path / "plan.yaml", bad))
