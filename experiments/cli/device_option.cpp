#include "experiments/cli/device_option.h"

#include <iostream>
#include <stdexcept>
#include <vector>

#include "analysis/spectral/dense_device_module.h"
#include "models/device/torch_operator_device.h"

#include <torch/cuda.h>

#ifdef JACOND_HAVE_CUDA
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <filesystem>
#endif

namespace jacond::cli {

void add_device_option(boost::program_options::options_description& desc, std::string* device) {
  desc.add_options()("device", boost::program_options::value(device)->default_value(*device),
                     "where the work runs: cpu | cuda (dense LU + Lanczos and the full spectrum on the GPU, the "
                     "lanczos route's matrix-free products and GKL basis, --certify's LDL^T factorisations, and, with a "
                     "CUDA LibTorch, the exact route's K_sa/B_sa/E_sa/K_sab assembly; GKL's k x k recurrence stays on "
                     "the host)");
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

void check_kappa_on_device(const std::string& kappa, const std::string& device) {
  if (kappa == "schur" && device != "cpu")
    throw std::invalid_argument("--kappa schur is the host's route; --device " + device +
                                " takes its own Schur route where its LU does not fit");
}

std::shared_ptr<const DenseDevice> select_dense_device(const std::string& device) {
  validate_device_name(device);
#ifdef JACOND_HAVE_CUDA
  if (device == "cuda") return load_cuda_dense_device(cuda_module_candidates(), "--device cuda");
#endif
  return cpu_dense_device();
}

void select_devices(const std::string& device, BlockReportOptions& opt) {
  opt.device = select_dense_device(device);
  opt.operator_device = nullptr;
  if (device != "cuda") return;
  std::string why;
  opt.operator_device = models::cuda_operator_device(&why);
  if (!opt.operator_device) std::cerr << "jacond: --device cuda: matrix-free products on the host: " << why << "\n";
}

models::TrackDevices select_track_devices(const std::string& device, int index) {
  models::TrackDevices on;
  if (device != "cuda" || !torch::cuda::is_available()) return on;
  std::string why;
  on.products = models::cuda_operator_device(&why, index);
  if (!on.products) std::cerr << "jacond train: conditioning tracking's matrix-free products on the host: " << why << "\n";
#ifdef JACOND_HAVE_CUDA
  try {
    on.dense = load_cuda_dense_device(cuda_module_candidates(), "--device cuda", index);
  } catch (const std::exception& e) {
    std::cerr << "jacond train: conditioning tracking's dense routes on the host: " << e.what() << "\n";
  }
#else
  std::cerr << "jacond train: conditioning tracking's dense routes on the host: this jacond was built without the "
               "CUDA back end\n";
#endif
  return on;
}

namespace {
const char* const kHostProducts = "host kernels (analysis/operators)";
}  // namespace

nlohmann::json device_json(const DenseDevice& device) {
  return {{"name", device.name()}, {"description", device.description()}};
}

nlohmann::json device_json(const BlockReportOptions& opt) {
  nlohmann::json j = device_json(*opt.device);
  j["matrix_free"] = opt.operator_device ? opt.operator_device->description() : kHostProducts;
  return j;
}

std::string device_description(const BlockReportOptions& opt) {
  return opt.device->description() + "; " + (opt.operator_device ? opt.operator_device->description() : kHostProducts);
}

}  // namespace jacond::cli
