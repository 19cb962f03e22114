#include "quant/int_gpu_layout.h"

#include <algorithm>
#include <numeric>

#include "common/thread_pool.h"

namespace pagellm::quant {

namespace {

uint16_t scale_bits(float s, DType dtype) {
  return dtype == DType::kF16 ? f32_to_f16(s) : f32_to_bf16(s);
}

float scale_value(uint16_t bits, DType dtype) {
  return dtype == DType::kF16 ? f16_to_f32(bits) : bf16_to_f32(bits);
}

// The column order that makes each group contiguous (stable, so in-order checkpoints keep theirs),
// and the width of the groups in that order; 0 with *why when they are not all equal.
int64_t order_columns(const std::vector<int32_t>& group, std::vector<int32_t>& perm,
                      std::string* why) {
  const int64_t k = int64_t(group.size());
  perm.resize(size_t(k));
  std::iota(perm.begin(), perm.end(), 0);
  if (!std::is_sorted(group.begin(), group.end()))
    std::stable_sort(perm.begin(), perm.end(),
                     [&](int32_t a, int32_t b) { return group[size_t(a)] < group[size_t(b)]; });
  int64_t width = 0, run = 0;
  for (int64_t j = 0; j <= k; ++j) {
    if (j < k && (j == 0 || group[size_t(perm[size_t(j)])] == group[size_t(perm[size_t(j - 1)])])) {
      ++run;
      continue;
    }
    if (width == 0) width = run;
    if (run != width) {
      *why = "its groups have different widths on this rank (" + std::to_string(width) + " and " +
             std::to_string(run) + " input columns)";
      return 0;
    }
    run = 1;
  }
  if (width % 32 != 0) {
    *why = "its groups are " + std::to_string(width) +
           " input columns wide (the kernel needs a "
           "multiple of 32)";
    return 0;
  }
  return width;
}

void pack_row(const IntPartValues& v, int64_t r, const std::vector<int32_t>& perm, uint8_t* out) {
  const uint8_t* q = v.q.data() + r * v.cols;
  const int64_t k = v.cols;
  if (v.bits == 8) {
    for (int64_t j = 0; j < k; ++j) out[j] = q[perm[size_t(j)]];
    return;
  }
  for (int64_t w = 0; w < k / 8; ++w) {
    uint32_t word = 0;
    for (int nib = 0; nib < 8; ++nib)
      word |= uint32_t(q[perm[size_t(8 * w + kIntNibbleColumn[nib])]] & 0xf) << (4 * nib);
    for (int b = 0; b < 4; ++b) out[4 * w + b] = uint8_t(word >> (8 * b));
  }
}

}  // namespace

std::optional<IntGpuLayer> pack_int_layer(const std::vector<const IntPartValues*>& parts,
                                          DType dtype, std::string* why) {
  std::string ignored;
  if (!why) why = &ignored;
  if (parts.empty()) {
    *why = "it has no parts";
    return std::nullopt;
  }
  const IntPartValues& first = *parts[0];
  IntGpuLayer L;
  L.bits = first.bits, L.k = first.cols;
  if (L.bits != 4 && L.bits != 8) {
    *why = std::to_string(L.bits) + "-bit weights have no GPU kernel";
    return std::nullopt;
  }
  if (L.k % 32 != 0) {
    *why = "it has " + std::to_string(L.k) +
           " input columns on this rank (the kernel needs a "
           "multiple of 32)";
    return std::nullopt;
  }
  for (const IntPartValues* p : parts) {
    if (p->bits != L.bits || p->cols != L.k || p->group != first.group) {
      *why = "its fused parts differ in bits, width or the order of their groups";
      return std::nullopt;
    }
    L.n += p->rows;
  }
  std::vector<int32_t> perm;
  L.group_size = int(order_columns(first.group, perm, why));
  if (L.group_size == 0) return std::nullopt;
  // Kernel group i holds checkpoint group group_of[i].
  const int64_t groups = L.k / L.group_size;
  std::vector<int32_t> group_of(static_cast<size_t>(groups));
  for (int64_t i = 0; i < groups; ++i)
    group_of[size_t(i)] = first.group[size_t(perm[size_t(i * L.group_size)])];
  const int32_t mid = 1 << (L.bits - 1);
  bool symmetric = true;
  for (const IntPartValues* p : parts)
    for (int32_t z : p->zero) {
      if (z < 0 || z > 255) {
        *why = "it has zero point " + std::to_string(z) + " (the kernel takes 0..255)";
        return std::nullopt;
      }
      symmetric = symmetric && z == mid;
    }
  const int64_t row_bytes = L.k * L.bits / 8;
  L.wq.resize(size_t(L.n * row_bytes));
  L.scale.resize(size_t(L.n * groups));
  if (!symmetric) L.zero.resize(size_t(L.n * groups));
  int64_t r0 = 0;
  for (const IntPartValues* p : parts) {
    ThreadPool::global().parallel_for(
        size_t(p->rows),
        [&](size_t begin, size_t end) {
          for (int64_t r = int64_t(begin); r < int64_t(end); ++r) {
            pack_row(*p, r, perm, L.wq.data() + (r0 + r) * row_bytes);
            for (int64_t i = 0; i < groups; ++i) {
              const size_t src = size_t(r * p->groups + group_of[size_t(i)]);
              const size_t dst = size_t((r0 + r) * groups + i);
              L.scale[dst] = scale_bits(p->scale[src], dtype);
              if (!symmetric) L.zero[dst] = uint8_t(p->zero[src]);
            }
          }
        },
        size_t(std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(L.k, 1))));
    r0 += p->rows;
  }
  bool identity = true;
  for (size_t j = 0; j < perm.size(); ++j) identity = identity && perm[j] == int32_t(j);
  if (!identity) L.perm = std::move(perm);
  return L;
}

float int_gpu_weight(const IntGpuLayer& L, DType dtype, int64_t r, int64_t local_col) {
  int64_t j = local_col;
  if (!L.perm.empty())
    j = std::find(L.perm.begin(), L.perm.end(), int32_t(local_col)) - L.perm.begin();
  const int64_t row_bytes = L.k * L.bits / 8;
  const uint8_t* row = L.wq.data() + r * row_bytes;
  int32_t q = 0;
  if (L.bits == 8) {
    q = row[j];
  } else {
    const int64_t w = j / 8;
    const uint32_t word = uint32_t(row[4 * w]) | uint32_t(row[4 * w + 1]) << 8 |
                          uint32_t(row[4 * w + 2]) << 16 | uint32_t(row[4 * w + 3]) << 24;
    const int nib =
        int(std::find(std::begin(kIntNibbleColumn), std::end(kIntNibbleColumn), int(j % 8)) -
            std::begin(kIntNibbleColumn));
    q = int32_t((word >> (4 * nib)) & 0xf);
  }
  const int64_t g = r * L.groups() + j / L.group_size;
  const int32_t z = L.zero.empty() ? 1 << (L.bits - 1) : L.zero[size_t(g)];
  const float s = scale_value(L.scale[size_t(g)], dtype);
  return float(q - z) * s;
}

}  // namespace pagellm::quant
