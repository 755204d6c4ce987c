"""Finding sentences by their vectors: the faiss index of a corpus (exact, IVF, binary with int8 rescoring),
the embedding quantization it and ``sentcl encode --precision`` use, and hard-negative mining for training
data. It sees models only through the Embedder protocol (an import contract says so)."""

from sentcl.search.index import Hit, IndexFolderError, SentenceIndex

__all__ = ["Hit", "IndexFolderError", "SentenceIndex"]
