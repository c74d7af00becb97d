// device="cpu" | "cuda": where the dense exact routes of block_reports and condition run
// (analysis/spectral/dense_device.h), as `--device` for the jacond command. The CUDA back end is
// the module libjacond_cuda.so, loaded on the first device="cuda" (analysis/spectral/
// dense_device_module.h) from $JACOND_CUDA_MODULE, beside _jacond, or the install prefix.
#include <pybind11/stl.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "analysis/spectral/dense_device_module.h"
#include "python/bindings/bindings.h"

namespace py = pybind11;

namespace jacond::python {

namespace {

constexpr bool kCudaBuilt =
#ifdef JACOND_HAVE_CUDA
    true;
#else
    false;
#endif

#ifdef JACOND_HAVE_CUDA
std::vector<std::string> cuda_module_candidates() {
  std::vector<std::string> out;
  if (const char* env = std::getenv("JACOND_CUDA_MODULE")) out.push_back(env);
  const std::string here = folder_of_code(reinterpret_cast<const void*>(&cuda_module_candidates));
  if (!here.empty()) out.push_back(here + "/" + kCudaModuleFile);
  out.push_back(JACOND_CUDA_MODULE_INSTALLED);
  return out;
}
#endif

}  // namespace

std::shared_ptr<const DenseDevice> dense_device(const std::string& name) {
  if (name == "cpu") return cpu_dense_device();
  if (name != "cuda") throw std::invalid_argument("device must be cpu or cuda, got '" + name + "'");
  if (!kCudaBuilt)
    throw std::invalid_argument("device='cuda': this jacond was built without the CUDA back end (build it with "
                                "CMake where the CUDA toolkit is found; `pip install .` builds the CPU core only)");
#ifdef JACOND_HAVE_CUDA
  // One device per process, made on first use; a failed load is retried on the next call.
  static std::mutex mutex;
  static std::shared_ptr<const DenseDevice> cuda;
  const std::lock_guard<std::mutex> lock(mutex);
  if (!cuda) cuda = load_cuda_dense_device(cuda_module_candidates(), "device='cuda'");
  return cuda;
#endif
  return nullptr;  // not reached
}

void bind_device(py::module_& m) {
  m.attr("cuda_built") = kCudaBuilt;
  m.def(
      "device_description", [](const std::string& name) { return dense_device(name)->description(); },
      py::arg("device") = "cpu",
      "One line on the device (the host's threads; the GPU's name and free memory). device='cuda' loads the "
      "CUDA back end: RuntimeError naming the reason where no GPU is usable.");
}

}  // namespace jacond::python
