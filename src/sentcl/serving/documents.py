"""A writable server's changes to its index (``sentcl serve --writable``): ``POST /documents`` adds or
replaces documents, ``DELETE /documents/{id}`` removes one.

Each change runs as one exclusive job of the admission queue (never inside another's yield point): the
documents that are new or whose text or kept fields changed are encoded with the document prompt (the
unchanged keep their vectors) and the index is rebuilt from its stored vectors (search/index.py's
``updated``: nothing trained again). The folder is then written in one atomic swap off the model's worker
(searches go on with the index as it was), and only then is the changed index served; a lock keeps one change
at a time from its turn to its swap. A search sees the index before the change or after it, never a mix; a
kill -9 at any moment leaves the folder's previous index; a change that fails leaves both as they were.
New documents go after the existing ones, in the request's order.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sentcl.errors import UserError
from sentcl.search.index import DocumentRows, SentenceIndex, Update, content_hash


class ChangeError(UserError, ValueError):
    """A change refused as a whole (nothing written): ``status`` is its HTTP answer."""

    def __init__(self, status: int, message: str, param: str | None = None):
        super().__init__(message)
        self.status, self.message, self.param = status, message, param


@dataclass
class DocumentWriter:
    """The served index's folder and the fields its documents keep."""

    folder: Path
    keep: tuple[str, ...]

    def kept(self, fields: dict[str, Any] | None) -> dict[str, Any] | None:
        """A document's kept fields as the index keeps them: every kept field, None where not given (the
        request's schema refuses a field the index does not keep)."""
        return {name: (fields or {}).get(name) for name in self.keep} if self.keep else None

    def upsert(self, index: SentenceIndex, documents: list[Any], encode) -> tuple[SentenceIndex, dict]:
        """``index`` with ``documents`` (id, text, fields) added or replaced, ``encode(texts)`` giving the
        vectors of those to encode: the changed index (``index`` itself when nothing changed) and the
        counts. :meth:`save` writes it."""
        rows = index.documents
        assert rows is not None and rows.hashes is not None
        ids, texts, hashes = list(rows.ids), list(index.texts), list(rows.hashes)
        kept = list(rows.kept) if rows.kept is not None else None
        position = {key: row for row, key in enumerate(ids)}
        reuse: list[int | None] = list(range(len(ids)))
        update = Update(reuse)
        first: dict[str, int] = {}
        for number, document in enumerate(documents):
            if document.id in first:
                twice = f"the id {document.id!r} is also documents[{first[document.id]}]"
                raise ChangeError(409, f"'documents[{number}]': {twice}", f"documents[{number}].id")
            first[document.id] = number
        for document in documents:
            fields = self.kept(document.fields)
            digest = content_hash(document.text, fields)
            row = position.get(document.id)
            if row is None:
                position[document.id] = len(ids)
                ids.append(document.id)
                texts.append(document.text)
                hashes.append(digest)
                reuse.append(None)
                if kept is not None:
                    kept.append(fields or {})
                update.added += 1
            elif hashes[row] != digest:
                texts[row], hashes[row], reuse[row] = document.text, digest, None
                if kept is not None:
                    kept[row] = fields or {}
                update.changed += 1
        fresh = update.encode
        vectors = encode([texts[row] for row in fresh]) if fresh else np.zeros((0, index.index.d), np.float32)
        changed = index.updated(update, texts, DocumentRows(ids, kept, rows.fields, hashes), vectors)
        same = len(documents) - update.added - update.changed
        counts = {
            "added": update.added,
            "changed": update.changed,
            "unchanged": same,
            "index_size": len(changed),
        }
        return (changed if fresh else index), counts

    def delete(self, index: SentenceIndex, key: str) -> tuple[SentenceIndex, dict]:
        """``index`` without document ``key``, and the answer; :meth:`save` writes it."""
        rows = index.documents
        assert rows is not None and rows.hashes is not None
        if key not in rows.ids:
            raise ChangeError(404, f"no document has the id {key!r}; the index is unchanged", "id")
        if len(rows.ids) == 1:
            raise ChangeError(409, f"{key!r} is the index's last document; an index cannot be empty", "id")
        keep = [row for row, other in enumerate(rows.ids) if other != key]
        update = Update(list(keep), removed=1)
        documents = DocumentRows(
            [rows.ids[r] for r in keep], None if rows.kept is None else [rows.kept[r] for r in keep],
            rows.fields, [rows.hashes[r] for r in keep],
        )  # fmt: skip
        changed = index.updated(
            update, [index.texts[r] for r in keep], documents, np.zeros((0, index.index.d))
        )
        return changed, {"deleted": key, "index_size": len(changed)}

    def save(self, index: SentenceIndex) -> None:
        """The changed index written to the folder in one atomic swap (the folder sentcl wrote)."""
        index.save(self.folder)
