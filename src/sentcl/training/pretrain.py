"""Masked-LM pre-training (``sentcl pretrain``): a raw encoder from scratch, or an existing one continued.

BERT's objective: 15 % of the tokens are selected (whole words optionally), 80 % of those become
[MASK], 10 % a random token, 10 % stay; the model predicts the original token at the selected positions
only (the vocabulary projection runs on those positions, not on every token). Sentences are single
lines of the training files (the unit a sentence encoder sees), padded per batch.

The model is an ``AutoModelForMaskedLM``: ``model.architecture`` (``model_type`` plus config keys, the
vocabulary of ``model.tokenizer``) builds a fresh one from ``training.seed``; ``model.name_or_path``
continues a checkpoint, with its own MLM head where it has one (a fresh head, tied to the embeddings,
where it has none). A run writes into ``output_dir``:

  config.yaml     the resolved recipe
  metrics.jsonl   training loss per logging step; held-out MLM loss (and STS-B dev Spearman of the
                  mean-pooled states, for information only) per evaluation
  model/          the final model with its MLM head: loads as a backbone (``sentcl train``'s
                  ``model.name_or_path``), keeps its head for MLM-based objectives (TaCL, do_mlm); a
                  continued sentence-transformers model keeps its sentence_bert_config.json, so it
                  encodes to the start's length (all-MiniLM-L6-v2: 256 tokens, not its tokenizer's 512)
  checkpoint/     every ``checkpoint_steps``, for an exact resume (same batches, masks and updates)
  mlm_loss.png    the loss curves
  summary.json    steps, final held-out loss and perplexity, final STS
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from transformers import AutoConfig, AutoModelForMaskedLM, AutoTokenizer

from sentcl.analysis.plots import plot_curves
from sentcl.atomic_write import atomic_folder
from sentcl.config import ConfigError, apply_overrides, from_dict, load_yaml, to_dict
from sentcl.data import DataError, read_records
from sentcl.data.corpus import UNITS, read_corpus
from sentcl.data.named import resolve_train_file
from sentcl.data.sentences import SentencesDataset, SentenceTokens
from sentcl.embedder import CachedEmbedder
from sentcl.model import ModelLoadError, SentenceEncoder, split_mlm_model, use_fast_dropout
from sentcl.model.backbone import check_positions, read_json_object, resolve_model_path
from sentcl.objectives.masked_lm import MaskedLM, MaskedLMConfig
from sentcl.training.guards import finite_evaluation, require_finite_metric, require_finite_weights
from sentcl.training.model_card import write_pretrained_card
from sentcl.training.recipe import RunConfig
from sentcl.training.run import finish_run, open_run, running, task_evaluator
from sentcl.training.steps import Steps, autocast_context, run_steps

if TYPE_CHECKING:
    from sentcl.training.run import RunStart

logger = logging.getLogger(__name__)


@dataclass
class PretrainModelConfig:
    """``model:`` section: exactly one of ``name_or_path`` (continue) or ``architecture`` (from scratch)."""

    name_or_path: str = ""
    #: from scratch: ``model_type`` (e.g. bert) and the config keys to set (num_hidden_layers, …)
    architecture: dict[str, Any] | None = None
    #: from scratch: whose vocabulary (a model name or folder with a tokenizer)
    tokenizer: str = ""
    #: as in ``sentcl train``'s model section: the packed pass on real tokens only (None: on the CPU),
    #: and the fast dropout masks
    unpad: bool | None = None
    fast_dropout: bool = True

    def validate(self) -> None:
        if bool(self.name_or_path) == bool(self.architecture):
            raise ConfigError("set exactly one of name_or_path (continue a checkpoint) or architecture")
        if self.architecture:
            if "model_type" not in self.architecture:
                raise ConfigError("architecture.model_type: required (e.g. bert)")
            if not self.tokenizer:
                raise ConfigError("tokenizer: required with architecture (whose vocabulary to use)")


@dataclass
class PretrainDataConfig:
    """``data:`` section: text files (.txt one sentence per line; every cell of a .csv/.tsv)."""

    train_files: list[str] = field(default_factory=list)
    max_length: int = 64
    #: sentences held out (seeded) for the evaluation's MLM loss
    eval_sentences: int = 2000
    #: batches of similar length (MLM has no in-batch negatives, so nothing is lost; far less padding)
    group_by_length: bool = True
    #: the train files as a domain's corpora (data/corpus.py): "none" (rows as they are), "sentence" (a
    #: BEIR folder, a corpus.jsonl or one document per line, split by Punkt trained on it), "document"
    corpus_unit: str = "none"

    def validate(self) -> None:
        if not self.train_files:
            raise ConfigError("train_files: at least one training file is required")
        if self.corpus_unit not in UNITS[:3]:  # ICT's pairs are for a pair objective, not the MLM
            raise ConfigError(f"corpus_unit: {self.corpus_unit!r} is not one of {', '.join(UNITS[:3])}")
        if self.max_length < 4:
            raise ConfigError(f"max_length: must be at least 4, got {self.max_length}")
        if self.eval_sentences < 0:
            raise ConfigError(f"eval_sentences: must not be negative, got {self.eval_sentences}")


@dataclass
class MaskingConfig:
    probability: float = 0.15
    #: mask all pieces of a word together (BERT's whole-word masking)
    whole_word: bool = False

    def validate(self) -> None:
        if not 0 < self.probability < 1:
            raise ConfigError(f"probability: must be in (0, 1), got {self.probability}")


@dataclass
class PretrainLoopConfig(RunConfig):
    """``training:`` section; defaults are BERT-like for a small model."""

    output_dir: str = "runs/pretrain"
    batch_size: int = 128
    learning_rate: float = 5e-4
    warmup_ratio: float = 0.06
    weight_decay: float = 0.01
    eval_steps: int = 500
    logging_steps: int = 50
    #: mean-pooled STS probe at each evaluation (information only: the final model is kept); "none" (as in
    #: training) or "" = off
    eval_task: str = "stsb-dev"


@dataclass
class PretrainConfig:
    model: PretrainModelConfig
    data: PretrainDataConfig
    masking: MaskingConfig = field(default_factory=MaskingConfig)
    training: PretrainLoopConfig = field(default_factory=PretrainLoopConfig)

    def to_dict(self) -> dict[str, Any]:
        return {name: to_dict(getattr(self, name)) for name in SECTIONS}


SECTIONS = ("model", "data", "masking", "training")


def load_pretrain_recipe(path: str | Path, overrides: list[str] | None = None) -> PretrainConfig:
    data = apply_overrides(load_yaml(path), overrides or [])
    unknown = [key for key in data if key not in SECTIONS]
    try:
        if unknown:
            raise ConfigError(f"unknown config key {unknown[0]!r} (sections: {', '.join(SECTIONS)})")
        kinds = (PretrainModelConfig, PretrainDataConfig, MaskingConfig, PretrainLoopConfig)
        sections: dict[str, Any] = {}
        for name, kind in zip(SECTIONS, kinds, strict=True):
            value = data.get(name) or {}
            if not isinstance(value, dict):
                raise ConfigError(f"{name}: expected a mapping")
            sections[name] = from_dict(kind, value, prefix=name)
        return PretrainConfig(**sections)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


# ------------------------------------------------------------------------------------------ model
def build_mlm_model(config: PretrainModelConfig, seed: int) -> tuple[Any, Any]:
    """(AutoModelForMaskedLM, tokenizer): fresh from ``architecture`` or loaded from ``name_or_path``."""
    if config.name_or_path:
        source = resolve_model_path(config.name_or_path)
        try:
            tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=False)
            model, loading = AutoModelForMaskedLM.from_pretrained(
                source, trust_remote_code=False, output_loading_info=True
            )
        except (OSError, ValueError) as exc:
            raise ModelLoadError(f"{config.name_or_path}: cannot load it as a masked LM ({exc})") from None
        if any(not key.startswith(model.base_model_prefix) for key in loading["missing_keys"]):
            logger.warning(
                "%s: the checkpoint has no masked-LM head, so a fresh one (random) is trained: until it has "
                "learned, its gradients reach the encoder as noise, and a high learning rate undoes what the "
                "encoder knew (docs/reports/domain.md section 5: all-MiniLM-L6-v2's SciFact train nDCG@10 "
                "65.24 fell to 19.54 in 200 steps at 1e-4, to 55.72 at 2e-5)",
                config.name_or_path,
            )
        return model, tokenizer
    try:
        tokenizer = AutoTokenizer.from_pretrained(
            resolve_model_path(config.tokenizer), trust_remote_code=False
        )
    except (OSError, ValueError) as exc:
        raise ModelLoadError(
            f"model.tokenizer: {config.tokenizer}: cannot load a tokenizer ({exc})"
        ) from None
    settings = dict(config.architecture or {})
    model_type = settings.pop("model_type")
    try:
        known = AutoConfig.for_model(model_type).to_dict()
    except ValueError:
        raise ConfigError(f"model.architecture.model_type: unknown model type {model_type!r}") from None
    for key in settings:
        if key not in known:
            raise ConfigError(f"model.architecture.{key}: not a {model_type} config key")
    settings.setdefault("vocab_size", len(tokenizer))
    if settings["vocab_size"] < len(tokenizer):
        raise ConfigError(f"model.architecture.vocab_size: smaller than the tokenizer's {len(tokenizer)}")
    settings.setdefault("pad_token_id", tokenizer.pad_token_id)
    try:
        model_config = AutoConfig.for_model(model_type, **settings)
        torch.manual_seed(seed)
        model = AutoModelForMaskedLM.from_config(model_config)  # type: ignore[no-untyped-call]
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"model.architecture: {exc}") from None
    return model, tokenizer


#: the start's file that says how sentence-transformers encodes with it (max_seq_length, do_lower_case)
SENTENCE_SETTINGS = "sentence_bert_config.json"


def start_sentence_settings(name_or_path: str) -> dict[str, Any] | None:
    """The start's ``sentence_bert_config.json`` (a local or packaged folder's), or None: carried to the
    pre-trained model, so that it and the models trained from it encode to the start's length, not to
    its tokenizer's (all-MiniLM-L6-v2: 256 tokens, its tokenizer 512; three times the encoding cost)."""
    if not name_or_path:
        return None
    folder = Path(resolve_model_path(name_or_path))
    try:
        return read_json_object(folder / SENTENCE_SETTINGS) if folder.is_dir() else None
    except ValueError as exc:
        raise ModelLoadError(str(exc)) from None


def save_mlm_model(
    model: Any, tokenizer: Any, folder: Path, sentence_settings: dict[str, Any] | None = None
) -> Path:
    with atomic_folder(folder, "model", overwrite=True) as tmp:  # inside the run folder, checked
        model.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
        if sentence_settings is not None:
            (tmp / SENTENCE_SETTINGS).write_text(json.dumps(sentence_settings, indent=2) + "\n")
    return folder


# ------------------------------------------------------------------------------------------- data
def read_pretrain_sentences(files: list[str], corpus_unit: str = "none") -> list[str]:
    """Every sentence of every file (each cell of a table), in order; empty cells are skipped. A corpus
    (``corpus_unit``) is read as data/corpus.py reads it."""
    sentences: list[str] = []
    for index, name in enumerate(files):
        path = resolve_train_file(name, f"data.train_files[{index}]")
        records = read_corpus(path, corpus_unit) if corpus_unit != "none" else read_records(path)
        sentences.extend(cell for row in records.rows for cell in row if cell.strip())
    return sentences


# ------------------------------------------------------------------------------------------- loop
@dataclass
class PretrainResult:
    output_dir: Path
    steps: int
    final_metrics: dict[str, float] | None = None
    autocast: str | None = None  # the precision the run computed in (training.autocast as decided)

    def summary(self) -> dict[str, Any]:
        return {
            "steps": self.steps,
            "final_metrics": self.final_metrics,
            "autocast": self.autocast,
            "model": str(self.output_dir / "model"),
        }


def pretrain(config: PretrainConfig) -> PretrainResult:
    """The masked-LM objective (``masked_lm.py``) run by the training loop (``run_steps``): only the
    model (an ``AutoModelForMaskedLM``), the data (held-out sentences apart), the evaluation (held-out MLM
    loss, an STS probe) and what is saved (the final model with its head) are pre-training's own."""
    with running(config.training, torchrun=False) as start:
        return _pretrain(config, start)


def _pretrain(config: PretrainConfig, start: RunStart) -> PretrainResult:
    loop = config.training
    context, device, output_dir = start.context, start.device, start.output_dir

    sentences = read_pretrain_sentences(config.data.train_files, config.data.corpus_unit)
    held_out = config.data.eval_sentences if loop.eval_steps > 0 else 0
    if len(sentences) <= held_out:
        raise DataError(
            f"{config.data.train_files[0]}: {len(sentences)} sentences, not more than "
            f"data.eval_sentences ({held_out})"
        )
    probe = loop.eval_task not in ("", "none")
    evaluator = task_evaluator(loop)[0] if loop.eval_steps > 0 and probe else None
    model, tokenizer = build_mlm_model(config.model, loop.seed)
    sentence_settings = start_sentence_settings(config.model.name_or_path)
    if config.model.fast_dropout:
        use_fast_dropout(model)  # cheaper dropout masks (model/dropout.py); weights unchanged
    if tokenizer.mask_token_id is None:
        raise ModelLoadError("the tokenizer has no [MASK] token; MLM needs one")
    check_positions(config.data.max_length, model.config)
    model.to(device)
    backbone, head = split_mlm_model(model, config.model.name_or_path or "the new model")
    # the backbone as a sentence encoder (mean pooling: the STS probe's), trained in place inside ``model``
    encoder = SentenceEncoder(
        backbone, tokenizer, "avg", max_length=config.data.max_length, unpad=config.model.unpad
    )
    masking = MaskedLMConfig(mlm_probability=config.masking.probability, whole_word=config.masking.whole_word)
    objective = MaskedLM(masking, encoder, head=head)
    open_run(start, loop, config.to_dict(), lambda path: load_pretrain_recipe(path).to_dict())
    tokens = SentenceTokens(sentences, tokenizer, config.data.max_length)
    split = torch.randperm(len(tokens), generator=torch.Generator().manual_seed(loop.seed)).tolist()
    source = ", ".join(config.data.train_files)
    evaluation_set = SentencesDataset(tokens, split[:held_out], source)
    dataset = SentencesDataset(tokens, split[held_out:], source)
    parameters = sum(p.numel() for p in model.parameters())
    logger.info("%d sentences (%d held out), %.1fM parameters", len(tokens), held_out, parameters / 1e6)

    def evaluate(step: int) -> dict[str, Any]:
        objective.eval()
        generator = torch.Generator().manual_seed(loop.seed + 1)  # the same masks at every evaluation
        total, count = 0.0, 0
        with torch.inference_mode(), autocast_context(steps.autocast or loop.autocast, device):
            for start in range(0, len(evaluation_set), loop.batch_size):
                rows = range(start, min(start + loop.batch_size, len(evaluation_set)))
                batch = evaluation_set.collate([evaluation_set[i] for i in rows]).to(device)
                loss = objective.masked_loss(batch, generator)
                total, count = total + loss.item() * len(rows), count + len(rows)
        metrics = {"mlm_loss": total / max(count, 1)}
        require_finite_metric("held-out mlm_loss", metrics["mlm_loss"], step)
        metrics["perplexity"] = math.exp(min(metrics["mlm_loss"], 50.0))
        if evaluator is not None:
            with finite_evaluation(step):
                metrics |= evaluator(CachedEmbedder(encoder))
        return {"eval": metrics}

    steps = Steps(
        objective=objective,
        dataset=dataset,
        trained=torch.nn.ModuleList([objective]),
        evaluate=evaluate if loop.eval_steps > 0 else None,
        eval_at_start=True,  # the held-out loss of the start, for the curve
        group_by_length=config.data.group_by_length,
        name="pre-training",
        recipe=config.to_dict(),
    )
    outcome = run_steps(loop, steps, context, device, output_dir, start.resume)
    require_finite_weights(model, outcome.state.step)
    # the final model, with its head (and the start's sentence-transformers settings, where it had them)
    save_mlm_model(model, tokenizer, output_dir / "model", sentence_settings)
    write_pretrained_card(output_dir / "model", config.to_dict(), outcome.state.step, outcome.history)
    plot_pretraining(outcome.history, output_dir / "mlm_loss.png")
    result = PretrainResult(output_dir, outcome.state.step, outcome.last_metrics, outcome.state.autocast)
    finish_run(start, result.summary())
    return result


def plot_pretraining(records: list[dict[str, Any]], path: Path) -> Path:
    """Training loss per logging step and held-out MLM loss per evaluation."""
    curves = {
        "training MLM loss": [(r["step"], r["loss"]) for r in records if "loss" in r],
        "held-out MLM loss": [(r["step"], r["eval"]["mlm_loss"]) for r in records if "eval" in r],
    }
    return plot_curves({k: v for k, v in curves.items() if v}, path, ylabel="cross-entropy (nats)")


def summarize_pretraining(result: PretrainResult) -> str:
    lines = [f"pre-trained {result.steps} steps; model: {result.output_dir / 'model'}"]
    if result.final_metrics:
        shown = ", ".join(f"{k} = {v:.4g}" for k, v in result.final_metrics.items())
        lines.append(f"held-out: {shown}")
    return "\n".join(lines)
