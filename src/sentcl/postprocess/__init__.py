"""Post-processing of embeddings: whitening, all-but-the-top, BERT-flow. Each wraps any Embedder."""

from sentcl.postprocess.all_but_the_top import AllButTheTop
from sentcl.postprocess.base import (
    PostProcessedEmbedder,
    PostProcessor,
    fit_postprocessor,
)
from sentcl.postprocess.base import load_postprocessor as _load
from sentcl.postprocess.flow import Flow
from sentcl.postprocess.whitening import Whitening

POSTPROCESSORS: dict[str, type[PostProcessor]] = {"whitening": Whitening, "abtt": AllButTheTop, "flow": Flow}


def load_postprocessor(folder) -> PostProcessor:
    return _load(folder, POSTPROCESSORS)


__all__ = [
    "POSTPROCESSORS",
    "AllButTheTop",
    "Flow",
    "PostProcessedEmbedder",
    "PostProcessor",
    "Whitening",
    "fit_postprocessor",
    "load_postprocessor",
]
