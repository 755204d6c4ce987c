"""Serving trained models: the HTTP API and its page (``sentcl.serving.server``, imported on demand so that
nothing else pulls in the web stack), its admission control and connection limits. The index it searches is
``sentcl.search``; ``SentenceIndex`` is also importable from here, where it lived before."""

from sentcl.search.index import Hit, IndexFolderError, SentenceIndex

__all__ = ["Hit", "IndexFolderError", "SentenceIndex"]
