"""A reproduction plan (YAML): encoders, the rows measured from each, one protocol for every method.

    output_dir: runs/reproduce            # cached stages live here
    report: docs/reports/reproduction.md          # regenerated at the end of every run
    images: docs/reports/images/reproduction      # the report's figures
    intro: configs/reproduce/intro.md     # Markdown put under the title (optional)
    produced_by: make reproduce           # the command named in the report's header
    fit_on: nli                           # post-processors' fitting corpus (nli | task | a file)
    fit_max: 10000
    budget:                               # key=value overrides applied to every method recipe
      training.max_steps: 250
    search:                               # the grid every method is searched over (seed: seeds[0])
      training.learning_rate: [1.0e-5, 3.0e-5, 1.0e-4]
    extend:                               # beyond the grid, both ways: tried one at a time while the
      training.learning_rate: [3.0e-6, 3.0e-4, 1.0e-3]   # choice is the largest (smallest) value tried
    results: results/reproduce/cpu   # the stages' small files (JSON, arrays, logs; no weights),
                                             # committed: the report regenerates without retraining
    seeds: [42, 43, 44]                   # the chosen setting is trained with each seed
    poolers:                              # named pooler settings methods pick from
      cls+mlp: {model.pooler: cls, model.mlp_only_train: true}
      avg: {model.pooler: avg, model.mlp_only_train: false}
    encoders:
      raw-4L-256:
        pretrain: configs/pretrain/raw_bert_4l_256.yaml   # or  model: a folder / hub id
        budget: {training.max_steps: 500}                # over the plan's budget, for its methods
        baselines: [avg_first_last, cls_before_pooler]   # poolers measured without training
        postprocess: [whitening, flow, abtt]             # fitted on each of postprocess_on
        postprocess_on: [avg_first_last, cls_before_pooler]  # default: the first baseline
        methods: all                                     # or a list of names from `methods`
    methods:
      unsup SimCSE:
        recipe: configs/cpu_budget/simcse.yaml
        role: unsup                       # the row the SimCSE claims are judged on
        poolers: [cls+mlp, avg]           # searched beside the grid (default: the recipe's own)
      DCLR:
        recipe: configs/cpu_budget/dclr.yaml
        overrides:                        # {model_of: a method}: that method's chosen model (seeds[0])
          objective.complementary_model: {model_of: unsup SimCSE}

Every method gets the same search: each pooler × each grid point, trained with ``seeds[0]``; while the
best candidate's value of an ``extend`` key is the largest tried, the next larger value is tried with its
pooler, and while it is the smallest, the next smaller one (so the choice ends inside the grid, or at an end
of what was tried, which the report says); the candidate with the best
STS-B dev (the budget evaluates at step 0 too, and step 0 is a candidate) is trained again with the other
seeds. Every problem is a :class:`ConfigError` naming the file and the key.
"""

from __future__ import annotations

from collections.abc import Callable
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
    "search",
    "extend",
    "results",
    "seeds",
    "poolers",
    "encoders",
    "methods",
}
_ENCODER_KEYS = {
    "budget",
    "pretrain",
    "model",
    "overrides",
    "baselines",
    "postprocess",
    "postprocess_on",
    "methods",
    "note",
}
_METHOD_KEYS = {"recipe", "overrides", "note", "role", "poolers", "beats"}
#: a method override whose value is ``{model_of: NAME}``: the model of method NAME's chosen run
MODEL_OF = "model_of"
_ROLES = ("", "unsup", "sup")


@dataclass
class MethodSpec:
    name: str
    recipe: Path
    overrides: dict[str, Any] = field(default_factory=dict)
    note: str = ""
    #: "unsup" / "sup": the row the claims about unsupervised / supervised SimCSE are judged on
    role: str = ""
    #: names from the plan's ``poolers``, searched beside its grid; empty: the recipe's own pooler
    poolers: list[str] = field(default_factory=list)
    #: "unsup" / "sup": a claim that this method beats that SimCSE row (each side's best, STS-B train)
    beats: str = ""

    def depends_on(self) -> list[str]:
        """Methods whose chosen model one of the overrides names (``{model_of: NAME}``)."""
        return [v[MODEL_OF] for v in self.overrides.values() if isinstance(v, dict) and MODEL_OF in v]


@dataclass
class EncoderSpec:
    name: str
    pretrain: Path | None = None  # a `sentcl pretrain` recipe …
    model: str = ""  # … or an existing model folder / hub id
    overrides: dict[str, Any] = field(default_factory=dict)  # for the pretrain recipe
    #: over the plan's budget, for every method trained from this encoder (a weak encoder may need longer)
    budget: dict[str, Any] = field(default_factory=dict)
    baselines: list[str] = field(default_factory=list)
    postprocess: list[str] = field(default_factory=list)
    #: the baselines the post-processors are fitted on (default: the first)
    postprocess_on: list[str] = field(default_factory=list)
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
    search: dict[str, list[Any]] = field(default_factory=dict)
    seeds: list[int] = field(default_factory=lambda: [42])
    poolers: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: values of a search key beyond its grid, tried one at a time while the choice is at that end
    extend: dict[str, list[Any]] = field(default_factory=dict)
    #: where the stages' small files are kept (committed), or None
    results: Path | None = None
    #: ``--report-only``: run no stage; a stage not done leaves its method out (pipeline.StageNotDoneError)
    report_only: bool = False
    #: while a plan runs: model folder → a call that runs its stage again (pipeline.ensure_weights)
    producers: dict[str, Callable[[], None]] = field(default_factory=dict, repr=False, compare=False)

    def candidates(
        self, method: MethodSpec, search: dict[str, list[Any]] | None = None, poolers: list[str] | None = None
    ) -> list[tuple[str, dict[str, Any]]]:
        """(label, overrides) of every setting ``method`` is searched over: its poolers × the grid (or the
        given ``search`` values and ``poolers``, for an extension of the grid)."""
        names = method.poolers if poolers is None else poolers
        settings = [(name, self.poolers[name]) for name in names] or [("", {})]
        grid: list[tuple[str, dict[str, Any]]] = [("", {})]
        for key, values in (self.search if search is None else search).items():
            grid = [
                (f"{label}, {setting_label(key, value)}", overrides | {key: value})
                for label, overrides in grid
                for value in values
            ]
        return [
            ((pooler + label).strip(", ") or "recipe", pooler_overrides | overrides)
            for pooler, pooler_overrides in settings
            for label, overrides in grid
        ]


def setting_label(key: str, value: Any) -> str:
    """``training.learning_rate``, 1e-4 → ``lr 0.0001``: how a search value reads in a setting's name."""
    short = key.rsplit(".", 1)[-1].replace("learning_rate", "lr")
    return f"{short} {value:g}" if isinstance(value, float) else f"{short} {value}"


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
    pooler_settings = {
        str(name): _mapping(value, f"{where}poolers.{name}")
        for name, value in _mapping(data.get("poolers"), f"{where}poolers").items()
    }
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
        poolers = _names(spec.get("poolers"), f"{where}methods.{name}.poolers")
        for pooler in poolers:
            if pooler not in pooler_settings:
                raise ConfigError(
                    f"{where}methods.{name}.poolers: {pooler!r} is not defined under poolers "
                    f"(defined: {', '.join(pooler_settings) or 'none'})"
                )
        beats = str(spec.get("beats", ""))
        if beats not in _ROLES:
            raise ConfigError(f"{where}methods.{name}.beats: {beats!r} is not one of unsup, sup")
        methods[name] = MethodSpec(name, recipe, overrides, str(spec.get("note", "")), role, poolers, beats)
    for name, method in methods.items():
        for other in method.depends_on():
            if other not in methods:
                raise ConfigError(f"{where}methods.{name}.overrides: model_of {other!r} is not a method")
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
            if pooler not in (*POOLERS, "prompt", "ditto"):
                raise ConfigError(
                    f"{key}.baselines: {pooler!r} is not one of {', '.join(POOLERS)}, prompt, ditto "
                    f"(Ditto with the head STS-B dev chooses)"
                )
        if "ditto" in _names(spec.get("postprocess_on"), f"{key}.postprocess_on"):
            raise ConfigError(f"{key}.postprocess_on: ditto is a row of its own, beside the post-processors")
        postprocess = _names(spec.get("postprocess"), f"{key}.postprocess")
        for name_pp in postprocess:
            if name_pp not in POSTPROCESSORS:
                raise ConfigError(f"{key}.postprocess: {name_pp!r} is not one of {', '.join(POSTPROCESSORS)}")
        if postprocess and not baselines:
            raise ConfigError(f"{key}.postprocess: needs a baseline pooler to post-process")
        postprocess_on = _names(spec.get("postprocess_on"), f"{key}.postprocess_on") or baselines[:1]
        for pooler in postprocess_on:
            if pooler not in baselines:
                raise ConfigError(f"{key}.postprocess_on: {pooler!r} is not one of its baselines")
        chosen = spec.get("methods", "all")
        chosen = list(methods) if chosen == "all" else _names(chosen, f"{key}.methods")
        for position, method in enumerate(chosen):
            if method not in methods:
                raise ConfigError(f"{key}.methods: {method!r} is not defined under methods")
            for other in methods[method].depends_on():
                if other not in chosen[:position]:
                    raise ConfigError(
                        f"{key}.methods: {method!r} uses the model of {other!r}; list {other!r} before it"
                    )
        encoders.append(
            EncoderSpec(
                name=str(name),
                pretrain=pretrain,
                model=str(spec.get("model", "")),
                overrides=_mapping(spec.get("overrides"), f"{key}.overrides"),
                budget=_mapping(spec.get("budget"), f"{key}.budget"),
                baselines=baselines,
                postprocess=postprocess,
                postprocess_on=postprocess_on if postprocess else [],
                methods=chosen,
                note=str(spec.get("note", "")),
            )
        )
    if not encoders:
        raise ConfigError(f"{where}encoders: at least one encoder is required")
    fit_max = data.get("fit_max", 10_000)
    if not isinstance(fit_max, int) or fit_max < 2:
        raise ConfigError(f"{where}fit_max: expected an integer ≥ 2")
    search = _mapping(data.get("search"), f"{where}search")
    for name, values in search.items():
        if not isinstance(values, list) or not values:
            raise ConfigError(f"{where}search.{name}: expected a non-empty list of values")
    extend = _mapping(data.get("extend"), f"{where}extend")
    for name, values in extend.items():
        if name not in search:
            raise ConfigError(f"{where}extend.{name}: extends a key that search does not list")
        if not isinstance(values, list) or not values:
            raise ConfigError(f"{where}extend.{name}: expected a non-empty list of values")
        grid = search[name]
        numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in [*grid, *values])
        if not numbers or len(set(values)) != len(values) or any(min(grid) <= v <= max(grid) for v in values):
            raise ConfigError(
                f"{where}extend.{name}: expected distinct numbers outside the search's range: those below it "
                f"are tried downwards while the smallest value is the choice, those above it upwards"
            )
    seeds = data.get("seeds", [42])
    if not isinstance(seeds, list) or not seeds or not all(isinstance(x, int) for x in seeds):
        raise ConfigError(f"{where}seeds: expected a non-empty list of integers")
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"{where}seeds: a seed appears twice")
    intro = ""
    if "intro" in data:
        intro_path = Path(data["intro"])
        if not intro_path.is_file():
            raise ConfigError(f"{where}intro: {intro_path} not found")
        intro = intro_path.read_text(encoding="utf-8")
    return Plan(
        path=path,
        output_dir=Path(data.get("output_dir", "runs/reproduce")),
        report=Path(data.get("report", "docs/reports/reproduction.md")),
        images=Path(data.get("images", "docs/reports/images/reproduction")),
        title=str(data.get("title", "Reproduction")),
        intro=intro,
        produced_by=str(data.get("produced_by", "make reproduce")),
        fit_on=str(data.get("fit_on", "nli")),
        fit_max=fit_max,
        budget=_mapping(data.get("budget"), f"{where}budget"),
        encoders=encoders,
        methods=methods,
        search=search,
        seeds=seeds,
        poolers=pooler_settings,
        extend=extend,
        results=Path(data["results"]) if data.get("results") else None,
    )


def as_overrides(values: dict[str, Any]) -> list[str]:
    """``{"training.max_steps": 250}`` → ``["training.max_steps=250"]`` (values written as YAML flow)."""
    return [
        f"{key}={yaml.safe_dump(value, default_flow_style=True).strip().removesuffix('...').strip()}"
        for key, value in values.items()
    ]
