// The CUDA back end as a module the `jacond` command loads only for --device cuda
// (experiments/cli/device_option.cpp): linking cuBLAS/cuSOLVER into the command itself cost every
// invocation ~0.5 s of library loading (libcublasLt alone is 540 MB), CPU runs included. One C
// entry point; everything else in this module is hidden (-fvisibility=hidden, --exclude-libs).
#include <cstdio>
#include <exception>

#include "analysis/cuda/dense_cuda.h"

// The device on GPU `ordinal` (−1: the calling thread's current one), or nullptr with the reason
// in `error` (analysis/spectral/dense_device_module.h, kCudaModuleEntry).
extern "C" __attribute__((visibility("default"))) jacond::DenseDevice* jacond_cuda_dense_device_on(int ordinal, char* error,
                                                                                                   size_t error_size) {
  try {
    return new jacond::cuda::CudaDenseDevice(ordinal);
  } catch (const std::exception& e) {
    std::snprintf(error, error_size, "%s", e.what());
    return nullptr;
  }
}
