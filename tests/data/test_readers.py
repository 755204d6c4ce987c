import gzip
import logging

import pytest

from sentcl.data import DataError, read_records, read_sentences, read_table


def test_txt_skips_blank_lines_and_counts_them(tmp_path, caplog):
    path = tmp_path / "s.txt"
    path.write_text("first sentence\n\n  second one  \n   \nthird\n", encoding="utf-8")
    with caplog.at_level(logging.INFO):
        records = read_sentences(path)
    assert records.rows == [("first sentence",), ("second one",), ("third",)]
    assert records.lines == [1, 3, 5]
    assert "skipped 2 blank line(s)" in caplog.text


def test_txt_gz(tmp_path):
    path = tmp_path / "s.txt.gz"
    path.write_bytes(gzip.compress(b"a b c\nd e f\n"))
    assert read_records(path).rows == [("a b c",), ("d e f",)]


@pytest.mark.parametrize(
    "content,header,expected",
    [
        ("sent0,sent1,hard_neg\na,b,c\nd,e,f\n", None, [("a", "b", "c"), ("d", "e", "f")]),
        ("a,b,c\nd,e,f\n", None, [("a", "b", "c"), ("d", "e", "f")]),
        ('sent0,sent1\n"x, with comma",y\n', None, [("x, with comma", "y")]),
        ("q,r\ns,t\n", True, [("s", "t")]),
    ],
)
def test_csv_pairs_and_triplets(tmp_path, content, header, expected):
    path = tmp_path / "nli.csv"
    path.write_text(content, encoding="utf-8")
    assert read_table(path, header=header).rows == expected


def test_tsv_and_source_lines(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_text("anchor\tpositive\n\nx\ty\nz\tw\n", encoding="utf-8")
    records = read_records(path)
    assert records.rows == [("x", "y"), ("z", "w")]
    assert records.lines == [3, 4]


def test_csv_gz(tmp_path):
    path = tmp_path / "triplets.csv.gz"
    path.write_bytes(gzip.compress(b"sent0,sent1,hard_neg\na,b,c\n"))
    assert read_records(path).rows == [("a", "b", "c")]


@pytest.mark.parametrize(
    "name,content,message",
    [
        ("bad.csv", "sent0,sent1,hard_neg\na,b,c\nd,e\n", r"bad\.csv:3: 2 field\(s\), expected 3"),
        ("bad.csv", "a,b,c,d\n", r"bad\.csv:1: 4 field\(s\), expected 2"),
        ("bad.csv", "a,b\nc,\n", r"bad\.csv:2: field 2 is empty"),
        ("bad.csv", 'a,b\n"c,d\n', r"bad\.csv:\d+: malformed"),
        ("empty.csv", "", r"empty\.csv:1: the file is empty"),
        ("header_only.csv", "sent0,sent1\n", r"header_only\.csv:1: the file has no data rows"),
        ("empty.txt", "\n\n", r"empty\.txt:1: the file is empty"),
    ],
)
def test_malformed_inputs_name_file_and_line(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    with pytest.raises(DataError, match=message):
        read_records(path)


def test_undecodable_byte_names_its_line(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes(b"fine\nalso fine\ncaf\xe9\n")
    with pytest.raises(DataError, match=r"latin1\.txt:3: undecodable byte 0xe9"):
        read_records(path)


def test_missing_file_and_unknown_type(tmp_path):
    with pytest.raises(DataError, match=r"nope\.txt: file not found"):
        read_records(tmp_path / "nope.txt")
    (tmp_path / "x.json").write_text("{}")
    with pytest.raises(DataError, match=r"unsupported file type"):
        read_records(tmp_path / "x.json")


def test_corrupt_gzip(tmp_path):
    path = tmp_path / "s.txt.gz"
    path.write_bytes(b"not gzip at all")
    with pytest.raises(DataError, match=r"not a valid gzip"):
        read_records(path)


# ----------------------------------------------------------------------------- named-column formats
def test_jsonl_layouts_and_errors_name_the_line(tmp_path):
    from sentcl.data.readers import read_records

    unsup = tmp_path / "u.jsonl"
    unsup.write_text('{"sentence": "a dog runs", "id": 1}\n\n{"sentence": "a cat sleeps", "id": 2}\n')
    records = read_records(unsup)
    assert records.rows == [("a dog runs",), ("a cat sleeps",)] and records.lines == [1, 3]
    sup = tmp_path / "s.jsonl"
    sup.write_text('{"sent0": "a", "sent1": "b", "hard_neg": "c"}\n')
    assert read_records(sup).rows == [("a", "b", "c")]
    ease = tmp_path / "e.jsonl"
    ease.write_text('{"sentence": "Paris is big", "entity": "Paris"}\n')
    assert read_records(ease).rows == [("Paris is big", "Paris")]
    cases = {
        '{"sentence": "a"}\n{"sentence": \n': r"b\.jsonl:2: invalid JSON",
        '{"sentence": "a"}\n{"text": "b"}\n': r"b\.jsonl:2: no 'sentence'",
        '{"sentence": "a"}\n{"sentence": " "}\n': r"b\.jsonl:2: 'sentence' is empty",
        '{"sentence": 3}\n': r"b\.jsonl:1: 'sentence' is int, not text",
        '{"title": "a"}\n': r"b\.jsonl:1: columns \['title'\] match no layout",
        '["a"]\n': r"b\.jsonl:1: a JSON object",
    }
    bad = tmp_path / "b.jsonl"
    for text, message in cases.items():
        bad.write_text(text)
        with pytest.raises(DataError, match=message):
            read_records(bad)


def test_parquet_and_datasets_folders_with_row_numbers(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    from datasets import Dataset, DatasetDict

    from sentcl.data.readers import read_records

    table = pa.table({"sent0": ["a man", "a dog"], "sent1": ["a person", "an animal"], "score": [1, 2]})
    pq.write_table(table, tmp_path / "pairs.parquet")
    records = read_records(tmp_path / "pairs.parquet")
    assert records.rows == [("a man", "a person"), ("a dog", "an animal")]
    assert records.lines == [1, 2] and records.unit == "row"
    pq.write_table(pa.table({"sentence": ["ok", ""]}), tmp_path / "bad.parquet")
    with pytest.raises(DataError, match=r"bad\.parquet: row 2: 'sentence' is empty"):
        read_records(tmp_path / "bad.parquet")
    (tmp_path / "broken.parquet").write_text("not parquet")
    with pytest.raises(DataError, match="not a Parquet file"):
        read_records(tmp_path / "broken.parquet")
    Dataset.from_dict({"text": ["one sentence", "another one"]}).save_to_disk(str(tmp_path / "ds"))
    assert read_records(tmp_path / "ds").rows == [("one sentence",), ("another one",)]
    splits = DatasetDict({"test": Dataset.from_dict({"text": ["x"]})})
    splits.save_to_disk(str(tmp_path / "splits"))
    with pytest.raises(DataError, match="no 'train' split"):
        read_records(tmp_path / "splits")


def test_a_run_trains_from_jsonl_and_names_its_rows_on_error(tmp_path, tiny_model_dir):
    from sentcl.data import ContrastiveDataset
    from sentcl.data.readers import read_records
    from sentcl.model import SentenceEncoder

    path = tmp_path / "train.jsonl"
    path.write_text("".join(f'{{"sentence": "sentence number {i}"}}\n' for i in range(6)))
    dataset = ContrastiveDataset(read_records(path), SentenceEncoder.load(str(tiny_model_dir)).tokenizer)
    assert dataset.describe([0, 5]) == f"{path} lines [1, 6]"


def test_old_mac_line_ends_are_lines_and_a_nul_byte_is_no_text(tmp_path):
    """A file with \\r line ends was one example; a NUL byte in a CSV field was accepted."""
    from sentcl.data import read_sentences, read_table

    mac = tmp_path / "mac.txt"
    mac.write_bytes(b"a dog runs\ra cat sits\r\ra bird sings\r")
    assert [r[0] for r in read_sentences(mac).rows] == ["a dog runs", "a cat sits", "a bird sings"]
    mixed = tmp_path / "mixed.txt"
    mixed.write_bytes(b"one\r\ntwo\rthree\nfour")
    records = read_sentences(mixed)
    assert [r[0] for r in records.rows] == ["one", "two", "three", "four"] and records.lines == [1, 2, 3, 4]
    nul = tmp_path / "pairs.csv"
    nul.write_bytes(b"a dog,a cat\nthe man,the wo\x00man\n")
    with pytest.raises(DataError, match=r"pairs\.csv:2: a NUL byte"):
        read_table(nul)


def test_a_huge_line_is_cut_and_said_to_be(tmp_path, monkeypatch, caplog):
    """A 50 MB single-line file once trained at 7.3 GB: a line is read at most MAX_LINE_BYTES at a time."""
    import sentcl.text_files as text_files
    from sentcl.data import read_sentences

    monkeypatch.setattr(text_files, "MAX_LINE_BYTES", 64)
    path = tmp_path / "long.txt"
    path.write_text("short one\n" + "é" * 5000 + "\nafter\n", encoding="utf-8")
    with caplog.at_level("WARNING", logger="sentcl.text_files"):
        rows = [r[0] for r in read_sentences(path).rows]
    assert rows[0] == "short one" and rows[2] == "after"
    assert rows[1] == "é" * 32  # 64 bytes of a two-byte character, cut on a character boundary
    assert "long.txt:2: a line of 10,001 bytes, cut to its first 64" in caplog.text


def test_a_field_count_on_a_cut_line_is_a_lower_bound(tmp_path, monkeypatch):
    """1,000,002 fields were reported as "144962 field(s)": the count stopped where the line was cut."""
    import sentcl.text_files as text_files

    monkeypatch.setattr(text_files, "MAX_LINE_BYTES", 64)
    wide = tmp_path / "wide.csv"
    wide.write_text("a,b\n" + ",".join(["x"] * 1000) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"wide\.csv:2: at least 33 fields, expected 2 like the rows above"):
        read_records(wide)
    wide.write_text("a,b\n" + ",".join(["x"] * 10) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"wide\.csv:2: 10 field\(s\), expected 2"):
        read_records(wide)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"text": ' + "[" * 100_000 + "]" * 100_000 + "}", r"deep\.jsonl:2: JSON nested too deeply"),
        (
            '{"text": "a b", "n": ' + "9" * 100_000 + "}",
            r"deep\.jsonl:2: unreadable JSON \(Exceeds the limit",
        ),
    ],
)
def test_hostile_json_lines_are_one_error_naming_the_line(tmp_path, line, message):
    path = tmp_path / "deep.jsonl"
    path.write_text('{"text": "fine"}\n' + line + "\n")
    with pytest.raises(DataError, match=message):
        read_records(path)


def test_a_corrupt_parquet_page_is_one_error_naming_the_file(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "corpus.parquet"
    pq.write_table(pa.table({"text": [f"sentence {i} about a dog" for i in range(20_000)]}), path)
    data = bytearray(path.read_bytes())
    data[2000:2100] = bytes(b ^ 0xFF for b in data[2000:2100])  # inside the first data page
    path.write_bytes(bytes(data))
    with pytest.raises(DataError, match=r"corpus\.parquet: corrupt data after row 0"):
        read_records(path)
