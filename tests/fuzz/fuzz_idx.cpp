// libFuzzer target: an IDX file (models/data/idx.h), gzip or plain, from the fuzz input, read as
// images (rank 3) and as labels (rank 1) through the same decoder as read_idx, then the split
// check that load_fashion_mnist relies on before wrapping the bytes in a tensor.
// Expected outcome for bad input: IdxError with a clean one-line message. Anything else
// (another exception type, a sanitizer report, a broken invariant, a hang, an allocation the
// input's size does not justify: libFuzzer's -malloc_limit_mb) is a finding.
#include <cstddef>
#include <cstdint>

#include "models/data/idx.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using jacond::models::IdxArray;

void check_array(const IdxArray& a, std::size_t rank) {
  if (a.dims.size() != rank) jacond::fuzz::fail("rank");
  uint64_t n = 1;
  for (const int64_t d : a.dims) {
    if (d < 1) jacond::fuzz::fail("dimension < 1");
    n *= static_cast<uint64_t>(d);  // <= 2^34 after a successful parse: no wrap
  }
  if (a.data.size() != n) jacond::fuzz::fail("data size != prod(dims)");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  using namespace jacond;
  try {
    const IdxArray images = models::parse_idx(data, size, 3, "fuzz-images.idx");
    check_array(images, 3);
    // Partner labels of the right count (all 0), as a well-formed label file would give.
    IdxArray labels{{images.dims[0]}, std::vector<uint8_t>(static_cast<std::size_t>(images.dims[0]), 0)};
    models::check_idx_split(images, "fuzz-images.idx", labels, "labels.idx");
  } catch (const models::IdxError& e) {
    fuzz::expect_clean_message(e.what());
  }
  try {
    const IdxArray labels = models::parse_idx(data, size, 1, "fuzz-labels.idx");
    check_array(labels, 1);
    // Partner images [N, 1, 1] so that the label checks (range, count) run on fuzzed labels.
    IdxArray images{{labels.dims[0], 1, 1}, std::vector<uint8_t>(labels.data.size(), 0)};
    models::check_idx_split(images, "images.idx", labels, "fuzz-labels.idx");
  } catch (const models::IdxError& e) {
    fuzz::expect_clean_message(e.what());
  }
  return 0;
}
