#include "common/phase_times.h"

#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace pagellm::phase {
namespace {

constexpr std::array<const char*, kNumPhases> kNames = {
    "engine: schedule",       "engine: start masks",     "engine: runner submit",
    "engine: runner wait",    "engine: apply output",    "engine: make outputs",
    "runner: prepare step",   "runner: stage inputs",    "runner: launch step",
    "runner: wait for masks", "runner: upload id lists", "runner: wait for GPU",
    "masks: build a step's",
};

struct Totals {
  std::array<std::atomic<int64_t>, kNumPhases> ns{};
  std::array<std::atomic<int64_t>, kNumPhases> calls{};
  // Prints the table when the process exits normally, if anything was timed.
  ~Totals() {
    if (!enabled()) return;
    const std::string table = report();
    std::fputs(table.c_str(), stderr);
  }
};

Totals& totals() {
  static Totals t;
  return t;
}

}  // namespace

bool enabled() {
  static const bool on = [] {
    const char* v = std::getenv("PAGELLM_PHASE_TIMES");
    return v && *v && std::strcmp(v, "0") != 0;
  }();
  return on;
}

void add(Id id, int64_t ns) {
  if (id < 0 || id >= kNumPhases) return;
  Totals& t = totals();
  t.ns[size_t(id)].fetch_add(ns, std::memory_order_relaxed);
  t.calls[size_t(id)].fetch_add(1, std::memory_order_relaxed);
}

std::string report() {
  Totals& t = totals();
  std::string out = "phase times (PAGELLM_PHASE_TIMES):\n";
  char line[160];
  std::snprintf(line, sizeof(line), "  %-24s %10s %12s %12s\n", "phase", "calls", "total ms",
                "us per call");
  out += line;
  for (int i = 0; i < kNumPhases; ++i) {
    const int64_t calls = t.calls[size_t(i)].load(std::memory_order_relaxed);
    if (calls == 0) continue;
    const double ms = double(t.ns[size_t(i)].load(std::memory_order_relaxed)) * 1e-6;
    std::snprintf(line, sizeof(line), "  %-24s %10lld %12.2f %12.2f\n", kNames[size_t(i)],
                  static_cast<long long>(calls), ms, ms * 1e3 / double(calls));
    out += line;
  }
  return out;
}

}  // namespace pagellm::phase
