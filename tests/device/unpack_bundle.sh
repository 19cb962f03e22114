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
