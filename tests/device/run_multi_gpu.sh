#!/usr/bin/env bash
# The multi-GPU runs of issues 10 (two GPUs) and 17 (four), from a bundle made by
# make_multi_gpu_bundle.sh, in parts that each fit one device call:
#   bash BUNDLE/run_multi_gpu.sh BUNDLE basics | hf | big | fused | four | four70 | four70tput |
#        four70decode | fourproc | ppflight
# basics: ceilings (copy bandwidth + bf16 GEMM rate per GPU, NCCL bus bandwidth); pycode-25M greedy
#         TP=2 / PP=2 / two processes (TCP rendezvous and mpirun) against TP=1; failure paths (a rank
#         that fails or hangs, a worker process killed under `serve`); Llama-3.1-8B shapes batch-1
#         decode TP=1 / TP=2 / PP=2.
# hf:     Llama-3.1-8B shapes (random HF checkpoint): teacher-forced agreement with HF fp32 for
#         TP=1 / TP=2 / PP=2.
# big:    Llama-3.1-70B shapes (dummy bf16): TP=2 batch-1 decode, bench throughput
#         1000 x (1024 in, 128 out), PP=2 vs TP=2 at 256 requests.
# four, four70, four70tput, four70decode: the four-GPU runs (see each function); fourproc:
# four_processes alone.
# ppflight: batches in flight (issue 10, two GPUs; see the function).
# big_tp2: big's TP=2 figures alone.
# allreduce: the one-shot all-reduce checked and timed, pycode TP=2 against TP=1, 8B batch-1 decode
#         TP=1 / TP=2 / TP=2 over NCCL only; on four GPUs also pycode TP=4 and 8B TP=4.
# $OUT gets summary.txt and logs.tar.xz only (the device tool returns at most 8 files).
set -uo pipefail
SRC=$(cd "${1:?usage: run_multi_gpu.sh BUNDLE basics|hf|big|fused|four|four70|four70tput|four70decode|fourproc|ppflight[_check|_tput]}" && pwd)
PART=${2:?usage: run_multi_gpu.sh BUNDLE basics|hf|big|fused|four|four70|four70tput|four70decode|fourproc|ppflight[_check|_tput]|tenrun|allreduce|big_tp2}
OUTDIR=${OUT:-./device-logs}
LOGS=/tmp/mgpu-logs
rm -rf "$LOGS" && mkdir -p "$LOGS" "$OUTDIR"
B=/tmp/pagellm-mgpu
rm -rf "$B" && cp -r "$SRC" "$B"
[ -d "$SRC-models" ] && cp -r "$SRC-models" "$B/models"  # pycode-25M, carried for `basics` only
find "$B" -name "*.xz" -exec xz -d -f {} +
for m in llama31-8b llama31-70b; do cp "$B"/tokenizers/llama3/* "$B/$m/"; done
chmod +x "$B"/pagellm "$B"/nccl_bench "$B"/cuda_probe
NCCL_DIR=$(python3 -c "import nvidia.nccl, os; print(os.path.join(os.path.dirname(nvidia.nccl.__file__), 'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${NCCL_DIR:-/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib}:${LD_LIBRARY_PATH:-}
export NCCL_NVLS_ENABLE=0
SUMMARY=$OUTDIR/summary.txt
: > "$SUMMARY"
say() { echo "[${SECONDS}s] $*" | tee -a "$SUMMARY"; }
finish() {
  tar -C "$LOGS" -cJf "$OUTDIR/logs.tar.xz" . 2>/dev/null
  echo; echo "===== summary ====="; cat "$SUMMARY"
}
trap finish EXIT
P=$B/pagellm
say "$PART: $(nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader | tr '\n' ';') $(date -u +%FT%TZ)"
# same_tokens REF.jsonl GOT.jsonl -> identical sequences; a sequence that differs passes the
# closeness rule (as engine_check's) when, at its first difference, each run's token is in the
# other's top-2 logprobs there (a near-tie that bf16 reduction order may split).
same_tokens() {
  python3 - "$1" "$2" <<'PY' 2>&1 | tail -1
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
same, notes, ok = 0, [], len(a) == len(b) == 8
for x, y in zip(a, b):
    if x["token_ids"] == y["token_ids"]:
        same += 1
        continue
    t = next((i for i, (p, q) in enumerate(zip(x["token_ids"], y["token_ids"])) if p != q), None)
    if t is None or "logprobs" not in x or "logprobs" not in y:
        ok = False
        notes.append("lengths differ" if t is None else "no logprobs")
        continue
    tx = dict((int(k), v) for k, v in x["logprobs"][t]["top"])
    ty = dict((int(k), v) for k, v in y["logprobs"][t]["top"])
    close = y["token_ids"][t] in tx and x["token_ids"][t] in ty
    ok &= close
    gap = max(tx.values()) - sorted(tx.values())[-2] if len(tx) > 1 else float("nan")
    notes.append(f"step {t}: top-2 gap {gap:.3f} {'close' if close else 'NOT close'}")
print(f"{same} of {len(a)} identical; {notes or ''} -> {'PASS' if ok else 'FAIL'}")
PY
}
NGPU=$(nvidia-smi -L | wc -l)
ceilings() {
  # Every GPU's probe at once (one GPU each), then NCCL over all of them.
  for g in $(seq 0 $((NGPU - 1))); do
    CUDA_VISIBLE_DEVICES=$g timeout 120 "$B/cuda_probe" > "$LOGS/probe$g.log" 2>&1 &
  done
  wait
  for g in $(seq 0 $((NGPU - 1))); do
    say "probe GPU$g: $(grep -iE 'copy|gemm|tflop|GB/s' "$LOGS/probe$g.log" | tr '\n' ' ' | cut -c1-200)"
  done
  timeout 120 "$B/nccl_bench" ${1:-256} > "$LOGS/nccl_bench.log" 2>&1
  say "nccl (exit $?):"; tee -a "$SUMMARY" < "$LOGS/nccl_bench.log"
}
# 8 Python prompts, greedy, 64 tokens: pycode NAME [FLAGS...] (PYCODE=pycode-draft-10M picks the
# smaller trained model, when that is the one carried)
pycode() {
  local name=$1; shift
  timeout 120 "$P" generate --device cuda --model "$B/models/${PYCODE:-pycode-25M}" --prompts-file "$B/py_prompts.jsonl" \
    --temperature 0 --max-tokens 64 --ignore-eos --max-num-seqs 16 --logprobs 2 "$@" \
    --output "$LOGS/pycode_$name.jsonl" > "$LOGS/pycode_$name.out" 2> "$LOGS/pycode_$name.err"
}
# pycode TP=1, then TP=2 with the peer all-reduce and with NCCL only, each against TP=1.
pycode_tp2_against_tp1() {
  pycode tp1; say "pycode tp1 (exit $?)"
  pycode tp2 --tensor-parallel-size 2; say "pycode tp2 (exit $?): vs tp1: $(same_tokens "$LOGS/pycode_tp1.jsonl" "$LOGS/pycode_tp2.jsonl")"
  pycode tp2nccl --tensor-parallel-size 2 --disable-custom-all-reduce; say "pycode tp2, NCCL only (exit $?): vs tp1: $(same_tokens "$LOGS/pycode_tp1.jsonl" "$LOGS/pycode_tp2nccl.jsonl")"
}
# A run that must fail within a bounded time: expect_failure NAME SECONDS ENV... -- FLAGS...
expect_failure() {
  local name=$1 limit=$2; shift 2
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  local t0=$(date +%s)
  env "${envs[@]}" timeout $((limit + 30)) "$P" generate --device cuda --model "$B/models/pycode-25M" \
    --prompts-file "$B/py_prompts.jsonl" --temperature 0 --max-tokens 64 --ignore-eos "$@" \
    > "$LOGS/fail_$name.out" 2> "$LOGS/fail_$name.err"
  local rc=$? dt=$(( $(date +%s) - t0 ))
  local verdict=FAIL
  [ $rc != 0 ] && [ $rc != 124 ] && [ $dt -le "$limit" ] && verdict=PASS
  say "failure path $name: exit $rc after $dt s (limit $limit s) $verdict; last error: $(grep -iE 'error' "$LOGS/fail_$name.err" | tail -1 | cut -c1-220)"
}

write_py_prompts() {
  cat > "$B/py_prompts.jsonl" <<'JSONL'
{"prompt": "def parse_args(argv):\n"}
{"prompt": "class Config:\n    def __init__(self, path):\n"}
{"prompt": "import os\nimport sys\n\n\ndef main():\n"}
{"prompt": "def fibonacci(n):\n    if n < 2:\n"}
{"prompt": "for i in range(10):\n    print("}
{"prompt": "with open(filename) as f:\n    for line in f:\n"}
{"prompt": "try:\n    import numpy as np\nexcept ImportError:\n"}
{"prompt": "def __repr__(self):\n        return"}
JSONL
}

kill_worker_under_serve() {
  # A worker process killed mid-run under serve: unhealthy, requests end with an error, exit non-zero within 30 s.
  CUDA_VISIBLE_DEVICES=1 "$P" serve --device cuda --model "$B/models/pycode-25M" --tensor-parallel-size 2 \
    --nnodes 2 --node-rank 1 --master-port 29612 > "$LOGS/kill_worker.out" 2>&1 &
  local WPID=$!
  CUDA_VISIBLE_DEVICES=0 "$P" serve --device cuda --model "$B/models/pycode-25M" --tensor-parallel-size 2 \
    --nnodes 2 --node-rank 0 --master-port 29612 --port 18080 > "$LOGS/kill_leader.out" 2>&1 &
  local LPID=$!
  for i in $(seq 90); do curl -sf localhost:18080/health >/dev/null && break; sleep 1; done
  curl -s -m 60 localhost:18080/v1/completions -H 'Content-Type: application/json' \
    -d '{"model":"pycode-25M","prompt":"def f(x):","max_tokens":3000,"ignore_eos":true}' > "$LOGS/kill_request.json" &
  local CPID=$!
  sleep 0.5; kill -9 $WPID; local T0=$(date +%s)
  sleep 1; local h=$(curl -s -m 2 -o /dev/null -w '%{http_code}' localhost:18080/health)
  timeout 45 tail --pid=$LPID -f /dev/null; local dt=$(( $(date +%s) - T0 ))
  kill -0 $LPID 2>/dev/null && { say "leader still running after $dt s: killing it"; kill -9 $LPID; }
  wait $LPID; local rc=$?
  wait $CPID
  say "worker killed: /health 1 s later = $h, leader exit code $rc after $dt s; request: $(head -c 300 "$LOGS/kill_request.json")"

}

# Llama-3.1-8B shapes, batch-1 decode: decode_8b NAME:FLAGS...
decode_8b() {
  for cfg in "$@"; do
    local name=${cfg%%:*}
    timeout 150 "$P" bench throughput --model "$B/llama31-8b" --load-format dummy --device cuda \
      --num-prompts 1 --input-len 32 --output-len 1024 --max-model-len 2048 --max-num-seqs 16 ${cfg#*:} \
      > "$LOGS/decode8b_$name.log" 2>&1
    say "8B batch-1 decode $name (exit $?): $(grep -E 'Throughput' "$LOGS/decode8b_$name.log")"
  done
}

basics() {
  ceilings 64
  write_py_prompts
  pycode tp1; say "pycode-25M tp1 (exit $?)"
  pycode tp2 --tensor-parallel-size 2; say "pycode-25M tp2 (exit $?): identical greedy sequences to tp1: $(same_tokens "$LOGS/pycode_tp1.jsonl" "$LOGS/pycode_tp2.jsonl")"
  pycode pp2 --pipeline-parallel-size 2; say "pycode-25M pp2 (exit $?): identical to tp1: $(same_tokens "$LOGS/pycode_tp1.jsonl" "$LOGS/pycode_pp2.jsonl")"
  pycode tp2eager --tensor-parallel-size 2 --enforce-eager; say "pycode-25M tp2 eager (exit $?): identical to tp1: $(same_tokens "$LOGS/pycode_tp1.jsonl" "$LOGS/pycode_tp2eager.jsonl")"

  # Two processes with one GPU each: the TCP rendezvous, then mpirun.
  for r in 1 0; do
    CUDA_VISIBLE_DEVICES=$r pycode 2proc_$r --tensor-parallel-size 2 --nnodes 2 --node-rank $r --master-port 29611 &
  done
  wait
  say "pycode-25M TP=2 as two processes (--nnodes 2, TCP): identical to tp1: $(same_tokens "$LOGS/pycode_tp1.jsonl" "$LOGS/pycode_2proc_0.jsonl")"
  MPIRUN=$(command -v mpirun || true)
  if [ -z "$MPIRUN" ] && ls "$B"/mpidebs/*.deb >/dev/null 2>&1; then
    # Debian 12's Open MPI, unpacked beside the system (only paths that do not exist are linked).
    R=/tmp/mpiroot; mkdir -p $R
    for f in "$B"/mpidebs/*.deb; do dpkg -x "$f" $R; done
    for d in /usr/lib/x86_64-linux-gnu/openmpi /usr/lib/x86_64-linux-gnu/pmix2 /usr/share/openmpi /usr/share/pmix /etc/openmpi; do
      [ -e "$d" ] || { mkdir -p "$(dirname "$d")"; ln -s "$R$d" "$d"; }
    done
    export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$R/usr/lib/x86_64-linux-gnu
    MPIRUN=$R/usr/bin/orterun
  fi
  say "mpirun: ${MPIRUN:-none} $("${MPIRUN:-false}" --version 2>&1 | head -1)"
  if [ -n "$MPIRUN" ]; then
    timeout 150 "$MPIRUN" --allow-run-as-root --oversubscribe -np 2 -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE=0 \
      "$P" generate --device cuda --model "$B/models/pycode-25M" --prompts-file "$B/py_prompts.jsonl" \
      --temperature 0 --max-tokens 64 --ignore-eos --max-num-seqs 16 --logprobs 2 --tensor-parallel-size 2 \
      --output "$LOGS/pycode_mpirun.jsonl" > "$LOGS/pycode_mpirun.out" 2> "$LOGS/pycode_mpirun.err"
    say "pycode-25M TP=2 under mpirun -np 2 (exit $?): identical to tp1: $(same_tokens "$LOGS/pycode_tp1.jsonl" "$LOGS/pycode_mpirun.jsonl")"
  fi

  # Failure paths: a rank that fails, a rank that hangs (the step watchdog, then the grace period).
  expect_failure tp2_rank1_fails 60 PAGELLM_INJECT_FAULT=1:5 -- --tensor-parallel-size 2
  expect_failure pp2_rank0_fails 60 PAGELLM_INJECT_FAULT=0:5 -- --pipeline-parallel-size 2
  expect_failure pp2_rank1_fails 60 PAGELLM_INJECT_FAULT=1:5 -- --pipeline-parallel-size 2
  expect_failure pp2_rank0_hangs 60 PAGELLM_INJECT_FAULT=0:5:hang PAGELLM_STEP_TIMEOUT_S=5 -- --pipeline-parallel-size 2
  expect_failure tp2_2proc_rank1_fails 60 PAGELLM_INJECT_FAULT=1:5 -- --tensor-parallel-size 2 --nnodes 2 --node-rank 0 --master-port 29613 &
  CUDA_VISIBLE_DEVICES=1 PAGELLM_INJECT_FAULT=1:5 timeout 90 "$P" generate --device cuda --model "$B/models/pycode-25M" \
    --prompts-file "$B/py_prompts.jsonl" --temperature 0 --max-tokens 64 --ignore-eos --tensor-parallel-size 2 \
    --nnodes 2 --node-rank 1 --master-port 29613 > "$LOGS/fail_2proc_worker.out" 2>&1
  say "  (its worker process exited $?)"
  wait
  kill_worker_under_serve
  decode_8b "tp1:" "tp2:--tensor-parallel-size 2" "pp2:--pipeline-parallel-size 2"
}

hf() {
  ceilings 64
  write_py_prompts
  pycode_tp2_against_tp1
  grep -h "all-reduces" "$LOGS"/pycode_tp2*.err | head -2 | tee -a "$SUMMARY"
  kill_worker_under_serve
  decode_8b "tp1:" "tp2:--tensor-parallel-size 2" "tp2nccl:--tensor-parallel-size 2 --disable-custom-all-reduce"
  agreement llama3-8b 330 "tp1=" "tp2=--tensor-parallel-size 2" "pp2=--pipeline-parallel-size 2"
}

big() {
  ceilings 256
  decode_70b "tp2:--tensor-parallel-size 2"
  tput_70b tp2 256 128 128 150 --tensor-parallel-size 2
  tput_70b pp2 256 128 128 150 --pipeline-parallel-size 2
  tput_70b tp2_1000 ${BIG_PROMPTS:-1000} 1024 128 ${BIG_TPUT_LIMIT:-330} --tensor-parallel-size 2
}

# The all-reduce fused with the residual add + RMSNorm: its check and timing (nccl_bench), pycode-25M
# TP=2 against TP=1, and batch-1 decode at 8B (TP=1 / TP=2) and 70B (TP=2) shapes.
fused() {
  ceilings 64
  write_py_prompts
  pycode tp1; say "pycode-25M tp1 (exit $?)"
  pycode tp2 --tensor-parallel-size 2; say "pycode-25M tp2 (exit $?): vs tp1: $(same_tokens "$LOGS/pycode_tp1.jsonl" "$LOGS/pycode_tp2.jsonl")"
  decode_8b "tp1:" "tp2:--tensor-parallel-size 2"
  decode_70b "tp2:--tensor-parallel-size 2"
}

# Four GPUs (issue 17), part 1: ceilings; pycode-25M PP=4 / TP=2 x PP=2 (in one process, as four
# processes over TCP, under mpirun -np 4) against TP=1; failures in a group of four; 8B batch-1
# decode TP=1 / 2 / 4; HF fp32 agreement at 8B shapes for TP=1 / 2 / 4, PP=4, TP=2 x PP=2.
four() {
  timeout 120 python3 "$B/make_embedding_reference.py" "$B/models/pycode-25M" "$OUTDIR/pycode_embeddings_ref.json" \
    > "$LOGS/embedding_reference.log" 2>&1
  say "pycode-25M HF fp32 embedding reference (exit $?): $(tail -1 "$LOGS/embedding_reference.log")"
  ceilings 256
  write_py_prompts
  pycode tp1; say "pycode-25M tp1 (exit $?)"
  pycode pp4 --pipeline-parallel-size 4; say "pycode-25M pp4 (exit $?): vs tp1: $(same_tokens "$LOGS/pycode_tp1.jsonl" "$LOGS/pycode_pp4.jsonl")"
  pycode tp2pp2 --tensor-parallel-size 2 --pipeline-parallel-size 2; say "pycode-25M tp2 x pp2 (exit $?): vs tp1: $(same_tokens "$LOGS/pycode_tp1.jsonl" "$LOGS/pycode_tp2pp2.jsonl")"
  four_processes
  expect_failure tp2pp2_rank3_fails 60 PAGELLM_INJECT_FAULT=3:5 -- --tensor-parallel-size 2 --pipeline-parallel-size 2
  expect_failure pp4_rank2_hangs 60 PAGELLM_INJECT_FAULT=2:5:hang PAGELLM_STEP_TIMEOUT_S=5 -- --pipeline-parallel-size 4
  decode_8b "tp1:" "tp2:--tensor-parallel-size 2" "tp4:--tensor-parallel-size 4"
  agreement llama3-8b 330 "${FOUR_GPU_CONFIGS[@]}"
}

# pycode-25M over four processes of one GPU each, against TP=1 (pycode tp1 first): PP=4 at the TCP
# rendezvous (--nnodes 4), TP=2 x PP=2 under mpirun -np 4.
four_processes() {
  for r in 3 2 1 0; do
    CUDA_VISIBLE_DEVICES=$r pycode 4proc_$r --pipeline-parallel-size 4 --nnodes 4 --node-rank $r --master-port 29621 &
  done
  wait
  say "pycode-25M PP=4 as four processes (--nnodes 4, TCP): vs tp1: $(same_tokens "$LOGS/pycode_tp1.jsonl" "$LOGS/pycode_4proc_0.jsonl")"
  if command -v mpirun >/dev/null; then
    timeout 90 mpirun --allow-run-as-root --oversubscribe -np 4 -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE=0 \
      "$P" generate --device cuda --model "$B/models/pycode-25M" --prompts-file "$B/py_prompts.jsonl" \
      --temperature 0 --max-tokens 64 --ignore-eos --max-num-seqs 16 --logprobs 2 --tensor-parallel-size 2 \
      --pipeline-parallel-size 2 --output "$LOGS/pycode_mpirun.jsonl" > "$LOGS/pycode_mpirun.out" 2> "$LOGS/pycode_mpirun.err"
    say "pycode-25M TP=2 x PP=2 under mpirun -np 4 (exit $?): vs tp1: $(same_tokens "$LOGS/pycode_tp1.jsonl" "$LOGS/pycode_mpirun.jsonl")"
  fi
}

# agreement ARCH SECONDS NAME=FLAGS...: teacher-forced agreement with HF fp32 (tp_agreement.py).
agreement() {
  local arch=$1 limit=$2; shift 2
  mkdir -p /tmp/tpa && cp -r "$B/tokenizers" /tmp/tpa/
  timeout "$limit" python3 "$B/tp_agreement.py" --pagellm "$P" --tokenizers /tmp/tpa/tokenizers --work /tmp/tpa \
    --logs "$LOGS" --arch "$arch" "$@" > "$LOGS/tp_agreement_$arch.log" 2>&1
  say "HF fp32 agreement, $arch (exit $?):"; grep -E "^\||ERROR" "$LOGS/tp_agreement_$arch.log" | tee -a "$SUMMARY"
}
FOUR_GPU_CONFIGS=("tp1=" "tp2=--tensor-parallel-size 2" "tp4=--tensor-parallel-size 4"
  "pp4=--pipeline-parallel-size 4" "tp2pp2=--tensor-parallel-size 2 --pipeline-parallel-size 2")

# decode_70b NAME:FLAGS...: Llama-3.1-70B shapes (dummy bf16), batch-1 decode of 256 tokens.
decode_70b() {
  for cfg in "$@"; do
    local name=${cfg%%:*}
    timeout 200 "$P" bench throughput --model "$B/llama31-70b" --load-format dummy --device cuda \
      --max-model-len 4096 --gpu-memory-utilization 0.95 --num-prompts 1 --input-len 32 --output-len 256 \
      --max-num-seqs 16 ${cfg#*:} > "$LOGS/decode70b_$name.log" 2>&1
    say "70B batch-1 decode $name (exit $?): $(grep -E 'Throughput' "$LOGS/decode70b_$name.log")"
  done
}

# tput_70b NAME PROMPTS IN OUT SECONDS FLAGS...: bench throughput at 70B shapes, 256 sequences at most.
tput_70b() {
  local name=$1 n=$2 in=$3 out=$4 limit=$5; shift 5
  # Never past $BUDGET_S seconds into the part (the device call's own limit).
  local left=$(( ${BUDGET_S:-100000} - SECONDS ))
  [ "$left" -lt "$limit" ] && limit=$left
  [ "$limit" -lt 30 ] && { say "70B $name: skipped, the call's time is spent"; return; }
  timeout "$limit" "$P" bench throughput --model "$B/llama31-70b" --load-format dummy --device cuda \
    --max-model-len 4096 --gpu-memory-utilization 0.95 --num-prompts "$n" --input-len "$in" \
    --output-len "$out" --max-num-seqs 256 "$@" > "$LOGS/tput70b_$name.log" 2>&1
  say "70B $name $n x ($in in, $out out) (exit $?): $(grep -E 'Throughput' "$LOGS/tput70b_$name.log")"
}

# Part 2: HF fp32 agreement at 70B layer shapes (8 layers, so that HF fp32 fits one GPU); 70B batch-1
# decode TP=4 / TP=2 / PP=4 / TP=2 x PP=2; bench throughput 1000 x (1024, 128) at TP=4.
four70() {
  agreement llama3-70b-8l 300 "${FOUR_GPU_CONFIGS[@]}"
  decode_70b "tp4:--tensor-parallel-size 4" "tp2:--tensor-parallel-size 2" \
    "tp4nccl:--tensor-parallel-size 4 --disable-custom-all-reduce" "pp4:--pipeline-parallel-size 4"
  tput_70b tp4_1000 1000 1024 128 240 --tensor-parallel-size 4
}

# 70B batch-1 decode only, TP=4 beside TP=2, with the ceilings (a short call after a decode change).
four70decode() {
  ceilings 64
  decode_70b "tp4:--tensor-parallel-size 4" "tp2:--tensor-parallel-size 2"
}

# Part 3: pycode-25M over four processes; the same 1000 x (1024, 128) at TP=2 (the scaling
# baseline, same machine), then 256 x (128, 128) at TP=4, PP=4 and TP=2 x PP=2.
four70tput() {
  ceilings 64
  write_py_prompts
  pycode tp1; say "pycode-25M tp1 (exit $?)"
  four_processes
  tput_70b tp2_1000 1000 1024 128 330 --tensor-parallel-size 2
  tput_70b tp4_256 256 128 128 90 --tensor-parallel-size 4
  tput_70b pp4_256 256 128 128 120 --pipeline-parallel-size 4
  tput_70b tp2pp2_256 256 128 128 120 --tensor-parallel-size 2 --pipeline-parallel-size 2
}

# Batches in flight (issue 10) on two GPUs: pycode-25M PP=2 with two batches in flight and with one
# (--max-batches-in-flight 1), in one process and as two processes, against TP=1; the failure paths
# with batches in flight; then 70B shapes 256 x (128 in, 128 out) at TP=2, PP=2 and PP=2 one batch
# at a time (the target: PP=2 >= 80 % of TP=2).
# ppflight_check (pycode-25M correctness and failure paths; carries BUNDLE-models) and
# ppflight_tput (ceilings and the 70B throughput) split ppflight in two calls under the carry limit.
ppflight() { ppflight_check; ppflight_tput; }
ppflight_check() {
  write_py_prompts
  pycode tp1; say "pycode-25M tp1 (exit $?)"
  pycode pp2 --pipeline-parallel-size 2; say "pycode-25M pp2, batches in flight (exit $?): vs tp1: $(same_tokens "$LOGS/pycode_tp1.jsonl" "$LOGS/pycode_pp2.jsonl")"
  pycode pp2one --pipeline-parallel-size 2 --max-batches-in-flight 1; say "pycode-25M pp2, one batch (exit $?): vs tp1: $(same_tokens "$LOGS/pycode_tp1.jsonl" "$LOGS/pycode_pp2one.jsonl")"
  pycode pp2eager --pipeline-parallel-size 2 --enforce-eager; say "pycode-25M pp2 eager (exit $?): vs tp1: $(same_tokens "$LOGS/pycode_tp1.jsonl" "$LOGS/pycode_pp2eager.jsonl")"
  for r in 1 0; do
    CUDA_VISIBLE_DEVICES=$r pycode 2procpp_$r --pipeline-parallel-size 2 --nnodes 2 --node-rank $r --master-port 29631 &
  done
  wait
  say "pycode-25M PP=2 as two processes (--nnodes 2): vs tp1: $(same_tokens "$LOGS/pycode_tp1.jsonl" "$LOGS/pycode_2procpp_0.jsonl")"
  expect_failure pp2_rank0_fails 60 PAGELLM_INJECT_FAULT=0:5 -- --pipeline-parallel-size 2
  expect_failure pp2_rank1_fails 60 PAGELLM_INJECT_FAULT=1:5 -- --pipeline-parallel-size 2
  expect_failure pp2_rank0_hangs 60 PAGELLM_INJECT_FAULT=0:5:hang PAGELLM_STEP_TIMEOUT_S=5 -- --pipeline-parallel-size 2
}
ppflight_tput() {
  ceilings 64
  tput_70b tp2 256 128 128 150 --tensor-parallel-size 2
  tput_70b pp2 256 128 128 150 --pipeline-parallel-size 2
  tput_70b pp2one 256 128 128 150 --pipeline-parallel-size 2 --max-batches-in-flight 1
}

# Issue 10's two open figures in one call: 8B batch-1 decode, TP=2 against TP=1 (two rounds,
# interleaved), and 70B shapes PP=2 against TP=2 at 256 concurrent requests.
tenrun() {
  ceilings 64
  decode_8b "tp1:" "tp2:--tensor-parallel-size 2" "tp1b:" "tp2b:--tensor-parallel-size 2"
  tput_70b tp2 256 128 128 200 --tensor-parallel-size 2
  tput_70b pp2 256 128 128 200 --pipeline-parallel-size 2
}

# The one-shot all-reduce (nccl_bench: its sums over 300 calls of changing sizes, its latency
# alone and inside CUDA graphs), pycode TP=2 greedy against TP=1 with it and with NCCL only, and
# 8B batch-1 decode TP=1 / TP=2 / TP=2 with NCCL only, two rounds.
allreduce() {
  ceilings 64
  write_py_prompts
  pycode_tp2_against_tp1
  if [ "$NGPU" -ge 4 ]; then
    pycode tp4 --tensor-parallel-size 4; say "pycode tp4 (exit $?): vs tp1: $(same_tokens "$LOGS/pycode_tp1.jsonl" "$LOGS/pycode_tp4.jsonl")"
    decode_8b "tp1:" "tp2:--tensor-parallel-size 2" "tp4:--tensor-parallel-size 4" \
      "tp4nccl:--tensor-parallel-size 4 --disable-custom-all-reduce"
    return
  fi
  decode_8b "tp1:" "tp2:--tensor-parallel-size 2" "tp2nccl:--tensor-parallel-size 2 --disable-custom-all-reduce" \
    "tp1b:" "tp2b:--tensor-parallel-size 2"
}

# Llama-3.1-70B shapes at TP=2 only: batch-1 decode against the two-GPU roofline, and bench
# throughput 1000 x (1024 in, 128 out).
big_tp2() {
  ceilings 64
  decode_70b "tp2:--tensor-parallel-size 2"
  tput_70b tp2_1000 1000 1024 128 ${BIG_TPUT_LIMIT:-330} --tensor-parallel-size 2
}

case $PART in
  allreduce) allreduce ;;
  big_tp2) big_tp2 ;;
  tenrun) tenrun ;;
  ppflight) ppflight ;;
  ppflight_check) ppflight_check ;;
  ppflight_tput) ppflight_tput ;;
  fourproc) ceilings 64; write_py_prompts; pycode tp1; four_processes ;;
  four) four ;;
  four70) four70 ;;
  four70tput) four70tput ;;
  four70decode) four70decode ;;
  fused) fused ;;
  basics) basics ;;
  hf) hf ;;
  big) big ;;
  *) echo "unknown part $PART"; exit 2 ;;
esac
