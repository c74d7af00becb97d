// libFuzzer target: a checkpoint meta.json (models/io/checkpoint_meta.h) from the fuzz input,
// through parse_checkpoint_meta, read_checkpoint's parser and validator.
// Expected outcome for bad input: std::runtime_error with a clean one-line message (nlohmann's
// own exceptions are not runtime_errors: one escaping is a finding, as is anything else).
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "models/io/checkpoint_meta.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  using namespace jacond;
  try {
    const std::string text(reinterpret_cast<const char*>(data), size);
    const nlohmann::json meta = models::parse_checkpoint_meta(text, "fuzz/meta.json");
    // What read_checkpoint promises its callers (cmd_audit, the trainer's resume).
    if (meta.at("format").get<std::string>() != models::kCheckpointFormat) fuzz::fail("format");
    if (meta.at("step").get<int64_t>() < 0) fuzz::fail("step < 0");
    if (!meta.at("model").is_object()) fuzz::fail("model is not an object");
  } catch (const std::runtime_error& e) {
    fuzz::expect_clean_message(e.what());
  }
  return 0;
}
