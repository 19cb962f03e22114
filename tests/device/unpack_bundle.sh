# Sourced by the device scripts: copies bundle $SRC to $B (/tmp/pagellm-bundle), unpacks what
# travels compressed (gzip; xz for the large files, with Python's lzma where xz is missing), sets
# up LD_LIBRARY_PATH, $LOGS ($OUT or ./device-logs), $SUMMARY and say() (echo + append to it).
LOGS=${OUT:-./device-logs}
mkdir -p "$LOGS"
B=/tmp/pagellm-bundle
rm -rf "$B" && cp -r "$SRC" "$B" && find "$B" -name "*.gz" -exec gunzip -f {} +
for f in $(find "$B" -name "*.xz"); do
  xz -d -T4 "$f" 2>/dev/null ||
    python3 -c 'import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[1][:-3], "wb"))' "$f"
  rm -f "$f"
done
chmod +x "$B"/pagellm "$B"/cuda_* 2>/dev/null
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
SUMMARY=$LOGS/summary.txt
: > "$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }
say "$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader) $(date -u +%FT%TZ)"
# serve_dummy_8b PORT LOG [FLAGS...]: `pagellm serve` of $B/llama31-8b (dummy weights, 4,096-token
# context) in the background, waited for until /health answers (at most 120 s); sets SERVE_PID.
serve_dummy_8b() {
  local port=$1 log=$2
  shift 2
  "$B/pagellm" serve --model "$B/llama31-8b" --load-format dummy --device cuda --port "$port" \
    --max-model-len 4096 --disable-log-requests "$@" > "$log" 2>&1 &
  SERVE_PID=$!
  for _ in $(seq 120); do
    curl -sf "http://127.0.0.1:$port/health" > /dev/null && return 0
    sleep 1
  done
}
