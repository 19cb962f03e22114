#include "kernel_reference.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <thread>

namespace pagellm::cuda::test {

void parallel_for(int n, const std::function<void(int)>& fn) {
  const int num_threads = std::max(1u, std::min(32u, std::thread::hardware_concurrency()));
  std::atomic<int> next{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < num_threads; ++t) {
    threads.emplace_back([&] {
      for (int i = next++; i < n; i = next++) fn(i);
    });
  }
  for (auto& t : threads) t.join();
}

void ref_attention(const RefAttention& a, float* out) {
  std::vector<int32_t> token_seq(a.num_tokens, -1);
  for (int s = 0; s < a.num_seqs; ++s)
    for (int t = a.query_start_loc[s]; t < a.query_start_loc[s + 1]; ++t) token_seq[t] = s;
  const int group = a.num_heads / a.num_kv_heads;
  parallel_for(a.num_tokens, [&](int t) {
    const int s = token_seq[t];
    if (s < 0) return;
    const int q_len = a.query_start_loc[s + 1] - a.query_start_loc[s];
    const int pos = a.seq_lens[s] - q_len + (t - a.query_start_loc[s]);
    const int first = a.window > 0 ? std::max(0, pos - a.window + 1) : 0;
    std::vector<double> scores(pos + 1);
    std::vector<double> acc(a.head_dim);
    for (int h = 0; h < a.num_heads; ++h) {
      const int kvh = h / group;
      const float* q = a.q + (static_cast<int64_t>(t) * a.num_heads + h) * a.head_dim;
      double mx = -INFINITY;
      for (int j = first; j <= pos; ++j) {
        const int64_t block =
            a.block_tables[static_cast<int64_t>(s) * a.max_blocks_per_seq + j / a.block_size];
        const float* k =
            a.k_cache +
            ((block * a.block_size + j % a.block_size) * a.num_kv_heads + kvh) * a.head_dim;
        double dot = 0;
        for (int d = 0; d < a.head_dim; ++d) dot += double(q[d]) * k[d];
        scores[j] = dot * a.scale;
        if (a.softcap > 0.f) scores[j] = a.softcap * std::tanh(scores[j] / a.softcap);
        mx = std::max(mx, scores[j]);
      }
      double sum = 0;
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int j = first; j <= pos; ++j) {
        const double p = std::exp(scores[j] - mx);
        sum += p;
        const int64_t block =
            a.block_tables[static_cast<int64_t>(s) * a.max_blocks_per_seq + j / a.block_size];
        const float* v =
            a.v_cache +
            ((block * a.block_size + j % a.block_size) * a.num_kv_heads + kvh) * a.head_dim;
        for (int d = 0; d < a.head_dim; ++d) acc[d] += p * v[d];
      }
      float* o = out + (static_cast<int64_t>(t) * a.num_heads + h) * a.head_dim;
      for (int d = 0; d < a.head_dim; ++d) o[d] = static_cast<float>(acc[d] / sum);
    }
  });
}

void ref_rms_norm(const float* x, float* residual, const float* weight, float* out, int num_rows,
                  int hidden, float eps, const RoundFn& round_fn) {
  for (int r = 0; r < num_rows; ++r) {
    std::vector<float> v(x + int64_t{r} * hidden, x + int64_t{r + 1} * hidden);
    if (residual) {
      for (int i = 0; i < hidden; ++i) {
        v[i] = round_fn(v[i] + residual[int64_t{r} * hidden + i]);
        residual[int64_t{r} * hidden + i] = v[i];
      }
    }
    double ss = 0;
    for (float f : v) ss += double(f) * f;
    const double inv = 1.0 / std::sqrt(ss / hidden + eps);
    for (int i = 0; i < hidden; ++i)
      out[int64_t{r} * hidden + i] = round_fn(weight[i] * round_fn(static_cast<float>(v[i] * inv)));
  }
}

void ref_rope(float* q, float* k, const int32_t* positions, const float* inv_freq, int num_tokens,
              int num_heads, int num_kv_heads, int head_dim, const RoundFn& round_fn, float scale) {
  const int half = head_dim / 2;
  for (int t = 0; t < num_tokens; ++t) {
    for (int h = 0; h < num_heads + num_kv_heads; ++h) {
      float* x = h < num_heads ? q + (int64_t{t} * num_heads + h) * head_dim
                               : k + (int64_t{t} * num_kv_heads + (h - num_heads)) * head_dim;
      for (int i = 0; i < half; ++i) {
        // The angle is one fp32 product, as on the device and in transformers.
        const float angle = static_cast<float>(positions[t]) * inv_freq[i];
        const float c = round_fn(static_cast<float>(std::cos(double(angle))) * scale);
        const float s = round_fn(static_cast<float>(std::sin(double(angle))) * scale);
        const float x1 = x[i], x2 = x[i + half];
        x[i] = round_fn(round_fn(x1 * c) - round_fn(x2 * s));
        x[i + half] = round_fn(round_fn(x2 * c) + round_fn(x1 * s));
      }
    }
  }
}

void ref_silu_and_mul(const float* x, float* out, int num_tokens, int inner,
                      const RoundFn& round_fn) {
  for (int t = 0; t < num_tokens; ++t) {
    for (int i = 0; i < inner; ++i) {
      const double g = x[int64_t{t} * 2 * inner + i];
      const float s = round_fn(static_cast<float>(g / (1.0 + std::exp(-g))));
      out[int64_t{t} * inner + i] = round_fn(s * x[int64_t{t} * 2 * inner + inner + i]);
    }
  }
}

void ref_gemm(const float* x, const float* w, float* y, int m, int n, int k, bool accumulate) {
  parallel_for(m, [&](int i) {
    for (int j = 0; j < n; ++j) {
      double acc = accumulate ? y[int64_t{i} * n + j] : 0.0;
      for (int l = 0; l < k; ++l) acc += double(x[int64_t{i} * k + l]) * w[int64_t{j} * k + l];
      y[int64_t{i} * n + j] = static_cast<float>(acc);
    }
  });
}

}  // namespace pagellm::cuda::test
