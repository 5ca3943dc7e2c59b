#!/usr/bin/env bash
# The wheel set for the lent GPU machine (issue 27 item 1), made here, with the network.
#
#   benchmarks/gpu_wheels.sh [--dest DIR] [--prove] [--proof-dir DIR]
#
#   fetch   pip downloads every `name==version` of benchmarks/gpu/wheels.txt as a cp312
#           manylinux x86-64 wheel (--no-deps --only-binary=:all:, as the device tool's
#           README says) into DIR (default .whl/, git-ignored); a file of DIR that the list
#           does not name is removed, so the set holds one version of each
#   size    the set plus the working tree that travels (tracked and untracked-not-ignored
#           files) against the 64 MiB a device call carries; one carry, or an order of
#           carries, each under the limit, is printed and written to DIR/carries.json
#   --prove a Python 3.12 venv (pyenv's 3.12, or python3.12 on PATH) stands in for the image:
#           benchmarks/gpu/image-packages.txt installed from PyPI (torch 2.11.0 with its CUDA
#           wheels, transformers 5.17.0, ...); then the set goes in exactly as on the device
#           (`pip install --no-index --no-deps --target SITE DIR/*.whl`), and with
#           PYTHONPATH=SITE the check's import closure (benchmarks/gpu/import_closure.py) must
#           import, name only distributions of the image or the set; `kvctl replay` must run,
#           the gpu-marked tests collect, and a real SGLang server (CPU platform) with kvctl's
#           plugin must pass the check's hits and ledger probes (benchmarks/gpu/prove_runtime.py).
#           Downloads about 3.5 GB the first time (torch and its CUDA wheels); kept in DIR.
#
# Exit: 0 all good, 1 a download, size or proof step failed (named), 2 bad usage.

set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
DEST="$ROOT/.whl"
PROVE=0
PROOF="${TMPDIR:-/tmp}/kvctl-gpu-proof"
LIMIT=$((64 * 1024 * 1024))
LIST="$ROOT/benchmarks/gpu/wheels.txt"
IMAGE="$ROOT/benchmarks/gpu/image-packages.txt"
PY="${PYTHON:-python3}"

die_usage() { echo "gpu_wheels.sh: $1" >&2; exit 2; }
while (($#)); do
  case "$1" in
    --dest) [[ $# -ge 2 ]] || die_usage "--dest needs a directory"; DEST="$2"; shift ;;
    --prove) PROVE=1 ;;
    --proof-dir) [[ $# -ge 2 ]] || die_usage "--proof-dir needs a directory"; PROOF="$2"; shift ;;
    -h|--help) sed -n '2,/^$/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) die_usage "unknown option $1 (see --help)" ;;
  esac
  shift
done

PLATFORMS=()
for tag in manylinux_2_34 manylinux_2_28 manylinux_2_27 manylinux_2_17 manylinux2014 manylinux1; do
  PLATFORMS+=(--platform "${tag}_x86_64")
done
mapfile -t PINS < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$LIST")

# ---- fetch ----------------------------------------------------------------------------
mkdir -p "$DEST"
echo "== fetch ${#PINS[@]} wheels into $DEST"
"$PY" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
  --python-version 3.12 --implementation cp --abi cp312 "${PLATFORMS[@]}" \
  -d "$DEST" "${PINS[@]}" 2>&1 | { grep -v "is ignored: it is neither" || true; }
"$PY" "$ROOT/benchmarks/gpu/wheel_set.py" prune "$DEST" "$LIST"

# ---- size -----------------------------------------------------------------------------
echo "== size against the device call's ${LIMIT} bytes"
tree_bytes=$(git ls-files -z --cached --others --exclude-standard | xargs -0 du -cb 2>/dev/null |
  tail -n 1 | cut -f1)
"$PY" "$ROOT/benchmarks/gpu/wheel_set.py" carries "$DEST" --tree-bytes "$tree_bytes" \
  --limit "$LIMIT" | tee "$DEST/carries.txt"

((PROVE)) || exit 0

# ---- prove ----------------------------------------------------------------------------
echo "== prove in $PROOF (Python 3.12 standing in for the image)"
PY312=""
for candidate in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python3.12 "$(command -v python3.12 || true)"; do
  [[ -x "$candidate" ]] && "$candidate" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' &&
    { PY312="$candidate"; break; }
done
[[ -n "$PY312" ]] || { echo "no Python 3.12 here (pyenv's versions/3.12*, python3.12): cannot prove" >&2; exit 1; }
VENV="$PROOF/venv"
SITE="$PROOF/site"
[[ -x "$VENV/bin/python" ]] || "$PY312" -m venv "$VENV"
mapfile -t IMAGE_PINS < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$IMAGE")
echo "+ image: pip install ${#IMAGE_PINS[@]} packages of $(basename "$IMAGE") into $VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-compile "${IMAGE_PINS[@]}" \
  2>&1 | { grep -v "is ignored: it is neither" || true; }
rm -rf "$SITE"
echo "+ the device's install: pip install --no-index --no-deps --target $SITE $DEST/*.whl"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-index --no-deps \
  --no-compile --no-cache-dir --upgrade --target "$SITE" "$DEST"/*.whl
export PYTHONPATH="$SITE:$ROOT"
"$VENV/bin/python" -m pip list --format json --disable-pip-version-check >"$PROOF/image-list.json"
echo "+ import closure under Python 3.12"
"$VENV/bin/python" "$ROOT/benchmarks/gpu/import_closure.py" --json >"$PROOF/closure.json"
"$PY" "$ROOT/benchmarks/gpu/wheel_set.py" cover "$PROOF/closure.json" "$LIST"
echo "+ the embedded engine (kvctl replay, SGLang's Python tree core) under Python 3.12"
"$VENV/bin/python" -m kvctl replay "$ROOT/examples/scenarios/coding-agents.yaml" --limit 16 \
  --tree-core python --json >"$PROOF/replay.json"
echo "+ the gpu-marked tests collect (they skip without CUDA)"
"$VENV/bin/python" -m pytest -q --co -m gpu -p no:cacheprovider \
  "$ROOT/tests/integration/test_engine_cuda.py" | tail -n 1
echo "+ a real SGLang server (CPU platform) with kvctl's plugin, under Python 3.12"
"$VENV/bin/python" "$ROOT/benchmarks/gpu/prove_runtime.py" --workdir "$PROOF/server"
echo "proof passed: Python 3.12, the image's packages, the set from $DEST, no index"
