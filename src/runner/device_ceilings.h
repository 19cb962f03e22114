// The rates a run's lower bound is computed from, measured on the device that runs it: the copy
// rate (bytes read + written per second by a device-to-device copy, the HBM ceiling of a weight
// stream), the dense GEMM rate of the model's 16-bit dtype (cuBLAS, the ceiling of a prefill) and,
// on GPUs with FP8 tensor cores, the rate of the FP8 GEMM that FP8 weights' prefill runs. On the
// CPU: memcpy and the CPU backend's fp32 matmul, for the same arithmetic.
#pragma once

#include <string>

#include "pagellm/engine_args.h"

namespace pagellm::runner {

struct DeviceCeilings {
  double copy_gbps = 0;    // GB/s, bytes read + written
  double gemm_tflops = 0;  // TFLOP/s
  // TFLOP/s of the e4m3 GEMM with per-token x per-channel scales (cuBLASLt, fp8_linear's prefill
  // path); 0 where not measured (the CPU, GPUs without FP8 tensor cores).
  double fp8_gemm_tflops = 0;
  std::string what;  // how they were measured, for the report
};

// Measures on args.device (the first GPU of the run for cuda). Takes ~1 s and 4 GiB of the GPU's
// memory: run it while no engine holds the GPU.
DeviceCeilings measure_device_ceilings(const EngineArgs& args);

#ifdef PAGELLM_HAVE_CUDA
DeviceCeilings measure_cuda_ceilings(const std::string& dtype);  // cuda_ceilings.cpp
#endif

}  // namespace pagellm::runner
