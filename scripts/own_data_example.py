"""The worked example of docs/evaluation.md ("Your own data"): STS-B train written in the layouts a user's own
data comes in, so that `sentcl evaluate --tasks PATH` can be tried on files that are here.

    python scripts/own_data_example.py runs/own-data     # $SENTCL_DATA holds STS-B

writes
* ``stsb-train.tsv``: sentence1, sentence2, score (graded pairs → Spearman, Pearson);
* ``stsb-train-binary.tsv``: sentence1, sentence2, label (1: gold ≥ 4, 0: gold ≤ 1; the pairs between are
  left out of this file) → accuracy, F1, AP;
* ``stsb-train-beir/``: corpus.jsonl (every distinct second sentence), queries.jsonl (the first sentences
  of the pairs with gold ≥ 4) and qrels/test.tsv (graded: 2 for gold 5, 1 for gold in [4, 5)) → nDCG@10 …
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

from sentcl.evaluation import load_task, resolve_data_dir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument(
        "--split", default="train", help="the STS-B split (train: the one the reproduction reports)"
    )
    args = parser.parse_args()
    task = load_task(resolve_data_dir(download=False), "STSBenchmark", (args.split,))
    if task.missing:
        raise SystemExit(f"STS-B {args.split}: {task.missing}")
    pairs = task.datasets[args.split]
    rows = list(zip(pairs.sentences1, pairs.sentences2, pairs.scores.tolist(), strict=True))
    args.out.mkdir(parents=True, exist_ok=True)
    with (args.out / "stsb-train.tsv").open("w", newline="") as handle:
        writer = csv.writer(handle, delimiter="\t", quoting=csv.QUOTE_MINIMAL)
        writer.writerow(["sentence1", "sentence2", "score"])
        writer.writerows(rows)
    with (args.out / "stsb-train-binary.tsv").open("w", newline="") as handle:
        writer = csv.writer(handle, delimiter="\t", quoting=csv.QUOTE_MINIMAL)
        writer.writerow(["sentence1", "sentence2", "label"])
        writer.writerows((a, b, int(s >= 4)) for a, b, s in rows if s >= 4 or s <= 1)
    beir = args.out / "stsb-train-beir"
    (beir / "qrels").mkdir(parents=True, exist_ok=True)
    documents = {text: f"d{i}" for i, text in enumerate(dict.fromkeys(b for _, b, _ in rows))}
    queries: dict[str, str] = {}
    judgments: dict[tuple[str, str], int] = {}
    for first, second, score in rows:
        if score >= 4 and first != second:
            key = (queries.setdefault(first, f"q{len(queries)}"), documents[second])
            judgments[key] = max(judgments.get(key, 0), 2 if score == 5 else 1)
    with (beir / "corpus.jsonl").open("w") as handle:
        handle.writelines(json.dumps({"_id": i, "title": "", "text": t}) + "\n" for t, i in documents.items())
    with (beir / "queries.jsonl").open("w") as handle:
        handle.writelines(json.dumps({"_id": i, "text": t}) + "\n" for t, i in queries.items())
    with (beir / "qrels" / "test.tsv").open("w") as handle:
        handle.write("query-id\tcorpus-id\tscore\n")
        handle.writelines(f"{q}\t{d}\t{g}\n" for (q, d), g in judgments.items())
    print(f"{args.out}: {len(rows)} pairs; {len(queries)} queries over {len(documents)} documents")


if __name__ == "__main__":
    main()
