// meta.json parsing and validation; see checkpoint_meta.h.
#include "models/io/checkpoint_meta.h"

#include <cstdint>
#include <limits>
#include <stdexcept>

#include "models/io/error_text.h"

namespace jacond::models {

nlohmann::json parse_checkpoint_meta(const std::string& text, const std::string& meta_path) {
  nlohmann::json meta;
  try {
    meta = parse_json_strict(text);
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(meta_path + ": malformed JSON: " + e.what());
  }
  if (!meta.is_object()) throw std::runtime_error(meta_path + ": not a JSON object");
  const auto format = meta.find("format");
  if (format == meta.end() || !format->is_string() || format->get_ref<const std::string&>() != kCheckpointFormat)
    throw std::runtime_error(meta_path + ": not a " + std::string(kCheckpointFormat) + " meta.json (format " +
                             (format == meta.end() ? std::string("missing") : json_snippet(*format)) + ")");
  const auto step = meta.find("step");
  if (step == meta.end() || !step->is_number_integer())
    throw std::runtime_error(meta_path + ": no integer 'step'");
  // Readers take it with get<int64_t>(): an unsigned value beyond int64 would wrap.
  if (step->is_number_unsigned() ? step->get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max())
                                 : step->get<int64_t>() < 0)
    throw std::runtime_error(meta_path + ": 'step' " + json_snippet(*step) + " is outside [0, 2^63)");
  const auto model = meta.find("model");
  if (model == meta.end() || !model->is_object()) throw std::runtime_error(meta_path + ": no 'model' config");
  return meta;
}

}  // namespace jacond::models
