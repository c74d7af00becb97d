// The fuzz targets' seed files (tests/fuzz/corpus/<target>/), for the ordinary test suite. Each
// seed is named for its verdict: bad_* is a file the parser must refuse (with its own error type
// and one clean line), every other seed one it must read. libFuzzer asserts nothing about its
// seeds (scripts/fuzz.sh only feeds them in), so without these tests a "bad_" seed the parser
// came to accept, or a good one it came to refuse, would go unnoticed.
#pragma once

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "support/error_message.h"

namespace jacond::test {

struct FuzzSeed {
  std::string name;   // file name, e.g. "bad_nul_in_header.safetensors"
  std::string bytes;  // its contents
  bool bad() const { return name.rfind("bad_", 0) == 0; }
};

/// Every seed of `target` ("fuzz_safetensors", "fuzz_idx", "fuzz_checkpoint_meta"), by name.
inline std::vector<FuzzSeed> fuzz_seeds(const std::string& target) {
  const std::filesystem::path dir = std::filesystem::path(JACOND_SOURCE_DIR) / "tests/fuzz/corpus" / target;
  std::vector<FuzzSeed> seeds;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(entry.path(), std::ios::binary);
    seeds.push_back({entry.path().filename().string(), std::string(std::istreambuf_iterator<char>(in), {})});
  }
  std::sort(seeds.begin(), seeds.end(), [](const FuzzSeed& a, const FuzzSeed& b) { return a.name < b.name; });
  return seeds;
}

/// An error message as the fuzz targets require it (tests/fuzz/fuzz_check.h): one line of
/// printable ASCII, at most 1 024 characters (fuzz_check.h's kMaxMessage).
inline bool clean_message(const std::string& message) {
  return !message.empty() && message.size() <= 1024 && printable_ascii(message);
}

}  // namespace jacond::test
