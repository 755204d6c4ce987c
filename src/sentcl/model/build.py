"""The model a training run starts from (``model:`` of a recipe): a transformer ``SentenceEncoder``, or a
``StaticEncoder`` where ``architecture: static`` or ``name_or_path`` is a static model."""

from __future__ import annotations

from sentcl.model.backbone import resolve_model_path
from sentcl.model.encoder import ModelConfig, SentenceEncoder
from sentcl.model.static import StaticEncoder, is_static_folder


def build_encoder(config: ModelConfig) -> SentenceEncoder | StaticEncoder:
    if config.architecture == "static" or is_static_folder(resolve_model_path(config.name_or_path)):
        return StaticEncoder.from_config(config)
    return SentenceEncoder.from_config(config)
