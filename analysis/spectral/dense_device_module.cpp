#include "analysis/spectral/dense_device_module.h"

#include <dlfcn.h>

#include <filesystem>
#include <stdexcept>

namespace jacond {

std::shared_ptr<const DenseDevice> load_cuda_dense_device(const std::vector<std::string>& candidates,
                                                          const std::string& what, int ordinal) {
  using Create = DenseDevice* (*)(int, char*, size_t);
  std::string tried;
  for (const std::string& path : candidates) {
    void* module = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!module) {
      tried += (tried.empty() ? "" : "; ") + std::string(::dlerror());
      continue;
    }
    auto create = reinterpret_cast<Create>(::dlsym(module, kCudaModuleEntry));
    if (!create) throw std::runtime_error(what + ": " + path + " has no " + kCudaModuleEntry);
    char error[1024] = "";
    DenseDevice* device = create(ordinal, error, sizeof error);
    if (!device) throw std::runtime_error(what + ": no usable GPU (" + error + ")");
    return std::shared_ptr<const DenseDevice>(device);
  }
  throw std::runtime_error(what + ": cannot load the CUDA back end module (" + tried + ")");
}

std::string folder_of_code(const void* address) {
  Dl_info info{};
  if (::dladdr(address, &info) == 0 || !info.dli_fname || !*info.dli_fname) return "";
  std::error_code error;
  const auto file = std::filesystem::canonical(info.dli_fname, error);
  return error ? "" : file.parent_path().string();
}

}  // namespace jacond
