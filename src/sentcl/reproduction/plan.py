"""A reproduction plan (YAML): encoders, the rows measured from each, one training budget for every method.

    output_dir: runs/reproduce            # cached stages live here
    report: docs/reproduction.md          # regenerated at the end of every run
    images: docs/images/reproduction      # the report's figures
    intro: configs/reproduce/intro.md     # Markdown put under the title (optional)
    produced_by: make reproduce           # the command named in the report's header
    fit_on: nli                           # post-processors' fitting corpus (nli | task | a file)
    fit_max: 10000
    budget:                               # key=value overrides applied to every method recipe
      training.max_steps: 250
    encoders:
      raw-4L-256:
        pretrain: configs/pretrain/raw_bert_4l_256.yaml   # or  model: a folder / hub id
        baselines: [avg_first_last, cls_before_pooler]   # poolers measured without training
        postprocess: [whitening, flow, abtt]             # fitted on the first baseline
        methods: all                                     # or a list of names from `methods`
    methods:
      unsup SimCSE:
        recipe: configs/cpu_budget/simcse.yaml
        role: unsup                       # the row the SimCSE claims are judged on
        overrides: {model.pooler: cls, model.mlp_only_train: true}

Every problem is a :class:`ConfigError` naming the file and the key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from sentcl.config import ConfigError, load_yaml
from sentcl.model.pooling import POOLERS
from sentcl.postprocess import POSTPROCESSORS

_TOP_KEYS = {
    "output_dir",
    "report",
    "images",
    "title",
    "intro",
    "produced_by",
    "fit_on",
    "fit_max",
    "budget",
    "encoders",
    "methods",
}
_ENCODER_KEYS = {"pretrain", "model", "overrides", "baselines", "postprocess", "methods", "note"}
_METHOD_KEYS = {"recipe", "overrides", "note", "role"}
_ROLES = ("", "unsup", "sup")


@dataclass
class MethodSpec:
    name: str
    recipe: Path
    overrides: dict[str, Any] = field(default_factory=dict)
    note: str = ""
    #: "unsup" / "sup": the row the claims about unsupervised / supervised SimCSE are judged on
    role: str = ""


@dataclass
class EncoderSpec:
    name: str
    pretrain: Path | None = None  # a `sentcl pretrain` recipe …
    model: str = ""  # … or an existing model folder / hub id
    overrides: dict[str, Any] = field(default_factory=dict)  # for the pretrain recipe
    baselines: list[str] = field(default_factory=list)
    postprocess: list[str] = field(default_factory=list)
    methods: list[str] = field(default_factory=list)
    note: str = ""


@dataclass
class Plan:
    path: Path
    output_dir: Path
    report: Path
    images: Path
    title: str
    intro: str  # Markdown placed under the title (read from the file the plan names)
    produced_by: str  # how the report is regenerated, e.g. "make reproduce"
    fit_on: str
    fit_max: int
    budget: dict[str, Any]
    encoders: list[EncoderSpec]
    methods: dict[str, MethodSpec]


def _mapping(value: Any, where: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected a mapping")
    return value


def _names(value: Any, where: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: expected a list of names")
    return list(value)


def _unknown(data: dict, allowed: set[str], where: str) -> None:
    for key in data:
        if key not in allowed:
            raise ConfigError(f"{where}{key}: unknown key (known: {', '.join(sorted(allowed))})")


def load_plan(path: str | Path) -> Plan:
    path = Path(path)
    data = load_yaml(path)
    where = f"{path}: "
    _unknown(data, _TOP_KEYS, where)
    methods = {}
    for name, spec in _mapping(data.get("methods"), f"{where}methods").items():
        spec = _mapping(spec, f"{where}methods.{name}")
        _unknown(spec, _METHOD_KEYS, f"{where}methods.{name}.")
        if "recipe" not in spec:
            raise ConfigError(f"{where}methods.{name}.recipe: a training recipe is required")
        recipe = Path(spec["recipe"])
        if not recipe.is_file():
            raise ConfigError(f"{where}methods.{name}.recipe: {recipe} not found")
        overrides = _mapping(spec.get("overrides"), f"{where}methods.{name}.overrides")
        role = str(spec.get("role", ""))
        if role not in _ROLES:
            raise ConfigError(f"{where}methods.{name}.role: {role!r} is not one of unsup, sup")
        methods[name] = MethodSpec(name, recipe, overrides, str(spec.get("note", "")), role)
    encoders = []
    for name, spec in _mapping(data.get("encoders"), f"{where}encoders").items():
        key = f"{where}encoders.{name}"
        spec = _mapping(spec, key)
        _unknown(spec, _ENCODER_KEYS, f"{key}.")
        if ("pretrain" in spec) == ("model" in spec):
            raise ConfigError(f"{key}: give exactly one of pretrain (a recipe) or model (a folder / hub id)")
        pretrain = Path(spec["pretrain"]) if "pretrain" in spec else None
        if pretrain is not None and not pretrain.is_file():
            raise ConfigError(f"{key}.pretrain: {pretrain} not found")
        baselines = _names(spec.get("baselines"), f"{key}.baselines")
        for pooler in baselines:
            if pooler not in POOLERS:
                raise ConfigError(f"{key}.baselines: {pooler!r} is not one of {', '.join(POOLERS)}")
        postprocess = _names(spec.get("postprocess"), f"{key}.postprocess")
        for name_pp in postprocess:
            if name_pp not in POSTPROCESSORS:
                raise ConfigError(f"{key}.postprocess: {name_pp!r} is not one of {', '.join(POSTPROCESSORS)}")
        if postprocess and not baselines:
            raise ConfigError(f"{key}.postprocess: needs a baseline pooler to post-process")
        chosen = spec.get("methods", "all")
        chosen = list(methods) if chosen == "all" else _names(chosen, f"{key}.methods")
        for method in chosen:
            if method not in methods:
                raise ConfigError(f"{key}.methods: {method!r} is not defined under methods")
        encoders.append(
            EncoderSpec(
                name=str(name),
                pretrain=pretrain,
                model=str(spec.get("model", "")),
                overrides=_mapping(spec.get("overrides"), f"{key}.overrides"),
                baselines=baselines,
                postprocess=postprocess,
                methods=chosen,
                note=str(spec.get("note", "")),
            )
        )
    if not encoders:
        raise ConfigError(f"{where}encoders: at least one encoder is required")
    fit_max = data.get("fit_max", 10_000)
    if not isinstance(fit_max, int) or fit_max < 2:
        raise ConfigError(f"{where}fit_max: expected an integer ≥ 2")
    intro = ""
    if "intro" in data:
        intro_path = Path(data["intro"])
        if not intro_path.is_file():
            raise ConfigError(f"{where}intro: {intro_path} not found")
        intro = intro_path.read_text(encoding="utf-8")
    return Plan(
        path=path,
        output_dir=Path(data.get("output_dir", "runs/reproduce")),
        report=Path(data.get("report", "docs/reproduction.md")),
        images=Path(data.get("images", "docs/images/reproduction")),
        title=str(data.get("title", "Reproduction")),
        intro=intro,
        produced_by=str(data.get("produced_by", "make reproduce")),
        fit_on=str(data.get("fit_on", "nli")),
        fit_max=fit_max,
        budget=_mapping(data.get("budget"), f"{where}budget"),
        encoders=encoders,
        methods=methods,
    )


def as_overrides(values: dict[str, Any]) -> list[str]:
    """``{"training.max_steps": 250}`` → ``["training.max_steps=250"]`` (values written as YAML flow)."""
    return [
        f"{key}={yaml.safe_dump(value, default_flow_style=True).strip().removesuffix('...').strip()}"
        for key, value in values.items()
    ]
