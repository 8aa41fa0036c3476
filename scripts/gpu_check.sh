#!/usr/bin/env bash
# Run: scripts/gpu_check.sh            (on a CUDA machine, after `make setup TORCH_INDEX=https://download.pytorch.org/whl/cu126`)
#      GPU_CHECK_BASE=tiny-random scripts/gpu_check.sh    (another base; the default is the embedded SmolLM2)
#
# The GPU day's checks, within 8 minutes, each printed as one PASS or FAIL line:
#   1. cuda       a CUDA device, its compute capability and bf16
#   2. train      `mint train` SFT on CUDA for a few steps: run.json must say the device was cuda and, where the GPU
#                 has bf16, that it trained in bf16
#   3. fsdp       `mint train --accelerate-config` with FSDP (accelerate launch) on one GPU as a smoke test: one
#                 rank, a registered revision
#   4. parity     the evaluation engine on CUDA: the greedy answers `mint eval` scores are the answers `mint serve`
#                 gives, byte for byte, both decoding on the GPU (scripts/gpu_check.py parity)
#   5. vllm       vLLM's GPU build started by `mint export vllm`'s launch.sh with the champion's adapter, behind
#                 `mint serve --upstream`: the gateway routes to the champion and passes vLLM's answer through
# It exits 1 when any check fails or the whole took more than 8 minutes; on a machine without CUDA it says so and
# exits 0. Work happens in a temporary project (GPU_CHECK_KEEP=DIR keeps it there instead).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PYTHON" ] || PYTHON=python3
BASE="${GPU_CHECK_BASE:-smollm2-135m}"
LIMIT_S=480
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
# transformers 5 on CUDA refuses a model without its `kernels` package unless hub kernels are off
export USE_HUB_KERNELS="${USE_HUB_KERNELS:-NO}"

started=$(date +%s)
failures=0
mint() { "$PYTHON" -m mint "$@"; }
pass() { echo "PASS $1: $2"; }
fail() { echo "FAIL $1: $2"; failures=$((failures + 1)); }

"$PYTHON" "$ROOT/scripts/gpu_check.py" cuda
case $? in
  0) ;;
  3) echo "no CUDA here: the GPU checks need a CUDA machine; nothing was run"; exit 0 ;;
  *) exit 1 ;;
esac

WORK="${GPU_CHECK_KEEP:-$(mktemp -d -t mint-gpu-check-XXXX)}"
mkdir -p "$WORK"
[ -n "${GPU_CHECK_KEEP:-}" ] || trap 'rm -rf "$WORK"' EXIT
PROJECT="$WORK/project"
if [ ! -f "$PROJECT/mint.yaml" ]; then
  mint init --dir "$PROJECT" > "$WORK/init.log" 2>&1 || { cat "$WORK/init.log"; exit 1; }
fi
cd "$PROJECT" || exit 1
sed -i "s/^base: .*/base: $BASE/" mint.yaml      # the project serves the base the checks train on
export MINT_HOME="$PROJECT/.mint"
# the smoke contract's live suite reads the dataset `smoke`
if ! mint ingest examples/logs --dataset smoke --json > "$WORK/ingest.log" 2>&1; then
  cat "$WORK/ingest.log"; exit 1
fi
SETTINGS=(--set trl.max_steps=6 --set trl.per_device_train_batch_size=4 --set trl.logging_steps=1 --set lora.r=8)

# 2. mint train on CUDA, bf16 where the GPU has it
t0=$(date +%s)
if mint train --specialist genui --data smoke --method sft --base "$BASE" "${SETTINGS[@]}" --json \
     > "$WORK/train.json" 2> "$WORK/train.log"; then
  verdict=$("$PYTHON" - "$WORK/train.json" "$MINT_HOME" <<'EOF'
import json, sys, torch
from pathlib import Path
result = json.loads(Path(sys.argv[1]).read_text())
run = json.loads((Path(sys.argv[2]) / "runs" / result["run"] / "run.json").read_text())
backend = run["effective"]["backend"]
want = "bf16" if torch.cuda.is_bf16_supported() else "fp32"
ok = backend["device"].startswith("cuda") and backend["precision"] == want
print(("ok " if ok else "bad ") + f"{result['ref']}: {result['steps']} steps on {backend['device']} in "
      f"{backend['precision']} (wanted {want}), loss {result['metrics'].get('train_loss')}")
EOF
)
  case "$verdict" in
    ok*) pass train "${verdict#ok } ($(( $(date +%s) - t0 )) s)" ;;
    *) fail train "${verdict#bad }" ;;
  esac
else
  fail train "mint train exited non-zero: $(tail -3 "$WORK/train.log")"
fi

# 3. accelerate launch with FSDP, one process on one GPU
cat > "$WORK/fsdp.yaml" <<'EOF'
compute_environment: LOCAL_MACHINE
distributed_type: FSDP
num_machines: 1
num_processes: 1
machine_rank: 0
mixed_precision: bf16
use_cpu: false
fsdp_config:
  fsdp_version: 1
  fsdp_sharding_strategy: FULL_SHARD
  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP
  fsdp_transformer_layer_cls_to_wrap: LlamaDecoderLayer
  fsdp_use_orig_params: true
  fsdp_state_dict_type: FULL_STATE_DICT
  fsdp_sync_module_states: true
  fsdp_cpu_ram_efficient_loading: false
  fsdp_offload_params: false
EOF
t0=$(date +%s)
if mint train --specialist genui --data smoke --method sft --base "$BASE" "${SETTINGS[@]}" \
     --accelerate-config "$WORK/fsdp.yaml" --num-processes 1 --json > "$WORK/fsdp.json" 2> "$WORK/fsdp.log"; then
  said=$("$PYTHON" -c "import json,sys; r=json.load(open(sys.argv[1])); print(r['ref'], r['steps'])" "$WORK/fsdp.json")
  pass fsdp "accelerate launch (FSDP, 1 process) trained and registered ${said% *} in ${said#* } steps ($(( $(date +%s) - t0 )) s)"
else
  fail fsdp "accelerate launch with FSDP exited non-zero: $(tail -3 "$WORK/fsdp.log")"
fi

# 4. and 5. need the champion: the first revision trained above
if mint promote genui:v1 --force --why "gpu check: the champion the engine and vLLM serve" > "$WORK/promote.log" 2>&1; then
  "$PYTHON" "$ROOT/scripts/gpu_check.py" parity --contract contracts/genui-smoke.yaml --ref genui:v1 \
    2> "$WORK/parity.log" || failures=$((failures + 1))
  "$PYTHON" "$ROOT/scripts/gpu_check.py" vllm --ref genui:v1 --out "$WORK/vllm-export" \
    2> "$WORK/vllm.log" || failures=$((failures + 1))
else
  fail parity "no champion to evaluate: $(tail -2 "$WORK/promote.log")"
  fail vllm "no champion to serve"
fi

elapsed=$(( $(date +%s) - started ))
if [ "$elapsed" -gt "$LIMIT_S" ]; then
  fail time "the checks took ${elapsed} s, more than ${LIMIT_S}"
fi
echo "gpu_check: ${failures} failure(s) in ${elapsed} s (logs: $WORK${GPU_CHECK_KEEP:+, kept})"
[ "$failures" -eq 0 ]
