#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace pagellm::io {

using nlohmann::json;

int64_t TensorView::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

namespace {

// The safetensors reference implementation caps the header at 100 MB; so do we, before allocating.
constexpr uint64_t kMaxHeaderBytes = 100u << 20;

std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

[[noreturn]] void bad(const std::string& source, const std::string& what) {
  invalid_argument(source + ": " + what);
}

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Parses one tensor entry; returns the view with `data` holding the data-section offset.
TensorView parse_entry(const std::string& name, const json& e, uint64_t data_len,
                       const std::string& source) {
  const std::string where = "tensor '" + name + "'";
  if (!e.is_object()) bad(source, where + ": header entry is not an object");
  if (!e.contains("dtype") || !e["dtype"].is_string())
    bad(source, where + ": missing string field 'dtype'");
  if (!e.contains("shape") || !e["shape"].is_array())
    bad(source, where + ": missing list field 'shape'");
  if (!e.contains("data_offsets") || !e["data_offsets"].is_array() || e["data_offsets"].size() != 2)
    bad(source, where + ": 'data_offsets' must be a list of two integers");
  TensorView t;
  t.name = name;
  t.file = source;
  const std::string tag = e["dtype"].get<std::string>();
  const auto dtype = dtype_from_safetensors(tag);
  if (!dtype)
    unsupported(source + ": " + where + " has unsupported dtype " + tag +
                " (supported: F32, F16, BF16, F8_E4M3, F8_E5M2, I8, U8, I32, I64)");
  t.dtype = *dtype;
  if (e["shape"].size() > 8) bad(source, where + ": too many dimensions");
  // Products are checked against the data length as they grow, so they never overflow.
  uint64_t num_bytes = dtype_size(t.dtype);
  bool empty = false;
  for (const json& d : e["shape"]) {
    if (!d.is_number_unsigned())
      bad(source, where + ": shape entries must be non-negative integers");
    const uint64_t dim = d.get<uint64_t>();
    if (dim > data_len)
      bad(source, where + ": dimension " + std::to_string(dim) + " exceeds the data section");
    t.shape.push_back(static_cast<int64_t>(dim));
    if (dim == 0) empty = true;
    if (!empty) {
      num_bytes *= dim;
      if (num_bytes > data_len)
        bad(source, where + ": shape needs more bytes than the data section holds");
    }
  }
  if (empty) num_bytes = 0;
  const json& off = e["data_offsets"];
  if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned())
    bad(source, where + ": 'data_offsets' must be non-negative integers");
  const uint64_t begin = off[0].get<uint64_t>();
  const uint64_t end = off[1].get<uint64_t>();
  if (begin > end || end > data_len)
    bad(source, where + ": data offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                    ") are outside the data section of " + std::to_string(data_len) +
                    " bytes (truncated file?)");
  if (end - begin != num_bytes)
    bad(source, where + ": shape and dtype need " + std::to_string(num_bytes) +
                    " bytes but data offsets span " + std::to_string(end - begin));
  t.num_bytes = num_bytes;
  t.data = reinterpret_cast<const uint8_t*>(static_cast<uintptr_t>(begin));
  return t;
}

}  // namespace

std::vector<TensorView> parse_safetensors_header(const uint8_t* bytes, size_t file_size,
                                                 const std::string& source) {
  if (file_size < 8)
    bad(source,
        "file is too short for a safetensors header (" + std::to_string(file_size) + " bytes)");
  const uint64_t header_len = read_u64_le(bytes);
  if (header_len > file_size - 8)
    bad(source, "header length " + std::to_string(header_len) + " is larger than the file (" +
                    std::to_string(file_size) + " bytes)");
  if (header_len > kMaxHeaderBytes)
    bad(source, "header length " + std::to_string(header_len) + " exceeds 100 MB");
  const uint64_t data_len = file_size - 8 - header_len;
  json header;
  try {
    header = json::parse(bytes + 8, bytes + 8 + header_len);
  } catch (const json::exception& e) {
    bad(source, "invalid header JSON: " + one_line(e.what()));
  }
  if (!header.is_object()) bad(source, "header JSON is not an object");
  std::vector<TensorView> tensors;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) bad(source, "'__metadata__' must be an object");
      continue;
    }
    tensors.push_back(parse_entry(name, entry, data_len, source));
  }
  // Overlap check on [begin, end) ranges sorted by begin; empty tensors occupy nothing.
  std::vector<const TensorView*> order;
  for (const auto& t : tensors)
    if (t.num_bytes > 0) order.push_back(&t);
  std::sort(order.begin(), order.end(),
            [](const TensorView* a, const TensorView* b) { return a->data < b->data; });
  for (size_t i = 1; i < order.size(); ++i) {
    const auto prev_end = reinterpret_cast<uintptr_t>(order[i - 1]->data) + order[i - 1]->num_bytes;
    if (reinterpret_cast<uintptr_t>(order[i]->data) < prev_end)
      bad(source,
          "data of tensors '" + order[i - 1]->name + "' and '" + order[i]->name + "' overlap");
  }
  return tensors;
}

// One memory-mapped .safetensors file with its validated tensors bound to the mapping.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::filesystem::path& path) : path_(path.string()) {
    fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0)
      throw_error(ErrorKind::kNotFound, path_ + ": cannot open (" + std::strerror(errno) + ")");
    struct stat st {};
    if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) close_and_fail("not a regular file");
    size_ = static_cast<size_t>(st.st_size);
    if (size_ < 8)
      close_and_fail("file is too short for a safetensors header (" + std::to_string(size_) +
                     " bytes)");
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd_, 0);
    if (p == MAP_FAILED) close_and_fail(std::string("mmap failed (") + std::strerror(errno) + ")");
    base_ = static_cast<const uint8_t*>(p);
    try {
      tensors_ = parse_safetensors_header(base_, size_, path_);
    } catch (...) {
      release();
      throw;
    }
    const uint8_t* data_start = base_ + 8 + read_u64_le(base_);
    for (auto& t : tensors_) t.data = data_start + reinterpret_cast<uintptr_t>(t.data);
  }
  ~SafetensorsFile() { release(); }
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  std::vector<TensorView>& tensors() { return tensors_; }
  const std::string& path() const { return path_; }

 private:
  [[noreturn]] void close_and_fail(const std::string& what) {
    release();
    bad(path_, what);
  }
  void release() {
    if (base_ != nullptr) ::munmap(const_cast<uint8_t*>(base_), size_);
    if (fd_ >= 0) ::close(fd_);
    base_ = nullptr;
    fd_ = -1;
  }

  std::string path_;
  int fd_ = -1;
  size_t size_ = 0;
  const uint8_t* base_ = nullptr;
  std::vector<TensorView> tensors_;
};

namespace {

std::string read_index(const std::filesystem::path& path) {
  constexpr uintmax_t kMaxIndexBytes = 64u << 20;
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec)
    throw_error(ErrorKind::kNotFound, path.string() + ": cannot read file (" + ec.message() + ")");
  if (size > kMaxIndexBytes) bad(path.string(), "index file is too large");
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// weight_map of model.safetensors.index.json: tensor name -> shard file name (a plain file name, so
// an index can never point outside the model folder).
std::map<std::string, std::string> parse_index(const std::filesystem::path& path) {
  const std::string source = path.string();
  json j;
  try {
    j = json::parse(read_index(path));
  } catch (const json::exception& e) {
    bad(source, "invalid JSON: " + one_line(e.what()));
  }
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    bad(source, "missing object 'weight_map'");
  std::map<std::string, std::string> map;
  for (const auto& [name, file] : j["weight_map"].items()) {
    if (!file.is_string()) bad(source, "weight_map entry '" + name + "' is not a file name");
    const std::string f = file.get<std::string>();
    if (f.empty() || f.find('/') != std::string::npos || f.find('\\') != std::string::npos ||
        f == "." || f == "..")
      bad(source, "weight_map entry '" + name + "' names an invalid shard file '" + f + "'");
    map.emplace(name, f);
  }
  if (map.empty()) bad(source, "'weight_map' is empty");
  return map;
}

}  // namespace

WeightStore WeightStore::open(const std::filesystem::path& model_dir) {
  WeightStore store;
  store.dir_ = model_dir;
  const auto index_path = model_dir / "model.safetensors.index.json";
  const auto single_path = model_dir / "model.safetensors";
  auto add_file = [&](const std::filesystem::path& p) -> SafetensorsFile& {
    store.files_.push_back(std::make_unique<SafetensorsFile>(p));
    for (auto& t : store.files_.back()->tensors()) {
      if (store.tensors_.count(t.name) != 0)
        bad(p.string(),
            "tensor '" + t.name + "' also appears in " + store.tensors_.at(t.name).file);
      store.tensors_.emplace(t.name, t);
    }
    return *store.files_.back();
  };
  if (std::filesystem::exists(index_path)) {
    const auto weight_map = parse_index(index_path);
    std::set<std::string> shards;
    for (const auto& [name, file] : weight_map) shards.insert(file);
    for (const auto& shard : shards) {
      const auto p = model_dir / shard;
      if (!std::filesystem::exists(p))
        throw_error(ErrorKind::kNotFound,
                    p.string() + ": shard named by " + index_path.string() + " not found");
      add_file(p);
    }
    for (const auto& [name, file] : weight_map) {
      const auto it = store.tensors_.find(name);
      if (it == store.tensors_.end() || std::filesystem::path(it->second.file).filename() != file)
        bad((model_dir / file).string(), "tensor '" + name + "' listed in " +
                                             index_path.filename().string() +
                                             " is not in this shard");
    }
  } else if (std::filesystem::exists(single_path)) {
    add_file(single_path);
  } else {
    throw_error(ErrorKind::kNotFound,
                single_path.string() + ": not found (nor model.safetensors.index.json)");
  }
  return store;
}

const TensorView* WeightStore::find(std::string_view name) const {
  const auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

const TensorView& WeightStore::get(std::string_view name) const {
  const TensorView* t = find(name);
  if (t == nullptr)
    throw_error(ErrorKind::kNotFound, source() + ": missing tensor '" + std::string(name) + "'");
  return *t;
}

std::string WeightStore::source() const {
  if (files_.size() == 1) return files_[0]->path();
  return (dir_ / "model.safetensors.index.json").string();
}

std::vector<std::string> WeightStore::names() const {
  std::vector<std::string> out;
  for (const auto& [name, t] : tensors_) out.push_back(name);
  return out;
}

WeightStore::WeightStore(WeightStore&&) noexcept = default;
WeightStore& WeightStore::operator=(WeightStore&&) noexcept = default;
WeightStore::~WeightStore() = default;

}  // namespace pagellm::io
