"""sentcl: contrastive learning of sentence embeddings (SimCSE and its family)."""

__version__ = "0.1.0"
