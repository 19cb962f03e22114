#include "backends/cuda/peer_all_reduce.h"

#include <type_traits>

#include "backends/cuda/common.cuh"

namespace pagellm::cuda {

struct OneShotParams {
  void* data = nullptr;  // this rank's input (and the plain all-reduce's output)
  char* slots[PeerAllReduce::kMaxRanks] = {};  // every rank's receive slots (peer pointers)
  uint32_t* state = nullptr;  // this rank's: [kBlocks] call counters, [3] bytes per buffer
  size_t slot_bytes = 0;      // one sender's slot in one buffer
  size_t bytes = 0;           // this call's
  size_t num_vecs = 0;        // 16-byte vectors
  int rank = 0;
  int world = 0;
};

namespace {

// The bits of one element of T, as an unsigned integer.
template <typename T>
using Bits = std::conditional_t<sizeof(T) == 2, uint16_t, uint32_t>;

// An empty receive slot holds elements with every bit set (a NaN in bf16, f16 and f32); a rank that
// would send that exact NaN sends another NaN instead, so a slot never looks empty once written.
template <typename T>
constexpr Bits<T> kEmpty = Bits<T>(~0u);
template <typename T>
constexpr Bits<T> kOtherNan = Bits<T>(kEmpty<T> >> 1);  // 0x7fff / 0x7fffffff: also a NaN

template <typename T>
__device__ __forceinline__ uint4 never_empty(uint4 v) {
  Bits<T>* e = reinterpret_cast<Bits<T>*>(&v);
#pragma unroll
  for (int k = 0; k < int(16 / sizeof(T)); ++k)
    if (e[k] == kEmpty<T>) e[k] = kOtherNan<T>;
  return v;
}

template <typename T>
__device__ __forceinline__ bool still_empty(const uint4& v) {
  const Bits<T>* e = reinterpret_cast<const Bits<T>*>(&v);
  bool empty = false;
#pragma unroll
  for (int k = 0; k < int(16 / sizeof(T)); ++k) empty |= e[k] == kEmpty<T>;
  return empty;
}

// 32-bit elements, each read and written whole (a sender's 16 bytes may land in any order).
__device__ __forceinline__ uint4 load_volatile16(const void* p) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p)
               : "memory");
  return v;
}

__device__ __forceinline__ void store_volatile16(void* p, uint4 v) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y),
               "r"(v.z), "r"(v.w)
               : "memory");
}

// One call's exchange. Every rank has three buffers of `world` receive slots; the call uses buffer
// (call number mod 3), the same on every rank. Each rank writes its input straight into its slot
// of every peer's buffer (one crossing of NVLink, no flag: the data is its own signal) and reads
// its peers' inputs from its own buffer once they are no longer empty. Then it empties the buffer
// of the call before (the one after next), which every rank has finished writing: a peer can
// start writing it again only in the call after next, which needs this rank's input of the next
// call, sent after this kernel ends.
class Exchange {
 public:
  __device__ explicit Exchange(const OneShotParams& p) : p_(p) {
    __shared__ uint32_t buffer;
    if (threadIdx.x == 0) {
      const uint32_t call = p.state[blockIdx.x] + 1;  // the same on every rank: all launch one grid
      p.state[blockIdx.x] = call;
      buffer = call % 3;
    }
    __syncthreads();
    buffer_ = buffer;
    base_ = size_t(buffer_) * size_t(p.world) * p.slot_bytes;
  }

  // Sends 16-byte vector i of this rank's input to every peer.
  template <typename T>
  __device__ void send(size_t i, uint4 v) const {
    v = never_empty<T>(v);
    const size_t at = base_ + size_t(p_.rank) * p_.slot_bytes + i * 16;
    for (int r = 0; r < p_.world; ++r)
      if (r != p_.rank) store_volatile16(p_.slots[r] + at, v);
  }

  // Vector i of peer r's input, once it has landed.
  template <typename T>
  __device__ uint4 receive(size_t i, int r) const {
    const char* at = p_.slots[p_.rank] + base_ + size_t(r) * p_.slot_bytes + i * 16;
    uint4 v;
    do v = load_volatile16(at);
    while (still_empty<T>(v));
    return v;
  }

  // Vector i summed over the ranks in rank order (the same bits on every rank), in fp32; `own` is
  // this rank's.
  template <typename T>
  __device__ void sum(size_t i, uint4 own, float (&acc)[16 / sizeof(T)]) const {
    constexpr int kV = 16 / sizeof(T);
#pragma unroll
    for (int k = 0; k < kV; ++k) acc[k] = 0.f;
    for (int r = 0; r < p_.world; ++r) {
      // This rank's own vector as the peers received it.
      const uint4 v = r == p_.rank ? never_empty<T>(own) : receive<T>(i, r);
      const T* e = reinterpret_cast<const T*>(&v);
#pragma unroll
      for (int k = 0; k < kV; ++k) acc[k] += to_float(e[k]);
    }
  }

  // Empties the previous call's buffer and records this call's size; after every sum of the call.
  __device__ void finish() const {
    uint32_t* sizes = p_.state + PeerAllReduce::kBlocks;
    const uint32_t previous = (buffer_ + 2) % 3;
    const size_t vecs = sizes[previous] / 16, total = vecs * size_t(p_.world);
    char* buffer = p_.slots[p_.rank] + size_t(previous) * size_t(p_.world) * p_.slot_bytes;
    const uint4 empty = make_uint4(~0u, ~0u, ~0u, ~0u);
    for (size_t k = size_t(blockIdx.x) * blockDim.x + threadIdx.x; k < total;
         k += size_t(gridDim.x) * blockDim.x)
      *reinterpret_cast<uint4*>(buffer + (k / vecs) * p_.slot_bytes + (k % vecs) * 16) = empty;
    if (blockIdx.x == 0 && threadIdx.x == 0) sizes[buffer_] = uint32_t(p_.bytes);
  }

 private:
  const OneShotParams& p_;
  uint32_t buffer_ = 0;
  size_t base_ = 0;
};

template <typename T>
__global__ void __launch_bounds__(PeerAllReduce::kThreads)
    one_shot_all_reduce(const __grid_constant__ OneShotParams p) {
  constexpr int kV = 16 / sizeof(T);
  const Exchange x(p);
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  const size_t first = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  uint4* data = static_cast<uint4*>(p.data);
  for (size_t i = first; i < p.num_vecs; i += stride) x.send<T>(i, data[i]);
  for (size_t i = first; i < p.num_vecs; i += stride) {
    float acc[kV];
    x.sum<T>(i, data[i], acc);  // this thread's vector i: still the input
    store16(reinterpret_cast<T*>(data + i), acc);
  }
  x.finish();
}

// out [world][num_vecs] = every rank's input, in rank order.
template <typename T>
__global__ void __launch_bounds__(PeerAllReduce::kThreads)
    one_shot_all_gather(const __grid_constant__ OneShotParams p, uint4* out) {
  const Exchange x(p);
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  const size_t first = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const uint4* in = static_cast<const uint4*>(p.data);
  for (size_t i = first; i < p.num_vecs; i += stride) {
    const uint4 v = in[i];
    x.send<T>(i, v);
    out[size_t(p.rank) * p.num_vecs + i] = v;
  }
  for (size_t i = first; i < p.num_vecs; i += stride)
    for (int r = 0; r < p.world; ++r)
      if (r != p.rank) out[size_t(r) * p.num_vecs + i] = x.receive<T>(i, r);
  x.finish();
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
    one_shot_all_reduce_add_rms_norm(const __grid_constant__ OneShotParams p, const NormParams n) {
  constexpr int kV = 16 / sizeof(T);
  __shared__ float scratch[32];
  const Exchange x(p);
  const uint4* in = static_cast<const uint4*>(p.data);
  for (int row = blockIdx.x; row < n.rows; row += gridDim.x)
    for (int v = threadIdx.x; v < n.vecs_per_row; v += blockDim.x) {
      const size_t i = size_t(row) * n.vecs_per_row + v;
      x.send<T>(i, in[i]);
    }
  for (int row = blockIdx.x; row < n.rows; row += gridDim.x) {
    float h[R][kV];
    float sumsq = 0.f;
    T* res = static_cast<T*>(n.residual) + size_t(row) * n.hidden;
#pragma unroll
    for (int k = 0; k < R; ++k) {
      const int v = threadIdx.x + k * blockDim.x;
      if (v >= n.vecs_per_row) continue;
      const size_t i = size_t(row) * n.vecs_per_row + v;
      float acc[kV], r[kV];
      x.sum<T>(i, in[i], acc);
      load16(res + v * kV, r);
#pragma unroll
      for (int j = 0; j < kV; ++j) {
        // The all-reduce's result and the residual stream are both stored in the model dtype.
        h[k][j] = round_to<T>(round_to<T>(acc[j]) + r[j]);
        sumsq += h[k][j] * h[k][j];
      }
      store16(res + v * kV, h[k]);
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
      for (int j = 0; j < kV; ++j) o[j] = wv[j] * round_to<T>(h[k][j] * inv);
      store16(out + v * kV, o);
    }
  }
  x.finish();
}

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
    const size_t buffers_bytes = 3 * size_t(n) * max_bytes,  // 3 buffers of n slots
        state_bytes = sizeof(uint32_t) * (kBlocks + 3);
    if (cudaSetDevice(k.device) != cudaSuccess ||
        cudaMalloc(&k.slots, buffers_bytes) != cudaSuccess ||
        cudaMalloc(reinterpret_cast<void**>(&k.state), state_bytes) != cudaSuccess ||
        cudaMemset(k.slots, 0xff, buffers_bytes) != cudaSuccess ||  // every slot empty
        cudaMemset(k.state, 0, state_bytes) != cudaSuccess)
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
    cudaFree(k.slots);
    cudaFree(k.state);
  }
}

bool PeerAllReduce::fits(const void* data, size_t count, DType dtype) const {
  if (dtype != DType::kBF16 && dtype != DType::kF16 && dtype != DType::kF32) return false;
  const size_t bytes = count * dtype_size(dtype);
  return bytes > 0 && bytes <= max_bytes_ && bytes % 16 == 0 && aligned16(data);
}

bool PeerAllReduce::fits_norm(const void* x, int rows, int hidden, DType dtype) const {
  if (rows <= 0 || hidden <= 0) return false;
  const size_t row_bytes = size_t(hidden) * dtype_size(dtype);
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
  NormParams n{residual, weight, out, rows, int(size_t(hidden) * dtype_size(dtype) / 16), hidden, eps};
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
  for (int r = 0; r < size(); ++r) p.slots[r] = static_cast<char*>(ranks_[size_t(r)].slots);
  p.state = ranks_[size_t(rank)].state;
  p.slot_bytes = max_bytes_;
  p.bytes = count * dtype_size(dtype);
  p.num_vecs = p.bytes / 16;
  p.rank = rank;
  p.world = size();
  return p;
}

cudaError_t PeerAllReduce::all_gather(int rank, const void* in, void* out, size_t count,
                                      DType dtype, cudaStream_t stream) {
  if (rank < 0 || rank >= size() || !fits(in, count, dtype) || !out || !aligned16(out))
    return cudaErrorInvalidValue;
  const OneShotParams p = params(rank, const_cast<void*>(in), count, dtype);
  return PAGELLM_DISPATCH_DTYPE(dtype, [&] {
    one_shot_all_gather<scalar_t><<<kBlocks, kThreads, 0, stream>>>(p, static_cast<uint4*>(out));
    return cudaGetLastError();
  });
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
