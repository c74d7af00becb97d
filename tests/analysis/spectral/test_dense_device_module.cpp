// The loader of the CUDA back end module (analysis/spectral/dense_device_module.h) on a stand-in
// module (tests/support/stand_in_cuda_module.cpp), so every outcome runs without a GPU: the first
// candidate that loads is used, the GPU ordinal reaches the module's entry point, and each failure
// is one line naming what failed. The real module on a GPU: test_dense_cuda, test_operator_device.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "analysis/spectral/dense_device_module.h"

namespace jacond {
namespace {

// The one-line message of load_cuda_dense_device's std::runtime_error ("" when it loads).
std::string failure_of(const std::vector<std::string>& candidates, int ordinal = -1) {
  try {
    load_cuda_dense_device(candidates, "test", ordinal);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

TEST(DenseDeviceModule, LoadsTheFirstCandidateThatLoadsOnTheGpuAskedFor) {
  const auto device = load_cuda_dense_device({"/nonexistent/libjacond_cuda.so", JACOND_STAND_IN_MODULE}, "test", 3);
  ASSERT_TRUE(device);
  EXPECT_EQ(device->name(), "stand-in");
  EXPECT_EQ(device->description(), "stand-in on cuda:3");
  EXPECT_EQ(load_cuda_dense_device({JACOND_STAND_IN_MODULE}, "test")->description(), "stand-in on cuda:-1");
}

TEST(DenseDeviceModule, EachFailureIsOneLineNamingIt) {
  EXPECT_EQ(failure_of({JACOND_STAND_IN_MODULE}, 7), "test: no usable GPU (require_device failed: cuda:7 asked for, 1 present)");
  const std::string none = failure_of({"/nonexistent/a.so", "/nonexistent/b.so"});
  EXPECT_EQ(none.rfind("test: cannot load the CUDA back end module (", 0), 0u) << none;
  EXPECT_NE(none.find("/nonexistent/a.so"), std::string::npos) << none;
  EXPECT_NE(none.find("; "), std::string::npos) << none;  // both tries, in one line
  EXPECT_EQ(none.find('\n'), std::string::npos) << none;
  // A library that loads but is not the module (the C library, which every process has).
  EXPECT_EQ(failure_of({"libc.so.6", JACOND_STAND_IN_MODULE}), "test: libc.so.6 has no jacond_cuda_dense_device_on");
}

}  // namespace
}  // namespace jacond
