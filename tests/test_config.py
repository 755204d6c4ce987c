import re

import pytest

from sentcl.config import ConfigError, apply_overrides, expand_path
from sentcl.training import load_recipe, recipe_from_dict

BASE = {"model": {"name_or_path": "m"}, "data": {"train_file": "t.txt"}}


def test_unknown_keys_are_errors_naming_the_key():
    with pytest.raises(ConfigError, match=r"unknown config key 'training.lr'"):
        recipe_from_dict(BASE | {"training": {"lr": 1e-5}})
    with pytest.raises(ConfigError, match=r"unknown config key 'optimizer'"):
        recipe_from_dict(BASE | {"optimizer": {}})
    with pytest.raises(ConfigError, match=r"unknown config key 'objective.temp'"):
        recipe_from_dict(BASE | {"objective": {"name": "simcse", "temp": 0.05}})


@pytest.mark.parametrize(
    "section,message",
    [
        ({"training": {"batch_size": "big"}}, "training.batch_size: expected an integer"),
        ({"training": {"batch_size": 0}}, "training.batch_size: must be positive"),
        ({"objective": {"temperature": -1}}, "objective.temperature: must be positive"),
        ({"objective": {"name": "simclr9"}}, "objective.name: 'simclr9' is not one of"),
        ({"model": {"name_or_path": "m", "pooler": "median"}}, "model.pooler: 'median' is not one of"),
        ({"data": {}}, "data.train_file: a training file is required"),
        ({"objective": {"temperature": float("inf")}}, r"objective.temperature: inf is not a finite number"),
        ({"objective": {"temperature": "nan"}}, r"objective.temperature: .*nan.* is not a finite number"),
        ({"training": {"learning_rate": float("-inf")}}, r"training.learning_rate: -inf is not a finite"),
        ({"objective": {"name": "simcse", "hard_negative_weight": float("nan")}}, r"not a finite number"),
        ({"objective": {"name": "align_uniform", "uniform_weight": -1}}, r"uniform_weight: a weight is ≥ 0"),
    ],
)
def test_bad_values_name_the_key(section, message):
    with pytest.raises(ConfigError, match=message):
        recipe_from_dict(BASE | section)


def test_overrides_are_typed(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("model: {name_or_path: m}\ndata: {train_file: t.txt}\n")
    config = load_recipe(
        path, ["training.learning_rate=1e-5", "objective.temperature=0.1", "data.header=false"]
    )
    assert config.training.learning_rate == 1e-5
    assert config.objective.temperature == 0.1
    assert config.data.header is False
    with pytest.raises(ConfigError, match=r"not of the form key=value"):
        apply_overrides({}, ["training.seed"])


def test_yaml_syntax_error_names_file_and_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("model:\n  name_or_path: m\n  pooler: [avg\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml:\d+: invalid YAML"):
        load_recipe(path)


def test_env_var_expansion(monkeypatch):
    monkeypatch.setenv("SENTCL_DATA", "/data")
    assert expand_path("${SENTCL_DATA}/wiki.txt", "data.train_file") == "/data/wiki.txt"
    monkeypatch.delenv("SENTCL_DATA")
    with pytest.raises(ConfigError, match=r"data.train_file: environment variable SENTCL_DATA is not set"):
        expand_path("${SENTCL_DATA}/wiki.txt", "data.train_file")


def test_a_deprecation_warning_raised_from_sentcl_code_fails_the_suite():
    """pyproject's filterwarnings: what sentcl's own calls trigger is an error; other modules' is not."""
    import warnings

    with pytest.raises(DeprecationWarning):
        warnings.warn_explicit("old API", DeprecationWarning, "encoder.py", 1, module="sentcl.model.encoder")
    with warnings.catch_warnings(record=True):
        warnings.warn_explicit("old API", DeprecationWarning, "x.py", 1, module="somelib.x")


def test_resource_bombs_in_a_recipe_are_cheap_one_line_errors(tmp_path):
    """744 bytes of nested YAML aliases grew to 6.5 GB; 5,000 levels of nesting were a RecursionError; a
    258-byte value printed in a type error became a 39 MB line."""
    from sentcl.config import from_dict, load_yaml
    from sentcl.training.recipe import LoopConfig

    bomb = tmp_path / "bomb.yaml"
    bomb.write_text('a: &a ["x","x","x","x","x","x","x","x","x"]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n')
    deep = tmp_path / "deep.yaml"
    deep.write_text("a: " + "[" * 5000 + "]" * 5000 + "\n")
    for path, words in ((bomb, "anchors (&name) are not allowed"), (deep, "nested deeper than 64 levels")):
        with pytest.raises(ConfigError, match=rf"{path.name}: invalid YAML: line 1: {re.escape(words)}"):
            load_yaml(path)
    with pytest.raises(ConfigError) as error:
        from_dict(LoopConfig, {"seed": "x" * 10**6}, prefix="training")
    assert len(str(error.value)) < 200 and "(1,000,002 characters)" in str(error.value)


def test_a_key_given_twice_in_a_recipe_is_refused_by_line(tmp_path):
    """Issue 55: ``temperature: 0.05`` then ``temperature: 5`` took the last without a word."""
    from sentcl.config import load_yaml

    path = tmp_path / "twice.yaml"
    path.write_text("objective:\n  name: simcse\n  temperature: 0.05\n  temperature: 5\n")
    with pytest.raises(
        ConfigError,
        match=r"twice\.yaml: invalid YAML: line 4: key 'temperature' is given twice \(first on line 3\)",
    ):
        load_yaml(path)
    path.write_text("objective:\n  temperature: 0.05\ntraining:\n  temperature: 5\n")  # other mappings: fine
    assert load_yaml(path)["training"]["temperature"] == 5
