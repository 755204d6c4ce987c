"""Every shipped recipe parses and validates, and the paper recipes carry the paper's numbers."""

from pathlib import Path

import pytest

from sentcl.training import load_recipe
from sentcl.training.pretrain import load_pretrain_recipe
from sentcl_reproduction.plan import as_overrides, load_plan

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "configs" / "reproduce" / "results"  # the runs' own config.yaml files, not recipes
CONFIGS = sorted(p for p in (ROOT / "configs").rglob("*.yaml") if not p.is_relative_to(RESULTS))


def test_there_are_recipes():
    names = {p.name for p in CONFIGS}
    assert {"simcse_unsup_bert_base.yaml", "simcse_sup_bert_base.yaml"} <= names


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_recipe_loads(path, monkeypatch):
    monkeypatch.setenv("SENTCL_DATA", "/data")
    monkeypatch.chdir(ROOT)  # plans name their recipes relative to the repository
    if path.parent.name == "reproduce":  # a plan: every recipe it trains, under its budget, must load
        plan = load_plan(path)
        for spec in plan.encoders:
            if spec.pretrain is not None:
                load_pretrain_recipe(spec.pretrain, as_overrides(spec.overrides))
            for name in spec.methods:
                method = plan.methods[name]
                overrides = {  # a method's model_of stands for a trained model folder
                    key: "trained-model" if isinstance(value, dict) else value
                    for key, value in method.overrides.items()
                }
                for _, candidate in plan.candidates(method):
                    settings = {**plan.budget, **overrides, **candidate, "training.seed": plan.seeds[0]}
                    load_recipe(method.recipe, as_overrides(settings))
        return
    if path.name == "passages_cpu.yaml":  # the passages study's plan: its models and judgements named
        from sentcl_reproduction.passages_study import Study

        study = Study.load(path)
        assert study.models and study.qrels.startswith("/data/beir/")
        return
    if path.name == "judgements_cpu.yaml":  # the judgements' learning curve: every recipe it runs loads
        from sentcl.training.adapt import recipe
        from sentcl.training.recipe import recipe_from_dict
        from sentcl_reproduction.judgement_curve import Curve, request_for

        curve = Curve.load(path)
        for size in curve.sizes:
            for negatives in curve.negatives:
                request = request_for(curve, size, negatives, curve.seeds[0], Path("runs/x"))
                request.pooler = "avg"
                recipe_from_dict(recipe(request, 256, Path("cache/scifact-x/fit-1")))
        return
    if path.name in ("study.yaml", "study_cpu.yaml"):  # a domain study's plan: every recipe it runs must load
        from sentcl.training.adapt import AdaptRequest, recipe
        from sentcl.training.recipe import recipe_from_dict
        from sentcl_reproduction.domain_study import Plan

        plan = Plan.load(path)
        for start in plan.starts.values():
            if "pretrain" in start:
                load_pretrain_recipe(start["pretrain"])
        for name, spec in plan.methods.items():
            if "pretrain" in spec:
                load_pretrain_recipe(spec["pretrain"])
            for lr in plan.learning_rates:
                request = AdaptRequest("a-model", plan.corpus, "out", spec.get("method", name),
                                       learning_rate=lr, choose=plan.choose, report=plan.report_qrels,
                                       max_length=spec.get("max_length"), **plan.settings)  # fmt: skip
                request.check()
                recipe_from_dict(recipe(request))
        return
    (load_pretrain_recipe if path.parent.name == "pretrain" else load_recipe)(path)


def test_paper_hyperparameters():
    configs = {p.name: p for p in CONFIGS}
    unsup = load_recipe(configs["simcse_unsup_bert_base.yaml"])
    assert (unsup.training.batch_size, unsup.training.learning_rate, unsup.training.epochs) == (64, 3e-5, 1)
    assert (unsup.data.max_length, unsup.objective.temperature) == (32, 0.05)
    assert (unsup.model.pooler, unsup.model.mlp_only_train, unsup.training.eval_steps) == ("cls", True, 125)
    assert (unsup.data.train_file, load_recipe(configs["simcse_sup_bert_base.yaml"]).data.train_file) == (
        "simcse:wiki1m",
        "simcse:nli",
    )  # the paper's own sets, by name (a local copy or the hub)
    sup = load_recipe(configs["simcse_sup_bert_base.yaml"])
    assert (sup.training.batch_size, sup.training.learning_rate, sup.training.epochs) == (512, 5e-5, 3)
    assert (sup.model.pooler, sup.model.mlp_only_train, sup.objective.hard_negative_weight) == (
        "cls",
        False,
        1.0,
    )


def test_the_reproductions_committed_results_are_not_ignored_by_git():
    """A plan's results hold folders named runs/ (its training stages): an ignore rule for the work folder
    runs/ must not hide them, or a fresh checkout trains every method again."""
    import subprocess

    for path in ("results/reproduce/cpu/runs/m/seed-1/stage.json", "runs/reproduce/x"):
        done = subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT, check=False)
        assert done.returncode == (0 if path.startswith("runs/") else 1), path
