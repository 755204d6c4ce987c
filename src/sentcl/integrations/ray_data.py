"""Encoding a corpus on a Ray cluster (``sentcl encode --engine ray``; ``pip install 'sentcl[ray]'``).

Two entries:

* :class:`SentenceEncoder`, a callable class for any Ray Data pipeline: one model per actor, a batch's text
  column in, a vector column out::

      ds = ray.data.read_parquet("s3://bucket/corpus/")
      ds = ds.map_batches(SentenceEncoder, fn_constructor_kwargs={"model": "my-model"},
                          compute=ray.data.ActorPoolStrategy(size=8), batch_size=1024)

* :func:`encode_with_ray`, the job behind the command: the inputs cut into shards
  (sentcl/data/shards.py), an actor pool of :class:`ShardWriter` (one model each) that reads a shard,
  encodes it in batches formed by token length (little padding) and writes ``OUT/part-NNNNN.parquet``
  (columns ``id``, ``text``, ``vector``: float32, or the int8/binary codes of ``--precision``) by a
  temporary file and a rename, so a shard file is whole or absent. ``OUT/encode.json`` records the model,
  the options and the shard plan: run the same command again and the shards already written are not
  redone (a different model, option or input is refused in one line). A shard that fails (a bad row, a
  file that changed) is reported with its error while the others go on; the next run redoes it. An actor
  that dies is restarted by Ray and its shard retried; one file per shard means no row is written twice.
"""

from __future__ import annotations

import json
import logging
import os
import socket
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from sentcl.arrow_columns import column_matrix, vector_column
from sentcl.atomic_write import OutputExistsError, atomic_file, check_replaceable, mark_folder
from sentcl.data.shards import Fields, Shard, plan_shards, read_shard
from sentcl.embedder import Batched, unit_rows
from sentcl.errors import UserError
from sentcl.extras import require
from sentcl.hardware import peak_rss_mb
from sentcl.model.inference import for_inference, load_encoder
from sentcl.search.quantization import quantize

logger = logging.getLogger(__name__)

KIND = "encoded shards"
MANIFEST = "encode.json"
#: how long a cluster's address may take to answer before the job says it does not
CONNECT_TIMEOUT_S = 5.0


class RayJobError(UserError, RuntimeError):
    """The cluster cannot be reached, or the output folder belongs to another job."""


def _ray():
    return require("ray", "ray", "sentcl encode --engine ray")


class SentenceEncoder:
    """A batch's ``text_column`` → ``output_column`` ([rows, D] float32), one model per actor (loaded once,
    in the constructor). The options are ``sentcl encode``'s."""

    def __init__(
        self, model: str, dtype: str = "auto", pooler: str | None = None, batch_size: int = 128,
        normalize: bool = False, dim: int | None = None, prompt_name: str | None = None,
        prompt: str | None = None, device: str = "cpu", allow_pickle: bool = False,
        threads: int | None = None, batch_tokens: int | None = None,
        text_column: str = "text", output_column: str = "embedding",
    ):  # fmt: skip
        if threads:
            import torch

            torch.set_num_threads(threads)
        encoder = for_inference(
            load_encoder(model, pooler=pooler, allow_pickle=allow_pickle), dtype, device=device
        )
        encoder.max_batch_tokens = batch_tokens  # a batch of long texts holds fewer of them
        self.embedder = Batched(encoder, batch_size, show_progress=False, dim=dim)
        self.normalize, self.prompt_name, self.prompt = normalize, prompt_name, prompt
        self.text_column, self.output_column = text_column, output_column

    def vectors(self, texts: list[str]) -> np.ndarray:
        found = self.embedder.encode(texts, prompt_name=self.prompt_name, prompt=self.prompt)
        return unit_rows(found) if self.normalize else found  # normalised after truncation, as encode does

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        return batch | {self.output_column: self.vectors([str(t) for t in batch[self.text_column]])}


class ShardWriter(SentenceEncoder):
    """A batch of shard records (see :class:`~sentcl.data.shards.Shard`) → each shard encoded and written
    as ``OUT/NAME.parquet``; returns one row per shard: its name, rows written and error ("" if none)."""

    def __init__(
        self, out: str, fields: dict[str, str], precision: str = "float32", ranges: list | None = None,
        **encoder: Any,
    ):  # fmt: skip
        super().__init__(**encoder)
        self.out, self.fields, self.precision = Path(out), Fields(**fields), precision
        self.ranges = None if ranges is None else np.asarray(ranges, dtype=np.float32)

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        names, rows, errors = [], [], []
        for values in zip(*(batch[k] for k in SHARD_KEYS), strict=True):
            shard = Shard(*(v.item() if hasattr(v, "item") else v for v in values))
            names.append(shard.name)
            try:
                rows.append(self.write(shard))
                errors.append("")
            except Exception as exc:  # the job goes on; this shard is reported and redone next time
                rows.append(0)
                errors.append(str(exc) if isinstance(exc, UserError) else f"{type(exc).__name__}: {exc}")
        peak = peak_rss_mb()  # this actor's so far
        return {
            "shard": np.array(names), "rows": np.array(rows), "error": np.array(errors),
            "pid": np.full(len(names), os.getpid()), "peak_rss_mb": np.full(len(names), peak),
        }  # fmt: skip

    def write(self, shard: Shard) -> int:
        pa = require("pyarrow", "ray", "sentcl encode --engine ray")
        parquet = require("pyarrow.parquet", "ray", "sentcl encode --engine ray")
        ids, texts = read_shard(shard, self.fields)
        codes = quantize(self.vectors(texts), self.precision, self.ranges)
        table = pa.table({
            "id": pa.array(ids, pa.string()), "text": pa.array(texts, pa.string()),
            "vector": vector_column(codes, "ray", "sentcl encode --engine ray"),
        })  # fmt: skip
        with atomic_file(self.out / f"{shard.name}.parquet", mode="wb") as handle:
            parquet.write_table(table, handle)
        return len(ids)


SHARD_KEYS = tuple(f.name for f in fields(Shard))  # a shard record's columns, in Shard's order


@dataclass
class RayEncodeJob:
    model: str
    inputs: list[str]
    out: str
    address: str | None = None  # None: a Ray of this machine (ray.init())
    actors: int = 1
    cpus_per_actor: float = 1
    gpus_per_actor: float = 0
    rows_per_shard: int = 100_000
    batch_size: int = 128
    batch_tokens: int | None = None  # a batch also holds at most this many tokens (rows × its longest)
    dtype: str = "auto"
    pooler: str | None = None
    normalize: bool = False
    dim: int | None = None
    precision: str = "float32"
    ranges: list | None = None  # int8/uint8: the [2, D] ranges every shard is coded with
    prompt_name: str | None = None
    prompt: str | None = None
    fields: Fields = field(default_factory=Fields)
    allow_pickle: bool = False
    overwrite: bool = False
    writer: type = ShardWriter  # the actors' class (a subclass changes how a shard is written)

    def settings(self) -> dict[str, Any]:
        """What a resumed job must share with the one that wrote the folder."""
        return {
            "model": self.model, "dtype": self.dtype, "pooler": self.pooler, "normalize": self.normalize,
            "dim": self.dim, "precision": self.precision, "ranges": self.ranges,
            "prompt_name": self.prompt_name, "prompt": self.prompt, "fields": asdict(self.fields),
        }  # fmt: skip


@dataclass
class RayEncodeResult:
    out: Path
    shards: list[Shard]
    written: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)  # written by an earlier run of the job
    failed: dict[str, str] = field(default_factory=dict)
    rows: int = 0
    actors: dict[int, float] = field(default_factory=dict)  # each actor process's peak RSS (MB)


def encode_with_ray(job: RayEncodeJob) -> RayEncodeResult:
    """Run ``job``: the shards not yet written, encoded by ``job.actors`` actors (module docstring)."""
    ray = _ray()
    out = Path(job.out)
    shards = plan_shards(job.inputs, job.rows_per_shard, job.fields)
    manifest = {"settings": job.settings(), "shards": [s.as_dict() for s in shards]}
    prepare_folder(out, manifest, job.overwrite)
    result = RayEncodeResult(out, shards)
    pending = [s for s in shards if not (out / f"{s.name}.parquet").is_file()]
    result.kept = [s.name for s in shards if s not in pending]
    if pending:
        connect(ray, job.address)
        run_shards(ray, job, pending, result)
    mark_folder(out, KIND)
    result.rows = sum(s.rows for s in shards if s.name not in result.failed)
    return result


def prepare_folder(out: Path, manifest: dict, overwrite: bool) -> None:
    """A new folder for the job, or the folder of the same job (resumed); another job's is refused."""
    path = out / MANIFEST
    if path.is_file() and not overwrite:
        try:
            before = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            before = {}
        if before == manifest:
            return  # the same job: resumed
        differs = next(
            (k for k in manifest["settings"] if before.get("settings", {}).get(k) != manifest["settings"][k]),
            "shards",
        )
        what = "the inputs or their rows" if differs == "shards" else f"its {differs}"
        raise OutputExistsError(
            f"--out {out}: written by another encode job ({what} differ); pass --overwrite to start "
            "again, or name a new folder"
        )
    check_replaceable(out, KIND, overwrite, "--out")
    if overwrite and out.is_dir():
        for old in out.glob("part-*.parquet"):
            old.unlink()  # this job's shards, started again (the user's other files stay)
    out.mkdir(parents=True, exist_ok=True)
    with atomic_file(path) as handle:
        json.dump(manifest, handle, indent=1)
        handle.write("\n")
    mark_folder(out, KIND)


def connect(ray, address: str | None) -> None:
    """``ray.init`` on ``address`` (None: a Ray of this machine), unless this process already is on one; an
    address that does not answer is one line, not a minute of retries."""
    if ray.is_initialized():
        return
    if address and address != "auto":
        host, _, port = address.removeprefix("ray://").rpartition(":")
        try:
            with socket.create_connection((host or "localhost", int(port)), timeout=CONNECT_TIMEOUT_S):
                pass
        except ValueError:
            raise RayJobError(f"--address {address}: not HOST:PORT (or ray://HOST:PORT)") from None
        except OSError as exc:
            raise RayJobError(f"--address {address}: no Ray cluster answers there ({exc})") from None
    try:
        ray.init(address=address or None, include_dashboard=False, log_to_driver=False)
    except ConnectionError as exc:
        raise RayJobError(f"--address {address}: {exc}") from None


def run_shards(ray, job: RayEncodeJob, pending: list[Shard], result: RayEncodeResult) -> None:
    from tqdm.auto import tqdm

    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False  # the job's own bar counts rows
    encoder = {
        "model": job.model, "dtype": job.dtype, "pooler": job.pooler, "batch_size": job.batch_size,
        "normalize": job.normalize, "dim": job.dim, "prompt_name": job.prompt_name, "prompt": job.prompt,
        "device": "cuda" if job.gpus_per_actor else "cpu", "allow_pickle": job.allow_pickle,
        "threads": max(1, int(job.cpus_per_actor)), "batch_tokens": job.batch_tokens,
    }  # fmt: skip
    records = [s.as_dict() for s in pending]
    dataset = ray.data.from_items(records, override_num_blocks=len(records)).map_batches(
        job.writer, batch_size=1, compute=ray.data.ActorPoolStrategy(size=job.actors),
        fn_constructor_kwargs={"out": str(result.out), "fields": asdict(job.fields),
                               "precision": job.precision, "ranges": job.ranges, **encoder},
        num_cpus=job.cpus_per_actor, num_gpus=job.gpus_per_actor or None,
    )  # fmt: skip
    rows = {s.name: s.rows for s in pending}
    with tqdm(total=sum(rows.values()), unit="row", desc=f"encoding {len(pending)} shard(s)") as bar:
        for batch in dataset.iter_batches(batch_size=None, batch_format="numpy"):
            for pid, peak in zip(batch["pid"], batch["peak_rss_mb"], strict=True):
                result.actors[int(pid)] = max(float(peak), result.actors.get(int(pid), 0.0))
            for name, error in zip(batch["shard"], batch["error"], strict=True):
                name, error = str(name), str(error)
                if error:
                    result.failed[name] = error
                    logger.error("%s: %s", name, error)
                else:
                    result.written.append(name)
                bar.update(rows[name])
    result.written.sort()


def shard_rows(out: str | Path) -> tuple[list[str], np.ndarray]:
    """The ids and vectors of a finished job's folder, in shard order (for checks; a large folder is read
    shard by shard by whoever reads it, e.g. ``sentcl index --backend lance``)."""
    parquet = require("pyarrow.parquet", "ray", "reading encoded shards")
    ids: list[str] = []
    vectors = []
    for path in sorted(Path(out).glob("part-*.parquet")):
        table = parquet.read_table(path)
        ids += table.column("id").to_pylist()
        vectors.append(column_matrix(table.column("vector")))
    return ids, np.concatenate(vectors) if vectors else np.empty((0, 0), np.float32)
