"""Encoding on Ray (local mode, two actors): the vectors ``sentcl encode`` gives, shard files written once,
a failed shard reported and redone on resume, a killed actor leaving no id missing or twice."""

import json
import os
import socket

import numpy as np
import pytest

from sentcl.cli.main import main
from sentcl.integrations.ray_data import (
    RayEncodeJob,
    RayJobError,
    SentenceEncoder,
    ShardWriter,
    connect,
    encode_with_ray,
    shard_rows,
)

from ..conftest import SENTENCES

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def local_ray(tmp_path_factory):
    # Ray's session files (logs, sockets) in this test's own temporary folder, not in /tmp/ray
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        _temp_dir=str(tmp_path_factory.mktemp("ray")),
    )
    yield
    ray.shutdown()


def test_two_actors_write_the_vectors_sentcl_encode_gives_and_resume(
    local_ray, tiny_model_dir, tmp_path, capsys
):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(f"{s} {i}" for i, s in enumerate(SENTENCES * 4)) + "\n")
    common = ["--dtype", "fp32", "--pooler", "avg", "--batch-size", "4"]
    assert (
        main(["encode", str(tiny_model_dir), str(corpus), "--out", str(tmp_path / "local.npy"), *common]) == 0
    )
    ray_args = ["encode", str(tiny_model_dir), str(corpus), "--out", str(tmp_path / "shards"), *common,
                "--engine", "ray", "--actors", "2", "--rows-per-shard", "7",
                "--batch-tokens", "20"]  # a token budget: other batches, the same vectors  # fmt: skip
    assert main(ray_args) == 0
    ids, vectors = shard_rows(tmp_path / "shards")
    rows = len(SENTENCES) * 4
    assert ids == [f"corpus.txt:{i}" for i in range(1, rows + 1)]
    np.testing.assert_allclose(vectors, np.load(tmp_path / "local.npy"), atol=1e-6)
    files = sorted((tmp_path / "shards").glob("part-*.parquet"))
    assert len(files) == -(-rows // 7)
    stamps = [f.stat().st_mtime_ns for f in files]
    assert main(ray_args) == 0  # resumed: nothing left to do, nothing rewritten
    assert [f.stat().st_mtime_ns for f in files] == stamps
    assert main([*ray_args, "--normalize"]) == 2
    assert "written by another encode job (its normalize differ" in capsys.readouterr().err
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    assert main([*ray_args[:4], str(tmp_path / "mine"), *ray_args[5:]]) == 2
    assert "holds 'notes.txt', which sentcl did not write" in capsys.readouterr().err
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"


def test_the_encoder_of_a_ray_pipeline_takes_a_token_budget(tiny_model_dir):
    encoder = SentenceEncoder(str(tiny_model_dir), dtype="fp32", batch_tokens=64)
    assert encoder.embedder.encoder.max_batch_tokens == 64
    got = encoder({"text": np.array(["a dog runs", "a cat"])})
    assert got["embedding"].shape == (2, encoder.embedder.encoder.dimension)


def test_a_failed_shard_and_a_killed_actor_lose_no_row(local_ray, tiny_model_dir, tmp_path):
    docs = tmp_path / "docs.jsonl"
    good = [{"id": f"d{i}", "text": SENTENCES[i % len(SENTENCES)]} for i in range(20)]
    bad = [*good[:12], {"id": "d12"}, *good[13:]]  # row 13 (in the third shard of 5) has no text
    docs.write_text("".join(json.dumps(r) + "\n" for r in bad))
    died = tmp_path / "died"

    class DiesOnce(ShardWriter):
        def write(self, shard):
            if shard.name == "part-00001" and not died.exists():
                died.write_text(str(os.getpid()))
                os._exit(1)  # the actor's process dies mid-shard: Ray restarts it and retries the shard
            return super().write(shard)

    job = RayEncodeJob(str(tiny_model_dir), [str(docs)], str(tmp_path / "out"), actors=2, rows_per_shard=5,
                       dtype="fp32", pooler="avg", writer=DiesOnce)  # fmt: skip
    result = encode_with_ray(job)
    assert died.exists()
    assert result.actors and min(result.actors.values()) > 10  # each actor's peak RSS, in MB
    assert list(result.failed) == ["part-00002"]
    assert "docs.jsonl:13: no text" in result.failed["part-00002"]
    ids, _ = shard_rows(tmp_path / "out")
    assert sorted(ids) == sorted(r["id"] for r in good if r["id"] not in {f"d{i}" for i in range(10, 15)})
    assert len(ids) == len(set(ids)) == 15
    docs.write_text("".join(json.dumps(r) + "\n" for r in good))  # fixed: the same rows
    again = encode_with_ray(job)
    assert again.written == ["part-00002"] and len(again.kept) == 3 and not again.failed
    ids, vectors = shard_rows(tmp_path / "out")
    assert ids == [r["id"] for r in good] and vectors.shape == (20, 32)


def test_a_cluster_that_does_not_answer_is_one_line():
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    class NotStarted:
        @staticmethod
        def is_initialized():
            return False

    with pytest.raises(RayJobError, match=f"--address 127.0.0.1:{port}: no Ray cluster answers there"):
        connect(NotStarted, f"127.0.0.1:{port}")
    with pytest.raises(RayJobError, match="not HOST:PORT"):
        connect(NotStarted, "somewhere")
