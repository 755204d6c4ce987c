"""A local server on 127.0.0.1 that plays the Hugging Face hub for ``hf_hub_download`` (``HF_ENDPOINT``):
``HEAD``/``GET /datasets/<owner>/<name>/resolve/<revision>/<file>`` (and a model's, without ``/datasets``;
``files`` keys do not say which) with the headers the hub sends (the
commit, the file's sha256 as ETag, its size). ``corrupt`` names files served with one byte changed but
the true hash announced, as a download damaged on the way would arrive.

Run alone it serves a folder laid out as ``<root>/<owner>/<name>/<file>`` until interrupted:
``python tests/hub_server.py ROOT [PORT]`` prints ``HF_ENDPOINT=http://127.0.0.1:PORT``.
"""

from __future__ import annotations

import hashlib
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

COMMIT = "0" * 39 + "1"


def etag(content: bytes, git: bool = False) -> str:
    if git:
        return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()
    return hashlib.sha256(content).hexdigest()


class FakeHub:
    def __init__(
        self,
        files: dict[str, bytes],
        corrupt: set[str] = frozenset(),
        git: set[str] = frozenset(),
        port: int = 0,
        stall_on: str | None = None,
    ):
        """``files``: ``"owner/name/file"`` → content (dataset repositories); those in ``git`` are announced
        as the hub announces files kept in git rather than LFS (ETag: git's blob sha1). A request whose path
        ends with ``stall_on`` is taken and never answered until the server stops (a hub that answers some
        requests, then hangs)."""
        self.files = files
        self.stall_on = stall_on
        self.stopped = threading.Event()
        self.corrupt = set(corrupt)
        self.git = set(git)
        self.requests: list[tuple[str, str]] = []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _answer(self, body: bool) -> None:
                hub.requests.append((self.command, self.path))
                if hub.stall_on is not None and self.path.split("?")[0].endswith(hub.stall_on):
                    hub.stopped.wait()  # silent until the server stops
                    return
                parts = self.path.split("?")[0].strip("/").split("/")
                # datasets / owner / name / resolve / revision / file…; a model: owner / name / resolve / …
                if parts[0] != "datasets":
                    parts = ["models", *parts]
                key = "/".join(parts[1:3] + parts[5:]) if len(parts) > 5 else ""
                if parts[3:4] != ["resolve"] or key not in hub.files:
                    self.send_response(404)
                    if any(name.startswith("/".join(parts[1:3]) + "/") for name in hub.files):
                        self.send_header("X-Repo-Commit", COMMIT)  # the repository exists: the hub says so
                    self.send_header("X-Error-Code", "EntryNotFound")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                content = hub.files[key]
                self.send_response(200)
                self.send_header("X-Repo-Commit", COMMIT)
                self.send_header("ETag", f'"{etag(content, key in hub.git)}"')
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                if body:
                    if key in hub.corrupt:
                        content = bytes([content[0] ^ 1]) + content[1:]
                    self.wfile.write(content)

            def do_HEAD(self):
                self._answer(body=False)

            def do_GET(self):
                self._answer(body=True)

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> FakeHub:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopped.set()
        self.server.shutdown()
        self.server.server_close()

    def downloads(self, name: str) -> int:
        return sum(1 for method, path in self.requests if method == "GET" and path.endswith("/" + name))


class SilentHub:
    """A server on 127.0.0.1 that takes every connection and never answers (``HF_ENDPOINT`` at a hub that
    hangs); the connections are closed when it stops."""

    def __init__(self):
        import socket

        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.socket.listen(64)
        self.endpoint = f"http://127.0.0.1:{self.socket.getsockname()[1]}"
        self.connections: list = []

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self.socket.accept()
            except OSError:  # closed
                return
            self.connections.append(connection)

    def __enter__(self) -> SilentHub:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.socket.close()
        for connection in self.connections:
            connection.close()


def folder_files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


if __name__ == "__main__":
    hub = FakeHub(folder_files(Path(sys.argv[1])), port=int(sys.argv[2]) if len(sys.argv) > 2 else 0)
    print(f"HF_ENDPOINT={hub.endpoint}", flush=True)
    hub.server.serve_forever()
