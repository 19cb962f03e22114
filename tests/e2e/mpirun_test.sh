#!/usr/bin/env bash
# Under a real Open MPI mpirun (issue 10's launcher), pagellm reads its rank from mpirun's
# environment and bad layouts end the job with one clear line. (The multi-process run itself
# needs GPUs: it is run on the two-GPU machine, see docs/PERF.md.)
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${PAGELLM_BIN:-build/pagellm}
MODEL=${PAGELLM_SHARED_DIR:-../shared}/models/stories260K
source tests/e2e/lib.sh
command -v mpirun > /dev/null || fail "mpirun is not installed (scripts/setup.sh installs openmpi-bin)"
e2e_init
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
expect_error() {  # expect_error NP "message" FLAGS...
  local np=$1 msg=$2
  shift 2
  if timeout 60 mpirun -np "$np" "$BIN" generate --model "$MODEL" --prompt "Once" --max-tokens 4 "$@" \
      > "$TMP/out.txt" 2>&1; then
    fail "mpirun -np $np $* succeeded"
  fi
  # mpirun ends the job at the first process that exits non-zero, so the others may not get to speak.
  grep -q "^error: .*$msg" "$TMP/out.txt" ||
    { cat "$TMP/out.txt" >&2; fail "mpirun -np $np $*: no process said '$msg'"; }
  ! grep "^error: " "$TMP/out.txt" | grep -v "$msg" ||
    { cat "$TMP/out.txt" >&2; fail "mpirun -np $np $*: another error"; }
}
expect_error 3 "do not split evenly over the processes" --device cuda --tensor-parallel-size 2
expect_error 2 "needs --device cuda" --tensor-parallel-size 2
expect_error 2 "not with mpirun" --device cuda --tensor-parallel-size 2 --nnodes 2
expect_error 2 "replicas run in one process" --device cuda --data-parallel-size 2
echo "ok: mpirun layouts that cannot work end the job with one line"
