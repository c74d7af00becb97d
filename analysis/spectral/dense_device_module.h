// The CUDA back end as a module loaded at run time (analysis/cuda/device_module.cpp builds
// libjacond_cuda.so), for every front end that offers a device choice: the jacond command
// (`--device cuda`, experiments/cli/device_option.cpp) and the Python module (`device="cuda"`,
// python/bindings). Loading on demand keeps cuBLAS/cuSOLVER (libcublasLt alone is 540 MB, ~0.5 s
// to load) out of every CPU run. The module exports one C function,
// jacond_cuda_dense_device_create; the rest of it is hidden, so its copy of the analysis core and
// its CUDA libraries stay its own (RTLD_LOCAL).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "analysis/spectral/dense_device.h"

namespace jacond {

/// The module's file name.
inline constexpr const char* kCudaModuleFile = "libjacond_cuda.so";

/// dlopens the first of `candidates` (paths to the module) that loads, never closes it (the
/// device's code lives there), and creates its device. `what` starts every message (the flag or
/// argument the user gave, e.g. "--device cuda"). Throws std::runtime_error with one line:
///   "<what>: cannot load the CUDA back end module (<each dlerror>)"    none of them loads
///   "<what>: no usable GPU (<the CUDA call and its error>)"            it loads, no device works
std::shared_ptr<const DenseDevice> load_cuda_dense_device(const std::vector<std::string>& candidates,
                                                          const std::string& what);

/// The folder of the executable or shared object that contains `address` (dladdr), "" where the
/// dynamic loader does not know it: where a front end looks for the module beside itself.
std::string folder_of_code(const void* address);

}  // namespace jacond
