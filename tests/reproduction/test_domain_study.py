"""The domain study on a tiny domain: each method searched on the choice judgements, its seeds reported on
the others with paired intervals; a second run reads every run back and trains nothing."""

import json

import pytest
import yaml

from sentcl.hardware import describe_machine
from sentcl_reproduction import domain_study

from ..training.test_adapt import domain as domain  # the tiny BEIR folder fixture


def write_plan(folder, tiny_model_dir, domain):
    """A tiny plan (two methods, two rates, two seeds) writing under ``folder``: its path."""
    plan = {
        "output_dir": str(folder / "study"), "report": str(folder / "domain_study.md"),
        "corpus": str(domain), "choose": str(domain / "qrels" / "train.tsv"),
        "report_qrels": str(domain / "qrels" / "test.tsv"),
        "starts": {"tiny": {"model": str(tiny_model_dir)}},
        "methods": {"tsdae": {}, "in-batch CT": {"method": "contrastive_tension"}},
        "learning_rates": [1e-3, 1e-4], "seeds": [1, 2],
        "settings": {"steps": 2, "eval_steps": 1, "batch_size": 4, "pooler": "avg"},
    }  # fmt: skip
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "plan.yaml"
    path.write_text(yaml.safe_dump(plan))
    return path


def tables(report: str) -> list[str]:
    return [line for line in report.splitlines() if line.startswith("|")]


def test_a_tiny_study_reports_and_resumes(tmp_path, tiny_model_dir, domain, monkeypatch):
    monkeypatch.setenv("SENTCL_CACHE", str(tmp_path / "cache"))
    path = write_plan(tmp_path, tiny_model_dir, domain)
    assert domain_study.main([str(path), "--method", "tsdae"]) == 0  # a part of the plan: said so
    part = (tmp_path / "domain_study.md").read_text()
    assert domain_study.main([str(path), "--report-only"]) == 0  # trains nothing, reports what is done
    assert (tmp_path / "domain_study.md").read_text() == part
    assert (
        "| tsdae |" in part
        and "**Partial**: the plan's runs not reported yet: in-batch CT from tiny." in part
    )
    with pytest.raises(SystemExit, match="--method simcse: not in the plan, which has: in-batch CT, tsdae"):
        domain_study.main([str(path), "--method", "simcse"])
    assert domain_study.main([str(path)]) == 0
    report = (tmp_path / "domain_study.md").read_text()
    assert "Partial" not in report
    assert f"The test reports were measured on: {describe_machine()}" in report  # this machine (; its GPU)
    assert "## From tiny" in report and "| tsdae |" in report and "| in-batch CT |" in report
    assert "![test nDCG@10 from tiny](images/domain_tiny.png)" in report
    table = report[report.index("| method |") :].split("\n\n")[0].splitlines()  # one table, unbroken
    assert len(table) == 2 + 2 and all(line.startswith("|") for line in table)
    assert len({line.count("|") for line in table}) == 1  # every row has the head's columns
    hybrid = report[report.index("| method | hybrid nDCG@10 |") :].split("\n\n")[0].splitlines()
    assert [line.split(" | ")[0] for line in hybrid[2:]] == [line.split(" | ")[0] for line in table[2:]]
    assert len({line.count("|") for line in hybrid}) == 1 and "The start's hybrid − BM25: " in report
    assert (tmp_path / "images" / "domain_tiny.png").stat().st_size > 1000
    study = tmp_path / "study"
    runs = sorted(p.parent.relative_to(study) for p in study.rglob("summary.json"))
    # each method: both rates with the first seed, then the chosen rate with the second
    assert len(runs) == 2 * 3 and all(str(r).count("/") == 3 for r in runs)
    reported = {p.parent.relative_to(tmp_path / "study") for p in (tmp_path / "study").rglob("adapt.json")}
    assert len(reported) == 2 * 2  # only what the table reads: the rate not chosen is never reported
    for method in ("tsdae", "in-batch CT"):
        chosen = domain_study.chosen_on_train(domain_study.Plan.load(path), "tiny", method, train=False)
        assert {r for r in runs if r.parts[1] == method} - reported == {
            next(r for r in runs if r.parts[1] == method and r.parts[2] != f"lr-{chosen:g}")
        }
    first = json.loads(next((tmp_path / "study").rglob("adapt.json")).read_text())
    assert len(first["per_query"]["adapted"]["domain_ndcg@10"]) == 6

    def never(request):
        raise AssertionError(f"trained again: {request.output}")

    monkeypatch.setattr(domain_study, "adapt", never)
    assert domain_study.main([str(path)]) == 0  # every run read back
    assert (tmp_path / "domain_study.md").read_text() == report

    parallel = write_plan(tmp_path / "parallel", tiny_model_dir, domain)
    monkeypatch.setenv("SENTCL_CACHE", str(tmp_path / "parallel" / "cache"))
    # the processes --jobs starts train (each imports sentcl afresh); this one, where adapt still refuses,
    # only reads their runs back
    assert domain_study.main([str(parallel), "--jobs", "2"]) == 0
    assert tables((tmp_path / "parallel" / "domain_study.md").read_text()) == tables(report)  # the same runs
    with pytest.raises(SystemExit, match="--jobs 0: must be at least 1"):
        domain_study.main([str(parallel), "--jobs", "0"])


def test_a_start_made_by_a_pretrain_recipe_is_made_once(tmp_path, tiny_model_dir, domain, monkeypatch):
    from ..training.test_pretrain import write_recipe

    recipe = write_recipe(tmp_path, {"name_or_path": str(tiny_model_dir)}, domain, tmp_path / "unused")
    raw = json.loads(recipe.read_text())
    raw["data"] |= {"corpus_unit": "sentence", "eval_sentences": 4}
    raw["training"] |= {"max_steps": 2, "eval_steps": 0}
    recipe.write_text(json.dumps(raw))
    made = domain_study.pretrained(str(recipe), tmp_path / "made")
    assert (tmp_path / "made" / "summary.json").is_file() and made == str(tmp_path / "made" / "model")

    def never(*args):
        raise AssertionError("pre-trained again")

    monkeypatch.setattr(domain_study, "run", never)
    assert domain_study.pretrained(str(recipe), tmp_path / "made") == made


def test_a_two_stage_method_is_compared_with_the_study_start(tmp_path):
    """A two-stage method's runs begin at its masked-LM stage's model: its "start" scores are that model's,
    and its row must be compared with the study's start (a run that began there), not with them."""
    plan = domain_study.Plan(
        tmp_path / "study", tmp_path / "report.md", "corpus", "train.tsv", "test.tsv", {"s": {"model": "m"}},
        {"one": {}, "two": {"method": "simcse", "pretrain": "mlm.yaml"}}, [1e-5], [1, 2],
    )  # fmt: skip
    start, stage, bm25 = [0.6, 0.8, 0.4], [0.1, 0.2, 0.0], [0.5, 0.5, 0.5]
    for method, began, adapted in (("one", start, [0.7, 0.8, 0.6]), ("two", stage, [0.3, 0.4, 0.2])):
        for seed in plan.seeds:
            folder = domain_study.run_folder(plan, "s", method, 1e-5, seed)
            folder.mkdir(parents=True)
            scores = {"d_ndcg@10": adapted, "d_hybrid_ndcg@10": adapted}
            metrics = {k: 100 * sum(v) / 3 for k, v in scores.items()} | {"d_recall@100": 90.0}
            began_scores = {"d_ndcg@10": began, "d_bm25_ndcg@10": bm25}
            report = {"task": "d", "queries": 3, "metrics": {"adapted": metrics},
                      "per_query": {"adapted": scores, "start": began_scores}}  # fmt: skip
            (folder / "adapt.json").write_text(json.dumps(report))
            summary = {"best_metrics": {"m": 1.0}, "primary_metric": "m", "best_step": 2}
            (folder / "summary.json").write_text(json.dumps(summary))
    row, first = domain_study.rows_of(plan, "s", "two", train=False)
    assert (
        first["per_query"]["start"]["d_ndcg@10"] == start
    )  # the study's start, from the run that began there
    assert row.versus_start.delta == pytest.approx(0.3 - 0.6)  # not + (0.3 − 0.1)
    assert row.versus_bm25.delta == pytest.approx(0.3 - 0.5)
    only_two = domain_study.Plan(**{**plan.__dict__, "methods": {"two": plan.methods["two"]}})
    with pytest.raises(ValueError, match="a method that starts from the start itself"):
        domain_study.rows_of(only_two, "s", "two", train=False)


def test_jobs_name_a_failed_pair_in_one_line(tmp_path, domain, monkeypatch):
    monkeypatch.setenv("SENTCL_CACHE", str(tmp_path / "cache"))
    path = write_plan(tmp_path, tmp_path / "no such model", domain)
    with pytest.raises(
        SystemExit, match=r"--jobs 2: 2 of 2 failed; the first: .* from tiny: .*no such model"
    ):
        domain_study.main([str(path), "--jobs", "2"])
    assert not list((tmp_path / "study").rglob("adapt.json")) and not (tmp_path / "domain_study.md").exists()


def test_next_runs_are_the_first_seed_at_every_rate_then_the_chosen_rate(tmp_path):
    plan = domain_study.Plan(
        tmp_path, tmp_path / "r.md", "c", "t", "t", {"s": {"model": "m"}}, {"x": {}}, [1e-5, 3e-5], [1, 2, 3]
    )  # fmt: skip
    assert domain_study.next_runs(plan, "s", "x") == [(1e-5, 1), (3e-5, 1)]

    def finish(lr, seed, score):
        folder = domain_study.run_folder(plan, "s", "x", lr, seed)
        folder.mkdir(parents=True)
        (folder / "adapt.json").write_text("{}")
        summary = {"best_metrics": {"m": score}, "primary_metric": "m", "best_step": 0}
        (folder / "summary.json").write_text(json.dumps(summary))

    finish(1e-5, 1, 0.5)
    assert domain_study.next_runs(plan, "s", "x") == [(3e-5, 1)]  # no choice before both rates are in
    finish(3e-5, 1, 0.6)
    assert domain_study.next_runs(plan, "s", "x") == [(3e-5, 2), (3e-5, 3)]  # at once, at the chosen rate
    finish(3e-5, 3, 0.1)
    assert domain_study.next_runs(plan, "s", "x") == [(3e-5, 2)]
    finish(3e-5, 2, 0.1)
    assert domain_study.next_runs(plan, "s", "x") == []


def test_a_methods_unknown_key_is_one_line(tmp_path, tiny_model_dir, domain):
    path = write_plan(tmp_path, tiny_model_dir, domain)
    plan = yaml.safe_load(path.read_text())
    plan["methods"]["tsdae"] = {"max_len": 32}
    path.write_text(yaml.safe_dump(plan))
    message = r"^methods\.tsdae\.max_len: not one of method, pretrain, max_length$"
    with pytest.raises(ValueError, match=message):
        domain_study.Plan.load(path)


def test_a_trained_run_is_reported_when_its_report_is_asked(tmp_path, tiny_model_dir, domain, monkeypatch):
    monkeypatch.setenv("SENTCL_CACHE", str(tmp_path / "cache"))
    plan = domain_study.Plan.load(write_plan(tmp_path, tiny_model_dir, domain))
    plan.methods["tsdae"]["max_length"] = 12
    assert domain_study.adapted(plan, "tiny", "tsdae", 1e-3, 1, report=False) == {}
    folder = domain_study.run_folder(plan, "tiny", "tsdae", 1e-3, 1)
    assert domain_study.trained_in(folder) and not (folder / "adapt.json").exists()
    assert "max_length: 12" in (folder / "config.yaml").read_text()

    def never(request):
        raise AssertionError(f"trained again: {request.output}")

    monkeypatch.setattr(domain_study, "adapt", never)
    report = domain_study.adapted(plan, "tiny", "tsdae", 1e-3, 1)  # reported now, not trained again
    assert report["method"] == "tsdae" and (folder / "adapt.json").is_file()
