"""The model card: a README.md in every saved ``model/`` folder, as sentence-transformers writes one.

It holds the recipe and the objective's paper, the evaluation results (STS-B dev before training and at
the kept step; whatever ``sentcl evaluate --json`` adds later through ``sentcl card``), the geometry
probe at the kept step, and how to load the model in sentcl, sentence-transformers and transformers. The
Hugging Face Hub reads the YAML front matter. The card's data travel with it in a JSON comment, so results
added later re-render the whole card instead of appending to it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from sentcl import finite_json
from sentcl.atomic_write import add_to_marker, atomic_file

CARD = "README.md"
SENTCL_USE = """```python
from sentcl.model import SentenceEncoder

encoder = SentenceEncoder.load("PATH")
vectors = encoder.encode(["A man is playing a guitar."])
```"""
SENTENCE_TRANSFORMERS_USE = """```python
from sentence_transformers import SentenceTransformer

model = SentenceTransformer("PATH")
vectors = model.encode(["A man is playing a guitar."])
```"""
NOT_EXPORTED = "Pooler `{pooler}` has no sentence-transformers equivalent: load the model with sentcl."
TRANSFORMERS_USE = """```python
from transformers import AutoModel, AutoTokenizer

tokenizer = AutoTokenizer.from_pretrained("PATH")
model = AutoModel.from_pretrained("PATH")
# then pool the token states as `{pooler}` does (sentcl/model/pooling.py)
```"""
_DATA = re.compile(r"<!-- sentcl-card-data\n(.*?)\n-->", re.S)


def card_data(
    recipe: dict[str, Any], paper: str, summary: dict[str, Any], geometry: dict[str, Any] | None
) -> dict[str, Any]:
    """What a training run knows about the model it saved."""
    return {"recipe": recipe, "paper": paper, "summary": summary, "geometry": geometry, "evaluations": []}


def write_model_card(folder: str | Path, data: dict[str, Any]) -> Path:
    """Render ``data`` as ``folder/README.md`` (atomically)."""
    path = Path(folder) / CARD
    with atomic_file(path) as handle:
        handle.write(render(Path(folder), data))
    add_to_marker(Path(folder), CARD)
    return path


def read_card_data(folder: str | Path) -> dict[str, Any] | None:
    path = Path(folder) / CARD
    if not path.is_file():
        return None
    match = _DATA.search(path.read_text(encoding="utf-8"))
    return json.loads(match.group(1)) if match else None


def add_evaluation(folder: str | Path, results: dict[str, Any], source: str) -> Path:
    """Merge ``sentcl evaluate --json`` results into the card of a model saved by sentcl."""
    data = read_card_data(folder)
    if data is None:
        raise ValueError(f"{folder}: no sentcl model card ({CARD} written by sentcl train) to add results to")
    if not isinstance(results.get("metrics"), dict):
        raise ValueError(f"{source}: not the output of sentcl evaluate --json (no 'metrics' object)")
    entry = {"source": source, "pooler": results.get("pooler"), "postprocess": results.get("postprocess")}
    data["evaluations"] = [e for e in data["evaluations"] if e["source"] != source]
    data["evaluations"].append(entry | {"metrics": results["metrics"]})
    return write_model_card(folder, data)


def _number(value: object) -> str:
    return f"{value:.2f}" if isinstance(value, (int, float)) else str(value)


def render(folder: Path, data: dict[str, Any]) -> str:
    recipe, summary = data["recipe"], data["summary"]
    model, objective = recipe.get("model", {}), recipe.get("objective", {})
    base, pooler = model.get("name_or_path", ""), model.get("pooler", "")
    name = objective.get("name", "")
    exported = (folder / "modules.json").is_file()
    front = {
        "library_name": "sentence-transformers" if exported else "transformers",
        "pipeline_tag": "sentence-similarity",
        "tags": ["sentence-transformers", "sentence-similarity", "feature-extraction", "sentcl", name],
        "base_model": base or None,
    }
    lines = _front_matter(front)
    lines += [f"# {name} from {base}", ""]
    lines += [f"A sentence encoder trained with sentcl (objective `{name}`, pooler `{pooler}`)."]
    if data.get("paper"):
        lines += ["", f"Objective's paper: {data['paper']}."]
    lines += ["", "## Evaluation", ""]
    primary = summary.get("primary_metric")
    if primary and summary.get("best_metrics"):
        lines += ["| metric | before training | kept model (step "
                  f"{summary.get('best_step')}) |", "|---|---:|---:|"]  # fmt: skip
        before = summary.get("initial_metrics") or {}
        for key, value in summary["best_metrics"].items():
            lines.append(f"| {key} | {_number(before.get(key, '—'))} | {_number(value)} |")
        if primary.startswith("heldout_"):
            rule = f"the lowest `{primary}` on held-out unlabelled training examples (label-free selection)"
        else:
            rule = f"the best `{primary}` (SimCSE's policy)"
        lines += ["", f"The kept model is the step with {rule}."]
    else:
        lines += [f"Trained {summary.get('steps')} steps without evaluation; the final model was saved."]
    for entry in data.get("evaluations", []):
        extra = f", post-processed with {entry['postprocess']}" if entry.get("postprocess") else ""
        lines += ["", f"`sentcl evaluate` ({entry['source']}; pooler {entry.get('pooler')}{extra}):", ""]
        lines += ["| task | score |", "|---|---:|"]
        lines += [f"| {task} | {_number(score)} |" for task, score in entry["metrics"].items()]
    if data.get("geometry"):
        lines += ["", "## Geometry at the kept step (STS-B dev probe)", ""]
        lines += ["| quantity | value |", "|---|---:|"]
        lines += [f"| {key} | {_number(value)} |" for key, value in data["geometry"].items()]
        lines += [
            "",
            "ℓ_align and ℓ_uniform as in Wang & Isola (2020), on L2-normalised vectors: lower is better.",
        ]
    lines += ["", "## Use", "", SENTCL_USE]
    lines += ["", SENTENCE_TRANSFORMERS_USE if exported else NOT_EXPORTED.format(pooler=pooler)]
    lines += ["", TRANSFORMERS_USE.format(pooler=pooler)]
    lines += _recipe_section("Training recipe", recipe)
    payload = json.dumps(json.loads(finite_json.dumps(data)), indent=1, ensure_ascii=False)
    payload = payload.replace("-->", "--\\u003e")  # nothing in the data may end the comment
    lines += ["", f"<!-- sentcl-card-data\n{payload}\n-->", ""]
    return "\n".join(lines)


FILL_MASK_USE = """```python
from transformers import pipeline

fill = pipeline("fill-mask", model="PATH")
fill("A man is playing a [MASK].")  # [MASK]: write the tokenizer's own mask token
```"""
AS_BASE_USE = """```bash
sentcl train configs/simcse_unsup_minilm_cpu.yaml model.name_or_path=PATH   # any recipe: a base encoder
```"""


def _front_matter(front: dict[str, Any]) -> list[str]:
    return ["---", yaml.safe_dump(front, sort_keys=False).strip(), "---", ""]


def _recipe_section(title: str, recipe: dict[str, Any]) -> list[str]:
    return ["", f"## {title}", "", "```yaml", yaml.safe_dump(recipe, sort_keys=False).strip(), "```"]


def render_pretrained(recipe: dict[str, Any], steps: int, history: list[dict[str, Any]]) -> str:
    """The card of a ``sentcl pretrain`` model: a masked-LM encoder (with its head), not yet a sentence
    encoder. It holds how it was made, the held-out MLM loss (and the STS probe) at the start and at the
    end, and how to use it: as a fill-mask model, or as the base of ``sentcl train``."""
    model, masking = recipe.get("model", {}), recipe.get("masking", {})
    base = model.get("name_or_path") or None
    made = f"continued from `{base}`" if base else "from scratch (the architecture in the recipe below)"
    front = {
        "library_name": "transformers",
        "pipeline_tag": "fill-mask",
        "tags": ["sentcl", "masked-lm", "fill-mask"],
        "base_model": base,
    }
    evaluations = [r for r in history if "eval" in r]
    lines = _front_matter(front)
    lines += ["# A masked-LM encoder pre-trained with sentcl", ""]
    lines += [
        f"Pre-trained by `sentcl pretrain` {made}: {steps} steps of masked-LM "
        f"({'whole-word' if masking.get('whole_word') else 'token'} masking, probability "
        f"{masking.get('probability')}). The saved model keeps its MLM head "
        "(Devlin et al., BERT, NAACL 2019)."
    ]
    lines += ["", "## Evaluation", ""]
    if evaluations:
        first, last = evaluations[0], evaluations[-1]
        lines += [f"| metric | step {first['step']} | step {last['step']} |", "|---|---:|---:|"]
        for key, value in last["eval"].items():
            lines.append(f"| {key} | {_number(first['eval'].get(key, '—'))} | {_number(value)} |")
        note = (
            "`mlm_loss` and `perplexity` are on held-out training sentences (the same masks at every "
            "evaluation); an STS metric, when present, is the mean-pooled probe."
        )
        lines += ["", note]
    else:
        lines += [f"Trained {steps} steps without evaluation; the final model was saved."]
    lines += ["", "## Use", "", FILL_MASK_USE, "", "As the starting point of sentence-embedding training:"]
    lines += ["", AS_BASE_USE]
    lines += _recipe_section("Pre-training recipe", recipe)
    return "\n".join(lines) + "\n"


def write_pretrained_card(
    folder: str | Path, recipe: dict[str, Any], steps: int, history: list[dict[str, Any]]
) -> Path:
    """``folder/README.md`` for a ``sentcl pretrain`` model of ``steps`` steps (atomically)."""
    path = Path(folder) / CARD
    with atomic_file(path) as handle:
        handle.write(render_pretrained(recipe, steps, history))
    add_to_marker(Path(folder), CARD)
    return path
