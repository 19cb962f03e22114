// Memory-mapped safetensors checkpoints: one file or shards listed in model.safetensors.index.json.
// The header is validated completely before any tensor is used: JSON shape, dtypes, shapes, and
// data offsets (inside the file, matching the shape, not overlapping). Errors name the file and the
// tensor.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/dtype.h"

namespace pagellm::io {

struct TensorView {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // points into the mapped file
  size_t num_bytes = 0;
  std::string file;  // file name, for error messages

  int64_t num_elements() const;
};

// Parses and validates a safetensors header. `file_size` is the size of the whole file;
// `source` names it in errors. Returns tensors with `data` holding offsets relative to the data
// section start (cast from size_t) until bound to a mapping. Exposed for fuzzing.
std::vector<TensorView> parse_safetensors_header(const uint8_t* bytes, size_t file_size,
                                                 const std::string& source);

class SafetensorsFile;

// All tensors of a checkpoint folder, by name.
class WeightStore {
 public:
  // Opens model_dir/model.safetensors, or the shards named by model.safetensors.index.json.
  static WeightStore open(const std::filesystem::path& model_dir);

  const TensorView* find(std::string_view name) const;
  // Throws "FILE: missing tensor NAME" naming the checkpoint file (or the shard index).
  const TensorView& get(std::string_view name) const;
  // The checkpoint's file for error messages: model.safetensors, or the shard index when sharded.
  std::string source() const;
  std::vector<std::string> names() const;
  const std::filesystem::path& dir() const { return dir_; }

  WeightStore(WeightStore&&) noexcept;
  WeightStore& operator=(WeightStore&&) noexcept;
  ~WeightStore();

 private:
  WeightStore() = default;
  std::filesystem::path dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, TensorView, std::less<>> tensors_;
};

}  // namespace pagellm::io
