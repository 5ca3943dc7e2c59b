#!/usr/bin/env bash
# GPU check for kvctl (issue 11 item 7): on a machine with CUDA, end to end.
#
#   1. install   a venv with SGLang 0.5.23 and its GPU dependencies (sglang-kernel,
#                flashinfer, ...), then kvctl (editable, so SGLang finds kvctl's plugin
#                entry point) and its test tools
#   2. server    a real `python -m sglang.launch_server` on a tiny dummy-weight Llama
#                (--load-format dummy --skip-tokenizer-init --enable-metrics, KV events on,
#                KVCTL_SGLANG_PLUGIN=1)
#   3. ledger    requests with shared prefixes through /generate with input_ids; while they
#                run, kvctl inspect --url --plugin-url --json (or the plugin's /snapshot)
#                must show ledger residual 0 and delta_ref max 0
#   4. embedded  the embedded engine with --device cuda (replay, check) and the gpu-marked
#                tests: pools on CUDA, the tiny model's exact reuse on CUDA
#   5. overhead  the same load against the server with the plugin on and off (each from an
#                empty tree, after one warm-up pass): output tokens/s and their ratio
#                (one measured run each; noisy, read it as such)
#
# Usage: benchmarks/gpu_check.sh [--dry-run] [--skip-install] [--venv DIR] [--python PY]
#                                [--port N] [--keep-logs]
#   --dry-run       print the plan (every command, in order) and exit 0; runs nothing
#   --skip-install  use the venv as it is (a machine without network: prepare it first)
#   --venv DIR      the GPU venv (default .venv-gpu; never the CPU .venv, whose torch differs)
#   --python PY     interpreter for a new venv (default python3.11)
#   --port N        SGLang's HTTP port (default 30000; KV events N+57, replay N+58)
# Environment: KVCTL_PLUGIN_PORT (default 30100), ATTENTION_BACKEND (default triton),
#   SERVER_EXTRA_ARGS (appended to the launch line), LOAD_REQUESTS (default 128).
# Exit: 0 when every step passed, 1 when any failed (the summary names them), 2 bad usage.

set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
DRY_RUN=0
SKIP_INSTALL=0
VENV="$ROOT/.venv-gpu"
PYTHON_FOR_VENV=python3.11
PORT=30000
KEEP_LOGS=0
PLUGIN_PORT="${KVCTL_PLUGIN_PORT:-30100}"
ATTENTION_BACKEND="${ATTENTION_BACKEND:-triton}"
LOAD_REQUESTS="${LOAD_REQUESTS:-128}"
read -r -a EXTRA_ARGS <<<"${SERVER_EXTRA_ARGS:-}"

usage() { sed -n '2,/^$/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; }
die_usage() { echo "gpu_check.sh: $1" >&2; exit 2; }

while (($#)); do
  case "$1" in
    --dry-run) DRY_RUN=1 ;;
    --skip-install) SKIP_INSTALL=1 ;;
    --keep-logs) KEEP_LOGS=1 ;;
    --venv) [[ $# -ge 2 ]] || die_usage "--venv needs a directory"; VENV="$2"; shift ;;
    --python) [[ $# -ge 2 ]] || die_usage "--python needs an interpreter"; PYTHON_FOR_VENV="$2"; shift ;;
    --port) [[ $# -ge 2 && "$2" =~ ^[0-9]+$ ]] || die_usage "--port needs a number"; PORT="$2"; shift ;;
    -h|--help) usage; exit 0 ;;
    *) die_usage "unknown option $1 (see --help)" ;;
  esac
  shift
done
[[ "$PLUGIN_PORT" =~ ^[0-9]+$ ]] || die_usage "KVCTL_PLUGIN_PORT must be a number"
[[ "$LOAD_REQUESTS" =~ ^[0-9]+$ ]] || die_usage "LOAD_REQUESTS must be a number"

PY="$VENV/bin/python"
URL="http://127.0.0.1:$PORT"
PLUGIN_URL="http://127.0.0.1:$PLUGIN_PORT"
EVENTS_PORT=$((PORT + 57))
REPLAY_PORT=$((PORT + 58))
WORK="$(mktemp -d "${TMPDIR:-/tmp}/kvctl-gpu-check.XXXXXX")"
SERVER_PID=""
declare -a RESULTS=()
FAILED=0

# ---- helpers --------------------------------------------------------------------------

say() { printf '\n== %s\n' "$*"; }

# run CMD...: print it (on stderr, as `set -x` does, so stdout redirections stay clean);
# execute it unless --dry-run
run() {
  printf '+ %s\n' "$*" >&2
  ((DRY_RUN)) || "$@"
}

record() {  # record STEP STATUS [DETAIL]
  RESULTS+=("$(printf '%-9s %-5s %s' "$1" "$2" "${3:-}")")
  [[ "$2" == FAIL ]] && FAILED=1
  return 0
}

# shellcheck disable=SC2317  # invoked by the EXIT trap
cleanup() {
  stop_server
  if ((KEEP_LOGS)); then echo "logs kept in $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

write_model() {  # a tiny Llama: head_dim 64 so every GPU attention backend takes it
  printf '+ write %s (2 layers, hidden 256, 4 heads, 2 KV heads, head_dim 64, vocab 1024)\n' \
    "$WORK/model/config.json" >&2
  ((DRY_RUN)) && return 0
  mkdir -p "$WORK/model"
  cat >"$WORK/model/config.json" <<'JSON'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
 "intermediate_size": 512, "num_attention_heads": 4, "num_key_value_heads": 2,
 "head_dim": 64, "num_hidden_layers": 2, "vocab_size": 1024,
 "max_position_embeddings": 4096, "rope_theta": 10000.0, "rms_norm_eps": 1e-05,
 "hidden_act": "silu", "tie_word_embeddings": false, "torch_dtype": "bfloat16"}
JSON
}

server_command() {
  local events
  events="{\"publisher\":\"zmq\",\"endpoint\":\"tcp://127.0.0.1:$EVENTS_PORT\","
  events+="\"replay_endpoint\":\"tcp://127.0.0.1:$REPLAY_PORT\",\"topic\":\"kv\"}"
  SERVER_CMD=("$PY" -m sglang.launch_server --model-path "$WORK/model" --load-format dummy
    --skip-tokenizer-init --enable-metrics --host 127.0.0.1 --port "$PORT"
    --attention-backend "$ATTENTION_BACKEND" --page-size 16 --context-length 2048
    --max-total-tokens 65536 --mem-fraction-static 0.3 --cuda-graph-max-bs-decode 32
    --kv-events-config "$events" "${EXTRA_ARGS[@]}")
}

# start_server on|off: launch in the background with the plugin enabled or not; wait ready
start_server() {
  local plugin="$1" log="$WORK/server-plugin-$1.log" waited=0
  server_command
  local -a env_plugin=(env -u KVCTL_SGLANG_PLUGIN -u SGLANG_PLUGINS)
  [[ "$plugin" == on ]] && env_plugin=(env KVCTL_SGLANG_PLUGIN=1 KVCTL_PLUGIN_PORT="$PLUGIN_PORT")
  printf '+ %s %s > %s &\n' "${env_plugin[*]}" "${SERVER_CMD[*]}" "$log" >&2
  ((DRY_RUN)) && return 0
  "${env_plugin[@]}" "${SERVER_CMD[@]}" >"$log" 2>&1 &
  SERVER_PID=$!
  until curl -sf -o /dev/null "$URL/server_info"; do
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
      echo "the server exited; last lines of $log:" >&2
      tail -n 40 "$log" >&2
      SERVER_PID=""
      return 1
    fi
    ((waited++ < 900)) || { echo "server not ready after 900 s" >&2; tail -n 40 "$log" >&2; return 1; }
    sleep 1
  done
  # one request so the scheduler has logged pool gauges, then an empty tree
  curl -sf -o /dev/null -H 'Content-Type: application/json' \
    -d '{"input_ids":[1,2,3],"sampling_params":{"max_new_tokens":1}}' "$URL/generate"
  curl -sf -o /dev/null -X POST "$URL/flush_cache"
  echo "server up after ${waited} s (plugin $plugin)"
}

stop_server() {
  [[ -n "$SERVER_PID" ]] || return 0
  kill -TERM "$SERVER_PID" 2>/dev/null || true
  for _ in $(seq 1 60); do
    kill -0 "$SERVER_PID" 2>/dev/null || break
    sleep 1
  done
  kill -KILL "$SERVER_PID" 2>/dev/null || true
  wait "$SERVER_PID" 2>/dev/null || true
  SERVER_PID=""
}

# measure_load OUTFILE: the shared-prefix load twice from an empty tree, the first pass to
# warm the kernels (so neither server is timed while compiling), the second measured; its
# one JSON line goes to OUTFILE
measure_load() {
  local -a cmd=("$PY" "$ROOT/benchmarks/gpu_check_load.py" load --url "$URL"
    --requests "$LOAD_REQUESTS" --concurrency 32 --vocab 1024)
  run curl -sf -o /dev/null -X POST "$URL/flush_cache" &&
    run "${cmd[@]}" >/dev/null &&
    run curl -sf -o /dev/null -X POST "$URL/flush_cache" || return 1
  printf '+ %s > %s\n' "${cmd[*]}" "$1" >&2
  ((DRY_RUN)) || "${cmd[@]}" >"$1"
}

json_field() { "$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"; }

# ---- 1. install -------------------------------------------------------------------------

say "1. install into $VENV"
if ((SKIP_INSTALL)); then
  echo "--skip-install: using $VENV as it is"
  record install SKIP "--skip-install"
else
  if ((DRY_RUN)) || [[ ! -x "$PY" ]]; then run "$PYTHON_FOR_VENV" -m venv "$VENV"; fi
  PIP=("$PY" -m pip --disable-pip-version-check -q)
  if run "${PIP[@]}" install "sglang==0.5.23" &&
     run "${PIP[@]}" install -r "$ROOT/requirements/kvctl.txt" -r "$ROOT/requirements/dev.txt" &&
     run "${PIP[@]}" install --no-deps -e "$ROOT"; then
    record install PASS "sglang 0.5.23 with its GPU dependencies, kvctl editable"
  else
    record install FAIL "pip failed (no network? prepare $VENV and pass --skip-install)"
  fi
fi
if ! ((DRY_RUN)); then
  [[ -x "$PY" ]] || { echo "no python at $PY" >&2; exit 1; }
  "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' ||
    { echo "torch in $VENV sees no CUDA device: this check needs one" >&2; exit 1; }
  "$PY" -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda, torch.cuda.get_device_name(0))'
fi

write_model

# ---- 2-3. server with the plugin; ledger while requests run ----------------------------

say "2. SGLang server with kvctl's plugin on $URL (plugin $PLUGIN_URL)"
if start_server on; then
  record server PASS "launch_server up, plugin enabled"
  say "3. ledger while shared-prefix requests run"
  run curl -sf "$PLUGIN_URL/healthz" || record healthz FAIL "plugin /healthz did not answer"
  if run "$PY" "$ROOT/benchmarks/gpu_check_load.py" ledger --url "$URL" \
      --plugin-url "$PLUGIN_URL" --requests 64 --concurrency 16 --vocab 1024; then
    record ledger PASS "residual 0 and delta_ref max 0 on every read with requests running"
  else
    record ledger FAIL "a read with requests running had residual != 0 or delta_ref != 0"
  fi
  if run "$PY" -m kvctl inspect --url "$URL" --json >"$WORK/inspect.json"; then
    record inspect PASS "kvctl inspect --url reads the live server"
  else
    record inspect FAIL "kvctl inspect --url failed"
  fi
  measure_load "$WORK/load-plugin-on.json" || record load-on FAIL "load with the plugin failed"
  stop_server
else
  record server FAIL "launch_server did not come up (log above)"
fi

# ---- 4. embedded engine on CUDA ------------------------------------------------------------

say "4. embedded engine with --device cuda"
if run "$PY" -m kvctl replay "$ROOT/examples/scenarios/coding-agents.yaml" --limit 64 \
    --device cuda --json >"$WORK/replay-cuda.json"; then
  record replay PASS "kvctl replay --device cuda"
else
  record replay FAIL "kvctl replay --device cuda"
fi
if run "$PY" -m kvctl check --device cuda --steps 300; then
  record check PASS "kvctl check --device cuda: integrity after every step"
else
  record check FAIL "kvctl check --device cuda"
fi
if run "$PY" -m pytest -q -m gpu -p no:cacheprovider "$ROOT/tests/integration/test_engine_cuda.py"; then
  record exact PASS "gpu tests: pools on CUDA, exact reuse and host reload on CUDA (<= 1e-6)"
else
  record exact FAIL "gpu tests (tests/integration/test_engine_cuda.py)"
fi

# ---- 5. throughput with the plugin off (on was measured in step 3) ----------------------

say "5. throughput, plugin off"
if start_server off; then
  measure_load "$WORK/load-plugin-off.json" || record load-off FAIL "load without the plugin failed"
  stop_server
fi
if ((DRY_RUN)); then
  echo "(dry run: the ratio of output tokens/s, plugin on / off, is printed here)"
elif [[ -s "$WORK/load-plugin-on.json" && -s "$WORK/load-plugin-off.json" ]]; then
  on=$(json_field "$WORK/load-plugin-on.json" output_tokens_per_s)
  off=$(json_field "$WORK/load-plugin-off.json" output_tokens_per_s)
  ratio=$("$PY" -c "print(f'{$off / $on:.3f}')")
  echo "output tokens/s: plugin on $on, plugin off $off"
  echo "time with the plugin / time without = $ratio (target <= 1.02; one run each, noisy)"
  record overhead INFO "tokens/s on $on, off $off; time ratio on/off $ratio"
else
  record overhead FAIL "a load run is missing"
fi

# ---- summary --------------------------------------------------------------------------------

say "summary"
if ((DRY_RUN)); then echo "dry run: nothing was executed"; exit 0; fi
printf '%s\n' "${RESULTS[@]}"
exit "$FAILED"
