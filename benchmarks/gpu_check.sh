#!/usr/bin/env bash
# GPU check for kvctl (issues 11 and 27): one call on the lent GPU machine (no network,
# python3 = Python 3.12 with torch 2.11 and Triton, 10 minutes a call), every step timed and
# bounded, everything measured written under $OUT as JSON.
#
#   env       the GPU and torch as python3 sees them
#   install   the carried wheels (.whl/, made here by benchmarks/gpu_wheels.sh) into a target
#             folder with --no-index; dist-info folders so SGLang finds kvctl's plugin and the
#             no-kernel CUDA platform (benchmarks/gpu/cuda_nokernel_platform.py)
#   probe     what SGLang resolves under that platform on the real GPU (nokernel_probe.py)
#   replay    the embedded engine on CUDA: kvctl replay --device cuda
#   check     kvctl check --device cuda: integrity after every step
#   rust-core informational: whether SGLang's bundled Rust tree core runs with this torch (the
#             check uses SGLang's Python tree core: the Rust one crashed with torch 2.11 here)
#   gputests  the gpu-marked tests (tests/integration/test_engine_cuda.py)
#   server-on a real `sglang.launch_server` on the GPU (tiny dummy-weight Llama, metrics, KV
#             events, Triton attention, torch sampling) with kvctl's plugin
#   ledger    shared-prefix load; the plugin's ledger read while requests run must have
#             free + evictable + protected + private = pool (residual 0) and delta_ref 0
#   hits      the plugin's hit tokens over one load == the cached tokens SGLang's replies report
#   inspect   kvctl inspect --url on the live server
#   load-on   output tokens/s with the plugin (one warm-up pass, then one measured)
#   server-off, load-off   the same without the plugin; the ratio is reported
#
# Usage: benchmarks/gpu_check.sh [--offline|--online] [--dry-run] [--wheels DIR] [--site DIR]
#                                [--budget SECONDS] [--port N]
#   --offline   install from the carried wheels, no index (the default; the lent machine)
#   --online    pip install benchmarks/gpu/wheels.txt's pins from the index instead
#   --dry-run   print the plan, each step's expected and maximum seconds; run nothing
#   --wheels    the carried wheels (default .whl)    --site  target folder (default /tmp/site)
#   --budget    every step ends within this many seconds of the start (default 540: a device
#               call is stopped at 600 s, and the report must be written before)
#   --port      SGLang's HTTP port (default 30000; KV events N+57, replay N+58, plugin N+100)
# Environment: OUT (default out/gpu-check): gpu-check.json (every step and figure),
#   gpu-check.log, server-on.log, server-off.log. PYTHON (default python3).
# Exit: 0 when every step passed, 1 when any failed (the summary names them), 2 bad usage.

set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 1
MODE=offline DRY_RUN=0 WHEELS="$ROOT/.whl" SITE=/tmp/site BUDGET=540 PORT=30000
PY="${PYTHON:-python3}"
OUT="${OUT:-$ROOT/out/gpu-check}"

die_usage() { echo "gpu_check.sh: $1" >&2; exit 2; }
ARGS=("$@")
while (($#)); do
  case "$1" in
    --offline) MODE=offline ;;
    --online) MODE=online ;;
    --dry-run) DRY_RUN=1 ;;
    --wheels) [[ $# -ge 2 ]] || die_usage "--wheels needs a directory"; WHEELS="$2"; shift ;;
    --site) [[ $# -ge 2 ]] || die_usage "--site needs a directory"; SITE="$2"; shift ;;
    --budget) [[ $# -ge 2 && "$2" =~ ^[0-9]+$ ]] || die_usage "--budget needs seconds"; BUDGET="$2"; shift ;;
    --port) [[ $# -ge 2 && "$2" =~ ^[0-9]+$ ]] || die_usage "--port needs a number"; PORT="$2"; shift ;;
    -h|--help) sed -n '2,/^$/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) die_usage "unknown option $1 (see --help)" ;;
  esac
  shift
done

URL="http://127.0.0.1:$PORT"
PLUGIN_PORT=$((PORT + 100))
PLUGIN_URL="http://127.0.0.1:$PLUGIN_PORT"
STARTED=$SECONDS
SERVER_PID=""
LOAD=("$PY" "$ROOT/benchmarks/gpu_check_load.py")
LOAD_ARGS=(--url "$URL" --vocab 1024 --groups 4 --prefix 256 --suffix 32)

# The step table: name, expected seconds on an H100 (estimates: nothing has run there yet),
# the cap. Expected seconds add up to the plan's total; caps are cut to the budget left.
PLAN=(env:5:30 install:15:90 probe:20:90 replay:40:120 check:40:120 rust-core:15:45
  gputests:60:150 server-on:60:180 ledger:25:90 hits:10:60 inspect:10:60 load-on:30:120
  server-off:45:150 load-off:30:120)
declare -A EXPECT CAP
for entry in "${PLAN[@]}"; do
  IFS=: read -r name expect cap <<<"$entry"
  EXPECT[$name]=$expect CAP[$name]=$cap
done

if ((DRY_RUN)); then
  total=0
  printf '%-10s %9s %6s  %s\n' step expected cap "(seconds; the budget is ${BUDGET} s, a call's limit 600 s)"
  for entry in "${PLAN[@]}"; do
    IFS=: read -r name expect cap <<<"$entry"
    printf '%-10s %9s %6s\n' "$name" "$expect" "$cap"
    total=$((total + expect))
  done
  printf 'total      %9s s expected in the call (+ about 120 s to start the machine and copy the tree) = %s s of the 900 s of device time\n' \
    "$total" "$((total + 120))"
  echo "mode $MODE: wheels $WHEELS -> $SITE; server on $URL, plugin $PLUGIN_URL; report $OUT/gpu-check.json"
  echo "dry run: nothing was executed"
  exit 0
fi

mkdir -p "$OUT"
if [[ -z "${KVCTL_GPU_CHECK_TEED:-}" ]]; then  # everything printed also goes to the log
  KVCTL_GPU_CHECK_TEED=1 bash "${BASH_SOURCE[0]}" "${ARGS[@]}" 2>&1 | tee "$OUT/gpu-check.log"
  exit "${PIPESTATUS[0]}"
fi
WORK="$(mktemp -d "${TMPDIR:-/tmp}/kvctl-gpu-check.XXXXXX")"
STEPS="$WORK/steps.tsv"
: >"$STEPS"

# nokernel_settings.SERVER_ENV: the platform, no sglang-kernel version check, SGLang's Python
# tree core (the bundled Rust one does not run with torch 2.11: docs/gpu-check.md)
eval "$("$PY" -c 'from benchmarks.gpu.nokernel_settings import SERVER_ENV as E
print("\n".join(f"export {k}={v}" for k, v in E.items()))')"
export KVCTL_TEST_TREE_CORE="$SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
export PYTHONPATH="$SITE:$ROOT:$ROOT/benchmarks/gpu/nokernel"

# step NAME FILE CMD...: run CMD bounded by the step's cap (cut to the budget left), stdout
# to $WORK/FILE (or the log for -), one row in the step table. A shell function of this file
# runs in a child bash (timeout needs a program) with the variables it reads.
step() {
  local name="$1" file="$2" rc start left cap
  shift 2
  left=$((BUDGET - (SECONDS - STARTED) - 5))
  cap=$((CAP[$name] < left ? CAP[$name] : left))
  if ((cap < 5)); then
    printf '%s\tSKIP\t0\t%s\t%s\tno budget left\n' "$name" "${EXPECT[$name]}" "$cap" >>"$STEPS"
    return 1
  fi
  printf '\n== %s (expected %s s, cap %s s)\n+ %s\n' "$name" "${EXPECT[$name]}" "$cap" "$*"
  local -a cmd=("$@")
  if declare -F "$1" >/dev/null; then
    cmd=(bash -c "$(declare -p ROOT PY SITE MODE WHEELS URL LOAD LOAD_ARGS); $(declare -f "$1" post); \"\$@\"" "$name" "$@")
  fi
  start=$SECONDS
  if [[ "$file" == - ]]; then timeout -k 5 "$cap" "${cmd[@]}"; rc=$?
  else timeout -k 5 "$cap" "${cmd[@]}" >"$WORK/$file"; rc=$?; fi
  local status=PASS
  ((rc == 0)) || status=FAIL
  ((rc == 124 || rc == 137)) && status=TIMEOUT
  printf '%s\t%s\t%s\t%s\t%s\texit %s\n' "$name" "$status" "$((SECONDS - start))" \
    "${EXPECT[$name]}" "$cap" "$rc" >>"$STEPS"
  return "$rc"
}

install_site() {
  rm -rf "$SITE" && mkdir -p "$SITE" || return 1
  if [[ "$MODE" == offline ]]; then
    compgen -G "$WHEELS/*.whl" >/dev/null || { echo "no wheels in $WHEELS (benchmarks/gpu_wheels.sh makes them)"; return 1; }
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --disable-pip-version-check --target "$SITE" "$WHEELS"/*.whl || return 1
  else
    "$PY" -m pip install -q --no-deps --only-binary=:all: --disable-pip-version-check \
      --target "$SITE" -r "$ROOT/benchmarks/gpu/wheels.txt" || return 1
  fi
  "$PY" "$ROOT/benchmarks/gpu/dist_info.py" "$SITE"
}

write_model() {  # a tiny Llama: head_dim 64 so Triton attention takes it
  mkdir -p "$WORK/model"
  cat >"$WORK/model/config.json" <<'JSON'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
 "intermediate_size": 512, "num_attention_heads": 4, "num_key_value_heads": 2,
 "head_dim": 64, "num_hidden_layers": 2, "vocab_size": 1024,
 "max_position_embeddings": 4096, "rope_theta": 10000.0, "rms_norm_eps": 1e-05,
 "hidden_act": "silu", "tie_word_embeddings": false, "torch_dtype": "bfloat16"}
JSON
}

# launch on|off: start the server in the background, the plugin enabled or not
launch() {
  local plugin="$1" events flags
  events="{\"publisher\":\"zmq\",\"endpoint\":\"tcp://127.0.0.1:$((PORT + 57))\","
  events+="\"replay_endpoint\":\"tcp://127.0.0.1:$((PORT + 58))\",\"topic\":\"kv\"}"
  flags=$("$PY" -c 'from benchmarks.gpu.nokernel_settings import SERVER_FLAGS as F; print(" ".join(F))')
  local -a env_plugin=(env -u KVCTL_SGLANG_PLUGIN -u SGLANG_PLUGINS)
  [[ "$plugin" == on ]] && env_plugin=(env KVCTL_SGLANG_PLUGIN=1 KVCTL_PLUGIN_PORT="$PLUGIN_PORT")
  # shellcheck disable=SC2086  # SERVER_FLAGS are single words
  "${env_plugin[@]}" "$PY" -m sglang.launch_server --model-path "$WORK/model" \
    --load-format dummy --skip-tokenizer-init --enable-metrics --host 127.0.0.1 \
    --port "$PORT" --page-size 16 --context-length 2048 --max-total-tokens 65536 \
    --mem-fraction-static 0.3 --kv-events-config "$events" $flags \
    >"$OUT/server-$plugin.log" 2>&1 &
  SERVER_PID=$!
}

# post URL [JSON]: one POST (python, since the image may have no curl); exit 1 on any error
post() {
  "$PY" -c 'import sys, urllib.request as r
r.urlopen(r.Request(sys.argv[1], data=(sys.argv[2] if len(sys.argv) > 2 else "").encode(),
  headers={"Content-Type": "application/json"}, method="POST"), timeout=60).read()' "$@" 2>/dev/null
}

# ready PID LOG: wait until the server answers a request (its first forward compiles the
# Triton kernels), then empty its tree; fail if it exits
ready() {
  until post "$URL/generate" '{"input_ids":[1,2,3],"sampling_params":{"max_new_tokens":2}}'; do
    kill -0 "$1" 2>/dev/null || { echo "the server exited:"; tail -n 30 "$2"; return 1; }
    sleep 1
  done
  post "$URL/flush_cache"
}

stop_server() {
  [[ -n "$SERVER_PID" ]] || return 0
  kill -TERM "$SERVER_PID" 2>/dev/null
  for _ in $(seq 1 20); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 1; done
  pkill -KILL -P "$SERVER_PID" 2>/dev/null
  kill -KILL "$SERVER_PID" 2>/dev/null
  wait "$SERVER_PID" 2>/dev/null
  SERVER_PID=""
}

gpu_tests() {  # the gpu-marked tests must pass on the GPU: a skip there fails the step
  local log rc
  log=$("$PY" -m pytest -q -rs -m gpu -p no:cacheprovider "$ROOT/tests/integration/test_engine_cuda.py" 2>&1)
  rc=$?
  echo "$log"
  ((rc == 0)) || return "$rc"
  ! tail -n 1 <<<"$log" | grep -q skipped
}

measure() {  # one warm-up pass (Triton compiles), then the measured one
  post "$URL/flush_cache" &&
    "${LOAD[@]}" load "${LOAD_ARGS[@]}" --requests 128 --concurrency 32 >/dev/null &&
    post "$URL/flush_cache" &&
    "${LOAD[@]}" load "${LOAD_ARGS[@]}" --requests 128 --concurrency 32
}

# shellcheck disable=SC2317  # invoked by the EXIT trap
finish() {
  stop_server
  "$PY" "$ROOT/benchmarks/gpu/check_report.py" "$WORK" "$OUT/gpu-check.json" \
    --budget "$BUDGET" --seconds "$((SECONDS - STARTED))"
  local rc=$?
  rm -rf "$WORK"
  exit "$rc"
}
trap finish EXIT

echo "kvctl GPU check, mode $MODE, budget ${BUDGET} s; report in $OUT"
step env env.json "$PY" -c 'import json, platform, torch, triton
gpu = torch.cuda.is_available()
print(json.dumps({"python": platform.python_version(), "torch": torch.__version__,
  "cuda": torch.version.cuda, "triton": triton.__version__, "cuda_available": gpu,
  "gpu": torch.cuda.get_device_name(0) if gpu else None}))'
cat "$WORK/env.json"
step install - install_site || exit 1
write_model
step probe probe.json "$PY" "$ROOT/benchmarks/gpu/nokernel_probe.py" --model-path "$WORK/model"
step replay replay.json "$PY" -m kvctl replay "$ROOT/examples/scenarios/coding-agents.yaml" \
  --limit 64 --device cuda --tree-core "$KVCTL_TEST_TREE_CORE" --json
step check - "$PY" -m kvctl check --device cuda --steps 300 --tree-core "$KVCTL_TEST_TREE_CORE"
# informational (not counted in the verdict): does SGLang's bundled Rust tree core run with
# this torch on CUDA? On the CPU with torch 2.11 it crashed (SIGSEGV, exit 139)
step rust-core rust-core.json "$PY" -m kvctl replay "$ROOT/examples/scenarios/coding-agents.yaml" \
  --limit 8 --device cuda --tree-core rust --json
step gputests gputests.txt gpu_tests
launch on
if step server-on - ready "$SERVER_PID" "$OUT/server-on.log"; then
  step ledger ledger.jsonl "${LOAD[@]}" ledger "${LOAD_ARGS[@]}" --plugin-url "$PLUGIN_URL" \
    --requests 64 --concurrency 16
  step hits hits.json "${LOAD[@]}" hits "${LOAD_ARGS[@]}" --plugin-url "$PLUGIN_URL" --requests 32
  step inspect inspect.json "$PY" -m kvctl inspect --url "$URL" --plugin-url "$PLUGIN_URL" --json
  step load-on load-on.json measure
fi
stop_server
launch off
if step server-off - ready "$SERVER_PID" "$OUT/server-off.log"; then
  step load-off load-off.json measure
fi
stop_server
