// INT4 / INT8 linear layers of the CUDA runner at load (issue 12): the checkpoint's integers (any
// format quant/int_weights.h reads) are unpacked on the host, packed into the kernels' runtime form
// (quant/int_gpu_layout.h: fused parts stacked, act-order columns made contiguous) and uploaded;
// the weight stays packed in GPU memory. A layer the kernel cannot take (a group width that is not
// a multiple of 32 on this rank, fused parts with different act-order, zero points above 255) is
// dequantized to the runner's dtype instead, with one log line saying why.
#include <algorithm>
#include <mutex>

#include "backends/cuda/gemm/int_gemm.h"
#include "common/logging.h"
#include "quant/fp8_weights.h"
#include "quant/int_gpu_layout.h"
#include "runner/cuda_runner_impl.h"

namespace pagellm::runner {

namespace {

template <typename T>
DevMem upload_vector(const std::vector<T>& v, const std::string& what) {
  DevMem mem(v.size() * sizeof(T), what);
  check(cudaMemcpy(mem.get(), v.data(), mem.bytes(), cudaMemcpyHostToDevice), "uploading " + what);
  return mem;
}

}  // namespace

bool CudaRunner::Impl::int_layer(const models::WeightTensorSpec& t,
                                 const io::WeightStore* checkpoint) const {
  const quant::QuantConfig& q = config.quant;
  if (!q.int_weights() || dt == DType::kF32) return false;
  if (!quant::quantized_slot(t.slot)) return false;
  return std::all_of(t.parts.begin(), t.parts.end(), [&](const models::HfTensorSpec& part) {
    return !checkpoint || int_part(t, part);
  });
}

IntScales& CudaRunner::Impl::int_slot(const models::WeightTensorSpec& t) {
  LayerWeights& l = layers.at(size_t(t.layer));
  switch (t.slot) {
    case models::WeightSlot::kQkv:
      return l.qkv_int;
    case models::WeightSlot::kOProj:
      return l.o_proj_int;
    case models::WeightSlot::kGateUp:
      return l.gate_up_int;
    case models::WeightSlot::kDown:
      return l.down_int;
    default:
      internal(t.label + " is not an INT layer");
  }
}

bool CudaRunner::Impl::load_int_layer(const models::WeightTensorSpec& t,
                                      const io::WeightStore* checkpoint, DevMem& w, IntScales& s) {
  const quant::QuantConfig& q = config.quant;
  if (q.int8_activations) {
    load_w8a8_layer(t, checkpoint, w, s);
    return true;
  }
  const int64_t k = t.parts[0].local_shape()[1];
  int64_t n = 0;
  for (const models::HfTensorSpec& part : t.parts) n += part.local_shape()[0];
  std::string why;
  std::optional<quant::IntGpuLayer> packed;
  if (checkpoint) {
    std::vector<quant::IntPartValues> values;
    values.reserve(t.parts.size());
    for (const models::HfTensorSpec& part : t.parts)
      values.push_back(quant::unpack_int_part(*checkpoint, part, q));
    std::vector<const quant::IntPartValues*> parts;
    for (const quant::IntPartValues& v : values) parts.push_back(&v);
    packed = quant::pack_int_layer(parts, dt, &why);
  } else {  // dummy weights: random packed bits, one scale, symmetric zeros
    const int64_t gs = q.group_size > 0 ? q.group_size : k;
    if (k % 32 != 0 || gs % 32 != 0 || k % gs != 0)
      why = "its dummy groups of " + std::to_string(gs) + " over " + std::to_string(k) +
            " input columns do not fit the kernel (multiples of 32)";
    else {
      packed.emplace();
      packed->bits = q.bits, packed->n = n, packed->k = k, packed->group_size = int(gs);
    }
  }
  if (!packed) {
    static std::once_flag logged;
    std::call_once(logged, [&] {
      log::warning(opt.model_name + ": " + t.label +
                   " (and any other layer like it) is dequantized to " +
                   std::string(dtype_name(dt)) + " at load: " + why);
    });
    return false;
  }
  const int64_t groups = packed->groups();
  s.bits = packed->bits, s.group_size = packed->group_size;
  if (checkpoint) {
    w = upload_vector(packed->wq, t.label + " (int" + std::to_string(s.bits) + ")");
    s.scale = upload_vector(packed->scale, t.label + " scales");
    if (!packed->zero.empty()) s.zero = upload_vector(packed->zero, t.label + " zero points");
    if (!packed->perm.empty()) s.perm = upload_vector(packed->perm, t.label + " column order");
  } else {
    const models::DummyFill f = models::dummy_fill(t.parts[0], opt.seed);
    w = DevMem(size_t(n * k * s.bits / 8), t.label + " (int" + std::to_string(s.bits) + ")");
    s.scale = DevMem(size_t(n * groups) * esz, t.label + " scales");
    check(cuda::fill_uniform(DType::kF32, w.get(), 1, int64_t(w.bytes() / 4),
                             int64_t(w.bytes() / 4), f.key, 1.f, stream),
          "filling " + t.label);
    check(cuda::fill_constant(dt, s.scale.get(), n * groups,
                              float(f.bound) / float(1 << (s.bits - 1)), stream),
          "filling " + t.label + " scales");
  }
  stats.weight_bytes += int64_t(w.bytes() + s.scale.bytes() + s.zero.bytes() + s.perm.bytes());
  any_int = true;
  any_int_perm = any_int_perm || s.perm.get() != nullptr;
  int_largest = std::max(int_largest, n * k);
  return true;
}

// W8A8-INT8: the checkpoint's int8 weights as they are (unpack_int_part offsets them by 128, with
// zero 128) and one fp32 scale per output row; dummy weights are random int8 with one scale.
void CudaRunner::Impl::load_w8a8_layer(const models::WeightTensorSpec& t,
                                       const io::WeightStore* checkpoint, DevMem& w, IntScales& s) {
  const int64_t k = t.parts[0].local_shape()[1];
  int64_t n = 0;
  for (const models::HfTensorSpec& part : t.parts) n += part.local_shape()[0];
  if (k % 4 != 0 || n % 4 != 0)
    unsupported(opt.model_name + ": W8A8-INT8 " + t.label + " is " + std::to_string(n) + " x " +
                std::to_string(k) + " on this rank; the int8 GEMM needs multiples of 4");
  s.bits = 8, s.group_size = int(k), s.w8a8 = true;
  w = DevMem(size_t(n * k), t.label + " (int8)");
  s.scale = DevMem(size_t(n) * 4, t.label + " scales");
  if (!checkpoint) {
    const models::DummyFill f = models::dummy_fill(t.parts[0], opt.seed);
    check(cuda::fill_uniform(DType::kF32, w.get(), 1, n * k / 4, n * k / 4, f.key, 1.f, stream),
          "filling " + t.label);
    check(cuda::fill_constant(DType::kF32, s.scale.get(), n, float(f.bound) / 127.f, stream),
          "filling " + t.label + " scales");
  } else {
    std::vector<int8_t> wq(size_t(n * k));
    std::vector<float> scale(static_cast<size_t>(n));
    int64_t r0 = 0;
    for (const models::HfTensorSpec& part : t.parts) {
      const quant::IntPartValues v = quant::unpack_int_part(*checkpoint, part, config.quant);
      for (int64_t r = 0; r < v.rows; ++r) {
        if (v.zero[size_t(r * v.groups)] != 128)
          unsupported(opt.model_name + ": W8A8-INT8 " + part.name + " is not symmetric");
        scale[size_t(r0 + r)] = v.scale[size_t(r * v.groups)];
        for (int64_t c = 0; c < k; ++c)
          wq[size_t((r0 + r) * k + c)] = int8_t(int(v.q[size_t(r * k + c)]) - 128);
      }
      r0 += v.rows;
    }
    check(cudaMemcpy(w.get(), wq.data(), wq.size(), cudaMemcpyHostToDevice),
          "uploading " + t.label);
    check(cudaMemcpy(s.scale.get(), scale.data(), scale.size() * 4, cudaMemcpyHostToDevice),
          "uploading " + t.label + " scales");
  }
  stats.weight_bytes += int64_t(w.bytes() + s.scale.bytes());
  any_w8a8 = true;
  widest_out = std::max(widest_out, n);
}

}  // namespace pagellm::runner
