#include "backends/cuda/peer_all_reduce.h"

#include "backends/cuda/common.cuh"

namespace pagellm::cuda {

struct OneShotParams {
  void* data = nullptr;                              // this rank's input and output
  const void* buffers[PeerAllReduce::kMaxRanks] = {};  // every rank's exchange buffer (peer pointers)
  uint32_t* flags[PeerAllReduce::kMaxRanks] = {};    // every rank's flags
  uint32_t* counters = nullptr;                      // this rank's
  size_t half_bytes = 0;
  size_t num_vecs = 0;  // 16-byte vectors
  int rank = 0;
  int world = 0;
};

namespace {

__device__ __forceinline__ void store_release_sys(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ uint32_t load_acquire_sys(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Thread p < world signals peer p that this block has put its chunk of the call in place, then
// waits for peer p's signal of the same call. (Flags only grow: a peer already in the next call
// has written a larger number.)
__device__ __forceinline__ void barrier_with_peers(const OneShotParams& p, uint32_t call) {
  const int peer = int(threadIdx.x);
  if (peer < p.world && peer != p.rank) {
    const int slot = int(blockIdx.x) * PeerAllReduce::kMaxRanks;
    __threadfence_system();
    store_release_sys(p.flags[peer] + slot + p.rank, call);
    while (load_acquire_sys(p.flags[p.rank] + slot + peer) < call) {
    }
  }
  __syncthreads();
}

// This call's number for the block (the same on every rank: all launch the same grid each call).
__device__ __forceinline__ uint32_t next_call(uint32_t* counters) {
  __shared__ uint32_t call;
  if (threadIdx.x == 0) {
    call = counters[blockIdx.x] + 1;
    counters[blockIdx.x] = call;
  }
  __syncthreads();
  return call;
}

// 16 bytes of element vector i of every rank's exchange buffer (this call's half), summed in rank
// order in fp32.
template <typename T>
__device__ __forceinline__ void sum_over_ranks(const OneShotParams& p, size_t half, size_t i,
                                               float (&acc)[16 / sizeof(T)]) {
  constexpr int kV = 16 / sizeof(T);
#pragma unroll
  for (int k = 0; k < kV; ++k) acc[k] = 0.f;
  for (int r = 0; r < p.world; ++r) {
    const uint4 raw = __ldcg(reinterpret_cast<const uint4*>(static_cast<const char*>(p.buffers[r]) + half) + i);
    const T* v = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int k = 0; k < kV; ++k) acc[k] += to_float(v[k]);
  }
}

template <typename T>
__global__ void __launch_bounds__(PeerAllReduce::kThreads) one_shot_all_reduce(OneShotParams p) {
  const uint32_t call = next_call(p.counters);
  const size_t half = (call & 1u) * p.half_bytes;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  const size_t first = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  uint4* mine = reinterpret_cast<uint4*>(static_cast<char*>(const_cast<void*>(p.buffers[p.rank])) + half);
  const uint4* in = static_cast<const uint4*>(p.data);
  for (size_t i = first; i < p.num_vecs; i += stride) mine[i] = in[i];
  __syncthreads();
  barrier_with_peers(p, call);
  constexpr int kV = 16 / sizeof(T);
  for (size_t i = first; i < p.num_vecs; i += stride) {
    float acc[kV];
    sum_over_ranks<T>(p, half, i, acc);  // rank order: the same sum on every rank
    store16(static_cast<T*>(p.data) + i * kV, acc);
  }
}

struct NormParams {
  void* residual = nullptr;      // [rows, hidden]
  const void* weight = nullptr;  // [hidden]
  void* out = nullptr;           // [rows, hidden]
  int rows = 0;
  int vecs_per_row = 0;
  int hidden = 0;
  float eps = 0.f;
};

// One block per row (rows b, b + grid, ...); R vectors of 16 bytes per thread cover a row.
template <typename T, int R>
__global__ void __launch_bounds__(PeerAllReduce::kThreads)
    one_shot_all_reduce_add_rms_norm(OneShotParams p, NormParams n) {
  constexpr int kV = 16 / sizeof(T);
  __shared__ float scratch[32];
  const uint32_t call = next_call(p.counters);
  const size_t half = (call & 1u) * p.half_bytes;
  uint4* mine = reinterpret_cast<uint4*>(static_cast<char*>(const_cast<void*>(p.buffers[p.rank])) + half);
  const uint4* in = static_cast<const uint4*>(p.data);
  for (int row = blockIdx.x; row < n.rows; row += gridDim.x)
    for (int v = threadIdx.x; v < n.vecs_per_row; v += blockDim.x) {
      const size_t i = size_t(row) * n.vecs_per_row + v;
      mine[i] = in[i];
    }
  __syncthreads();
  barrier_with_peers(p, call);
  for (int row = blockIdx.x; row < n.rows; row += gridDim.x) {
    float x[R][kV];
    float sumsq = 0.f;
    T* res = static_cast<T*>(n.residual) + size_t(row) * n.hidden;
#pragma unroll
    for (int k = 0; k < R; ++k) {
      const int v = threadIdx.x + k * blockDim.x;
      if (v >= n.vecs_per_row) continue;
      float acc[kV], r[kV];
      sum_over_ranks<T>(p, half, size_t(row) * n.vecs_per_row + v, acc);
      load16(res + v * kV, r);
#pragma unroll
      for (int j = 0; j < kV; ++j) {
        // The all-reduce's result and the residual stream are both stored in the model dtype.
        x[k][j] = round_to<T>(round_to<T>(acc[j]) + r[j]);
        sumsq += x[k][j] * x[k][j];
      }
      store16(res + v * kV, x[k]);
    }
    const float inv = rsqrtf(block_sum(sumsq, scratch) / n.hidden + n.eps);
    T* out = static_cast<T*>(n.out) + size_t(row) * n.hidden;
    const T* w = static_cast<const T*>(n.weight);
#pragma unroll
    for (int k = 0; k < R; ++k) {
      const int v = threadIdx.x + k * blockDim.x;
      if (v >= n.vecs_per_row) continue;
      float wv[kV], o[kV];
      load16(w + v * kV, wv);
#pragma unroll
      for (int j = 0; j < kV; ++j) o[j] = wv[j] * round_to<T>(x[k][j] * inv);
      store16(out + v * kV, o);
    }
  }
}

// The kernels library does not link pagellm's core (dtype_size lives there).
size_t element_bytes(DType dtype) { return dtype == DType::kF32 ? 4 : 2; }

}  // namespace

std::shared_ptr<PeerAllReduce> PeerAllReduce::create(const std::vector<int>& devices, size_t max_bytes,
                                                     std::string* why_not) {
  auto fail = [&](const std::string& why) {
    if (why_not) *why_not = why;
    return std::shared_ptr<PeerAllReduce>();
  };
  const int n = int(devices.size());
  if (n < 2 || n > kMaxRanks) return fail("needs 2 to 8 GPUs in one process");
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      if (i == j) continue;
      int can = 0;
      if (cudaDeviceCanAccessPeer(&can, devices[size_t(i)], devices[size_t(j)]) != cudaSuccess || !can)
        return fail("GPU " + std::to_string(devices[size_t(i)]) + " cannot access GPU " +
                    std::to_string(devices[size_t(j)]) + " directly");
      if (cudaSetDevice(devices[size_t(i)]) != cudaSuccess) return fail("cannot select a GPU");
      const cudaError_t e = cudaDeviceEnablePeerAccess(devices[size_t(j)], 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled) {
        cudaGetLastError();
      } else if (e != cudaSuccess) {
        return fail(std::string("enabling peer access: ") + cudaGetErrorString(e));
      }
    }
  std::shared_ptr<PeerAllReduce> g(new PeerAllReduce());
  g->max_bytes_ = max_bytes;
  for (int r = 0; r < n; ++r) {
    Rank rank;
    rank.device = devices[size_t(r)];
    g->ranks_.push_back(rank);  // before allocating: the destructor frees what exists
    Rank& k = g->ranks_.back();
    const size_t flag_bytes = sizeof(uint32_t) * kBlocks * kMaxRanks, counter_bytes = sizeof(uint32_t) * kBlocks;
    if (cudaSetDevice(k.device) != cudaSuccess || cudaMalloc(&k.buffer, 2 * max_bytes) != cudaSuccess ||
        cudaMalloc(reinterpret_cast<void**>(&k.flags), flag_bytes) != cudaSuccess ||
        cudaMalloc(reinterpret_cast<void**>(&k.counters), counter_bytes) != cudaSuccess ||
        cudaMemset(k.flags, 0, flag_bytes) != cudaSuccess ||
        cudaMemset(k.counters, 0, counter_bytes) != cudaSuccess)
      return fail("cannot allocate the exchange buffers");
  }
  for (const Rank& k : g->ranks_) {
    cudaSetDevice(k.device);
    if (cudaDeviceSynchronize() != cudaSuccess) return fail("setting up the exchange buffers failed");
  }
  return g;
}

PeerAllReduce::~PeerAllReduce() {
  for (const Rank& k : ranks_) {
    cudaSetDevice(k.device);
    cudaFree(k.buffer);
    cudaFree(k.flags);
    cudaFree(k.counters);
  }
}

bool PeerAllReduce::fits(const void* data, size_t count, DType dtype) const {
  if (dtype != DType::kBF16 && dtype != DType::kF16 && dtype != DType::kF32) return false;
  const size_t bytes = count * element_bytes(dtype);
  return bytes > 0 && bytes <= max_bytes_ && bytes % 16 == 0 && aligned16(data);
}

bool PeerAllReduce::fits_norm(const void* x, int rows, int hidden, DType dtype) const {
  if (rows <= 0 || hidden <= 0) return false;
  const size_t row_bytes = size_t(hidden) * element_bytes(dtype);
  return fits(x, size_t(rows) * hidden, dtype) && row_bytes % 16 == 0 &&
         row_bytes / 16 <= size_t(kMaxNormVecsPerThread) * kThreads;
}

cudaError_t PeerAllReduce::run_add_rms_norm(int rank, const void* x, void* residual, const void* weight,
                                            void* out, int rows, int hidden, float eps, DType dtype,
                                            cudaStream_t stream) {
  if (rank < 0 || rank >= size() || !fits_norm(x, rows, hidden, dtype) || !residual || !weight || !out ||
      !aligned16(residual) || !aligned16(weight) || !aligned16(out))
    return cudaErrorInvalidValue;
  OneShotParams p = params(rank, const_cast<void*>(x), size_t(rows) * hidden, dtype);
  NormParams n{residual, weight, out, rows, int(size_t(hidden) * element_bytes(dtype) / 16), hidden, eps};
  const int per_thread = (n.vecs_per_row + kThreads - 1) / kThreads;
  return PAGELLM_DISPATCH_DTYPE(dtype, [&] {
    auto kernel = per_thread <= 1   ? one_shot_all_reduce_add_rms_norm<scalar_t, 1>
                  : per_thread <= 2 ? one_shot_all_reduce_add_rms_norm<scalar_t, 2>
                                    : one_shot_all_reduce_add_rms_norm<scalar_t, kMaxNormVecsPerThread>;
    kernel<<<kBlocks, kThreads, 0, stream>>>(p, n);
    return cudaGetLastError();
  });
}

OneShotParams PeerAllReduce::params(int rank, void* data, size_t count, DType dtype) const {
  OneShotParams p;
  p.data = data;
  for (int r = 0; r < size(); ++r) {
    p.buffers[r] = ranks_[size_t(r)].buffer;
    p.flags[r] = ranks_[size_t(r)].flags;
  }
  p.counters = ranks_[size_t(rank)].counters;
  p.half_bytes = max_bytes_;
  p.num_vecs = count * element_bytes(dtype) / 16;
  p.rank = rank;
  p.world = size();
  return p;
}

cudaError_t PeerAllReduce::run(int rank, void* data, size_t count, DType dtype, cudaStream_t stream) {
  if (rank < 0 || rank >= size() || !fits(data, count, dtype)) return cudaErrorInvalidValue;
  const OneShotParams p = params(rank, data, count, dtype);
  return PAGELLM_DISPATCH_DTYPE(dtype, [&] {
    one_shot_all_reduce<scalar_t><<<kBlocks, kThreads, 0, stream>>>(p);
    return cudaGetLastError();
  });
}

}  // namespace pagellm::cuda
