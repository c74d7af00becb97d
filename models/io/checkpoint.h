// Crash-safe training checkpoints.
//
//   RUN/step-0000100/model.safetensors   model state, timm names, fp32 (metadata: "config" JSON)
//   RUN/step-0000100/optimizer.pt        optimizer state (torch::serialize archive)
//   RUN/step-0000100/meta.json           step, epoch, config, RNG states, metrics
//
// A checkpoint is written into RUN/.tmp-step-0000100.<pid>/, every file is fsync'ed, and the
// directory is renamed onto RUN/step-0000100 (then RUN is fsync'ed). rename(2) of a directory is
// atomic, so killing the writer at any moment leaves either no step-0000100 or a complete one;
// leftovers .tmp-* are removed by clean_partial_checkpoints. A step-0000100 already there is
// first renamed aside to RUN/.old-step-0000100.<pid> and removed only once the new one is in
// place; clean_partial_checkpoints renames such a leftover back while step-0000100 is missing
// (a crash between the renames), so no crash loses a step that was complete. Retention (keep K)
// deletes the oldest complete checkpoints only after the new one is in place.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "models/io/checkpoint_meta.h"  // kCheckpointFormat, parse_checkpoint_meta
#include "models/io/tensor_map.h"

namespace jacond::models {


/// "step-0000100".
std::string checkpoint_name(int64_t step);

/// What a reader needs of a checkpoint: a resume needs the optimizer state too; an analysis
/// (`jacond audit`) reads the model alone, so a run whose optimizer.pt files were deleted to save
/// space is still audited.
enum class CheckpointParts { kTrainingState, kModel };

/// Complete checkpoints of a run directory (step-* directories with meta.json, model.safetensors
/// and, for kTrainingState, optimizer.pt), by step.
struct CheckpointEntry {
  int64_t step;
  std::string dir;
};
std::vector<CheckpointEntry> list_checkpoints(const std::string& run_dir,
                                              CheckpointParts parts = CheckpointParts::kTrainingState);

/// Writes a checkpoint atomically (see the header comment) and returns its directory.
/// `save_optimizer` fills the optimizer archive. meta gets "format" and "step" added.
std::string write_checkpoint(const std::string& run_dir, int64_t step, const TensorMap& model_state,
                             const std::function<void(torch::serialize::OutputArchive&)>& save_optimizer,
                             nlohmann::json meta);

/// Removes all but the newest `keep` complete checkpoints (keep <= 0 keeps all). Step 0, the
/// initialisation (`jacond train --checkpoint-init`), is neither counted nor removed: it is the
/// audit's reference point. A checkpoint that cannot be removed is reported on stderr (one line)
/// and left in place.
void prune_checkpoints(const std::string& run_dir, int64_t keep);

/// Removes .tmp-* leftovers of interrupted writes, and .old-step-N.* leftovers once a complete
/// step-N is in place; a .old-step-N.* whose step-N is missing is renamed back to step-N (it is
/// the only copy). A failure is reported on stderr (one line).
void clean_partial_checkpoints(const std::string& run_dir);

/// The steps clean_partial_checkpoints would restore (reading only): each .old-step-N.* whose
/// step-N is missing, by step, its dir the .old-step-N.* directory. A run's checks on the steps
/// it holds count them with list_checkpoints' (they are the run's steps, only misnamed).
std::vector<CheckpointEntry> list_set_aside_checkpoints(const std::string& run_dir);

/// Test seam: `hook(point)` is called inside write_checkpoint at each point where a crash leaves
/// a distinct state on disk ("new-complete": the new one written under .tmp-*; "old-set-aside":
/// a replaced step-N renamed to .old-*; "new-installed": step-N in place, the old not yet
/// removed). Tests copy the run directory there: the copy is what a crash would leave. An empty
/// function (the default) turns it off.
void set_checkpoint_crash_point_for_testing(std::function<void(const std::string& point)> hook);

/// A checkpoint read back: its meta.json and model state (tensors as stored).
struct Checkpoint {
  std::string dir;
  nlohmann::json meta;
  TensorMap model;
};

/// Reads and validates a checkpoint directory: meta.json parses and has format/step/model
/// config, model.safetensors is a valid file, and for kTrainingState optimizer.pt exists (it is
/// read by read_optimizer_state). Throws one line naming the file and the problem.
Checkpoint read_checkpoint(const std::string& dir, CheckpointParts parts = CheckpointParts::kTrainingState);

/// Loads `dir`/optimizer.pt into `load_optimizer`, its tensors onto `device` (the resuming run's:
/// a run trained on a GPU resumes on the CPU and the other way round); torch's errors become one
/// line naming the file.
void read_optimizer_state(const std::string& dir, const torch::Device& device,
                          const std::function<void(torch::serialize::InputArchive&)>& load_optimizer);

/// The checkpoint to resume from: `path` itself when it is a checkpoint directory, otherwise the
/// newest complete checkpoint under the run directory `path`. Throws when there is none, and
/// (reading only) when a step set aside by a crash mid-replacement (.old-step-N, no step-N) is there:
/// the message says how to restore it.
std::string resolve_resume_checkpoint(const std::string& path);

/// fsync of a file or directory; throws naming the path.
void fsync_path(const std::string& path);

/// Writes text to path via a temporary file, fsync and rename.
void write_text_atomic(const std::string& path, const std::string& text);

}  // namespace jacond::models
