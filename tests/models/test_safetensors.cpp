// Tests for models/safetensors: round trips (raw and LibTorch layers), a hand-built file as the
// oracle for the format, rejection of malformed files, atomic writes, F16/BF16 bit conversions.
#include "models/io/safetensors.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "support/fuzz_seeds.h"

namespace fs = std::filesystem;
using jacond::models::DType;
using jacond::models::RawTensor;
using jacond::models::SafetensorsError;
using jacond::models::SafetensorsFile;
using jacond::models::TensorMap;
using json = nlohmann::json;

namespace {

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// A fresh directory per test, removed afterwards.
class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    dir_ = fs::path(::testing::TempDir()) /
           ("jacond_st_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }

  /// Names under the test directory (subdirectories included) that look like leftover
  /// temporary files.
  std::vector<std::string> temp_leftovers() const {
    std::vector<std::string> out;
    for (const auto& e : fs::recursive_directory_iterator(dir_)) {
      const std::string name = e.path().filename().string();
      if (name.find(".tmp.") != std::string::npos) out.push_back(name);
    }
    return out;
  }

  fs::path dir_;
};

void append_bytes(std::string& s, const void* p, std::size_t n) {
  s.append(static_cast<const char*>(p), n);
}

/// 8-byte little-endian u64, assembled byte by byte (independent of the library's code).
std::string u64_le(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

/// A complete file: length prefix + header text (padded with spaces to a multiple of 8 when
/// asked) + data buffer.
std::string make_file(std::string header, const std::string& data, bool pad = true) {
  if (pad) header.append((8 - header.size() % 8) % 8, ' ');
  return u64_le(header.size()) + header + data;
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good());
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

/// n zero bytes of data.
std::string zeros(std::size_t n) { return std::string(n, '\0'); }

/// Reading path must throw a one-line SafetensorsError naming the file and containing every
/// given fragment.
void expect_read_error(const std::string& path, const std::vector<std::string>& fragments) {
  try {
    jacond::models::read_safetensors(path);
    ADD_FAILURE() << "expected SafetensorsError reading " << path;
  } catch (const SafetensorsError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    EXPECT_EQ(msg.rfind(path + ": ", 0), 0u) << "message should start with the path: " << msg;
    for (const auto& f : fragments)
      EXPECT_NE(msg.find(f), std::string::npos) << "missing '" << f << "' in: " << msg;
  }
}

RawTensor raw_of_bytes(DType dtype, std::vector<int64_t> shape, const std::string& bytes) {
  return RawTensor{dtype, std::move(shape), std::vector<uint8_t>(bytes.begin(), bytes.end())};
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// ---------------------------------------------------------------------------------------------
// Round trips
// ---------------------------------------------------------------------------------------------

TEST_F(SafetensorsTest, RawRoundTripF64F32Exact) {
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> v64 = {M_PI, -0.0, 1e-310 /* subnormal */, -1.7976931348623157e308,
                                   std::nan(""), inf};
  const std::vector<double> v32 = {0.1f, -3.5, 1e-40f /* float subnormal */, 65504.0};
  SafetensorsFile f;
  f.tensors["w64"] = jacond::models::from_doubles(v64, {2, 3});
  f.tensors["w32"] = jacond::models::from_doubles(v32, {4}, DType::F32);
  f.tensors["scalar"] = jacond::models::from_doubles({42.0}, {});
  f.tensors["empty"] = jacond::models::from_doubles({}, {0, 3}, DType::F32);
  const std::string path = file("raw.safetensors");
  jacond::models::write_safetensors(path, f);

  const SafetensorsFile g = jacond::models::read_safetensors(path);
  ASSERT_EQ(g.tensors.size(), 4u);
  EXPECT_TRUE(g.metadata.empty());
  for (const auto& [name, t] : f.tensors) {
    const RawTensor& u = g.tensors.at(name);
    EXPECT_EQ(u.dtype, t.dtype) << name;
    EXPECT_EQ(u.shape, t.shape) << name;
    EXPECT_EQ(u.bytes, t.bytes) << name;  // bit-exact, NaN included
  }
  const std::vector<double> back64 = jacond::models::to_doubles(g.tensors.at("w64"));
  ASSERT_EQ(back64.size(), v64.size());
  for (std::size_t i = 0; i < v64.size(); ++i) EXPECT_TRUE(same_bits(back64[i], v64[i])) << i;
  const std::vector<double> back32 = jacond::models::to_doubles(g.tensors.at("w32"));
  ASSERT_EQ(back32.size(), v32.size());
  for (std::size_t i = 0; i < v32.size(); ++i)
    EXPECT_EQ(back32[i], static_cast<double>(static_cast<float>(v32[i]))) << i;
  EXPECT_EQ(jacond::models::to_doubles(g.tensors.at("scalar")), std::vector<double>{42.0});
  EXPECT_TRUE(jacond::models::to_doubles(g.tensors.at("empty")).empty());
}

TEST_F(SafetensorsTest, TorchRoundTripExact) {
  at::manual_seed(7);
  TensorMap m;
  m["blocks.0.attn.qkv.weight"] = at::randn({6, 2}, at::kDouble);
  m["blocks.0.attn.qkv.bias"] = at::randn({6}, at::kFloat);
  m["transposed"] = at::randn({3, 5}, at::kDouble).t();  // non-contiguous
  m["sliced"] = at::arange(20, at::kFloat).view({4, 5}).slice(1, 1, 4);  // offset + strides
  m["half"] = at::randn({3}, at::kFloat).to(at::kHalf);
  m["bf16"] = at::randn({3}, at::kFloat).to(at::kBFloat16);
  m["ids"] = at::arange(-3, 4, at::kLong);
  m["i32"] = at::arange(5, at::kInt);
  m["u8"] = at::arange(250, 256, at::kLong).to(at::kByte);
  m["scalar"] = at::scalar_tensor(2.5, at::kDouble);
  const std::string path = file("torch.safetensors");
  jacond::models::save_safetensors(path, m);

  const TensorMap back = jacond::models::load_safetensors(path);
  ASSERT_EQ(back.size(), m.size());
  for (const auto& [name, t] : m) {
    const at::Tensor& u = back.at(name);
    EXPECT_EQ(u.scalar_type(), t.scalar_type()) << name;
    EXPECT_EQ(u.sizes(), t.sizes()) << name;
    EXPECT_TRUE(u.is_contiguous()) << name;
    EXPECT_TRUE(u.device().is_cpu()) << name;
    EXPECT_TRUE(at::equal(u, t)) << name;
  }
  // The stored layout is row-major: the transposed tensor reads back as its logical values.
  const SafetensorsFile raw = jacond::models::read_safetensors(path);
  const std::vector<double> tr = jacond::models::to_doubles(raw.tensors.at("transposed"));
  const at::Tensor expect = m["transposed"].contiguous();
  for (int64_t i = 0; i < expect.numel(); ++i)
    EXPECT_EQ(tr[i], expect.view(-1)[i].item<double>());
  // Loaded tensors own their memory: they survive and are writable.
  at::Tensor w = back.at("blocks.0.attn.qkv.weight");
  w.add_(1.0);
  EXPECT_TRUE(at::equal(w, m["blocks.0.attn.qkv.weight"] + 1.0));
}

TEST_F(SafetensorsTest, MetadataRoundTrip) {
  const std::map<std::string, std::string> meta = {
      {"format", "pt"}, {"step", "1200"}, {"config", "{\"depth\": 12}"}, {"unicode", "κ σ_min"}};
  const std::string p1 = file("meta_torch.safetensors");
  jacond::models::save_safetensors(p1, {{"x", at::ones({2}, at::kFloat)}}, meta);
  std::map<std::string, std::string> got;
  const TensorMap t = jacond::models::load_safetensors(p1, &got);
  EXPECT_EQ(got, meta);
  EXPECT_EQ(t.size(), 1u);

  SafetensorsFile f;
  f.metadata = meta;  // metadata only, no tensors
  const std::string p2 = file("meta_raw.safetensors");
  jacond::models::write_safetensors(p2, f);
  const SafetensorsFile g = jacond::models::read_safetensors(p2);
  EXPECT_EQ(g.metadata, meta);
  EXPECT_TRUE(g.tensors.empty());
}

TEST_F(SafetensorsTest, OverwriteReplacesWholeFile) {
  const std::string path = file("w.safetensors");
  jacond::models::save_safetensors(path, {{"big", at::zeros({1000}, at::kDouble)}});
  jacond::models::save_safetensors(path, {{"small", at::ones({2}, at::kDouble)}});
  const TensorMap back = jacond::models::load_safetensors(path);
  ASSERT_EQ(back.size(), 1u);
  EXPECT_TRUE(at::equal(back.at("small"), at::ones({2}, at::kDouble)));
  EXPECT_TRUE(temp_leftovers().empty());
}

// ---------------------------------------------------------------------------------------------
// The oracle: bytes built by hand from the spec, independent of the writer
// ---------------------------------------------------------------------------------------------

/// Data buffer: b (F64 [1] = 0.1) at [0, 8), a (F32 [2] = 1.0, -2.5) at [8, 16),
/// h (F16 [3] = 1.0, -2.0, 65504) at [16, 22). Out of name order: by element size, as the
/// writer lays them out.
std::string hand_data() {
  std::string d;
  const unsigned char b[] = {0x9A, 0x99, 0x99, 0x99, 0x99, 0x99, 0xB9, 0x3F};  // 0x3FB999999999999A
  const unsigned char a[] = {0x00, 0x00, 0x80, 0x3F,                           // 0x3F800000
                             0x00, 0x00, 0x20, 0xC0};                          // 0xC0200000
  const unsigned char h[] = {0x00, 0x3C, 0x00, 0xC0, 0xFF, 0x7B};  // 0x3C00 0xC000 0x7BFF
  append_bytes(d, b, sizeof b);
  append_bytes(d, a, sizeof a);
  append_bytes(d, h, sizeof h);
  return d;
}

TEST_F(SafetensorsTest, HandBuiltFileReads) {
  // Keys in arbitrary order, whitespace inside the JSON, metadata in the middle.
  const std::string header =
      "{\"h\": {\"shape\": [3], \"dtype\": \"F16\", \"data_offsets\": [16, 22]},\n"
      " \"__metadata__\": {\"format\": \"pt\"},\n"
      " \"b\": {\"dtype\": \"F64\", \"shape\": [1], \"data_offsets\": [0, 8]},\n"
      " \"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [8, 16]}}";
  const std::string path = file("hand.safetensors");
  write_file(path, make_file(header, hand_data(), /*pad=*/false));

  const SafetensorsFile f = jacond::models::read_safetensors(path);
  ASSERT_EQ(f.tensors.size(), 3u);
  EXPECT_EQ(f.metadata, (std::map<std::string, std::string>{{"format", "pt"}}));
  EXPECT_EQ(f.tensors.at("b").dtype, DType::F64);
  EXPECT_EQ(f.tensors.at("a").shape, std::vector<int64_t>{2});
  EXPECT_EQ(jacond::models::to_doubles(f.tensors.at("b")), std::vector<double>{0.1});
  EXPECT_EQ(jacond::models::to_doubles(f.tensors.at("a")), (std::vector<double>{1.0, -2.5}));
  EXPECT_EQ(jacond::models::to_doubles(f.tensors.at("h")),
            (std::vector<double>{1.0, -2.0, 65504.0}));

  const TensorMap m = jacond::models::load_safetensors(path);
  EXPECT_EQ(m.at("a").scalar_type(), at::kFloat);
  EXPECT_EQ(m.at("h").scalar_type(), at::kHalf);
  EXPECT_EQ(m.at("b").item<double>(), 0.1);
  EXPECT_EQ(m.at("a")[1].item<float>(), -2.5f);
  EXPECT_EQ(m.at("h")[2].item<float>(), 65504.0f);
}

TEST_F(SafetensorsTest, WriterOutputMatchesSpecLayout) {
  // Same tensors as the hand-built file: the writer lays them out by element size descending,
  // then name (b F64, a F32, h F16), the hand-built order; the header keys stay in name order.
  SafetensorsFile f;
  const std::string d = hand_data();
  f.tensors["b"] = raw_of_bytes(DType::F64, {1}, d.substr(0, 8));
  f.tensors["a"] = raw_of_bytes(DType::F32, {2}, d.substr(8, 8));
  f.tensors["h"] = raw_of_bytes(DType::F16, {3}, d.substr(16, 6));
  f.metadata["format"] = "pt";
  const std::string path = file("writer.safetensors");
  jacond::models::write_safetensors(path, f);

  const std::string bytes = read_file(path);
  ASSERT_GE(bytes.size(), 8u);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  EXPECT_EQ(n % 8, 0u) << "header padded to a multiple of 8";
  ASSERT_EQ(bytes.size(), 8 + n + 22);
  const std::string header = bytes.substr(8, n);
  EXPECT_EQ(header.front(), '{');
  EXPECT_EQ(header.find_last_not_of(' '), header.find_last_of('}')) << "padding is spaces";
  const json expect = {
      {"a", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {8, 16}}}},
      {"b", {{"dtype", "F64"}, {"shape", {1}}, {"data_offsets", {0, 8}}}},
      {"h", {{"dtype", "F16"}, {"shape", {3}}, {"data_offsets", {16, 22}}}},
      {"__metadata__", {{"format", "pt"}}}};
  EXPECT_EQ(json::parse(header), expect);
  EXPECT_LT(header.find("\"a\""), header.find("\"b\"")) << "header keys in name order";
  EXPECT_EQ(bytes.substr(8 + n), d);

  // Deterministic: the same input gives the same bytes.
  const std::string path2 = file("writer2.safetensors");
  jacond::models::write_safetensors(path2, f);
  EXPECT_EQ(read_file(path2), bytes);
}

/// The data offsets [begin, end) and element size of every tensor of a written file, with the
/// header length N, read from the bytes (independent of the reader).
struct Placed {
  std::string name;
  uint64_t begin;
  std::size_t element_size;
};
std::vector<Placed> placements(const std::string& bytes, uint64_t* n) {
  *n = 0;
  for (int i = 7; i >= 0; --i) *n = (*n << 8) | static_cast<unsigned char>(bytes[i]);
  std::vector<Placed> out;
  const json header = json::parse(bytes.substr(8, *n));
  for (const auto& [name, e] : header.items())
    if (name != "__metadata__")
      out.push_back({name, e["data_offsets"][0].get<uint64_t>(),
                     jacond::models::element_size(jacond::models::parse_dtype(e["dtype"]))});
  return out;
}

TEST_F(SafetensorsTest, WriterKeepsEveryTensorAlignedToItsElementSize) {
  // Laid out in name order, an F64 after an F16[3] started 6 bytes into the data: zero-copy
  // loaders (torch.frombuffer on an mmap: "storage_offset() must be divisible by 8") refuse it.
  // Each tensor must start at a file offset (8 + N + begin) that its element size divides.
  SafetensorsFile f;
  f.tensors["a"] = jacond::models::from_doubles({1, 2, 3}, {3}, DType::F16);
  f.tensors["b"] = jacond::models::from_doubles({4, 5}, {2}, DType::F64);
  f.tensors["c"] = jacond::models::from_doubles({6}, {1}, DType::U8);
  f.tensors["d"] = jacond::models::from_doubles({7}, {1}, DType::F32);
  f.tensors["e"] = jacond::models::from_doubles({8}, {1}, DType::I64);
  f.metadata["k"] = "v";  // the metadata lengthens the header: N stays a multiple of 8
  const std::string path = file("aligned.safetensors");
  jacond::models::write_safetensors(path, f);
  uint64_t n = 0;
  const auto placed = placements(read_file(path), &n);
  ASSERT_EQ(placed.size(), 5u);
  EXPECT_EQ((8 + n) % 8, 0u);
  for (const Placed& p : placed)
    EXPECT_EQ((8 + n + p.begin) % p.element_size, 0u) << p.name << " at data offset " << p.begin;
  const SafetensorsFile g = jacond::models::read_safetensors(path);
  for (const auto& [name, t] : f.tensors) EXPECT_EQ(g.tensors.at(name).bytes, t.bytes) << name;

  // The LibTorch layer writes through the same writer.
  const std::string path2 = file("aligned_torch.safetensors");
  jacond::models::save_safetensors(path2, {{"a", at::ones({3}, at::kHalf)}, {"b", at::ones({2}, at::kDouble)}});
  const auto placed2 = placements(read_file(path2), &n);
  for (const Placed& p : placed2)
    EXPECT_EQ((8 + n + p.begin) % p.element_size, 0u) << p.name << " at data offset " << p.begin;
}

// ---------------------------------------------------------------------------------------------
// Rejections
// ---------------------------------------------------------------------------------------------

/// Header for one F32 tensor 'x' of the given shape and offsets.
std::string one_tensor_header(const std::string& dtype, const std::string& shape,
                              const std::string& offsets) {
  return "{\"x\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":" +
         offsets + "}}";
}

TEST_F(SafetensorsTest, RejectsNulByteInHeader) {
  // nlohmann's lexer stops at a NUL: "{valid}\0garbage" parsed as "{valid}". HF's reader and
  // jacond's Python reader reject it; so must this one, naming the offset.
  const std::string valid = one_tensor_header("F32", "[2]", "[0,8]");
  const std::string path = file("nul.safetensors");
  write_file(path, make_file(valid + std::string(1, '\0') + "garbage", zeros(8)));
  expect_read_error(path, {"header is not valid JSON: NUL byte at offset " + std::to_string(valid.size())});
  // NUL padding instead of spaces: the same.
  const std::string path2 = file("nulpad.safetensors");
  write_file(path2, make_file(valid + std::string(8 - valid.size() % 8, '\0'), zeros(8), false));
  expect_read_error(path2, {"header is not valid JSON: NUL byte at offset " + std::to_string(valid.size())});
  const std::string bytes = make_file(valid + std::string(1, '\0') + "]]", zeros(8));
  EXPECT_THROW(jacond::models::parse_safetensors(bytes.data(), bytes.size()), SafetensorsError);
}

TEST_F(SafetensorsTest, RejectsAByteOrderMark) {
  // nlohmann skips a UTF-8 BOM (RFC 8259 §8.1 lets a parser ignore one); HF's reader and jacond's
  // Python reader (python/tests/test_io.py) refuse the file: one file, one verdict.
  const std::string path = file("bom.safetensors");
  write_file(path, make_file("\xef\xbb\xbf" + one_tensor_header("F32", "[2]", "[0,8]"), zeros(8)));
  expect_read_error(path, {"header is not valid JSON: a UTF-8 byte-order mark at offset 0"});
}

TEST_F(SafetensorsTest, RejectsShapeWhoseElementCountOverflowsInt64) {
  // One zero extent makes the byte count 0, however large the others; numel() then threw
  // std::invalid_argument (not a SafetensorsError, so the fuzz target and callers missed it).
  const std::string path = file("numel.safetensors");
  write_file(path, make_file(one_tensor_header("F64", "[2,9223372036854775807,0]", "[0,0]"), zeros(0)));
  expect_read_error(path, {"'x'", "shape [2, 9223372036854775807, 0] of F64 is too large",
                           "overflow int64"});
  EXPECT_THROW(jacond::models::load_safetensors(path), SafetensorsError);
  // The largest extents numpy and LibTorch index: accepted.
  const std::string ok = file("numel_ok.safetensors");
  write_file(ok, make_file(one_tensor_header("F64", "[1152921504606846975,0]", "[0,0]"), zeros(0)));
  EXPECT_EQ(jacond::models::read_safetensors(ok).tensors.at("x").shape,
            (std::vector<int64_t>{1152921504606846975, 0}));
  EXPECT_EQ(jacond::models::load_safetensors(ok).at("x").numel(), 0);
  // The writer refuses to make a file its reader rejects.
  SafetensorsFile f;
  f.tensors["x"] = RawTensor{DType::F64, {2, 9223372036854775807, 0}, {}};
  EXPECT_THROW(jacond::models::write_safetensors(file("numel_w.safetensors"), f), SafetensorsError);
  EXPECT_FALSE(fs::exists(file("numel_w.safetensors")));
}

TEST_F(SafetensorsTest, RejectsEmptyTensorInsideAnother) {
  // Sorted by offset, each tensor begins where the previous ended, empty ones included (HF's
  // rule and jacond's Python reader's): an empty tensor at [4, 4) sits inside a at [0, 8).
  const std::string path = file("empty_inside.safetensors");
  write_file(path, make_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                             "\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]}}",
                             zeros(8)));
  expect_read_error(path, {"tensor 'e' data_offsets [4, 4) overlap tensor 'a' [0, 8)"});
  // At a boundary an empty tensor is fine: before, between and after the others.
  const std::string ok = file("empty_between.safetensors");
  write_file(ok, make_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                           "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]},"
                           "\"e0\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]},"
                           "\"e4\":{\"dtype\":\"F64\",\"shape\":[3,0],\"data_offsets\":[4,4]},"
                           "\"e8\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[8,8]}}",
                           zeros(8)));
  EXPECT_EQ(jacond::models::read_safetensors(ok).tensors.size(), 5u);
}

TEST_F(SafetensorsTest, RejectsTruncatedFile) {
  const std::string path = file("trunc.safetensors");
  jacond::models::save_safetensors(path, {{"x", at::ones({4}, at::kDouble)}});
  const std::string bytes = read_file(path);
  write_file(path, bytes.substr(0, bytes.size() - 3));
  expect_read_error(path, {"'x'", "beyond the data buffer", "29 bytes"});
}

TEST_F(SafetensorsTest, RejectsTinyFile) {
  const std::string path = file("tiny.safetensors");
  write_file(path, "abc");
  expect_read_error(path, {"3 bytes", "shorter than"});
}

TEST_F(SafetensorsTest, RejectsHeaderLengthBeyondFile) {
  const std::string path = file("hlen.safetensors");
  write_file(path, u64_le(1000) + "{}      ");
  expect_read_error(path, {"header length 1000", "past the end of the file"});
}

TEST_F(SafetensorsTest, RejectsAbsurdHeaderLength) {
  const std::string path = file("absurd.safetensors");
  write_file(path, u64_le(uint64_t{1} << 40) + "{}      ");
  expect_read_error(path, {"header length 1099511627776", "exceeds the limit"});
}

TEST_F(SafetensorsTest, RejectsOffsetsBeyondData) {
  const std::string path = file("beyond.safetensors");
  write_file(path, make_file(one_tensor_header("F32", "[4]", "[0,16]"), zeros(8)));
  expect_read_error(path, {"'x'", "[0, 16)", "beyond the data buffer (8 bytes"});
}

TEST_F(SafetensorsTest, RejectsOverlappingTensors) {
  const std::string path = file("overlap.safetensors");
  const std::string header =
      "{\"blocks.0.attn.qkv.weight\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]},"
      "\"x\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[8,20]}}";
  write_file(path, make_file(header, zeros(20)));
  expect_read_error(path, {"tensor 'x' data_offsets [8, 20) overlap tensor "
                           "'blocks.0.attn.qkv.weight' [0, 12)"});
}

TEST_F(SafetensorsTest, RejectsHoleInData) {
  const std::string path = file("hole.safetensors");
  const std::string header =
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
      "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}";
  write_file(path, make_file(header, zeros(20)));
  expect_read_error(path, {"hole [8, 12)", "before tensor 'b'"});

  // Trailing bytes that no tensor claims are a hole too.
  const std::string path2 = file("tail.safetensors");
  write_file(path2, make_file(one_tensor_header("F32", "[2]", "[0,8]"), zeros(12)));
  expect_read_error(path2, {"hole [8, 12)", "at the end"});
}

TEST_F(SafetensorsTest, RejectsWrongByteCount) {
  const std::string path = file("count.safetensors");
  write_file(path, make_file(one_tensor_header("F32", "[2,3]", "[0,20]"), zeros(20)));
  expect_read_error(path, {"'x'", "hold 20 bytes", "F32 shape [2, 3] needs 24"});
}

TEST_F(SafetensorsTest, RejectsUnknownDtype) {
  const std::string path = file("dtype.safetensors");
  write_file(path, make_file(one_tensor_header("F99", "[2]", "[0,8]"), zeros(8)));
  expect_read_error(path, {"'x'", "unknown", "'F99'"});
}

TEST_F(SafetensorsTest, RejectsNonJsonHeader) {
  const std::string path = file("nonjson.safetensors");
  write_file(path, make_file("{\"x\": [1, 2", zeros(0)));
  expect_read_error(path, {"header is not valid JSON"});

  const std::string path2 = file("array.safetensors");
  write_file(path2, make_file("[1, 2, 3]", zeros(0)));
  expect_read_error(path2, {"header is not a JSON object"});
}

TEST_F(SafetensorsTest, RejectsBadShapesAndOffsets) {
  const std::string p1 = file("negdim.safetensors");
  write_file(p1, make_file(one_tensor_header("F32", "[-2,2]", "[0,16]"), zeros(16)));
  expect_read_error(p1, {"'x'", "negative dimension"});

  const std::string p2 = file("fracoff.safetensors");
  write_file(p2, make_file(one_tensor_header("F32", "[2]", "[0,8.5]"), zeros(8)));
  expect_read_error(p2, {"'x'", "data_offsets must be two non-negative integers"});

  const std::string p3 = file("reversed.safetensors");
  write_file(p3, make_file(one_tensor_header("F32", "[0]", "[8,0]"), zeros(8)));
  expect_read_error(p3, {"'x'", "begin > end"});

  const std::string p4 = file("threeoff.safetensors");
  write_file(p4, make_file(one_tensor_header("F32", "[2]", "[0,8,8]"), zeros(8)));
  expect_read_error(p4, {"data_offsets must be two"});

  const std::string p5 = file("meta.safetensors");
  write_file(p5, make_file("{\"__metadata__\":{\"step\":12}}", zeros(0)));
  expect_read_error(p5, {"__metadata__", "'step'", "not a string"});

  const std::string p6 = file("missing.safetensors");
  expect_read_error(p6, {"cannot open"});
}

// JSON's -0 is a signed zero to nlohmann; it was refused with "has a negative dimension 0" and
// "must be two non-negative integers ... got [0, 0]". Python's json (jacond.safetensors) reads 0.
TEST_F(SafetensorsTest, ANegativeZeroIsZero) {
  const std::string path = file("negzero.safetensors");
  write_file(path, make_file(one_tensor_header("F32", "[-0]", "[-0,0]"), zeros(0)));
  const jacond::models::TensorMap t = jacond::models::load_safetensors(path);
  ASSERT_EQ(t.count("x"), 1u);
  EXPECT_EQ(t.at("x").sizes().vec(), std::vector<int64_t>{0});
  const std::string p2 = file("negone.safetensors");  // a real negative stays refused
  write_file(p2, make_file(one_tensor_header("F32", "[-1]", "[0,0]"), zeros(0)));
  expect_read_error(p2, {"'x'", "negative dimension"});
}

TEST_F(SafetensorsTest, ErrorMessagesStayOnOneLine) {
  const std::string path = file("newline.safetensors");
  const std::string header =
      "{\"a\\nb\":{\"dtype\":\"F99\",\"shape\":[2],\"data_offsets\":[0,8]}}";
  write_file(path, make_file(header, zeros(8)));
  expect_read_error(path, {"'a\\nb'"});
}

/// True when every char is printable ASCII (0x20..0x7e): no raw byte of a corrupt file made it
/// into the message (models/io/error_text.h).
using jacond::test::printable_ascii;

/// The message of the SafetensorsError that reading path throws.
std::string read_error(const std::string& path) {
  try {
    jacond::models::read_safetensors(path);
  } catch (const SafetensorsError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected SafetensorsError reading " << path;
  return "";
}

TEST_F(SafetensorsTest, RawBytesInTheHeaderNeverReachTheMessage) {
  // Invalid UTF-8, ESC and BEL in the header: nlohmann rejects the JSON and quotes the bytes it
  // read; the message must show them escaped, not raw.
  const std::string p1 = file("raw_bytes.safetensors");
  write_file(p1, make_file("{\"x\xff\x1b[31m\x07\":{\"dtype\":\"F32\"}}", zeros(0)));
  const std::string m1 = read_error(p1);
  EXPECT_TRUE(printable_ascii(m1)) << m1;
  EXPECT_EQ(m1.rfind(p1 + ": header is not valid JSON: ", 0), 0u) << m1;
  EXPECT_NE(m1.find("\\xff"), std::string::npos) << m1;  // escaped, not dropped

  // Valid JSON whose strings decode to controls, NUL and non-ASCII: in a name and in a dtype.
  const std::string p2 = file("escaped.safetensors");
  write_file(p2, make_file("{\"\\u001b[2J\\u00e9\":{\"dtype\":\"F\\u0000\\u00ff\",\"shape\":[1],"
                           "\"data_offsets\":[0,4]}}",
                           zeros(4)));
  const std::string m2 = read_error(p2);
  EXPECT_TRUE(printable_ascii(m2)) << m2;
  EXPECT_NE(m2.find("tensor '\\x1b[2J\\xc3\\xa9'"), std::string::npos) << m2;
  EXPECT_NE(m2.find("dtype 'F\\x00\\xc3\\xbf'"), std::string::npos) << m2;

  // A JSON value quoted back (the shape), holding non-ASCII and a newline.
  const std::string p3 = file("shape_text.safetensors");
  write_file(p3, make_file(one_tensor_header("F32", "[2,\"\\u00e9\\n\"]", "[0,8]"), zeros(8)));
  const std::string m3 = read_error(p3);
  EXPECT_TRUE(printable_ascii(m3)) << m3;
  EXPECT_NE(m3.find("shape [2, \"\\xc3\\xa9\\n\"] has a dimension that is not an integer"),
            std::string::npos)
      << m3;

  // Metadata keys too.
  const std::string p4 = file("meta_key.safetensors");
  write_file(p4, make_file("{\"__metadata__\":{\"k\\u0007\\u00e9\":1}}", zeros(0)));
  const std::string m4 = read_error(p4);
  EXPECT_TRUE(printable_ascii(m4)) << m4;
  EXPECT_NE(m4.find("'k\\x07\\xc3\\xa9'"), std::string::npos) << m4;
}

TEST_F(SafetensorsTest, FileTextInMessagesIsLengthCapped) {
  const std::string path = file("long_name.safetensors");
  const std::string name(100000, 'n');
  write_file(path, make_file("{\"" + name + "\":{\"dtype\":\"F99\",\"shape\":[1],"
                             "\"data_offsets\":[0,4]}}",
                             zeros(4)));
  const std::string msg = read_error(path);
  EXPECT_LT(msg.size(), path.size() + 200) << msg;
  EXPECT_NE(msg.find("nnnn...'"), std::string::npos) << msg;

  // A long string token that nlohmann quotes in its parse error ("last read: '...").
  const std::string path2 = file("long_token.safetensors");
  write_file(path2, make_file("{\"" + name + "\xff\":1}", zeros(0)));
  const std::string msg2 = read_error(path2);
  EXPECT_LT(msg2.size(), path2.size() + 400) << msg2;
  EXPECT_TRUE(printable_ascii(msg2)) << msg2;
}

TEST_F(SafetensorsTest, DeeplyNestedShapeIsAnErrorNotAStackOverflow) {
  // json::dump() recurses once per nesting level; quoting this shape in the message with it
  // overflowed the stack. The bounded snippet (json_snippet) quotes a capped prefix.
  const std::size_t depth = 1000000;
  const std::string shape = std::string(depth, '[') + std::string(depth, ']');
  const std::string path = file("deep.safetensors");
  write_file(path, make_file(one_tensor_header("F32", shape, "[0,0]"), zeros(0)));
  const std::string msg = read_error(path);
  EXPECT_NE(msg.find("has a dimension that is not an integer"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[[[[..."), std::string::npos) << msg;
  EXPECT_LT(msg.size(), path.size() + 200) << msg;
}

TEST_F(SafetensorsTest, ParseFromMemoryIsTheSameParser) {
  const std::string path = file("mem.safetensors");
  jacond::models::save_safetensors(path, {{"a", at::arange(6, at::kFloat).view({2, 3})},
                                          {"b", at::ones({2}, at::kLong)}},
                                   {{"k", "v"}});
  const std::string bytes = read_file(path);
  const SafetensorsFile from_file = jacond::models::read_safetensors(path);
  const SafetensorsFile from_mem = jacond::models::parse_safetensors(bytes.data(), bytes.size(), "mem");
  EXPECT_EQ(from_mem.metadata, from_file.metadata);
  ASSERT_EQ(from_mem.tensors.size(), 2u);
  for (const auto& [name, t] : from_file.tensors) {
    EXPECT_EQ(from_mem.tensors.at(name).shape, t.shape) << name;
    EXPECT_EQ(from_mem.tensors.at(name).bytes, t.bytes) << name;
  }
  // Errors name the given label, and a truncated buffer is caught like a truncated file.
  try {
    jacond::models::parse_safetensors(bytes.data(), bytes.size() - 1, "mem");
    ADD_FAILURE() << "expected SafetensorsError";
  } catch (const SafetensorsError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("mem: ", 0), 0u) << e.what();
  }
  const TensorMap m = jacond::models::to_tensor_map(jacond::models::parse_safetensors(bytes.data(), bytes.size()));
  EXPECT_TRUE(at::equal(m.at("a"), at::arange(6, at::kFloat).view({2, 3})));
}

// ---------------------------------------------------------------------------------------------
// Writing: atomicity and validation
// ---------------------------------------------------------------------------------------------

TEST_F(SafetensorsTest, WriteIntoMissingDirectoryThrowsAndCreatesNothing) {
  // The temporary file would go next to the destination, in the missing directory: the writer
  // must fail on opening it, naming the destination, and create nothing in the directory that
  // exists (no missing directories made on the way, no temporary file elsewhere).
  const std::string path = file("no/such/dir/w.safetensors");
  try {
    jacond::models::save_safetensors(path, {{"x", at::ones({2})}});
    ADD_FAILURE() << "expected SafetensorsError";
  } catch (const SafetensorsError& e) {
    EXPECT_EQ(std::string(e.what()).rfind(path + ": cannot open temporary file", 0), 0u) << e.what();
  }
  EXPECT_TRUE(fs::is_empty(dir_));
}

TEST_F(SafetensorsTest, FailedRenameRemovesTempFile) {
  // The destination is a non-empty directory: the temporary file is written, the rename
  // fails, and the temporary file must be gone.
  const std::string path = file("occupied");
  fs::create_directories(dir_ / "occupied" / "child");
  try {
    jacond::models::save_safetensors(path, {{"x", at::ones({2})}});
    ADD_FAILURE() << "expected SafetensorsError";
  } catch (const SafetensorsError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot rename"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(temp_leftovers().empty());
  EXPECT_TRUE(fs::is_directory(dir_ / "occupied" / "child"));
}

TEST_F(SafetensorsTest, WriteRejectsInconsistentTensorsWithoutTouchingDisk) {
  const std::string path = file("bad.safetensors");
  SafetensorsFile f;
  f.tensors["x"] = raw_of_bytes(DType::F32, {2, 3}, zeros(20));
  try {
    jacond::models::write_safetensors(path, f);
    ADD_FAILURE() << "expected SafetensorsError";
  } catch (const SafetensorsError& e) {
    EXPECT_NE(std::string(e.what()).find("needs 24"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(path));
  EXPECT_TRUE(temp_leftovers().empty());

  SafetensorsFile g;
  g.tensors["__metadata__"] = jacond::models::from_doubles({1.0}, {1});
  EXPECT_THROW(jacond::models::write_safetensors(path, g), SafetensorsError);

  EXPECT_THROW(jacond::models::save_safetensors(path, {{"b", at::ones({2}, at::kBool)}}),
               SafetensorsError);
  EXPECT_THROW(jacond::models::save_safetensors(path, {{"u", at::Tensor()}}), SafetensorsError);
  EXPECT_FALSE(fs::exists(path));
}

// ---------------------------------------------------------------------------------------------
// Small floats and from_doubles / to_doubles
// ---------------------------------------------------------------------------------------------

TEST(SafetensorsFloats, HalfAndBf16KnownBits) {
  using jacond::models::bf16_bits_to_double;
  using jacond::models::half_bits_to_double;
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(half_bits_to_double(0x3C00), 1.0);
  EXPECT_EQ(half_bits_to_double(0xC000), -2.0);
  EXPECT_EQ(half_bits_to_double(0x3555), 0.333251953125);
  EXPECT_EQ(half_bits_to_double(0x7BFF), 65504.0);
  EXPECT_EQ(half_bits_to_double(0x0400), std::ldexp(1.0, -14));  // smallest normal
  EXPECT_EQ(half_bits_to_double(0x0001), std::ldexp(1.0, -24));  // smallest subnormal
  EXPECT_EQ(half_bits_to_double(0x03FF), std::ldexp(1023.0, -24));
  EXPECT_EQ(half_bits_to_double(0x7C00), inf);
  EXPECT_EQ(half_bits_to_double(0xFC00), -inf);
  EXPECT_TRUE(std::isnan(half_bits_to_double(0x7E00)));
  EXPECT_TRUE(std::signbit(half_bits_to_double(0x8000)));

  EXPECT_EQ(bf16_bits_to_double(0x3F80), 1.0);
  EXPECT_EQ(bf16_bits_to_double(0xC000), -2.0);
  EXPECT_EQ(bf16_bits_to_double(0x3E20), 0.15625);
  EXPECT_EQ(bf16_bits_to_double(0x7F7F), std::ldexp(255.0, 127 - 7));  // max finite
  EXPECT_EQ(bf16_bits_to_double(0x0001), std::ldexp(1.0, -133));
  EXPECT_EQ(bf16_bits_to_double(0x7F80), inf);
  EXPECT_TRUE(std::isnan(bf16_bits_to_double(0x7FC0)));

  // Through a RawTensor as well.
  const std::string h = std::string("\x00\x3C\x00\xC0", 4);
  EXPECT_EQ(jacond::models::to_doubles(raw_of_bytes(DType::F16, {2}, h)),
            (std::vector<double>{1.0, -2.0}));
  const std::string b = std::string("\x80\x3F\x00\xC0", 4);
  EXPECT_EQ(jacond::models::to_doubles(raw_of_bytes(DType::BF16, {2}, b)),
            (std::vector<double>{1.0, -2.0}));
}

TEST(SafetensorsFloats, EncodeRoundsToNearestEven) {
  using jacond::models::double_to_bf16_bits;
  using jacond::models::double_to_half_bits;
  EXPECT_EQ(double_to_half_bits(1.0), 0x3C00);
  EXPECT_EQ(double_to_half_bits(-2.0), 0xC000);
  EXPECT_EQ(double_to_half_bits(1.0 + std::ldexp(1.0, -11)), 0x3C00);      // tie -> even
  EXPECT_EQ(double_to_half_bits(1.0 + 3 * std::ldexp(1.0, -11)), 0x3C02);  // tie -> even
  EXPECT_EQ(double_to_half_bits(1.0 + std::ldexp(1.0, -11) + 1e-12), 0x3C01);
  EXPECT_EQ(double_to_half_bits(65519.99), 0x7BFF);
  EXPECT_EQ(double_to_half_bits(65520.0), 0x7C00);  // rounds to inf
  EXPECT_EQ(double_to_half_bits(std::ldexp(1.0, -25)), 0x0000);  // tie -> even (zero)
  EXPECT_EQ(double_to_half_bits(std::ldexp(3.0, -26)), 0x0001);
  EXPECT_EQ(double_to_half_bits(std::ldexp(1.0, -14) - std::ldexp(1.0, -26)), 0x0400);
  EXPECT_EQ(double_to_half_bits(-0.0), 0x8000);
  EXPECT_EQ(double_to_bf16_bits(1.0), 0x3F80);
  EXPECT_EQ(double_to_bf16_bits(1.0 + std::ldexp(1.0, -8)), 0x3F80);  // tie -> even
  EXPECT_EQ(double_to_bf16_bits(1e300), 0x7F80);

  // Every non-NaN bit pattern survives decode -> encode.
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const uint16_t b = static_cast<uint16_t>(bits);
    const double h = jacond::models::half_bits_to_double(b);
    if (std::isnan(h)) {
      EXPECT_TRUE(std::isnan(jacond::models::half_bits_to_double(double_to_half_bits(h))));
    } else {
      ASSERT_EQ(double_to_half_bits(h), b) << std::hex << bits;
    }
    const double f = jacond::models::bf16_bits_to_double(b);
    if (!std::isnan(f)) {
      ASSERT_EQ(double_to_bf16_bits(f), b) << std::hex << bits;
    }
  }

  // Agrees with LibTorch's float -> Half / BFloat16 conversions (both round to nearest even).
  std::mt19937 gen(3);
  std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
  std::uniform_int_distribution<int> expo(-30, 20);
  for (int i = 0; i < 20000; ++i) {
    const float x = std::ldexp(mant(gen), expo(gen));
    ASSERT_EQ(double_to_half_bits(x), c10::Half(x).x) << x;
    ASSERT_EQ(double_to_bf16_bits(x), c10::BFloat16(x).x) << x;
  }
}

TEST(SafetensorsFloats, FromDoublesIntegersAndChecks) {
  const RawTensor t = jacond::models::from_doubles({-3, 0, 2147483647}, {3}, DType::I32);
  EXPECT_EQ(jacond::models::to_doubles(t), (std::vector<double>{-3, 0, 2147483647}));
  const RawTensor u = jacond::models::from_doubles({0, 255}, {1, 2}, DType::U8);
  EXPECT_EQ(u.bytes, (std::vector<uint8_t>{0, 255}));
  const RawTensor l = jacond::models::from_doubles({-9007199254740992.0}, {1}, DType::I64);
  EXPECT_EQ(jacond::models::to_doubles(l), std::vector<double>{-9007199254740992.0});

  EXPECT_THROW(jacond::models::from_doubles({1.5}, {1}, DType::I64), std::invalid_argument);
  EXPECT_THROW(jacond::models::from_doubles({256}, {1}, DType::U8), std::invalid_argument);
  EXPECT_THROW(jacond::models::from_doubles({2147483648.0}, {1}, DType::I32),
               std::invalid_argument);
  EXPECT_THROW(jacond::models::from_doubles({1, 2, 3}, {2, 2}), std::invalid_argument);
  EXPECT_THROW(jacond::models::from_doubles({}, {-1}), std::invalid_argument);
  EXPECT_THROW(jacond::models::to_doubles(raw_of_bytes(DType::F64, {2}, zeros(12))),
               std::invalid_argument);

  // F32 narrowing rounds once, and overflows to inf only past FLT_MAX + half an ulp.
  const RawTensor f = jacond::models::from_doubles({1e39, -1e39, 3.4028235e38, 0.1}, {4},
                                                   DType::F32);
  const std::vector<double> back = jacond::models::to_doubles(f);
  EXPECT_EQ(back[0], std::numeric_limits<double>::infinity());
  EXPECT_EQ(back[1], -std::numeric_limits<double>::infinity());
  EXPECT_EQ(back[2], static_cast<double>(std::numeric_limits<float>::max()));
  EXPECT_EQ(back[3], static_cast<double>(0.1f));
}

TEST(SafetensorsDType, NamesAndSizes) {
  for (DType d : {DType::F64, DType::F32, DType::F16, DType::BF16, DType::I64, DType::I32,
                  DType::U8})
    EXPECT_EQ(jacond::models::parse_dtype(jacond::models::to_string(d)), d);
  EXPECT_EQ(jacond::models::to_string(DType::BF16), "BF16");
  EXPECT_EQ(jacond::models::element_size(DType::F64), 8u);
  EXPECT_EQ(jacond::models::element_size(DType::BF16), 2u);
  EXPECT_EQ(jacond::models::element_size(DType::U8), 1u);
  EXPECT_TRUE(jacond::models::is_floating(DType::F16));
  EXPECT_FALSE(jacond::models::is_floating(DType::I32));
  EXPECT_THROW(jacond::models::parse_dtype("F99"), std::invalid_argument);
  EXPECT_EQ(jacond::models::numel({}), 1);
  EXPECT_EQ(jacond::models::numel({2, 0, 3}), 0);
}

}  // namespace

// The fuzz seeds' names are their verdicts (tests/support/fuzz_seeds.h): each bad_* seed refused
// with a SafetensorsError of one clean line, each other seed read into tensors of its shapes.
TEST(SafetensorsFuzzSeeds, EachSeedGetsTheVerdictItsNameSays) {
  const auto seeds = jacond::test::fuzz_seeds("fuzz_safetensors");
  ASSERT_GE(seeds.size(), 10u);
  for (const auto& seed : seeds) {
    try {
      jacond::models::SafetensorsFile file = jacond::models::parse_safetensors(seed.bytes.data(), seed.bytes.size(), seed.name);
      const std::size_t tensors = file.tensors.size();
      const jacond::models::TensorMap map = jacond::models::to_tensor_map(std::move(file));
      EXPECT_FALSE(seed.bad()) << seed.name << " was read (" << map.size() << " tensors)";
      EXPECT_EQ(map.size(), tensors) << seed.name;
    } catch (const SafetensorsError& e) {
      EXPECT_TRUE(seed.bad()) << seed.name << " was refused: " << e.what();
      EXPECT_TRUE(jacond::test::clean_message(e.what())) << seed.name << ": " << e.what();
    }
  }
}
