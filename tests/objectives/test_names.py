"""One name per method: a recipe's ``objective.name`` is its module, its class (the same letters, any case)
and its docs page, and the names classes had before that rule still import as the same classes."""

from pathlib import Path

import pytest

import sentcl.objectives as objectives
from sentcl.objectives import REGISTRY

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("key", sorted(REGISTRY))
def test_key_module_class_and_page_are_one_name(key):
    objective_class, config_class = REGISTRY[key]
    assert objective_class.__module__ == f"sentcl.objectives.{key}"
    assert objective_class.__name__.lower() == key.replace("_", "")
    assert config_class.__name__ == f"{objective_class.__name__}Config"
    assert (ROOT / "docs" / "methods" / f"{key}.md").is_file()


def test_the_old_class_names_are_the_same_classes():
    before = {
        "InfoNCE": "SimCSE", "InfoNCEConfig": "SimCSEConfig",
        "SelfGuided": "SGOPT", "SGConfig": "SGOPTConfig",
        "DebiasedInfoNCE": "DebiasedSimCSE", "DebiasedConfig": "DebiasedSimCSEConfig",
    }  # fmt: skip
    for old, new in before.items():
        assert getattr(objectives, old) is getattr(objectives, new), old
