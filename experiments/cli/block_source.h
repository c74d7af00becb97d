// Where a block comes from on the command line: an initialization (docs/design.md §3) with Gaussian
// tokens, or timm-named safetensors weights plus a tokens file, and the residuals (--skip) it is
// analysed with. Shared by block and spectrum.
#pragma once

#include <boost/program_options.hpp>
#include <string>

#include "analysis/jacobians/block.h"
#include "models/io/tensor_map.h"

namespace jacond::cli {

struct BlockSource {
  // from an init
  std::string init = "timm";
  double alpha = 2.0, beta = 0.6, c = 3.0;
  std::string mlp_init = "default";  // default | timm | dks
  uint64_t seed = 0;
  int64_t n = 16, d = 32, mlp_ratio = 4;
  int64_t heads = 0;  // 0: 2 in init mode; with --weights, from the file's jacond config
  int64_t init_heads() const { return heads ? heads : 2; }
  // from files
  std::string weights, tokens;
  int64_t layer = 0;
  int64_t sample = 0;  // which sample of a [m, n, d] tokens tensor
  /// pre | post for a --weights file without jacond's config (the tensors cannot say where the
  /// LayerNorms sit); "": the file's config, pre-norm (timm's ViT) without one. A --norm that
  /// contradicts the file's config is refused, as --heads is.
  std::string norm;
  // both
  double logit_scale = 0.0;  // 0 = 1/sqrt(d_h)
  /// --skip: the residuals of an --init block, or of a --weights file without jacond's config. A
  /// file's config decides its own (as its heads and norm); a typed --skip that contradicts it is
  /// refused, and a post-norm file takes none.
  std::string skip = "none";
  /// Which flags were typed (set by validate): --skip against a file's config, --sample against
  /// [n, d] tokens, both known only once the files are read.
  bool skip_typed = false, sample_typed = false;

  bool from_files() const { return !weights.empty(); }
  void add_options(boost::program_options::options_description& desc);
  /// The flags' own consistency (sizes, names, which flags go together); throws
  /// std::invalid_argument naming the flag. Run it under check_usage (exit 2). With the parsed
  /// flags, a flag typed for the other source is refused too (--alpha with --weights, --layer
  /// without it, --alpha/--beta/--c with an init other than ours), instead of being silently
  /// ignored; `seed_used_with_files`: the command seeds something besides the init with --seed
  /// (spectrum's SLQ probes), so --seed goes with --weights too. Records skip_typed, sample_typed.
  void validate(const boost::program_options::variables_map* typed = nullptr, bool seed_used_with_files = false);
};

struct LoadedBlock {
  BlockWeights weights;
  Mat tokens;
  /// The file's config says norm "post": LayerNorm after each residual, none before the branches,
  /// so the block's attention sees its input itself and only post_norm_block_reports apply
  /// (block_reports would put norm1 in front of the attention: a valid-looking, wrong κ).
  bool post_norm = false;
  /// Non-empty when the placement was assumed (a file without config and no --norm): one line the
  /// command prints, so a post-norm file read as pre-norm does not pass unseen.
  std::string norm_note;
  /// The residuals analysed: a --weights file's config's (ReZero as full, its α folded into the
  /// weights), else --skip's; skip_name as the config or --skip spells it ("rezero", "full", ...).
  SkipMode skip = SkipMode::kNone;
  std::string skip_name;
  /// The sample of [m, n, d] tokens analysed; -1 for [n, d] tokens and for an --init block.
  int64_t sample = -1;
  /// A branch scale the file stores for this block and block_from_timm folded into W^O, b_O
  /// (attention: LayerScale ls1.gamma, ReZero rezero_attn) or W_2, b_2 (MLP: ls2.gamma,
  /// rezero_mlp): its key, "" when none. Exact for the input Jacobians; a parameter Jacobian would
  /// be w.r.t. the folded weights, not the stored ones.
  std::string attn_scale_key, mlp_scale_key;
};

/// Builds the block and tokens; throws with a one-line message naming the bad input: a
/// UsageError (exit 2) for a flag the file contradicts (--heads, --norm, --skip against its
/// config; --skip on a post-norm file; --sample with [n, d] tokens), else std::invalid_argument
/// (exit 1; e.g. a config whose dim the tensors do not have).
LoadedBlock load_block(const BlockSource& src);

/// Refuses (std::invalid_argument naming the flags and sizes) an initialised block whose forward
/// pass alone cannot fit this machine's memory, before anything is allocated: `block`, `spectrum`
/// (through load_block) and `sweep` (once for its grid).
void refuse_forward_that_cannot_fit(int64_t n, int64_t d, int64_t heads, int64_t mlp_ratio);

/// Block 0 of the `ours`/`timm`/`mimetic` init for a given (α, β, c, seed), as timm-named tensors
/// (what `save_safetensors` writes for the Python routes).
models::TensorMap init_tensors(const std::string& init, double alpha, double beta, double c, const std::string& mlp_init,
                               uint64_t seed, int64_t d, int64_t heads, int64_t hidden);

/// Weights of the `ours`/`timm`/`mimetic` init for a given (α, β, c, seed) without tokens.
BlockWeights init_weights(const std::string& init, double alpha, double beta, double c, const std::string& mlp_init,
                          uint64_t seed, int64_t d, int64_t heads, int64_t hidden, double logit_scale);

}  // namespace jacond::cli
