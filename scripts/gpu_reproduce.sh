# How docs/reproduction_gpu.md is made on a lent GPU (the device tool): the repository plus .gpu/data (wiki,
# NLI, STS-B files), .gpu/tokenizer (the MiniLM tokenizer), .gpu/wordnet (Debian's WordNet 3.0 files, for
# CLINE), .whl (nltk and its small dependencies) and runs/data/ease_redocred.tsv (EASE's rows) travel. Stages
# are cached in runs/reproduce_gpu, so a call cut by the time limit is continued by the next one.
set -e
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src SENTCL_DATA=$PWD/.gpu/data HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
  PYTHONUNBUFFERED=1 SENTCL_WORDNET=$PWD/.gpu/wordnet SENTCL_CACHE=/tmp/sentcl-cache
nvidia-smi --query-gpu=name --format=csv,noheader
status=0
timeout "${LIMIT:-540}" python3 -m sentcl.cli.main reproduce configs/reproduce/gpu.yaml > /tmp/reproduce.log 2>&1 \
  || status=$?
grep -v "it/s\|s/it\|step/s\|sent/s" /tmp/reproduce.log | grep -v "^\s*$" | tail -25
mkdir -p $OUT/docs $OUT/runs
[ -f docs/reproduction_gpu.md ] && cp -r docs/reproduction_gpu.md docs/images/reproduction_gpu $OUT/docs/
(cd runs/reproduce_gpu && find . -name stage.json -o -name row.json -o -name metrics.jsonl | tar cf $OUT/runs/stages.tar -T -)
exit $status
