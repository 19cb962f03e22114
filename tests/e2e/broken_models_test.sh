#!/usr/bin/env bash
# Broken model folders through the real binary: each must fail with exactly one line on stderr that
# names the offending file, a non-zero exit, and nothing on stdout — never a crash or a hang.
# (tests/unit/broken_models_test.cpp checks the loader's error kinds and messages in more detail.)
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${PAGELLM_BIN:-build/pagellm}
MODEL=${PAGELLM_SHARED_DIR:-../shared}/models/stories260K
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# make NAME: a writable copy of stories260K to break.
make() { mkdir -p "$TMP/$1" && cp "$MODEL"/* "$TMP/$1"/ && chmod -R u+w "$TMP/$1"; }
# edit NAME PYTHON: rewrite the copy's files with a Python snippet (cwd = the folder).
edit() { (cd "$TMP/$1" && python3 -c "$2"); }
# A safetensors file from a header dict and a payload size (payload bytes are zero).
ST='
import json, struct
def write_st(path, header, payload, header_len=None):
    h = json.dumps(header).encode()
    n = len(h) if header_len is None else header_len
    open(path, "wb").write(struct.pack("<Q", n) + h + b"\0" * payload)
def read_header():
    raw = open("model.safetensors", "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    return json.loads(raw[8:8 + n]), raw[8 + n:]
'

make missing_config; rm "$TMP/missing_config/config.json"
make invalid_config_json; echo '{"hidden_size": 64,' > "$TMP/invalid_config_json/config.json"
make unsupported_arch; edit unsupported_arch 'import json; c=json.load(open("config.json")); c["architectures"]=["GPT2LMHeadModel"]; json.dump(c, open("config.json","w"))'
make bad_heads; edit bad_heads 'import json; c=json.load(open("config.json")); c["num_key_value_heads"]=3; json.dump(c, open("config.json","w"))'
make shape_mismatch; edit shape_mismatch 'import json; c=json.load(open("config.json")); c["intermediate_size"]=100; json.dump(c, open("config.json","w"))'
make missing_weights; rm "$TMP/missing_weights/model.safetensors"
make truncated; truncate -s 500000 "$TMP/truncated/model.safetensors"
make tiny_file; printf 'abc' > "$TMP/tiny_file/model.safetensors"
make header_too_long; edit header_too_long "$ST"'
h, data = read_header(); write_st("model.safetensors", h, len(data), header_len=1 << 40)'
make header_not_json; edit header_not_json "$ST"'
h, data = read_header(); open("model.safetensors", "wb").write(struct.pack("<Q", 5) + b"{nope" + data)'
make offsets_out_of_range; edit offsets_out_of_range "$ST"'
h, data = read_header(); k = "model.norm.weight"; b, e = h[k]["data_offsets"]; h[k]["data_offsets"] = [len(data) + 4, len(data) + 4 + e - b]
write_st("model.safetensors", h, len(data))'
make overlapping_offsets; edit overlapping_offsets "$ST"'
h, data = read_header(); names = sorted(k for k in h if k != "__metadata__")
h[names[1]]["data_offsets"] = list(h[names[0]]["data_offsets"]); h[names[1]]["shape"] = h[names[0]]["shape"]
write_st("model.safetensors", h, len(data))'
make missing_tensor; edit missing_tensor "$ST"'
h, data = read_header(); del h["model.layers.2.mlp.up_proj.weight"]; write_st("model.safetensors", h, len(data))'
make unexpected_tensor; edit unexpected_tensor "$ST"'
h, data = read_header(); h["model.layers.9.extra.weight"] = {"dtype": "F32", "shape": [1], "data_offsets": [len(data), len(data) + 4]}
write_st("model.safetensors", h, len(data) + 4)'
make unsupported_dtype; edit unsupported_dtype "$ST"'
h, data = read_header(); h["model.norm.weight"]["dtype"] = "I8"; h["model.norm.weight"]["shape"] = [256]; write_st("model.safetensors", h, len(data))'
make missing_shard; rm "$TMP/missing_shard/model.safetensors"
echo '{"weight_map": {"model.norm.weight": "model-00001-of-00002.safetensors"}}' > "$TMP/missing_shard/model.safetensors.index.json"
make bad_generation_config; echo '{"eos_token_id": "two"}' > "$TMP/bad_generation_config/generation_config.json"

count=0
for dir in "$TMP"/*/; do
  name=$(basename "$dir")
  rc=0
  timeout 60 "$BIN" generate --model "$dir" --prompt "x" --max-tokens 4 > "$TMP/$name.out" 2> "$TMP/$name.err" || rc=$?
  [ $rc -ne 0 ] || fail "$name: exit code 0"
  [ $rc -lt 124 ] || fail "$name: crashed or hung (exit $rc)"
  [ ! -s "$TMP/$name.out" ] || fail "$name: wrote to stdout"
  # Logs may precede it; the error itself is the last line and the only one starting with "error:".
  [ "$(grep -c '^error:' "$TMP/$name.err")" = 1 ] || { cat "$TMP/$name.err" >&2; fail "$name: expected one error line"; }
  line=$(grep '^error:' "$TMP/$name.err")
  echo "$line" | grep -qE 'config\.json|safetensors|generation_config' || fail "$name: error does not name the file: $line"
  echo "ok: $name -> $line"
  count=$((count + 1))
done
[ $count -ge 12 ] || fail "only $count broken folders"
echo "broken_models_test: $count broken folders rejected"
