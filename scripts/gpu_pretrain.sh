# How runs/pretrain/raw_bert_6l_384_gpu was made on a lent H100 (the device tool; see docs/pretraining.md):
# the repository plus .gpu/ (wiki + NLI + STS-B files, the MiniLM tokenizer) and .whl/ (faiss-cpu for Python 3.12)
# travel; a 300-step probe sizes the run to the time left, the weights come back as fp16 parts of 15 MB.
set -e
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src SENTCL_DATA=$PWD/.gpu/data HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total --format=csv
python3 -c "import torch, transformers; print(torch.__version__, transformers.__version__)"
R=configs/pretrain/raw_bert_6l_384_gpu.yaml
T=model.tokenizer=$PWD/.gpu/tokenizer
# 1. probe: 300 steps, no evaluation, to size the run to the time left
s=$(date +%s.%N)
python3 -m sentcl.cli.main -q pretrain $R $T training.max_steps=300 training.eval_steps=0 --output /tmp/probe 2>&1 | grep -v "it/s\|s/it\|step/s\|sent/s" | tail -3
e=$(date +%s.%N)
per=$(python3 -c "import json;r=[json.loads(l) for l in open('/tmp/probe/metrics.jsonl')];a=[x for x in r if 'seconds' in x];print((a[-1]['seconds']-a[0]['seconds'])/(a[-1]['step']-a[0]['step']))")
echo "probe wall $(python3 -c "print($e-$s)") s, $per s/step"
steps=$(python3 -c "print(min(int(${STEPS:-8000}), int(${BUDGET:-330}/$per)//100*100))")
echo "main run: $steps steps"
python3 -m sentcl.cli.main pretrain $R $T training.max_steps=$steps --output runs/pretrain/raw_bert_6l_384 2>&1 | grep -v "it/s\|s/it\|step/s\|sent/s" | tail -5
cp runs/pretrain/raw_bert_6l_384/metrics.jsonl runs/pretrain/raw_bert_6l_384/mlm_loss.png runs/pretrain/raw_bert_6l_384/config.yaml runs/pretrain/raw_bert_6l_384/summary.json $OUT/
python3 - <<'PY'
import torch, os
from transformers import AutoModelForMaskedLM
m = AutoModelForMaskedLM.from_pretrained("runs/pretrain/raw_bert_6l_384/model").half()
m.save_pretrained("/tmp/half", max_shard_size="2GB")
PY
cd /tmp/half && tar cf /tmp/model.tar . && cd - && split -b 15M -d /tmp/model.tar $OUT/model.tar.part && ls -la $OUT
