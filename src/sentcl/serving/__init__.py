"""Using trained models: a faiss index over a corpus (an HTTP API and a web page are to come)."""

from sentcl.serving.index import Hit, SentenceIndex

__all__ = ["Hit", "SentenceIndex"]
