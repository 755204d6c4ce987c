"""The README's lists come from the code: every registered objective is named there with a docs page."""

import re
from pathlib import Path

from sentcl.objectives import REGISTRY

ROOT = Path(__file__).resolve().parents[1]


def test_every_registered_objective_is_in_the_readme_with_its_page():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("Objectives (`objective.name`)") :].split("\n\n", 1)[0]
    named = re.findall(r"`([a-z_]+)`\s*\(", section)
    assert set(REGISTRY) <= set(named), f"missing from the README: {sorted(set(REGISTRY) - set(named))}"
    for page in re.findall(r"\]\((docs/[^)]+\.md)\)", section):
        assert (ROOT / page).is_file(), page
    assert "docs/extending.md" in readme
