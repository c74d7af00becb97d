// A checkpoint's meta.json (models/io/checkpoint.h): parsing and validation, kept apart from
// the LibTorch side of checkpoints so that tests/fuzz/fuzz_checkpoint_meta links only this
// and nlohmann (no LibTorch to compile or load).
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace jacond::models {

inline constexpr const char* kCheckpointFormat = "jacond-checkpoint/1";

/// Parses and validates the text of a meta.json: a JSON object with "format" ==
/// kCheckpointFormat, an integer "step" in [0, 2^63) and a "model" config object (other keys
/// are the writer's business). Throws std::runtime_error, one line "<meta_path>: <problem>",
/// with text from the file sanitized (models/io/error_text.h). read_checkpoint's parser.
nlohmann::json parse_checkpoint_meta(const std::string& text, const std::string& meta_path);

}  // namespace jacond::models
