// Fashion-MNIST (models/data/fashion_mnist.h): the Debian files load with the published sizes and
// class balance (6000 per class in train, 1000 in test: Xiao et al. 2017), malformed IDX files
// give one-line errors naming the file, data order and augmentation are pure functions of the
// seed.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include "models/data/fashion_mnist.h"
#include "support/fuzz_seeds.h"

namespace jacond {
namespace {

namespace fs = std::filesystem;
using models::IdxError;

TEST(FashionMnist, DebianFilesLoadWithPublishedSizesAndBalance) {
  const auto train = models::load_fashion_mnist(models::kFashionMnistDir, "train");
  const auto test = models::load_fashion_mnist(models::kFashionMnistDir, "test");
  EXPECT_EQ(train.images.sizes(), (std::vector<int64_t>{60000, 1, 28, 28}));
  EXPECT_EQ(test.images.sizes(), (std::vector<int64_t>{10000, 1, 28, 28}));
  EXPECT_EQ(torch::bincount(train.labels).equal(torch::full({10}, 6000, torch::kLong)), true);
  EXPECT_EQ(torch::bincount(test.labels).equal(torch::full({10}, 1000, torch::kLong)), true);
  // Normalisation statistics of the training split (the constants in the header).
  const auto x = train.images.to(torch::kFloat64) / 255.0;
  EXPECT_NEAR(x.mean().item<double>(), models::kFashionMnistMean, 5e-4);
  EXPECT_NEAR(x.std().item<double>(), models::kFashionMnistStd, 5e-4);
  const auto limited = models::load_fashion_mnist(models::kFashionMnistDir, "test", 100);
  EXPECT_EQ(limited.size(), 100);
  EXPECT_TRUE(torch::equal(limited.labels, test.labels.narrow(0, 0, 100)));
}

class IdxFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("jacond_idx_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  static std::vector<uint8_t> be32(uint32_t v) {
    return {uint8_t(v >> 24), uint8_t(v >> 16), uint8_t(v >> 8), uint8_t(v)};
  }
  // Writes gzip'ed bytes: header words then `payload` data bytes.
  std::string write_gz(const std::string& name, std::vector<uint32_t> words, size_t payload, uint8_t value = 1) {
    std::vector<uint8_t> bytes;
    for (auto w : words)
      for (auto b : be32(w)) bytes.push_back(b);
    bytes.insert(bytes.end(), payload, value);
    const std::string path = (dir_ / name).string();
    gzFile f = gzopen(path.c_str(), "wb");
    gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
    gzclose(f);
    return path;
  }
  std::string error_of(const std::function<void()>& f) {
    try {
      f();
    } catch (const IdxError& e) {
      return e.what();
    }
    return "";
  }
  fs::path dir_;
};

TEST_F(IdxFiles, WellFormedSmallSplitLoads) {
  write_gz("t10k-images-idx3-ubyte.gz", {0x803, 3, 2, 2}, 12, 7);
  write_gz("t10k-labels-idx1-ubyte.gz", {0x801, 3}, 3, 9);
  const auto s = models::load_fashion_mnist(dir_.string(), "test");
  EXPECT_EQ(s.images.sizes(), (std::vector<int64_t>{3, 1, 2, 2}));
  EXPECT_EQ(s.images.sum().item<int64_t>(), 12 * 7);
  EXPECT_EQ(s.labels.sum().item<int64_t>(), 27);
}

TEST_F(IdxFiles, WrongMagic) {
  const auto p = write_gz("x.gz", {0x802, 3, 2, 2}, 12);
  EXPECT_EQ(error_of([&] { models::read_idx(p, 3); }),
            p + ": bad IDX magic 0x00000802, expected 0x00000803 (u8 data, 3 dims)");
}

TEST_F(IdxFiles, TruncatedData) {
  const auto p = write_gz("x.gz", {0x803, 3, 2, 2}, 11);
  EXPECT_EQ(error_of([&] { models::read_idx(p, 3); }), p + ": truncated: expected 12 data bytes, got 11");
}

TEST_F(IdxFiles, TruncatedHeaderAndTrailingBytes) {
  const auto p = write_gz("x.gz", {0x803, 3}, 0);
  EXPECT_EQ(error_of([&] { models::read_idx(p, 3); }), p + ": truncated IDX header");
  const auto q = write_gz("y.gz", {0x801, 2}, 3);
  EXPECT_EQ(error_of([&] { models::read_idx(q, 1); }), q + ": trailing bytes after the IDX data");
}

TEST_F(IdxFiles, CountMismatchAndBadLabel) {
  write_gz("t10k-images-idx3-ubyte.gz", {0x803, 3, 2, 2}, 12);
  const auto labels = write_gz("t10k-labels-idx1-ubyte.gz", {0x801, 2}, 2);
  EXPECT_NE(error_of([&] { models::load_fashion_mnist(dir_.string(), "test"); }).find(labels + ": label count 2 != image count 3"),
            std::string::npos);
  write_gz("t10k-labels-idx1-ubyte.gz", {0x801, 3}, 3, 10);
  EXPECT_EQ(error_of([&] { models::load_fashion_mnist(dir_.string(), "test"); }),
            labels + ": label 10 at index 0 is outside [0, 10)");
}

TEST_F(IdxFiles, MissingFileAndCorruptGzip) {
  const std::string missing = (dir_ / "none.gz").string();
  EXPECT_NE(error_of([&] { models::read_idx(missing, 3); }).find(missing + ": file not found"), std::string::npos);
  const auto p = write_gz("x.gz", {0x803, 3, 2, 2}, 12);
  // Corrupt the deflate stream after the gzip header.
  std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(14);
  const char junk[8] = {'\x7f', '\x7f', '\x7f', '\x7f', '\x7f', '\x7f', '\x7f', '\x7f'};
  f.write(junk, sizeof junk);
  f.close();
  const std::string msg = error_of([&] { models::read_idx(p, 3); });
  EXPECT_EQ(msg.rfind(p + ": ", 0), 0u) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos);
}

// Raw (uncompressed) bytes: header words then `payload` data bytes.
std::string idx_bytes(std::vector<uint32_t> words, size_t payload, uint8_t value = 1) {
  std::string s;
  for (auto w : words)
    for (int k = 3; k >= 0; --k) s.push_back(static_cast<char>((w >> (8 * k)) & 0xff));
  s.append(payload, static_cast<char>(value));
  return s;
}

std::string gzip_of(const std::string& raw) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&z, raw.size()) + 32, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(raw.data()));
  z.avail_in = static_cast<uInt>(raw.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

std::string parse_error(const std::string& bytes, int rank) {
  try {
    models::parse_idx(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), rank, "mem.idx");
  } catch (const IdxError& e) {
    return e.what();
  }
  return "";
}

using jacond::test::printable_ascii;

TEST_F(IdxFiles, PlainFileAndMemoryGiveTheSameArray) {
  const std::string raw = idx_bytes({0x803, 2, 3, 1}, 6, 5);
  const std::string path = (dir_ / "plain.idx").string();
  { std::ofstream(path, std::ios::binary) << raw; }
  const auto a = models::read_idx(path, 3);
  EXPECT_EQ(a.dims, (std::vector<int64_t>{2, 3, 1}));
  EXPECT_EQ(a.data, std::vector<uint8_t>(6, 5));
  const auto b = models::parse_idx(reinterpret_cast<const uint8_t*>(raw.data()), raw.size(), 3);
  EXPECT_EQ(b.dims, a.dims);
  EXPECT_EQ(b.data, a.data);
  const std::string gz = gzip_of(raw);
  const auto c = models::parse_idx(reinterpret_cast<const uint8_t*>(gz.data()), gz.size(), 3);
  EXPECT_EQ(c.data, a.data);
}

TEST_F(IdxFiles, GzipMembersConcatenateAndTrailingGarbageIsAnError) {
  const std::string raw = idx_bytes({0x801, 5}, 5, 3);
  const std::string two = gzip_of(raw.substr(0, 7)) + gzip_of(raw.substr(7));
  const auto a = models::parse_idx(reinterpret_cast<const uint8_t*>(two.data()), two.size(), 1);
  EXPECT_EQ(a.data, std::vector<uint8_t>(5, 3));
  EXPECT_EQ(parse_error(gzip_of(raw) + "junk", 1), "mem.idx: trailing bytes after the gzip data");
  const std::string gz = gzip_of(raw);
  EXPECT_EQ(parse_error(gz.substr(0, gz.size() - 4), 1), "mem.idx: gzip error: truncated data (unexpected end of file)");
}

// The files below are the same bytes as in python/tests/test_io.py (test_idx_decoders_agree...):
// the C++ and Python decoders must accept and reject the same files, with the same messages.
// G is gzip (zlib, mtime 0) of the label file {0x801, 5} + five 3s; G1 and G2 of its first 7 and
// last 6 bytes.
std::string from_hex(const std::string& h) {
  std::string out;
  for (std::size_t i = 0; i + 1 < h.size(); i += 2) out.push_back(static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16)));
  return out;
}
const std::string kG = from_hex("1f8b08000000000002036360e06064606060650601005434cfef0d000000");
const std::string kG1 = from_hex("1f8b08000000000002036360e0606460600000daf3a01507000000");
const std::string kG2 = from_hex("1f8b080000000000020363650601000e59780406000000");

TEST_F(IdxFiles, GzipZeroPaddingIsSkippedAsByPythonAndOtherTrailingBytesAreErrors) {
  // The C++ decoder rejected zero padding after the gzip data, which Python's decoder
  // (gzip.decompress) accepted: one file, two verdicts. Zero bytes after a member are now
  // skipped by both (as gzip -d does); anything else after a member stays an error in both.
  for (const std::string& ok : {kG, kG + std::string(16, '\0'), kG1 + std::string(4, '\0') + kG2}) {
    EXPECT_EQ(parse_error(ok, 1), "");
    const auto a = models::parse_idx(reinterpret_cast<const uint8_t*>(ok.data()), ok.size(), 1);
    EXPECT_EQ(a.data, std::vector<uint8_t>(5, 3));
  }
  EXPECT_EQ(parse_error(kG + std::string(4, '\0') + "junk", 1), "mem.idx: trailing bytes after the gzip data");
  EXPECT_EQ(parse_error(kG + "junk", 1), "mem.idx: trailing bytes after the gzip data");
  EXPECT_EQ(parse_error(kG + std::string(3, '\0') + "\x1f", 1), "mem.idx: gzip error: truncated data (unexpected end of file)");
  std::string bad_crc = kG;
  bad_crc[bad_crc.size() - 8] ^= 0x5a;
  EXPECT_EQ(parse_error(bad_crc, 1), "mem.idx: gzip error: incorrect data check");  // zlib's message
  // Zero bytes after plain IDX data are data, not padding: trailing bytes.
  EXPECT_EQ(parse_error(idx_bytes({0x801, 5}, 5, 3) + std::string(4, '\0'), 1),
            "mem.idx: trailing bytes after the IDX data");
  // Through a file as well (read_idx streams the input in 64 KiB pieces: padding longer than one).
  const std::string path = (dir_ / "padded.gz").string();
  { std::ofstream(path, std::ios::binary) << kG + std::string(200000, '\0'); }
  EXPECT_EQ(models::read_idx(path, 1).data, std::vector<uint8_t>(5, 3));
}

TEST_F(IdxFiles, DimensionCapIsCheckedDimensionByDimensionAsInPython) {
  // [2^20, 2^20, 0]: the count passes 2^34 at the second dimension, before the zero is read.
  // The Python decoder checks in the same order (it checked every zero first).
  EXPECT_EQ(parse_error(idx_bytes({0x803, 1u << 20, 1u << 20, 0}, 0), 3),
            "mem.idx: IDX dimensions too large (more than 2^34 elements)");
  EXPECT_EQ(parse_error(idx_bytes({0x803, 0, 1u << 20, 1u << 20}, 0), 3), "mem.idx: IDX dimension 0 is zero");
}

TEST_F(IdxFiles, DimensionProductThatWouldWrapIsRejected) {
  // 2^17 * 2^17 * 2^30 = 2^64 wrapped to 0 in 64 bits: the old reader accepted this header with
  // no data, and load_fashion_mnist then wrapped 2^64 "pixels" of nothing in a tensor.
  EXPECT_EQ(parse_error(idx_bytes({0x803, 1u << 17, 1u << 17, 1u << 30}, 0), 3),
            "mem.idx: IDX dimensions too large (more than 2^34 elements)");
}

TEST_F(IdxFiles, HeaderCountIsNotTrustedWithAnAllocation) {
  // 2^34 elements claimed, 4 present: an error about the data, not a 16 GiB allocation.
  EXPECT_EQ(parse_error(idx_bytes({0x803, 1u << 14, 1u << 10, 1u << 10}, 4), 3),
            "mem.idx: truncated: expected 17179869184 data bytes, got 4");
}

TEST_F(IdxFiles, ErrorsArePrintableOneLiners) {
  // A corrupt deflate stream (zlib's message) and a corrupt header (CRC) stay printable ASCII.
  std::string gz = gzip_of(idx_bytes({0x803, 2, 2, 2}, 8));
  for (size_t i = 10; i < 16 && i < gz.size(); ++i) gz[i] = '\xff';
  const std::string m = parse_error(gz, 3);
  EXPECT_EQ(m.rfind("mem.idx: gzip error: ", 0), 0u) << m;
  EXPECT_TRUE(printable_ascii(m)) << m;
  std::string bad_crc = gzip_of(idx_bytes({0x801, 1}, 1));
  bad_crc[bad_crc.size() - 8] ^= 0x5a;
  const std::string m2 = parse_error(bad_crc, 1);
  EXPECT_EQ(m2.rfind("mem.idx: gzip error: ", 0), 0u) << m2;
  EXPECT_TRUE(printable_ascii(m2)) << m2;
}

TEST_F(IdxFiles, SplitCheckRejectsInconsistentArrays) {
  models::IdxArray images{{2, 1, 1}, {0, 0}};
  models::IdxArray labels{{2}, {1, 2}};
  EXPECT_NO_THROW(models::check_idx_split(images, "i", labels, "l"));
  images.data.pop_back();  // sizes that disagree with the dims must never reach from_blob
  EXPECT_EQ(error_of([&] { models::check_idx_split(images, "i", labels, "l"); }),
            "i: image data size does not match its dims");
}

TEST(FashionMnist, EpochPermutationIsADeterministicPermutation) {
  const auto a = models::epoch_permutation(1000, 5, 2);
  EXPECT_EQ(a, models::epoch_permutation(1000, 5, 2));
  EXPECT_NE(a, models::epoch_permutation(1000, 5, 3));
  EXPECT_NE(a, models::epoch_permutation(1000, 6, 2));
  std::set<int64_t> seen(a.begin(), a.end());
  EXPECT_EQ(seen.size(), 1000u);
  EXPECT_EQ(*seen.begin(), 0);
  EXPECT_EQ(*seen.rbegin(), 999);
}

// Every output image is its input padded by 2 with black (pixel 0, normalised), cropped back to
// 28 × 28 at one of the 5 × 5 shifts, and maybe mirrored left–right: found by trying all 50 (the
// pixels of arange are distinct, so at most one matches). Over 16 images some are shifted and some
// mirrored (the identity would pass the first check alone).
TEST(FashionMnist, AugmentationIsAShiftedMaybeMirroredCropAndReproducible) {
  const int64_t B = 16, pad = 2;
  auto x = torch::arange(B * 28 * 28, torch::kFloat32).reshape({B, 1, 28, 28});
  std::mt19937_64 g1(3), g2(3);
  const auto a = models::augment(x, pad, true, g1);
  const auto b = models::augment(x, pad, true, g2);
  EXPECT_TRUE(torch::equal(a, b));
  EXPECT_EQ(a.sizes(), x.sizes());
  // No padding, no flip: the identity.
  std::mt19937_64 g3(3);
  EXPECT_TRUE(torch::equal(models::augment(x, 0, false, g3), x));
  const double black = (0.0 - models::kFashionMnistMean) / models::kFashionMnistStd;
  int shifted = 0, mirrored = 0;
  for (int64_t i = 0; i < B; ++i) {
    const auto padded = torch::constant_pad_nd(x[i], {pad, pad, pad, pad}, black);
    int matches = 0;
    for (int64_t dy = 0; dy <= 2 * pad; ++dy)
      for (int64_t dx = 0; dx <= 2 * pad; ++dx)
        for (const bool flip : {false, true}) {
          auto crop = padded.narrow(1, dy, 28).narrow(2, dx, 28);
          if (!torch::equal(a[i], flip ? crop.flip({2}) : crop)) continue;
          ++matches;
          shifted += dy != pad || dx != pad;
          mirrored += flip;
        }
    EXPECT_EQ(matches, 1) << "image " << i;
  }
  EXPECT_GT(shifted, 0);
  EXPECT_GT(mirrored, 0);
}

// The fuzz seeds' names are their verdicts (tests/support/fuzz_seeds.h), read as fuzz_idx reads
// them: as images (rank 3) and as labels (rank 1), each with its split check. A good seed is one
// split file (one of the two readings holds), a bad_* seed neither, each refusal an IdxError of
// one clean line.
TEST(IdxFuzzSeeds, EachSeedGetsTheVerdictItsNameSays) {
  const auto seeds = test::fuzz_seeds("fuzz_idx");
  ASSERT_GE(seeds.size(), 10u);
  for (const auto& seed : seeds) {
    const auto* bytes = reinterpret_cast<const uint8_t*>(seed.bytes.data());
    int readings = 0;
    for (const int rank : {3, 1}) {
      try {
        const models::IdxArray a = models::parse_idx(bytes, seed.bytes.size(), rank, seed.name);
        const int64_t n = a.dims[0];
        if (rank == 3) {
          models::check_idx_split(a, seed.name, {{n}, std::vector<uint8_t>(static_cast<size_t>(n), 0)}, "labels.idx");
        } else {
          models::check_idx_split({{n, 1, 1}, std::vector<uint8_t>(static_cast<size_t>(n), 0)}, "images.idx", a, seed.name);
        }
        ++readings;
      } catch (const IdxError& e) {
        EXPECT_TRUE(test::clean_message(e.what())) << seed.name << ": " << e.what();
      }
    }
    EXPECT_EQ(readings, seed.bad() ? 0 : 1) << seed.name;
  }
}

}  // namespace
}  // namespace jacond
