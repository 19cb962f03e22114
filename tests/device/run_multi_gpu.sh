#!/usr/bin/env bash
# The two-GPU run of issue 10, from a bundle made by make_multi_gpu_bundle.sh:
#   bash BUNDLE/run_multi_gpu.sh BUNDLE [--no-hf] [--no-70b]
# 1. ceilings: copy bandwidth + bf16 GEMM rate per GPU (cuda_probe), NCCL bus bandwidth;
# 2. pycode-25M greedy on the GPUs: TP=2 and PP=2 against TP=1 (8 prompts x 64 tokens);
# 3. Llama-3.1-8B shapes (dummy bf16): batch-1 decode TP=1 / TP=2 / PP=2;
# 4. Llama-3.1-8B shapes (random HF checkpoint): teacher-forced agreement with HF fp32, TP=1 / TP=2 / PP=2;
# 5. Llama-3.1-70B shapes (dummy bf16): TP=2 batch-1 decode and throughput; PP=2 vs TP=2 at 256
#    concurrent requests. Logs go to $OUT (or ./device-logs); a summary prints last.
set -uo pipefail
SRC=$(cd "${1:?usage: run_multi_gpu.sh BUNDLE [--no-hf] [--no-70b]}" && pwd)
shift
HF=1 BIG=1
for a in "$@"; do case $a in --no-hf) HF=0 ;; --no-70b) BIG=0 ;; esac; done
LOGS=${OUT:-./device-logs}
mkdir -p "$LOGS"
B=/tmp/pagellm-mgpu
rm -rf "$B" && cp -r "$SRC" "$B" && find "$B" -name "*.xz" -exec xz -d -f {} +
chmod +x "$B"/pagellm "$B"/nccl_bench "$B"/cuda_probe
NCCL_DIR=$(python3 -c "import nvidia.nccl, os; print(os.path.join(os.path.dirname(nvidia.nccl.__file__), 'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${NCCL_DIR:-/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib}:${LD_LIBRARY_PATH:-}
export NCCL_NVLS_ENABLE=0
SUMMARY=$LOGS/summary.txt
: > "$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }
P=$B/pagellm
say "$(nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader | tr '\n' ';') $(date -u +%FT%TZ)"
nvidia-smi topo -m > "$LOGS/topo.txt" 2>&1
for g in 0 1; do
  CUDA_VISIBLE_DEVICES=$g timeout 120 "$B/cuda_probe" > "$LOGS/probe$g.log" 2>&1
  say "probe GPU$g: $(grep -iE 'copy|gemm|tflop|GB/s' "$LOGS/probe$g.log" | tr '\n' ' ' | cut -c1-200)"
done
timeout 120 "$B/nccl_bench" 256 > "$LOGS/nccl_bench.log" 2>&1
say "nccl (exit $?):"; tee -a "$SUMMARY" < "$LOGS/nccl_bench.log"

# 2. pycode-25M greedy texts.
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
for cfg in "tp1:" "tp2:--tensor-parallel-size 2" "pp2:--pipeline-parallel-size 2"; do
  name=${cfg%%:*}
  timeout 120 "$P" generate --device cuda --model "$B/models/pycode-25M" --prompts-file "$B/py_prompts.jsonl" \
    --temperature 0 --max-tokens 64 --ignore-eos --max-num-seqs 16 ${cfg#*:} \
    --output "$LOGS/pycode_$name.jsonl" 2> "$LOGS/pycode_$name.err"
  rc=$?
  same=$(python3 -c "import json,sys; a=[json.loads(l)['token_ids'] for l in open(sys.argv[1])]; b=[json.loads(l)['token_ids'] for l in open(sys.argv[2])]; print(sum(x==y for x,y in zip(a,b)), 'of', len(a))" "$LOGS/pycode_tp1.jsonl" "$LOGS/pycode_$name.jsonl" 2>&1)
  say "pycode-25M $name (exit $rc): identical greedy sequences to tp1: $same"
  [ $rc = 0 ] || FAILED=1
done
if [ "${FAILED:-0}" = 1 ]; then
  say "a parallel pycode run failed: skipping the 8B / 70B parts"; tail -5 "$LOGS"/pycode_*.err
  cat "$SUMMARY"; exit 1
fi

# 2b. The multi-process path on one host: two processes with one GPU each, TCP rendezvous.
for r in 1 0; do
  CUDA_VISIBLE_DEVICES=$r timeout 120 "$P" generate --device cuda --model "$B/models/pycode-25M" \
    --prompts-file "$B/py_prompts.jsonl" --temperature 0 --max-tokens 64 --ignore-eos --max-num-seqs 16 \
    --tensor-parallel-size 2 --nnodes 2 --node-rank $r --master-port 29611 \
    --output "$LOGS/pycode_2proc_$r.jsonl" > "$LOGS/pycode_2proc_$r.out" 2> "$LOGS/pycode_2proc_$r.err" &
done
wait
same=$(python3 -c "import json,sys; a=[json.loads(l)['token_ids'] for l in open(sys.argv[1])]; b=[json.loads(l)['token_ids'] for l in open(sys.argv[2])]; print(sum(x==y for x,y in zip(a,b)), 'of', len(a))" "$LOGS/pycode_tp2.jsonl" "$LOGS/pycode_2proc_0.jsonl" 2>&1)
say "pycode-25M TP=2 as two processes (--nnodes 2): identical to in-process TP=2: $same"
# A worker killed mid-run: the server must report unhealthy and exit non-zero within 30 s.
CUDA_VISIBLE_DEVICES=1 "$P" serve --device cuda --model "$B/models/pycode-25M" --tensor-parallel-size 2 \
  --nnodes 2 --node-rank 1 --master-port 29612 > "$LOGS/kill_worker.out" 2>&1 &
WPID=$!
CUDA_VISIBLE_DEVICES=0 "$P" serve --device cuda --model "$B/models/pycode-25M" --tensor-parallel-size 2 \
  --nnodes 2 --node-rank 0 --master-port 29612 --port 18080 > "$LOGS/kill_leader.out" 2>&1 &
LPID=$!
for i in $(seq 60); do curl -sf localhost:18080/health >/dev/null && break; sleep 1; done
curl -s localhost:18080/v1/completions -H 'Content-Type: application/json' \
  -d '{"model":"pycode-25M","prompt":"def f(x):","max_tokens":2000,"ignore_eos":true}' > "$LOGS/kill_request.json" &
sleep 2; kill -9 $WPID; T0=$(date +%s)
h=$(curl -s -o /dev/null -w '%{http_code}' localhost:18080/health)
timeout 40 tail --pid=$LPID -f /dev/null; wait $LPID; rc=$?
say "worker killed: /health right after = $h, leader exit code $rc after $(( $(date +%s) - T0 )) s; request: $(head -c 200 "$LOGS/kill_request.json")"

# 3. 8B batch-1 decode.
for cfg in "tp1:" "tp2:--tensor-parallel-size 2" "pp2:--pipeline-parallel-size 2"; do
  name=${cfg%%:*}
  timeout 150 "$P" bench throughput --model "$B/llama31-8b" --load-format dummy --device cuda \
    --num-prompts 1 --input-len 32 --output-len 512 --max-model-len 2048 --max-num-seqs 16 ${cfg#*:} \
    > "$LOGS/decode8b_$name.log" 2>&1
  say "8B batch-1 decode $name (exit $?): $(grep -E 'Throughput' "$LOGS/decode8b_$name.log")"
done

# 4. HF fp32 teacher-forced agreement.
if [ "$HF" = 1 ]; then
  mkdir -p /tmp/tpa && cp -r "$B/tokenizers" /tmp/tpa/
  timeout 900 python3 "$B/tp_agreement.py" --pagellm "$P" --tokenizers /tmp/tpa/tokenizers --work /tmp/tpa \
    --logs "$LOGS" --arch llama3-8b "tp1=" "tp2=--tensor-parallel-size 2" "pp2=--pipeline-parallel-size 2" \
    > "$LOGS/tp_agreement.log" 2>&1
  say "HF fp32 agreement (exit $?):"; grep -E "^\|" "$LOGS/tp_agreement.log" | tee -a "$SUMMARY"
fi

# 5. 70B shapes.
if [ "$BIG" = 1 ]; then
  timeout 300 "$P" bench throughput --model "$B/llama31-70b" --load-format dummy --device cuda \
    --tensor-parallel-size 2 --num-prompts 1 --input-len 32 --output-len 256 --max-model-len 4096 \
    --max-num-seqs 16 > "$LOGS/decode70b_tp2.log" 2>&1
  rc70=$?
  say "70B TP=2 batch-1 decode (exit $rc70): $(grep -E 'Throughput' "$LOGS/decode70b_tp2.log")"
  grep -E "loaded" "$LOGS/decode70b_tp2.log" | head -1 | tee -a "$SUMMARY"
  for cfg in "tp2:--tensor-parallel-size 2" "pp2:--pipeline-parallel-size 2"; do
    name=${cfg%%:*}
    timeout 300 "$P" bench throughput --model "$B/llama31-70b" --load-format dummy --device cuda \
      --num-prompts ${BIG_PROMPTS:-256} --input-len ${BIG_IN:-1024} --output-len 128 --max-model-len 4096 \
      --max-num-seqs 256 ${cfg#*:} > "$LOGS/tput70b_$name.log" 2>&1
    say "70B $name ${BIG_PROMPTS:-256} x (${BIG_IN:-1024} in, 128 out) (exit $?): $(grep -E 'Throughput' "$LOGS/tput70b_$name.log")"
  done
fi
echo; echo "===== summary ====="; cat "$SUMMARY"
