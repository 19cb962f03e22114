#include <cstring>

#include <gtest/gtest.h>

#include "common/error.h"
#include "io/safetensors.h"
#include "model_files_util.h"

namespace pagellm::io {
namespace {

using nlohmann::json;
using testing::safetensors_bytes;

std::vector<TensorView> parse(const std::string& bytes) {
  return parse_safetensors_header(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(),
                                  "x.safetensors");
}

void expect_invalid(const std::string& bytes, const std::string& needle,
                    ErrorKind kind = ErrorKind::kInvalidArgument) {
  try {
    parse(bytes);
    ADD_FAILURE() << "accepted header";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_NE(std::string(e.what()).find("x.safetensors"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << needle << " not in: " << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
  }
}

std::string entry(const char* dtype, json shape, uint64_t begin, uint64_t end) {
  return json{{"dtype", dtype}, {"shape", shape}, {"data_offsets", {begin, end}}}.dump();
}

TEST(Safetensors, ParsesHeaderWithMetadataAndAllDtypes) {
  const std::string header =
      "{\"__metadata__\":{\"format\":\"pt\"},\"a\":" + entry("F32", {2, 3}, 0, 24) +
      ",\"b\":" + entry("BF16", {4}, 24, 32) + ",\"c\":" + entry("F16", {1, 1}, 32, 34) +
      ",\"e\":" + entry("F32", {0, 5}, 34, 34) + "}";
  const auto tensors = parse(safetensors_bytes(header, std::string(34, '\0')));
  ASSERT_EQ(tensors.size(), 4u);
  std::map<std::string, TensorView> by_name;
  for (const auto& t : tensors) by_name[t.name] = t;
  EXPECT_EQ(by_name["a"].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(by_name["a"].num_elements(), 6);
  EXPECT_EQ(by_name["b"].dtype, DType::kBF16);
  EXPECT_EQ(by_name["c"].dtype, DType::kF16);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(by_name["b"].data),
            24u);  // offset until bound to a mapping
  EXPECT_EQ(by_name["e"].num_bytes, 0u);
  // The integer storage types of INT4 / INT8 checkpoints (packed weights, zeros, g_idx, shapes).
  const std::string ints = "{\"q\":" + entry("I32", {2, 2}, 0, 16) + ",\"z\":" +
                           entry("I8", {3}, 16, 19) + ",\"u\":" + entry("U8", {1}, 19, 20) +
                           ",\"s\":" + entry("I64", {2}, 20, 36) + "}";
  std::map<std::string, DType> dtypes;
  for (const auto& t : parse(safetensors_bytes(ints, std::string(36, '\0')))) dtypes[t.name] = t.dtype;
  EXPECT_EQ(dtypes, (std::map<std::string, DType>{
                        {"q", DType::kI32}, {"z", DType::kI8}, {"u", DType::kU8}, {"s", DType::kI64}}));
}

TEST(Safetensors, RejectsMalformedHeaders) {
  expect_invalid("abc", "too short");
  std::string huge = safetensors_bytes("{}", "");
  huge[5] = 0x10;  // header length ~2^40: must fail before allocating
  expect_invalid(huge, "larger than the file");
  expect_invalid(safetensors_bytes("{\"a\":", ""), "invalid header JSON");
  expect_invalid(safetensors_bytes("[1,2]", ""), "not an object");
  expect_invalid(
      safetensors_bytes("{\"a\":" + entry("F32", {2}, 8, 16) + "}", std::string(8, '\0')),
      "outside");
  expect_invalid(
      safetensors_bytes("{\"a\":" + entry("F32", {4}, 0, 16) + "}", std::string(8, '\0')),
      "more bytes");
  expect_invalid(
      safetensors_bytes("{\"a\":" + entry("F32", {4}, 8, 4) + "}", std::string(16, '\0')),
      "outside");
  expect_invalid(
      safetensors_bytes("{\"a\":" + entry("F32", {3}, 0, 16) + "}", std::string(16, '\0')),
      "need 12 bytes");
  expect_invalid(safetensors_bytes("{\"a\":" + entry("F64", {4}, 0, 32) + "}", std::string(32, '\0')),
                 "F64", ErrorKind::kUnsupported);
  expect_invalid(safetensors_bytes("{\"a\":" + entry("F32", {2}, 0, 8) +
                                       ",\"b\":" + entry("F32", {2}, 4, 12) + "}",
                                   std::string(12, '\0')),
                 "overlap");
  expect_invalid(
      safetensors_bytes("{\"a\":" + entry("F32", {-2}, 0, 8) + "}", std::string(8, '\0')),
      "non-negative");
  // A shape whose element count overflows 64 bits must not wrap around to a small byte count.
  expect_invalid(
      safetensors_bytes("{\"a\":" + entry("F32", {1u << 31, 1u << 31, 1u << 31}, 0, 0) + "}", ""),
      "exceeds");
  expect_invalid(
      safetensors_bytes("{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", std::string(4, '\0')),
      "data_offsets");
  expect_invalid(safetensors_bytes("{\"a\":5}", ""), "not an object");
  expect_invalid(safetensors_bytes("{\"__metadata__\":3}", ""), "__metadata__");
}

TEST(Safetensors, WeightStoreMapsSingleFileAndConvertsNothing) {
  testing::TempDir tmp;
  testing::SafetensorsBuilder b;
  b.add_bf16("w", {2, 2}, {1.0f, -2.0f, 0.5f, 3.0f});
  b.add_f32("v", {3});
  testing::write_file(tmp.path() / "model.safetensors", b.bytes());
  const WeightStore store = WeightStore::open(tmp.path());
  EXPECT_EQ(store.names(), (std::vector<std::string>{"v", "w"}));
  const TensorView& w = store.get("w");
  EXPECT_EQ(w.dtype, DType::kBF16);
  std::vector<float> out(4);
  std::vector<uint16_t> raw(4);  // the mapping gives no alignment guarantee
  std::memcpy(raw.data(), w.data, w.num_bytes);
  convert_to_f32(w.dtype, raw.data(), out.data(), 4);
  EXPECT_EQ(out, (std::vector<float>{1.0f, -2.0f, 0.5f, 3.0f}));
  EXPECT_EQ(store.find("nope"), nullptr);
  try {
    store.get("nope");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.safetensors: missing tensor 'nope'"),
              std::string::npos)
        << e.what();
  }
}

TEST(Safetensors, ShardedIndexAndDuplicateTensors) {
  testing::TempDir tmp;
  testing::SafetensorsBuilder a, b;
  a.add_f32("x", {2});
  b.add_f32("y", {3});
  testing::write_file(tmp.path() / "s1.safetensors", a.bytes());
  testing::write_file(tmp.path() / "s2.safetensors", b.bytes());
  testing::write_file(tmp.path() / "model.safetensors.index.json",
                      R"({"weight_map": {"x": "s1.safetensors", "y": "s2.safetensors"}})");
  const WeightStore store = WeightStore::open(tmp.path());
  EXPECT_EQ(store.get("y").shape, (std::vector<int64_t>{3}));
  EXPECT_NE(store.source().find("model.safetensors.index.json"), std::string::npos);
  // The index says y lives in s1, but it does not.
  testing::write_file(tmp.path() / "model.safetensors.index.json",
                      R"({"weight_map": {"x": "s1.safetensors", "y": "s1.safetensors"}})");
  EXPECT_THROW(WeightStore::open(tmp.path()), Error);
  // The same tensor in two shards.
  testing::write_file(tmp.path() / "s2.safetensors", a.bytes());
  testing::write_file(tmp.path() / "model.safetensors.index.json",
                      R"({"weight_map": {"x": "s1.safetensors", "z": "s2.safetensors"}})");
  EXPECT_THROW(WeightStore::open(tmp.path()), Error);
}

}  // namespace
}  // namespace pagellm::io
