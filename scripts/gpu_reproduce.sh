# How docs/reproduction_gpu.md (and, with configs/reproduce/gpu_minilm.yaml, docs/reproduction_minilm_mlm.md)
# is made on a lent GPU (the device tool): the repository plus .gpu/data (wiki,
# NLI, STS-B files), .gpu/tokenizer (the MiniLM tokenizer), .gpu/wordnet (Debian's WordNet 3.0 files, for
# CLINE), .whl (nltk and its small dependencies) and runs/data/ease_redocred.tsv (EASE's rows) travel; for the MiniLM plan
# .gpu/minilm (all-MiniLM-L6-v2 as fp16) instead of .gpu/wordnet and the EASE rows. Stages
# are cached in runs/reproduce_gpu, so a call cut by the time limit is continued by the next one.
set -e
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src SENTCL_DATA=$PWD/.gpu/data HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
  PYTHONUNBUFFERED=1 SENTCL_WORDNET=$PWD/.gpu/wordnet SENTCL_CACHE=/tmp/sentcl-cache
nvidia-smi --query-gpu=name --format=csv,noheader
PLAN=${1:-configs/reproduce/gpu.yaml}
if [ -d .gpu/minilm ] && [ ! -d /tmp/minilm ]; then  # all-MiniLM-L6-v2 travels as fp16: back to fp32 first
  mkdir -p /tmp/minilm && cp -r .gpu/minilm/* /tmp/minilm/ && rm /tmp/minilm/model.fp16.safetensors
  python3 -c "
from safetensors.torch import load_file, save_file
w = load_file('.gpu/minilm/model.fp16.safetensors')
save_file({k: v.float() if v.is_floating_point() else v for k, v in w.items()}, '/tmp/minilm/model.safetensors')"
fi
status=0
timeout "${LIMIT:-540}" python3 -m sentcl.cli.main reproduce "$PLAN" > /tmp/reproduce.log 2>&1 || status=$?
grep -v "it/s\|s/it\|step/s\|sent/s" /tmp/reproduce.log | grep -v "^\s*$" | tail -25
mkdir -p $OUT/docs $OUT/runs
cp -r docs/reproduction_*.md docs/images $OUT/docs/ 2>/dev/null || true
find runs -name stage.json -o -name row.json -o -name metrics.jsonl | tar cf $OUT/runs/stages.tar -T -
exit $status
