"""Write EASE's training rows from the shared Re-DocRED copy: python scripts/ease_pairs.py OUT.tsv"""

import csv
import os
import sys
from pathlib import Path

from sentcl.atomic_write import atomic_file
from sentcl.data.entity_pairs import redocred_entity_pairs

data = Path(os.environ.get("SENTCL_DATA", "../shared/data")) / "wiki" / "redocred"
rows = redocred_entity_pairs(sorted(data.glob("*_revised.json.gz")))
with atomic_file(sys.argv[1], encoding="utf-8") as handle:  # csv quoting keeps quotes in sentences intact
    writer = csv.writer(handle, delimiter="\t", lineterminator="\n")
    writer.writerow(["sentence", "entity", "hard_negative_entity"])
    writer.writerows(rows)
print(f"{len(rows)} rows, {len({r[1] for r in rows})} entities -> {sys.argv[1]}")
