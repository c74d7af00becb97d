// libFuzzer target: a safetensors file (models/io/safetensors.h) from the fuzz input, through
// the same parser as read_safetensors, then the LibTorch layer of load_safetensors.
// Expected outcome for bad input: SafetensorsError with a clean one-line message. Anything
// else (another exception type, a sanitizer report, a broken invariant, a hang) is a finding.
#include <ATen/ATen.h>

#include <cstddef>
#include <cstdint>

#include "models/io/safetensors.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  using namespace jacond;
  try {
    models::SafetensorsFile file = models::parse_safetensors(data, size, "fuzz.safetensors");
    for (const auto& [name, t] : file.tensors) {
      // The reader promises bytes == prod(shape) * element size; to_doubles re-checks it and
      // throws std::invalid_argument (uncaught here: a finding) if the promise is broken.
      const std::vector<double> v = models::to_doubles(t);
      if (static_cast<int64_t>(v.size()) != models::numel(t.shape)) fuzz::fail("to_doubles size");
    }
    std::map<std::string, std::vector<int64_t>> shapes;
    for (const auto& [name, t] : file.tensors) shapes[name] = t.shape;
    const models::TensorMap m = models::to_tensor_map(std::move(file));
    for (const auto& [name, t] : m)
      if (t.sizes().vec() != shapes.at(name)) fuzz::fail("tensor shape differs from the header");
  } catch (const models::SafetensorsError& e) {
    fuzz::expect_clean_message(e.what());
  }
  return 0;
}
