#!/usr/bin/env bash
# Writes a deterministic ~10 MB text of mixed English prose and code for the tokenizer benchmark:
# Markdown documentation from /usr/share/doc (prose with some inline code) alternating with C++
# headers from Boost (code), file by file in sorted order. Both come with scripts/setup.sh's packages
# (nodejs ships its API docs as Markdown; libboost-dev the headers).
# Usage: bench/make_tokenizer_corpus.sh OUT_FILE [BYTES]
set -euo pipefail
out=${1:?usage: make_tokenizer_corpus.sh OUT_FILE [BYTES]}
limit=${2:-10000000}
mapfile -t prose < <(find /usr/share/doc -name '*.md' -type f -size +4k | LC_ALL=C sort)
mapfile -t code < <(find /usr/include/boost -name '*.hpp' -type f -size +4k | LC_ALL=C sort)
[ ${#prose[@]} -gt 0 ] && [ ${#code[@]} -gt 0 ] || { echo "no prose or code sources found" >&2; exit 1; }
: > "$out"
i=0
while [ "$(stat -c %s "$out")" -lt "$limit" ]; do
  cat "${prose[$((i % ${#prose[@]}))]}" >> "$out"
  cat "${code[$((i * 7 % ${#code[@]}))]}" >> "$out"
  i=$((i + 1))
done
truncate -s "$limit" "$out"
# Cutting may split a UTF-8 sequence at the end; drop any partial trailing character.
python3 - "$out" <<'PY'
import sys
p = sys.argv[1]
data = open(p, "rb").read()
text = data.decode("utf-8", errors="ignore")
open(p, "wb").write(text.encode("utf-8"))
PY
echo "$out: $(stat -c %s "$out") bytes from $i prose + $i code files"
