// Which of `jacond bench train`'s timed steps time what (bench_train.cpp, time_training), apart
// so that tests/bench/test_bench_rules.cpp (BenchTrainTiming.*) checks it without a GPU.
//
// On the CPU every timed step gives both times. On a GPU a step cannot time its optimizer.step()
// without synchronising around it, which would also stall the step, so the timed steps alternate
// between the two. They alternate in windows of W consecutive steps, not step by step: SOAP
// refreshes its eigenbases when its step t is a multiple of precondition_frequency F
// (models/optim/soap.cpp, Soap::update; t is the loop's step index s, warm-up included), so with
// W = 1 and an odd warm-up every refresh fell on an odd, optimizer-timed step: the full-step mean
// held none and the optimizer's held them at twice their rate (H200, SOAP optimizer_step_s 0.028 s
// > step_s 0.019 s). Any W = F consecutive steps hold exactly one refresh, so with whole windows
// only (a trailing partial window is run but not counted) both means carry refreshes at their true
// rate, whatever the warm-up.
#pragma once

#include <cstdint>
#include <string>

namespace jacond::cli {

/// What one step of time_training contributes to.
enum class TimedRole {
  kNone,       // warm-up, or a step of a trailing partial window on a GPU
  kStep,       // the whole step (GPU: unsynchronised, as `jacond train` runs it)
  kOptimizer,  // optimizer.step() alone, between synchronisations (GPU)
  kBoth,       // the CPU: both from every timed step
};

/// The window W: SOAP's eigenbasis refresh period, so each window holds one refresh; 1 for an
/// optimizer without a periodic step (AdamW: every step costs the same).
inline int64_t timing_window(const std::string& optimizer, int64_t precondition_frequency) {
  return optimizer == "soap" ? precondition_frequency : 1;
}

/// The role of timed step k (k = s − warmup; negative while warming up) of `steps`, windows of
/// `window` steps: even windows time the step, odd ones the optimizer, a trailing partial window
/// nothing. Both roles need steps ≥ 2·window (parse_bench_train checks it for --device cuda).
inline TimedRole timed_role(bool on_gpu, int64_t k, int64_t steps, int64_t window) {
  if (k < 0 || k >= steps) return TimedRole::kNone;
  if (!on_gpu) return TimedRole::kBoth;
  if (k >= steps / window * window) return TimedRole::kNone;  // an incomplete window: its refresh share is not 1/W
  return (k / window) % 2 == 0 ? TimedRole::kStep : TimedRole::kOptimizer;
}

}  // namespace jacond::cli
