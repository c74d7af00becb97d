#include "experiments/cli/device_option.h"

#include <stdexcept>
#include <vector>

#include "analysis/spectral/dense_device_module.h"

#ifdef JACOND_HAVE_CUDA
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <filesystem>
#endif

namespace jacond::cli {

void add_device_option(boost::program_options::options_description& desc, std::string* device) {
  desc.add_options()("device", boost::program_options::value(device)->default_value(*device),
                     "where the dense exact routes run: cpu | cuda (LU + Lanczos and the full spectrum on the GPU; "
                     "assembly, matrix-free brackets and certificates stay on the host)");
}

void validate_device_name(const std::string& device) {
  if (device == "cpu") return;
  if (device == "cuda") {
#ifdef JACOND_HAVE_CUDA
    return;
#else
    throw std::invalid_argument("--device cuda: this jacond was built without the CUDA back end "
                                "(configure with the CUDA toolkit present, JACOND_CUDA=AUTO or ON)");
#endif
  }
  throw std::invalid_argument("--device must be cpu or cuda, got '" + device + "'");
}

#ifdef JACOND_HAVE_CUDA
namespace {

// Where the module libjacond_cuda.so (analysis/spectral/dense_device_module.h) may be:
// $JACOND_CUDA_MODULE, beside this executable (the build tree), then the install prefix's lib/jacond.
std::vector<std::string> cuda_module_candidates() {
  std::vector<std::string> out;
  if (const char* env = std::getenv("JACOND_CUDA_MODULE")) out.push_back(env);
  char exe[PATH_MAX];
  const ssize_t len = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (len > 0) out.push_back((std::filesystem::path(std::string(exe, len)).parent_path() / kCudaModuleFile).string());
  out.push_back(JACOND_CUDA_MODULE_INSTALLED);
  return out;
}

}  // namespace
#endif

std::shared_ptr<const DenseDevice> select_dense_device(const std::string& device) {
  validate_device_name(device);
#ifdef JACOND_HAVE_CUDA
  if (device == "cuda") return load_cuda_dense_device(cuda_module_candidates(), "--device cuda");
#endif
  return cpu_dense_device();
}

nlohmann::json device_json(const DenseDevice& device) {
  return {{"name", device.name()}, {"description", device.description()}};
}

}  // namespace jacond::cli
