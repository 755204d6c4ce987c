"""A corpus cut into shards: counted, cut within files, read back in order, bad rows named by file:line."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sentcl.data.readers import DataError
from sentcl.data.shards import Fields, plan_shards, read_shard


def test_files_are_cut_into_shards_that_read_back_in_order(tmp_path):
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "a.txt").write_text("one\n\n  two  \nthree\nfour\nfive\n")
    (folder / "b.jsonl").write_text(
        "".join(json.dumps({"id": f"d{i}", "text": f"doc {i}"}) + "\n" for i in range(3))
    )
    pq.write_table(pa.table({"id": [7, 8], "text": ["p one", "p two"]}), folder / "c.parquet")
    (folder / ".hidden").write_text("not read\n")
    shards = plan_shards([str(folder)], rows_per_shard=2)
    assert [(s.name, s.format, s.start, s.stop) for s in shards] == [
        ("part-00000", "text", 0, 2), ("part-00001", "text", 2, 4), ("part-00002", "text", 4, 5),
        ("part-00003", "jsonl", 0, 2), ("part-00004", "jsonl", 2, 3), ("part-00005", "parquet", 0, 2),
    ]  # fmt: skip
    rows = [read_shard(s) for s in shards]
    assert rows[0] == (["a.txt:1", "a.txt:3"], ["one", "two"])  # the blank line skipped, its number kept
    assert rows[2] == (["a.txt:6"], ["five"])
    assert rows[4] == (["d2"], ["doc 2"])
    assert rows[5] == (["7", "8"], ["p one", "p two"])
    assert plan_shards([str(folder / "*.jsonl")], 10)[0].source.endswith("b.jsonl")  # a glob


def test_a_bad_row_is_named_when_its_shard_is_read(tmp_path):
    path = tmp_path / "docs.jsonl"
    path.write_text('{"id": 1, "text": "fine"}\n{"id": 2}\nnot json\n{"id": 4, "text": "fine"}\n')
    first, second, third = plan_shards([str(path)], 1)[1:3] + plan_shards([str(path)], 3)[1:]
    with pytest.raises(DataError, match=r"docs.jsonl:2: no text \(the 'text' field"):
        read_shard(first)
    with pytest.raises(DataError, match=r"docs.jsonl:3: not a JSON object"):
        read_shard(second)
    assert read_shard(third) == (["4"], ["fine"])  # the bad rows before it belong to other shards
    path.write_text('{"_id": 1, "body": "x"}\n')
    assert read_shard(plan_shards([str(path)], 5, Fields("_id", "body"))[0], Fields("_id", "body")) == (
        ["1"],
        ["x"],
    )


def test_inputs_that_hold_nothing_are_one_line(tmp_path):
    with pytest.raises(DataError, match=r"nothing-here/\*.txt: no file matches this pattern"):
        plan_shards([str(tmp_path / "nothing-here" / "*.txt")], 10)
    (tmp_path / "empty.txt").write_text("\n\n")
    with pytest.raises(DataError, match="no rows to encode"):
        plan_shards([str(tmp_path / "empty.txt")], 10)
    pq.write_table(pa.table({"id": [1], "body": ["x"]}), tmp_path / "t.parquet")
    with pytest.raises(DataError, match=r"t.parquet: no column 'text' \(it has id, body\)"):
        plan_shards([str(tmp_path / "t.parquet")], 10)


def test_a_file_that_changed_after_planning_fails_its_shard(tmp_path):
    path = tmp_path / "s.txt"
    path.write_text("a\nb\nc\n")
    (shard,) = plan_shards([str(path)], 10)
    path.write_text("a\nb\n")
    with pytest.raises(DataError, match=r"s.txt: 2 rows now, 3 when the job was planned"):
        read_shard(shard)
