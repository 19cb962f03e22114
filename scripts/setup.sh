#!/usr/bin/env bash
# Installs everything pagellm needs to build and test on a fresh Debian 12 machine:
# Debian packages (compiler, CMake, libraries) and the npm packages the test suite uses.
# Idempotent; run as root (or with sudo available).
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

PACKAGES=(
  build-essential cmake ninja-build pkg-config git ca-certificates
  clang libclang-rt-14-dev            # libFuzzer targets
  nlohmann-json3-dev                  # JSON (config.json, tokenizer.json, OpenAI protocol)
  libpcre2-dev                        # tokenizer pre-tokenizer regexes (Unicode classes, lookahead)
  libicu-dev                          # tokenizer Unicode normalization (NFC) and character classes
  libboost-dev                        # Boost.Asio / Beast for the HTTP server (header-only)
  libcli11-dev                        # command-line parsing
  libxxhash-dev                       # prefix-cache block hashes
  libssl-dev                          # libcrypto (static): checksums of Hugging Face Hub downloads
  libcurl4-openssl-dev                # Hub downloads (the header; libcurl is loaded at run time)
  libgtest-dev libgmock-dev libbenchmark-dev
  nodejs npm                          # test tooling: reference tokenizers, jinja, openai client
  curl python3 openssl                # openssl: the TLS test's self-signed certificate
  chromium                            # the CORS test: a real browser calling the API from another origin
  openmpi-bin                         # mpirun: the multi-node launch (docs; tested on the GPU machine)
  python3-numpy                       # tools/quantize_fp8.py and its tests (numpy only, no torch)
  python3-dev pybind11-dev            # the Python package's extension module (python/)
  python3-pytest                      # its tests (tests/python/)
  python3-setuptools python3-wheel python3-pip python3-venv   # `pip install --no-build-isolation .` offline
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# node/npm may come from outside Debian (nodesource); accept any working node + npm.
if command -v node >/dev/null && command -v npm >/dev/null; then
  missing=("${missing[@]/nodejs}"); missing=("${missing[@]/npm}")
fi
pkgs=()
for p in "${missing[@]}"; do [ -n "$p" ] && pkgs+=("$p"); done
if [ ${#pkgs[@]} -gt 0 ]; then
  echo "setup: installing ${pkgs[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${pkgs[@]}"
fi

if [ ! -d tests/js/node_modules ] || [ tests/js/package.json -nt tests/js/node_modules ]; then
  echo "setup: installing npm test tooling"
  (cd tests/js && npm install --no-audit --no-fund --loglevel=error && touch node_modules)
fi
echo "setup: done"
