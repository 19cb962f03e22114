// Host side of the tensor memory accelerator (TMA): tensor maps, made by the driver's
// cuTensorMapEncodeTiled, which is reached through the runtime's driver entry point so that
// nothing links libcuda directly.
#pragma once

#include <cuda.h>  // CUtensorMap

#include <cstdint>

namespace pagellm::cuda {

// Whether this process can make tensor maps (a driver with cuTensorMapEncodeTiled).
bool tma_available();

// A 3-D map of 16-bit elements at `base`: dims {d0, d1, d2} (innermost first, d0 contiguous), the
// byte strides of dims 1 and 2, boxes of `box` elements, stored with the 128-byte swizzle (box[0]
// * 2 <= 128), elements outside the dims read as zeros. False when the driver refuses the shape
// (alignment, strides, sizes).
bool encode_tma_3d_u16(CUtensorMap* map, const void* base, const uint64_t (&dims)[3],
                       const uint64_t (&strides)[2], const uint32_t (&box)[3]);

// A 2-D map of bytes at `base`: `rows` rows of `cols` bytes, `row_stride` bytes apart (a multiple
// of 16), boxes of box_cols (<= 128) x box_rows (<= 256) stored with the 128-byte swizzle, bytes
// outside the dims read as zeros. False when the driver refuses the shape.
bool encode_tma_2d_u8(CUtensorMap* map, const void* base, uint64_t cols, uint64_t rows,
                      uint64_t row_stride, uint32_t box_cols, uint32_t box_rows);

}  // namespace pagellm::cuda
