// The CUDA back end as a module loaded at run time (analysis/cuda/device_module.cpp builds
// libjacond_cuda.so), for every front end that offers a device choice: the jacond command
// (`--device cuda`, experiments/cli/device_option.cpp) and the Python module (`device="cuda"`,
// python/bindings). Loading on demand keeps cuBLAS/cuSOLVER (libcublasLt alone is 540 MB, ~0.5 s
// to load) out of every CPU run. The module exports one C function, kCudaModuleEntry below; the rest
// of it is hidden, so its copy of the analysis core and its CUDA libraries stay its own (RTLD_LOCAL).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "analysis/spectral/dense_device.h"

namespace jacond {

/// The module's file name.
inline constexpr const char* kCudaModuleFile = "libjacond_cuda.so";

/// The module's one C function:
///   DenseDevice* jacond_cuda_dense_device_on(int ordinal, char* error, size_t error_size)
/// the device on GPU `ordinal` (−1: the calling thread's current one), or nullptr with one line in
/// `error`. (Named for its signature: a module of an older jacond, whose entry took no ordinal,
/// is refused by name rather than called wrongly.)
inline constexpr const char* kCudaModuleEntry = "jacond_cuda_dense_device_on";

/// dlopens the first of `candidates` (paths to the module) that loads, never closes it (the
/// device's code lives there), and creates its device on GPU `ordinal` (−1: the current one).
/// `what` starts every message (the flag or argument the user gave, e.g. "--device cuda").
/// Throws std::runtime_error with one line:
///   "<what>: cannot load the CUDA back end module (<each dlerror>)"    none of them loads
///   "<what>: <path> has no jacond_cuda_dense_device_on"               the first that loads lacks it
///   "<what>: no usable GPU (<the CUDA call and its error>)"            it loads, no device works
std::shared_ptr<const DenseDevice> load_cuda_dense_device(const std::vector<std::string>& candidates,
                                                          const std::string& what, int ordinal = -1);

/// The folder of the executable or shared object that contains `address` (dladdr), "" where the
/// dynamic loader does not know it: where a front end looks for the module beside itself.
std::string folder_of_code(const void* address);

}  // namespace jacond
