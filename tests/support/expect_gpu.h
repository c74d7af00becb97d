// JACOND_EXPECT_GPU=1 (scripts/gpu_measure.sh item 1, on the GPU machine): a GPU test that finds no
// GPU (or no CUDA back end) fails naming why, instead of skipping or returning as passed.
#pragma once

#include <cstdlib>
#include <string>

namespace jacond::test {

inline bool expect_gpu() {
  const char* v = std::getenv("JACOND_EXPECT_GPU");
  return v && std::string(v) == "1";
}

}  // namespace jacond::test

// A GPU test's first line (in a TEST body or a void helper; the file includes gtest): where
// `available` is false, the test skips saying `why` (CI: no GPU), but under JACOND_EXPECT_GPU=1 it
// fails, "JACOND_EXPECT_GPU=1 and <why>": on the GPU machine a skip is a test that measured
// nothing, which ctest counts as passed (a CPU-only LibTorch there, or a driver the CUDA runtime
// refuses, would skip every one). REQUIRE_DEVICE (tests/analysis/cuda/test_dense_cuda.cpp) and
// REQUIRE_CUDA (tests/models/test_operator_device.cpp) are this pattern with their own reasons.
#define JACOND_REQUIRE_GPU(available, why)                                            \
  if (!(available)) {                                                                 \
    if (::jacond::test::expect_gpu()) FAIL() << "JACOND_EXPECT_GPU=1 and " << (why); \
    GTEST_SKIP() << (why);                                                            \
  }
