// The lower bound of a `bench throughput` run (issue 15): its prefill FLOPs at the GEMM rate plus
// its decode bytes at the copy rate, both rates measured on the device in the same run
// (runner/device_ceilings.h). Prefill counts the projections of every prompt token, the causal
// attention of each prompt (windowed where layers slide) and one LM-head row per request; decode
// counts, per step, every weight byte once (max_num_seqs sequences per step at most, one token of
// a request per step) and, per generated token after the first, the K/V bytes it attends. No real
// run can beat it; how far above it a run lands is what the GPU performance targets are stated in.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "io/hf_config.h"
#include "runner/device_ceilings.h"

namespace pagellm::cli {

struct BoundInputs {
  double weight_bytes = 2;  // per weight element (16-bit: 2; the CPU's fp32: 4)
  // FP8 weights (W8A8): the layers' projections hold 1 byte per element and their prefill runs at
  // the FP8 GEMM rate; the LM head and the attention stay 16-bit.
  bool fp8_projections = false;
  double kv_bytes = 2;  // per cached K or V element
  int max_num_seqs = 256;
  std::vector<std::pair<int64_t, int64_t>> requests;  // (prompt tokens, output tokens)
};

struct ThroughputBound {
  double prefill_flop = 0;      // projections + attention + one LM-head row per request
  double prefill_fp8_flop = 0;  // the part of prefill_flop at the FP8 rate (fp8_projections)
  // max(ceil(generated tokens after each request's first / max_num_seqs), the longest request's)
  double decode_steps = 0;
  double step_bytes = 0;     // weights read by one decode step
  double kv_read_bytes = 0;  // K/V read by all decode tokens
  double prefill_seconds = 0;
  double decode_seconds = 0;
  double seconds() const { return prefill_seconds + decode_seconds; }
};

ThroughputBound throughput_bound(const io::ModelConfig& config, const BoundInputs& in,
                                 const runner::DeviceCeilings& ceilings);

// One line: the bound, its two parts with their inputs, and elapsed / bound.
std::string describe_bound(const ThroughputBound& b, const runner::DeviceCeilings& ceilings,
                           double elapsed_seconds);

}  // namespace pagellm::cli
