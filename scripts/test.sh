#!/usr/bin/env bash
# The whole test suite: CPU build + unit tests, ASan/UBSan unit tests, bounded fuzzing, the CUDA
# compile (when nvcc is present), and end-to-end tests against the real binary and server.
# Usage: scripts/test.sh [--fast]   (--fast skips the sanitizer, fuzz and CUDA stages)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
JOBS=${JOBS:-$(nproc)}
FUZZ_SECONDS=${FUZZ_SECONDS:-20}
FAST=0
[ "${1:-}" = "--fast" ] && FAST=1

stage() { echo; echo "=== $* === ($(date -u +%T) UTC, ${SECONDS}s in)"; }

stage "CPU build (Release)"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$JOBS"

stage "unit tests"
(cd build && ctest --output-on-failure -j "$JOBS")

if [ $FAST = 0 ]; then
  # One clang tree for both stages: the library is compiled once, with the sanitizers and the
  # fuzzers' coverage instrumentation, and serves the unit tests and the fuzz targets alike.
  stage "unit tests under ASan + UBSan (clang; the same build makes the fuzz targets)"
  CC=clang CXX=clang++ cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug \
     -DPAGELLM_SANITIZE=ON -DPAGELLM_FUZZ=ON -DPAGELLM_PYTHON=OFF >/dev/null
  # Only the unit tests and fuzz targets (not the CLI, benchmarks or Python module, built and
  # tested above).
  fuzz_targets=$(for f in fuzz/*_fuzz.cpp; do basename "$f" .cpp; done)
  # shellcheck disable=SC2086
  cmake --build build-asan -j "$JOBS" --target unit_tests $fuzz_targets
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
     ctest --output-on-failure -j "$JOBS")

  stage "fuzzing (${FUZZ_SECONDS}s per target)"
  # JOBS targets at a time (one core each), each logged apart and printed in turn; any failure
  # (a crash, a leak, a timeout) fails the stage once all have run.
  fuzz_logs=$(mktemp -d)
  fuzz_one() {
    local target=$1 name corpus seeds
    name=$(basename "$target")
    corpus=$(mktemp -d)
    seeds="fuzz/corpus/${name%_fuzz}"
    [ -d "$seeds" ] && cp -r "$seeds"/. "$corpus"/
    local status=0
    "$target" -max_total_time="$FUZZ_SECONDS" -rss_limit_mb=2048 -timeout=10 \
       -print_final_stats=0 "$corpus" > "$fuzz_logs/$name.log" 2>&1 || status=$?
    rm -rf "$corpus"
    return $status
  }
  fuzz_failed=0
  running=()
  for target in build-asan/*_fuzz; do
    fuzz_one "$target" &
    running+=($!)
    if [ ${#running[@]} -ge "$JOBS" ]; then
      wait "${running[0]}" || fuzz_failed=1
      running=("${running[@]:1}")
    fi
  done
  for pid in "${running[@]}"; do wait "$pid" || fuzz_failed=1; done
  for target in build-asan/*_fuzz; do
    echo "fuzz: $(basename "$target")"
    tail -n 3 "$fuzz_logs/$(basename "$target").log"
  done
  rm -rf "$fuzz_logs"
  if [ $fuzz_failed != 0 ]; then echo "fuzzing found a failure (see above)"; exit 1; fi

  if command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then
    if [ -f cmake/cuda.cmake ]; then
      stage "CUDA build (compile only; no GPU here)"
      cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DPAGELLM_CUDA=ON \
         -DPAGELLM_TESTS=OFF -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc >/dev/null
      cmake --build build-cuda -j "$JOBS"
    fi
  fi
fi

# The Python package (tests/python/, pytest) against the Release build: built whenever Python 3's
# headers and pybind11 are present (scripts/setup.sh installs them).
if compgen -G "build/python/pagellm/_pagellm*.so" >/dev/null; then
  stage "Python package tests"
  PY=$(cat build/python/python_executable)
  PAGELLM_BIN="$ROOT/build/pagellm" "$PY" -m pytest -q -p no:cacheprovider tests/python
  # `pip install .` offline (setup.py reuses this build's engine), then import the installed copy.
  PIP_TARGET_DIR=$(mktemp -d)
  PAGELLM_CMAKE_BUILD_DIR=build PIP_ROOT_USER_ACTION=ignore "$PY" -m pip install -q \
     --no-build-isolation --no-index --no-cache-dir --target "$PIP_TARGET_DIR" .
  (cd "$PIP_TARGET_DIR" && "$PY" -c "import pagellm, sys; assert pagellm.__file__.startswith(sys.argv[1]); print('pip install: ok')" "$PIP_TARGET_DIR")
  rm -rf "$PIP_TARGET_DIR"
else
  echo "python: the module was not built (python3-dev / pybind11-dev missing): skipping its tests"
fi

stage "end-to-end tests"
for t in tests/e2e/*_test.sh; do
  [ -e "$t" ] || continue
  echo "e2e: $t"
  started=$SECONDS
  PAGELLM_BIN="$ROOT/build/pagellm" bash "$t"
  echo "e2e: $t took $((SECONDS - started))s"
done
if ls tests/e2e/*.test.mjs >/dev/null 2>&1; then
  PAGELLM_BIN="$ROOT/build/pagellm" node --test --test-concurrency=1 tests/e2e/*.test.mjs
fi
echo
echo "all tests passed (${SECONDS}s)"
