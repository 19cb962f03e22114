#include "quant/int_weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/error.h"
#include "common/thread_pool.h"
#include "quant/fp8_weights.h"
#include "quant/int_config.h"
#include "quant/tensor_errors.h"

namespace pagellm::quant {

namespace {

// AWQ packs output columns 8j + {0, 2, 4, 6, 1, 3, 5, 7} into nibbles 0..7 of word j; column
// 8j + i therefore sits in nibble kAwqNibble[i].
constexpr int kAwqNibble[8] = {0, 4, 1, 5, 2, 6, 3, 7};

uint32_t word_at(const io::TensorView& t, int64_t i) {
  uint32_t w;
  std::memcpy(&w, t.data + size_t(i) * 4, 4);
  return w;
}

// The values of a small integer tensor (g_idx, weight_shape, unpacked zero points).
std::vector<int64_t> read_ints(const io::TensorView& t) {
  std::vector<int64_t> out(size_t(t.num_elements()));
  for (size_t i = 0; i < out.size(); ++i) {
    const uint8_t* p = t.data + i * dtype_size(t.dtype);
    if (t.dtype == DType::kI64) {
      int64_t v;
      std::memcpy(&v, p, 8);
      out[i] = v;
    } else if (t.dtype == DType::kI32) {
      int32_t v;
      std::memcpy(&v, p, 4);
      out[i] = v;
    } else {
      out[i] = t.dtype == DType::kI8 ? int64_t(int8_t(*p)) : int64_t(*p);
    }
  }
  return out;
}

// The tensors of one quantized part, located and shape-checked (see int_weights.h for the layouts).
struct IntTensors {
  const io::TensorView* qweight = nullptr;  // qweight / weight_packed / weight (I8)
  const io::TensorView* zeros = nullptr;    // qzeros / weight_zero_point, when the format has one
  const io::TensorView* scales = nullptr;   // scales / weight_scale
  const io::TensorView* g_idx = nullptr;    // g_idx / weight_g_idx
  const io::TensorView* shape = nullptr;    // weight_shape (pack-quantized)
  int64_t out = 0, in = 0, groups = 1;
  int pack = 1;                      // values per 32-bit word
  bool scales_by_group_row = false;  // AWQ / GPTQ: scales [groups, out]; else [out, groups]
};

bool ct_format(const QuantConfig& q) {
  return q.method == Method::kCtPacked || q.method == Method::kCtInt8;
}

std::string module_of(const std::string& weight_name) {
  const std::string tail = ".weight";
  return weight_name.ends_with(tail) ? weight_name.substr(0, weight_name.size() - tail.size())
                                     : weight_name;
}

const io::TensorView& need(const io::WeightStore& store, const models::HfTensorSpec& part,
                           const std::string& suffix, const QuantConfig& q) {
  const std::string name = module_of(part.name) + "." + suffix;
  const io::TensorView* t = store.find(name);
  if (!t)
    invalid_argument(store.source() + ": missing tensor '" + name + "' (" + q.name + " " +
                     std::to_string(q.bits) + "-bit weight '" + module_of(part.name) + "')");
  return *t;
}

const io::TensorView* maybe(const io::WeightStore& store, const models::HfTensorSpec& part,
                            const std::string& suffix) {
  return store.find(module_of(part.name) + "." + suffix);
}

// "4-bit gptq weight 'X' [out, in], group 128": the context of a shape error.
std::string context(const QuantConfig& q, const models::HfTensorSpec& part) {
  return std::to_string(q.bits) + "-bit " + q.name + " weight '" + module_of(part.name) + "' " +
         shape_str(part.shape) +
         (q.group_size > 0 ? ", group_size " + std::to_string(q.group_size) : std::string());
}

void expect(const io::TensorView& t, std::initializer_list<DType> dtypes,
            const std::vector<int64_t>& shape, const std::string& role, const std::string& ctx) {
  if (std::find(dtypes.begin(), dtypes.end(), t.dtype) == dtypes.end()) {
    std::string names;
    for (DType d : dtypes) names += (names.empty() ? "" : " or ") + std::string(dtype_name(d));
    bad_tensor(t, "is " + std::string(dtype_name(t.dtype)) + " but " + role + " must be " + names);
  }
  if (t.shape != shape)
    bad_tensor(t, "has shape " + shape_str(t.shape) + " but the " + role + " of a " + ctx +
                      " must be " + shape_str(shape));
}

constexpr std::initializer_list<DType> kI32{DType::kI32};
constexpr std::initializer_list<DType> kFloat{DType::kF16, DType::kBF16, DType::kF32};
constexpr std::initializer_list<DType> kIndex{DType::kI32, DType::kI64};

void locate_awq_gptq(const io::WeightStore& store, const models::HfTensorSpec& part,
                     const QuantConfig& q, const std::string& ctx, IntTensors& L) {
  const bool awq = q.method == Method::kAwq;
  const int64_t packed_dim = awq ? L.out : L.in;
  // AWQ packs qweight and qzeros along out; GPTQ qweight along in and qzeros along out.
  if (packed_dim % L.pack != 0 || L.out % L.pack != 0)
    invalid_argument(
        store.source() + ": " + ctx + ": " + q.name + " packs " + std::to_string(L.pack) +
        " values per int32, which does not divide " +
        (packed_dim % L.pack != 0 ? std::to_string(packed_dim) : std::to_string(L.out)));
  L.qweight = &need(store, part, "qweight", q);
  expect(
      *L.qweight, kI32,
      awq ? std::vector<int64_t>{L.in, L.out / L.pack} : std::vector<int64_t>{L.in / L.pack, L.out},
      "qweight", ctx);
  // GPTQ always writes qzeros (also for symmetric weights); AWQ only with zero points.
  L.zeros = q.zero_points || !awq ? &need(store, part, "qzeros", q) : maybe(store, part, "qzeros");
  if (L.zeros) expect(*L.zeros, kI32, {L.groups, L.out / L.pack}, "qzeros", ctx);
  L.scales = &need(store, part, "scales", q);
  expect(*L.scales, kFloat, {L.groups, L.out}, "scales", ctx);
  L.scales_by_group_row = true;
  if (!awq) {
    L.g_idx = q.desc_act ? &need(store, part, "g_idx", q) : maybe(store, part, "g_idx");
    if (L.g_idx) expect(*L.g_idx, kIndex, {L.in}, "g_idx", ctx);
  }
}

void locate_compressed(const io::WeightStore& store, const models::HfTensorSpec& part,
                       const QuantConfig& q, const std::string& ctx, IntTensors& L) {
  L.scales = &need(store, part, "weight_scale", q);
  L.zeros = q.zero_points ? &need(store, part, "weight_zero_point", q)
                          : maybe(store, part, "weight_zero_point");
  if (q.method == Method::kCtInt8) {
    L.qweight = &store.get(part.name);
    expect(*L.qweight, {DType::kI8}, {L.out, L.in}, "int8 weight", ctx);
    const std::vector<int64_t>& sh = L.scales->shape;
    if (!(scalar_shape(sh) || sh == std::vector<int64_t>{L.out, 1} ||
          sh == std::vector<int64_t>{L.out}))
      expect(*L.scales, kFloat, {L.out, 1}, "per-channel ([out, 1]) or per-tensor ([1]) scale",
             ctx);
    expect(*L.scales, kFloat, sh, "weight_scale", ctx);
    return;
  }
  L.qweight = &need(store, part, "weight_packed", q);
  expect(*L.qweight, kI32, {L.out, ceil_div(L.in, L.pack)}, "weight_packed", ctx);
  L.shape = &need(store, part, "weight_shape", q);
  expect(*L.shape, kIndex, {2}, "weight_shape", ctx);
  if (read_ints(*L.shape) != std::vector<int64_t>{L.out, L.in})
    bad_tensor(*L.shape, "holds " + shape_str(read_ints(*L.shape)) + " but config.json implies " +
                             shape_str(part.shape));
  expect(*L.scales, kFloat, {L.out, L.groups}, "weight_scale", ctx);
  if (q.zero_points)
    expect(*L.zeros, kI32, {ceil_div(L.out, L.pack), L.groups}, "weight_zero_point", ctx);
  L.g_idx = q.desc_act ? &need(store, part, "weight_g_idx", q) : maybe(store, part, "weight_g_idx");
  if (L.g_idx) expect(*L.g_idx, kIndex, {L.in}, "weight_g_idx", ctx);
}

IntTensors locate(const io::WeightStore& store, const models::HfTensorSpec& part,
                  const QuantConfig& q) {
  IntTensors L;
  L.out = part.shape[0], L.in = part.shape[1];
  L.pack = 32 / q.bits;
  L.groups = q.group_size > 0 ? ceil_div(L.in, q.group_size) : 1;
  const std::string ctx = context(q, part);
  if (ct_format(q))
    locate_compressed(store, part, q, ctx, L);
  else
    locate_awq_gptq(store, part, q, ctx, L);
  return L;
}

// A packed field: `bits` bits at slot `slot` (low bits first) of a 32-bit word.
int32_t field(uint32_t word, int slot, int bits) {
  return int32_t((word >> (slot * bits)) & ((1u << bits) - 1));
}

// The zero point of output row r in group g, as the integer subtracted from q.
int32_t zero_at(const IntTensors& L, const QuantConfig& q, int64_t r, int64_t g) {
  const int32_t mid = 1 << (q.bits - 1);
  if (q.method == Method::kCtInt8) return 0;
  if (!q.zero_points) return mid;  // symmetric (pack-quantized stores q + 2^(bits-1))
  switch (q.method) {
    case Method::kAwq:
      return field(word_at(*L.zeros, g * (L.out / 8) + r / 8), kAwqNibble[r % 8], 4);
    case Method::kGptq:  // v1 stores zero - 1; vLLM adds the 1 back without wrapping
      return field(word_at(*L.zeros, g * (L.out / L.pack) + r / L.pack), int(r % L.pack), q.bits) +
             (q.gptq_v2 ? 0 : 1);
    default:
      return field(word_at(*L.zeros, (r / L.pack) * L.groups + g), int(r % L.pack), q.bits);
  }
}

float scale_at(const IntTensors& L, const std::vector<float>& s, int64_t r, int64_t g) {
  if (L.scales_by_group_row) return s[size_t(g * L.out + r)];
  if (s.size() == 1) return s[0];  // int-quantized per-tensor
  return s[size_t(r * L.groups + g)];
}

// Scales must be finite and non-zero (a zero silently zeroes a group, a NaN poisons the layer).
void check_scales(const io::TensorView& t) {
  const std::vector<float> v = read_f32(t);
  for (size_t i = 0; i < v.size(); ++i)
    if (!std::isfinite(v[i]) || v[i] == 0)
      bad_tensor(t, "holds " + std::to_string(v[i]) + " at flat index " + std::to_string(i) +
                        "; scales must be finite and non-zero");
}

// g_idx: every value a group in range; act-order: a permutation of the in-order assignment (each
// group as many columns as group_size gives it); otherwise exactly column / group_size.
void check_g_idx(const IntTensors& L, const QuantConfig& q) {
  const std::vector<int64_t> g = read_ints(*L.g_idx);
  const int64_t gs = q.group_size > 0 ? q.group_size : L.in;
  std::vector<int64_t> count(size_t(L.groups), 0);
  for (int64_t c = 0; c < L.in; ++c) {
    const int64_t v = g[size_t(c)];
    if (v < 0 || v >= L.groups)
      bad_tensor(*L.g_idx, "assigns input column " + std::to_string(c) + " to group " +
                               std::to_string(v) + ", outside [0, " + std::to_string(L.groups) +
                               ")");
    if (!q.desc_act && v != c / gs)
      bad_tensor(*L.g_idx, "assigns input column " + std::to_string(c) + " to group " +
                               std::to_string(v) +
                               " but without act-order (desc_act / actorder) "
                               "group_size " +
                               std::to_string(gs) + " puts it in group " + std::to_string(c / gs));
    ++count[size_t(v)];
  }
  for (int64_t i = 0; i < L.groups; ++i)
    if (count[size_t(i)] != std::min(gs, L.in - i * gs))
      bad_tensor(*L.g_idx, "puts " + std::to_string(count[size_t(i)]) + " input columns in group " +
                               std::to_string(i) + " but group_size " + std::to_string(gs) +
                               " needs " + std::to_string(std::min(gs, L.in - i * gs)));
}

// Zero-point tensors of symmetric schemes must hold the fixed zero: AWQ 2^(bits-1); GPTQ
// 2^(bits-1) - 1 (v1) or 2^(bits-1) (v2: some exporters write it without saying so, and vLLM's
// kernels ignore symmetric zeros); compressed-tensors 0 (unpacked zero points of old exports).
void check_symmetric_zeros(const IntTensors& L, const QuantConfig& q) {
  const io::TensorView& z = *L.zeros;
  const int32_t mid = 1 << (q.bits - 1);
  if (ct_format(q)) {
    if (!is_integer(z.dtype))
      bad_tensor(z, "is " + std::string(dtype_name(z.dtype)) + "; zero points are integers");
    for (int64_t v : read_ints(z))
      if (v != 0)
        bad_tensor(z, "holds zero point " + std::to_string(v) +
                          " but the scheme is symmetric (zero points 0)");
    return;
  }
  for (int64_t i = 0; i < z.num_elements(); ++i)
    for (int slot = 0; slot < L.pack; ++slot) {
      const int32_t v = field(word_at(z, i), slot, q.bits);
      if (v == mid || (q.method == Method::kGptq && v == mid - 1)) continue;
      bad_tensor(z, "holds zero point " + std::to_string(v) + " but a symmetric " +
                        std::to_string(q.bits) + "-bit " + q.name + " checkpoint stores " +
                        (q.method == Method::kGptq ? std::to_string(mid - 1) + " (v1) or " : "") +
                        std::to_string(mid));
    }
}

// A row-parallel slice [c0, c0 + nc) of input columns must hold whole groups (unless act-order's
// g_idx assigns them): the GPU kernels keep one rank's groups on that rank.
void check_row_slice(const IntTensors& L, const QuantConfig& q, const models::HfTensorSpec& part,
                     int64_t c0, int64_t nc) {
  if (part.slice.dim != 1 || q.group_size <= 0 || q.desc_act) return;
  const int64_t gs = q.group_size;
  if (c0 % gs == 0 && (nc % gs == 0 || c0 + nc == L.in)) return;
  bad_tensor(*L.qweight,
             "cannot be split for tensor parallelism: this rank's shard of input "
             "columns [" +
                 std::to_string(c0) + ", " + std::to_string(c0 + nc) +
                 ") cuts through groups of group_size " + std::to_string(gs) +
                 " (each shard must hold whole groups)");
}

// Fills v.q [nr, nc] with q_at(R, C) + offset for rows r0.. and columns c0.., and v.scale /
// v.zero [nr, groups] with each row's group constants.
template <class QAt>
void unpack_rows(const IntTensors& L, const QuantConfig& q, int64_t r0, int64_t c0, int32_t offset,
                 IntPartValues& v, QAt q_at) {
  const std::vector<float> s = read_f32(*L.scales);
  const int64_t nr = v.rows, nc = v.cols;
  const size_t min_rows =
      size_t(std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(nc, 1)));
  ThreadPool::global().parallel_for(
      size_t(nr),
      [&](size_t begin, size_t end) {
        for (size_t lr = begin; lr < end; ++lr) {
          const int64_t r = r0 + int64_t(lr);
          for (int64_t g = 0; g < L.groups; ++g) {
            v.scale[lr * size_t(L.groups) + size_t(g)] = scale_at(L, s, r, g);
            v.zero[lr * size_t(L.groups) + size_t(g)] = zero_at(L, q, r, g) + offset;
          }
          uint8_t* row = v.q.data() + int64_t(lr) * nc;
          for (int64_t lc = 0; lc < nc; ++lc) row[lc] = uint8_t(q_at(r, c0 + lc) + offset);
        }
      },
      min_rows);
}

}  // namespace

bool int_part_quantized(const QuantConfig& q, const std::string& weight_name) {
  const std::string m = module_of(weight_name);
  for (const std::string& e : q.ignore)
    if (module_matches(e, m, q.ignore_match)) return false;
  if (q.targets.empty()) return true;
  for (const std::string& t : q.targets)
    if (module_matches(t, m, IgnoreMatch::kExactOrRegex)) return true;
  return false;
}

void check_int_part(const io::WeightStore& store, const models::HfTensorSpec& part,
                    const QuantConfig& q, std::set<std::string, std::less<>>& used) {
  const IntTensors L = locate(store, part, q);
  for (const io::TensorView* t : {L.qweight, L.zeros, L.scales, L.g_idx, L.shape})
    if (t) used.insert(t->name);
  check_scales(*L.scales);
  if (L.g_idx) check_g_idx(L, q);
  if (L.zeros && !q.zero_points) check_symmetric_zeros(L, q);
}

IntPartValues unpack_int_part(const io::WeightStore& store, const models::HfTensorSpec& part,
                              const QuantConfig& q) {
  const IntTensors L = locate(store, part, q);
  const bool rows = part.slice.dim == 0, cols = part.slice.dim == 1;
  const int64_t r0 = rows ? part.slice.begin : 0, nr = rows ? part.slice.count : L.out;
  const int64_t c0 = cols ? part.slice.begin : 0, nc = cols ? part.slice.count : L.in;
  check_row_slice(L, q, part, c0, nc);
  IntPartValues v;
  v.bits = q.bits, v.rows = nr, v.cols = nc, v.groups = L.groups;
  v.q.resize(size_t(nr * nc));
  v.scale.resize(size_t(nr * L.groups));
  v.zero.resize(size_t(nr * L.groups));
  v.group.resize(size_t(nc));
  const std::vector<int64_t> g_idx = L.g_idx ? read_ints(*L.g_idx) : std::vector<int64_t>{};
  for (int64_t lc = 0; lc < nc; ++lc)
    v.group[size_t(lc)] = int32_t(L.g_idx            ? g_idx[size_t(c0 + lc)]
                                  : q.group_size > 0 ? (c0 + lc) / q.group_size
                                                     : 0);
  const io::TensorView& w = *L.qweight;
  const int bits = q.bits;
  switch (q.method) {
    case Method::kAwq:
      unpack_rows(L, q, r0, c0, 0, v, [&](int64_t r, int64_t c) {
        return field(word_at(w, c * (L.out / 8) + r / 8), kAwqNibble[r % 8], 4);
      });
      break;
    case Method::kGptq:
      unpack_rows(L, q, r0, c0, 0, v, [&](int64_t r, int64_t c) {
        return field(word_at(w, (c / L.pack) * L.out + r), int(c % L.pack), bits);
      });
      break;
    case Method::kCtPacked: {
      const int64_t words = ceil_div(L.in, L.pack);
      unpack_rows(L, q, r0, c0, 0, v, [&](int64_t r, int64_t c) {
        return field(word_at(w, r * words + c / L.pack), int(c % L.pack), bits);
      });
      break;
    }
    case Method::kCtInt8:  // signed int8, zero 0: stored offset by 128 (zero 128)
      unpack_rows(L, q, r0, c0, 128, v, [&](int64_t r, int64_t c) {
        return int32_t(int8_t(w.data[size_t(r * L.in + c)]));
      });
      break;
    default:
      throw_error(ErrorKind::kInternal, "unpack_int_part: not an INT4/INT8 config");
  }
  return v;
}

void dequantize_int_part(const io::WeightStore& store, const models::HfTensorSpec& part,
                         const QuantConfig& q, float* dst) {
  const IntPartValues v = unpack_int_part(store, part, q);
  const size_t groups = size_t(v.groups);
  ThreadPool::global().parallel_for(
      size_t(v.rows),
      [&](size_t begin, size_t end) {
        for (size_t r = begin; r < end; ++r) {
          const uint8_t* qr = v.q.data() + r * size_t(v.cols);
          float* row = dst + r * size_t(v.cols);
          for (size_t c = 0; c < size_t(v.cols); ++c) {
            const size_t g = r * groups + size_t(v.group[c]);
            row[c] = float(int32_t(qr[c]) - v.zero[g]) * v.scale[g];
          }
        }
      },
      size_t(std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(v.cols, 1))));
}

void check_int_weights_on_gpu(const QuantConfig& q, const std::string& model) {
  if (!q.int_weights() || !q.int8_activations) return;
  if (q.method == Method::kCtInt8 && q.bits == 8 && q.group_size <= 0 && !q.zero_points) return;
  unsupported(model + ": W8A8-INT8 (" + q.name +
              ", int8 activations) runs on the GPU only with "
              "compressed-tensors int-quantized symmetric per-channel or per-tensor weights; use "
              "--device cpu for this one");
}

std::string describe_int_weights_on_gpu(const QuantConfig& q, DType dtype) {
  if (!q.int_weights()) return "";
  if (dtype == DType::kF32)
    return q.describe() +
           ": dequantized to float32 at load (the INT kernels compute in bfloat16 "
           "or float16)";
  if (q.int8_activations)
    return q.describe() +
           ": int8 weights and per-token int8 activations on the int8 tensor-core "
           "GEMM";
  return q.describe() + ": weights kept packed (" + std::to_string(q.bits) +
         " bits), multiplied by the INT weight-only kernels";
}

void fake_quantize_rows_int8(float* x, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = x + r * cols;
    float amax = 0;
    for (int64_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(row[c]));
    if (amax == 0) continue;
    // As vLLM's dynamic int8 kernel: multiply by 127 / amax, round to nearest even, clamp.
    const float inv = 127.0f / amax, scale = amax / 127.0f;
    for (int64_t c = 0; c < cols; ++c) {
      const float v = std::nearbyint(row[c] * inv);
      row[c] = std::clamp(v, -128.0f, 127.0f) * scale;
    }
  }
}

}  // namespace pagellm::quant
