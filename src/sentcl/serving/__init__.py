"""Using trained models: a faiss index over a corpus; the HTTP API and page live in ``sentcl.serving.server``
(imported on demand, so the index does not pull in the web stack)."""

from sentcl.serving.index import Hit, IndexFolderError, SentenceIndex

__all__ = ["Hit", "IndexFolderError", "SentenceIndex"]
