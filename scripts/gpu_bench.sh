# How the GPU rows of docs/benchmarks.md were measured on a lent H100 (the device tool): the repository plus
# .gpu/ (wiki + STS-B files, all-MiniLM-L6-v2 as fp16 to fit the transfer) and .whl/ (datasets 4.0.0, dill, multiprocess)
# travel; the weights are turned back into fp32 there before anything runs.
set -e
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src SENTCL_DATA=$PWD/.gpu/data HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 TRANSFORMERS_OFFLINE=1
mkdir -p /tmp/minilm && cp -r .gpu/minilm/* /tmp/minilm/ && rm /tmp/minilm/model.fp16.safetensors
python3 -c "
from safetensors.torch import load_file, save_file
w = load_file('.gpu/minilm/model.fp16.safetensors'); save_file({k: v.float() if v.is_floating_point() else v for k, v in w.items()}, '/tmp/minilm/model.safetensors')"
export SENTCL_BENCH_MODEL=/tmp/minilm
nvidia-smi --query-gpu=name --format=csv,noheader
python3 -c "import torch, transformers, sentence_transformers, datasets; print(torch.__version__, transformers.__version__, sentence_transformers.__version__, datasets.__version__)"
python3 benchmarks/bench.py --device cuda --repeats ${REPEATS:-3} ${QUICK:+--quick} --out $OUT/table_gpu.md --json $OUT/results_gpu.json
