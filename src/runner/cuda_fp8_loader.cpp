// FP8 linear layers of the CUDA runner at load (issue 11): every checkpoint format
// (quant/quant_config.h) becomes the one runtime form of gemm/fp8_gemm.h — an e4m3 weight with
// fp32 scales per output row, or per 128x128 block when the checkpoint is block-scaled and the
// rank's slice keeps whole blocks. FP8 parts are uploaded as their bytes; a block-scaled slice that
// cuts blocks is dequantized on the GPU and requantized per row; 16-bit parts (--quantization fp8,
// dummy weights, a module the checkpoint left unquantized next to FP8 ones) are quantized per row
// on the GPU.
#include <algorithm>

#include "backends/cuda/gemm/fp8_gemm.h"
#include "quant/fp8_weights.h"
#include "runner/cuda_runner_impl.h"
#include "runner/cuda_weight_loader.h"

namespace pagellm::runner {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Whether the rank's slices of a block-scaled layer keep whole 128x128 blocks, so that cuBLASLt's
// block-scaled GEMM can run on the checkpoint's scales as they are: every slice starts on a block
// boundary, the input width is a multiple of 128, and fused parts meet on block boundaries.
bool keeps_blocks(const quant::QuantConfig& q, const models::WeightTensorSpec& t) {
  if (q.weight_scales != quant::WeightScales::kBlock || q.block_n != cuda::kFp8Block ||
      q.block_k != cuda::kFp8Block)
    return false;
  for (size_t i = 0; i < t.parts.size(); ++i) {
    const models::HfTensorSpec& part = t.parts[i];
    const std::vector<int64_t> local = part.local_shape();
    if (local[1] % cuda::kFp8Block != 0) return false;
    if (part.slice.dim >= 0 && part.slice.begin % cuda::kFp8Block != 0) return false;
    if (i + 1 < t.parts.size() && local[0] % cuda::kFp8Block != 0) return false;
  }
  return true;
}

bool stored_fp8(const quant::QuantConfig& q, const io::WeightStore* checkpoint,
                const models::HfTensorSpec& part) {
  return checkpoint && q.fp8_checkpoint() && quant::part_is_fp8(*checkpoint, part);
}

// A device buffer that only grows; the stream is drained before an old one is freed.
void ensure_staging(DevMem& buf, size_t bytes, cudaStream_t stream) {
  if (buf.bytes() >= bytes) return;
  check(cudaStreamSynchronize(stream), "loading FP8 weights");
  buf = DevMem(bytes, "FP8 weight staging");
}

}  // namespace

bool CudaRunner::Impl::fp8_layer(const models::WeightTensorSpec& t,
                                 const io::WeightStore* checkpoint) const {
  const quant::QuantConfig& q = config.quant;
  if (!q.fp8() || !quant::quantizable_slot(t.slot)) return false;
  if (q.online || !checkpoint) return true;  // dummy weights are quantized like a 16-bit model
  for (const models::HfTensorSpec& part : t.parts)
    if (quant::part_is_fp8(*checkpoint, part)) return true;
  return false;
}

uint64_t CudaRunner::Impl::plan_device_bytes(const std::vector<models::WeightTensorSpec>& plan,
                                             const io::WeightStore* checkpoint) const {
  uint64_t bytes = 0;
  for (const models::WeightTensorSpec& t : plan) {
    if (int_layer(t, checkpoint)) {  // packed: bits per weight, plus 16-bit scales per group
      const int64_t k = t.parts[0].local_shape()[1];
      const int64_t gs = config.quant.group_size > 0 ? config.quant.group_size : k;
      bytes += uint64_t(t.num_elements()) * uint64_t(config.quant.bits) / 8 +
               uint64_t(t.num_elements() / std::max<int64_t>(gs, 1)) * 3;
      continue;
    }
    if (!fp8_layer(t, checkpoint)) {
      bytes += uint64_t(t.num_elements()) * esz;
      continue;
    }
    int64_t rows = 0;
    for (const models::HfTensorSpec& part : t.parts) rows += part.local_shape()[0];
    bytes += uint64_t(t.num_elements()) + uint64_t(rows) * 4;
  }
  return bytes;
}

void CudaRunner::Impl::load_fp8_layer(const models::WeightTensorSpec& t,
                                      const io::WeightStore* checkpoint, WeightUploader* uploader,
                                      DevMem& w, Fp8Scales& s) {
  const quant::QuantConfig& q = config.quant;
  const int64_t k = t.parts[0].local_shape()[1];
  int64_t n = 0;
  for (const models::HfTensorSpec& part : t.parts) n += part.local_shape()[0];
  if (dt == DType::kF32)
    unsupported(opt.model_name +
                ": FP8 layers compute in bfloat16 or float16, not --dtype float32");
  if (k % 16 != 0)
    unsupported(opt.model_name + ": " + t.label + " has " + std::to_string(k) +
                " input features on this rank; FP8 layers need a multiple of 16");
  // The expert kernels take a scale per row (moe.h).
  const bool blocks = !quant::fp8_expert_slot(t.slot) && keeps_blocks(q, t) &&
                      std::all_of(t.parts.begin(), t.parts.end(),
                                  [&](auto& p) { return stored_fp8(q, checkpoint, p); });
  const int64_t stride = cuda::fp8_block_scale_stride(int(k));
  std::vector<float> host_blocks;
  w = DevMem(size_t(n * k), t.label + " (fp8)");
  if (blocks) {
    s.block = cuda::kFp8Block;
    host_blocks.assign(size_t(ceil_div(n, cuda::kFp8Block) * stride), 0.f);
    s.scale = DevMem(host_blocks.size() * 4, t.label + " block scales");
  } else {
    s.scale = DevMem(size_t(n) * 4, t.label + " scales");
  }
  stats.weight_bytes += int64_t(w.bytes() + s.scale.bytes());
  int64_t r0 = 0;
  for (const models::HfTensorSpec& part : t.parts) {
    const int64_t rows = part.local_shape()[0];
    unsigned char* wout = w.as<unsigned char>() + r0 * k;
    float* sout = s.scale.as<float>() + r0;
    const bool fp8 = stored_fp8(q, checkpoint, part);
    if (fp8 && q.weight_scales != quant::WeightScales::kBlock) {
      uploader->upload(checkpoint->get(part.name), part, wout, DType::kF8E4M3);
      const std::vector<float> rs = quant::part_row_scales(*checkpoint, part, q);
      check(cudaMemcpy(sout, rs.data(), rs.size() * 4, cudaMemcpyHostToDevice),
            "uploading scales of " + part.name);
    } else if (fp8 && blocks) {
      uploader->upload(checkpoint->get(part.name), part, wout, DType::kF8E4M3);
      const std::vector<float> full = quant::part_block_scales(*checkpoint, part, q);
      const int64_t full_cols = ceil_div(part.shape[1], q.block_k);
      const int64_t b_row = (part.slice.dim == 0 ? part.slice.begin : 0) / q.block_n;
      const int64_t b_col = (part.slice.dim == 1 ? part.slice.begin : 0) / q.block_k;
      for (int64_t i = 0; i < ceil_div(rows, q.block_n); ++i)
        for (int64_t j = 0; j < k / q.block_k; ++j)
          host_blocks[size_t((r0 / q.block_n + i) * stride + j)] =
              full[size_t((b_row + i) * full_cols + b_col + j)];
    } else if (fp8) {
      requantize_fp8_blocks(part, checkpoint, uploader, wout, sout);
    } else {
      ensure_staging(fp8_staging16, size_t(rows * k) * esz, stream);
      if (checkpoint)
        uploader->upload(checkpoint->get(part.name), part, fp8_staging16.get());
      else
        check(fill_dummy(part, fp8_staging16.get()), "filling " + part.name);
      check(cuda::quantize_fp8_per_channel(dt, fp8_staging16.get(), int(rows), int(k), wout, sout,
                                           stream),
            "quantizing " + part.name + " to FP8");
    }
    r0 += rows;
  }
  if (blocks)
    check(cudaMemcpy(s.scale.get(), host_blocks.data(), host_blocks.size() * 4,
                     cudaMemcpyHostToDevice),
          "uploading block scales of " + t.label);
}

// A block-scaled part whose slice cuts blocks: e4m3 bytes -> 16-bit with the block scales ->
// per-row e4m3 and scales at (wout, sout).
void CudaRunner::Impl::requantize_fp8_blocks(const models::HfTensorSpec& part,
                                             const io::WeightStore* checkpoint,
                                             WeightUploader* uploader, unsigned char* wout,
                                             float* sout) {
  const quant::QuantConfig& q = config.quant;
  const std::vector<int64_t> local = part.local_shape();
  const int64_t rows = local[0], k = local[1];
  ensure_staging(fp8_staging8, size_t(rows * k), stream);
  ensure_staging(fp8_staging16, size_t(rows * k) * esz, stream);
  uploader->upload(checkpoint->get(part.name), part, fp8_staging8.get(), DType::kF8E4M3);
  const std::vector<float> full = quant::part_block_scales(*checkpoint, part, q);
  DevMem scales(full.size() * 4, "block scales of " + part.name);
  check(cudaMemcpy(scales.get(), full.data(), full.size() * 4, cudaMemcpyHostToDevice),
        "uploading block scales of " + part.name);
  cuda::Fp8BlockDequantParams p;
  p.dtype = dt;
  p.wq = fp8_staging8.get();
  p.scale = scales.as<float>();
  p.out = fp8_staging16.get();
  p.rows = rows, p.cols = k;
  p.row0 = part.slice.dim == 0 ? part.slice.begin : 0;
  p.col0 = part.slice.dim == 1 ? part.slice.begin : 0;
  p.scale_cols = ceil_div(part.shape[1], q.block_k);
  p.block_n = q.block_n, p.block_k = q.block_k;
  check(cuda::dequantize_fp8_blocks(p, stream), "dequantizing " + part.name);
  check(cuda::quantize_fp8_per_channel(dt, fp8_staging16.get(), int(rows), int(k), wout, sout,
                                       stream),
        "requantizing " + part.name + " per channel");
  check(cudaStreamSynchronize(stream), "requantizing " + part.name);  // before `scales` is freed
}

}  // namespace pagellm::runner
