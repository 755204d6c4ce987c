"""Model: any Hugging Face encoder → pooler → optional MLP head, with encode/save/load."""

from sentcl.model.backbone import ModelLoadError, load_backbone, packaged_model_path, resolve_model_path
from sentcl.model.build import build_encoder
from sentcl.model.dropout import use_fast_dropout
from sentcl.model.encoder import ModelConfig, SentenceEncoder
from sentcl.model.heads import MLPHead, split_mlm_model
from sentcl.model.inference import for_inference, load_encoder
from sentcl.model.packing import backbone_states
from sentcl.model.pooling import POOLERS, pad_rows, pooler_argument
from sentcl.model.static import StaticEncoder
from sentcl.model.trainable import TrainableEncoder

__all__ = [
    "POOLERS",
    "MLPHead",
    "ModelConfig",
    "ModelLoadError",
    "SentenceEncoder",
    "StaticEncoder",
    "TrainableEncoder",
    "backbone_states",
    "build_encoder",
    "for_inference",
    "load_backbone",
    "load_encoder",
    "packaged_model_path",
    "pad_rows",
    "pooler_argument",
    "resolve_model_path",
    "split_mlm_model",
    "use_fast_dropout",
]
