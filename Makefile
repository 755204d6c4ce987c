# The two commands: `make demo` and `make test`. Each sets up .venv by itself.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PEERS  := benchmarks/peers/.venv/.installed
# torch==2.13.0 is the CPU build on this machine's disk; an unpinned torch pulls a multi-GB CUDA build.
TORCH  ?= torch==2.13.0

# Beside ../shared/data (the development layout) data and models are local and the hub is never asked.
# Elsewhere `make demo` downloads what it names (simcse:wiki1m, the SentEval bundle) into ~/.cache/sentcl.
ifneq ($(wildcard ../shared/data),)
export SENTCL_DATA ?= $(abspath ../shared/data)
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
endif
export TOKENIZERS_PARALLELISM := false
# The tests never reach for the hub, wherever they run (a local server plays it where a test needs one).
test test-min unit: export HF_HUB_OFFLINE := 1
test test-min unit: export TRANSFORMERS_OFFLINE := 1

# Debian's Chromium for the web-page test (Playwright drives it; it never downloads a browser), and
# Debian's WordNet 3.0 for CLINE (read with nltk's reader; nothing is downloaded at run time).
CHROMIUM := /usr/bin/chromium
WORDNET  := /usr/share/wordnet/data.noun
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: demo test test-min lint docs docs-check unit setup clean bench reproduce domain-study domain-study-cpu domain-students judgement-curve passages-study

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade "pip>=24"
	$(BIN)/pip install --quiet "$(TORCH)"
	$(BIN)/pip install --quiet -e ".[dev]"
	touch $@

demo: $(STAMP)
	$(BIN)/sentcl train configs/demo_simcse_unsup_minilm.yaml --output runs/demo --overwrite

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks scripts
	$(BIN)/ruff format --check src tests benchmarks scripts
	$(BIN)/lint-imports
	$(BIN)/mypy src/sentcl src/sentcl_reproduction
	$(BIN)/mypy --strict src/sentcl/objectives src/sentcl/training
	$(MAKE) --no-print-directory docs-check

# The documentation site (mkdocs.yml: guides, methods, the API reference from docstrings, reports). docs-check
# builds it with --strict: a broken link or anchor, an unresolved API reference or a page of docs/ left out of
# the navigation fails; `make docs` builds it into site/ and serves it at http://127.0.0.1:8001/.
export NO_MKDOCS_2_WARNING := 1
docs-check: $(STAMP)
	site=$$(mktemp -d) && $(BIN)/mkdocs build --strict --quiet --site-dir $$site; status=$$?; rm -rf $$site; exit $$status

docs: $(STAMP)
	$(BIN)/mkdocs build --strict
	$(BIN)/mkdocs serve --strict --dev-addr 127.0.0.1:8001

$(CHROMIUM):
	$(SUDO) apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium

$(WORDNET):
	$(SUDO) apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq wordnet-base

unit: $(STAMP) $(WORDNET)
	$(BIN)/pytest -m "not integration"

# The declared ranges, tested: the lowest versions pyproject.toml allows (uv's lowest-direct resolution; torch
# pinned as above), then the unit tests that go through other libraries. A floor that fails here is raised in
# pyproject.toml, not skipped. The tests of sentcl's own machinery on torch alone (torch is the same pinned
# build in both environments: objectives' maths, ranks under torchrun, checkpoints and resume, GradCache,
# Child-Tuning, checkpoint selection, the reproduction's stage cache, folder consent, the docs' command lines)
# run once, in `make test`: here they would test the same code on the same torch a second time.
SAME_IN_BOTH := tests/objectives tests/training/test_distributed.py tests/training/test_checkpoint.py \
	tests/training/test_gradcache.py tests/training/test_child_tuning.py tests/training/test_selection.py \
	tests/reproduction tests/cli/test_output_consent.py tests/cli/test_docs_commands.py tests/model/test_parallel.py \
	tests/test_docs_site.py
MIN := .venv-min
test-min: $(CHROMIUM) $(WORDNET)
	rm -rf $(MIN)
	$(PYTHON) -m venv $(MIN)
	$(MIN)/bin/pip install --quiet "uv>=0.5"
	$(MIN)/bin/uv pip install --quiet --python $(MIN)/bin/python --resolution lowest-direct \
		$(if $(wildcard /opt/wheels),--find-links /opt/wheels) "$(TORCH)" -e ".[dev]"
	$(MIN)/bin/pytest -m "not integration" $(addprefix --ignore=,$(SAME_IN_BOTH))

test: lint $(CHROMIUM) $(WORDNET)
	$(BIN)/pytest --durations=25

# sentcl against sentence-transformers on this machine (about 50 min on 2 cores, the students about 30 of them):
# docs/benchmarks.md and docs/students.md explain it.
# PARTS=encode (or train, sts, sts7, profile, students, comma-separated) runs those groups only; PARTS=scale
# (not in the default: about 2 h) runs benchmarks/scale.py (docs/scale.md); a part that fails is a
# row of the table with its error, and the rest still runs.
PARTS ?= train,encode,sts,sts7,profile,students
bench: $(STAMP) $(PEERS)
	mkdir -p runs/bench
	$(BIN)/python benchmarks/bench.py --sts7-stand-in --parts $(PARTS) --out runs/bench/table.md \
		--json runs/bench/results.json

# sentence-transformers 5.x with its onnx and openvino extras, which cannot share sentcl's transformers 5:
# the peer at its best documented inference paths, in an environment of its own
# (from a lock: every package pinned, so a fresh machine gets the versions the bench last ran whole with)
$(PEERS): benchmarks/peers/requirements.lock
	$(PYTHON) -m venv benchmarks/peers/.venv
	benchmarks/peers/.venv/bin/pip install --quiet --upgrade "pip>=24"
	benchmarks/peers/.venv/bin/pip install --quiet "$(TORCH)"
	benchmarks/peers/.venv/bin/pip install --quiet --no-deps -r benchmarks/peers/requirements.lock
	benchmarks/peers/.venv/bin/pip check
	touch $@

# The seeds' findings at CPU scale (docs/reports/reproduction.md): makes two MLM encoders, then measures baselines,
# post-processing and every method under one protocol (a search, 3 seeds); stages are cached in runs/reproduce,
# so a re-run only redoes what changed.
# the domain study (docs/domain.md): every adaptation method on SciFact, chosen on train, reported on test;
# resumable (each run is a sentcl adapt folder under runs/domain-study); on a GPU, JOBS=8 trains eight
# runs at once (docs/reports/domain.md section 5)
JOBS ?= 1
domain-study: $(STAMP)
	$(BIN)/python -m sentcl_reproduction.domain_study configs/domain/study.yaml --jobs $(JOBS)

# the same study sized for 2 CPU cores (configs/domain/study_cpu.yaml: 100 steps, ICT's passages at 128 tokens,
# the report in bf16 where native; about 4 h, resumable under runs/domain-study-cpu; docs/reports/domain.md section 5c)
domain-study-cpu: $(STAMP)
	$(BIN)/python -m sentcl_reproduction.domain_study configs/domain/study_cpu.yaml

# how many judgements SciFact needs: all-MiniLM-L6-v2 fine-tuned on 50 … all of its labelled train queries, with
# and without mined hard negatives, 3 seeds, and a label-free stage first (configs/domain/judgements_cpu.yaml;
# resumable under runs/judgement-curve-cpu; SIZES=all SEEDS=42 runs a part; the report docs/reports/)
judgement-curve: $(STAMP)
	$(BIN)/python -m sentcl_reproduction.judgement_curve configs/domain/judgements_cpu.yaml \
		$(if $(SIZES),--sizes $(SIZES)) $(if $(SEEDS),--seeds $(SEEDS))

# long documents as passages against truncation on SciFact's test judgements, for all-MiniLM-L6-v2 and the
# judgement curve's fine-tuned model (needs its all-hard seed-42 run); the report docs/reports/passages_cpu.md
passages-study: $(STAMP)
	$(BIN)/python -m sentcl_reproduction.passages_study configs/domain/passages_cpu.yaml

# static students of the study's adapted model (chosen on train judgements, or TEACHER=method) and of the
# start, on SciFact's sentences: their test nDCG@10 and speed (docs/reports/domain.md section 6, made with
# TEACHER=simcse); needs the study's runs of that start
TEACHER ?=
domain-students: $(STAMP)
	$(BIN)/python -m sentcl_reproduction.domain_student configs/domain/study.yaml --start all-MiniLM-L6-v2 \
		--out docs/reports/domain_students.md $(if $(TEACHER),--teacher $(TEACHER))

reproduce: $(STAMP) runs/data/ease_redocred.tsv
	$(BIN)/sentcl reproduce configs/reproduce/cpu.yaml

# EASE's (sentence, entity, hard-negative entity) rows from the shared Re-DocRED copy
runs/data/ease_redocred.tsv: $(STAMP)
	$(BIN)/python scripts/ease_pairs.py $@

clean:
	rm -rf $(VENV) $(MIN) runs .pytest_cache .ruff_cache
