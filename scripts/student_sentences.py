"""Write the students' training sentences: the shared wiki sentences, then every distinct sentence of the NLI
triplets (premise, entailment, contradiction; unlabelled here) not among them, sorted. One per line.

    python scripts/student_sentences.py OUT.txt
"""

import csv
import gzip
import os
import sys
from pathlib import Path

from sentcl.atomic_write import atomic_file

data = Path(os.environ.get("SENTCL_DATA", "../shared/data"))
with gzip.open(data / "wiki" / "sentences.txt.gz", "rt", encoding="utf-8") as handle:
    wiki = [line.rstrip("\n") for line in handle if line.strip()]
nli: set[str] = set()
with gzip.open(data / "nli" / "triplets.csv.gz", "rt", encoding="utf-8", newline="") as handle:
    rows = csv.reader(handle)
    next(rows)  # sent0,sent1,hard_neg
    for row in rows:
        nli.update(" ".join(cell.split()) for cell in row if cell.strip())
seen = set(wiki)
extra = sorted(nli - seen)
with atomic_file(sys.argv[1], encoding="utf-8") as out:
    out.write("\n".join(wiki + extra) + "\n")
print(f"{len(wiki)} wiki + {len(extra)} NLI sentences -> {sys.argv[1]}")
