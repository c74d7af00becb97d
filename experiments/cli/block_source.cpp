#include "experiments/cli/block_source.h"

#include <torch/torch.h>

#include <cmath>
#include <initializer_list>
#include <map>
#include <optional>
#include <sstream>
#include <utility>
#include <stdexcept>

#include "analysis/spectral/dense_cost.h"
#include "experiments/cli/cli_common.h"
#include "models/track/bridge.h"
#include "models/init/init.h"
#include "models/io/safetensors.h"
#include "models/vit/vit.h"

namespace jacond::cli {

namespace po = boost::program_options;

void BlockSource::add_options(po::options_description& desc) {
  desc.add_options()
      ("init", po::value(&init)->default_value(init), "initialization: timm | ours | mimetic (docs/design.md §3)")
      ("alpha", number_value(&alpha), "`ours`: Q/K init W^Q W^Kᵀ = alpha Z + beta I (Eq. 11)")
      ("beta", number_value(&beta), "`ours`: identity weight beta")
      ("c", number_value(&c), "`ours`: V/O scale, W^V W^O = c² U Vᵀ")
      ("mlp-init", po::value(&mlp_init)->default_value(mlp_init), "MLP init: default (dks for ours, else timm) | timm | dks")
      ("seed", po::value(&seed)->default_value(seed), "seed of the weights and of the Gaussian tokens")
      ("n", po::value(&n)->default_value(n), "tokens (init mode)")
      ("d", po::value(&d)->default_value(d), "embedding dimension (init mode)")
      ("heads", po::value(&heads)->default_value(heads),
       "attention heads; 0: 2 in init mode, with --weights the file's jacond config (required without one)")
      ("mlp-ratio", po::value(&mlp_ratio)->default_value(mlp_ratio), "MLP hidden width / d (init mode)")
      ("weights", po::value(&weights), "timm-named safetensors file (instead of --init)")
      ("layer", po::value(&layer)->default_value(layer), "block index in --weights (blocks.{layer}.*)")
      ("tokens", po::value(&tokens), "safetensors file with tensor `tokens` [n, d] or [m, n, d]")
      ("sample", po::value(&sample)->default_value(sample), "sample index when tokens are [m, n, d]")
      ("norm", po::value(&norm), "pre | post: LayerNorm placement of a --weights file without jacond config "
       "(default: the file's config; pre-norm, as timm's ViT, without one)")
      ("skip", po::value(&skip)->default_value(skip),
       "residuals: none | full | no-ffn-skip (attention residual only) | no-sab-skip (MLP residual only); a "
       "--weights file with jacond config, or with rezero_* tensors, has its own (rezero analysed as full, its alphas "
       "folded in)")
      ("logit-scale", number_value(&logit_scale), "logit scale s; 0 = 1/sqrt(d_h)");
}

void BlockSource::validate(const po::variables_map* typed, bool seed_used_with_files) {
  const auto given = [&](const char* flag) { return typed && typed->count(flag) && !(*typed)[flag].defaulted(); };
  skip_typed = given("skip");
  sample_typed = given("sample");
  for (const char* flag : {"init", "alpha", "beta", "c", "mlp-init", "seed", "n", "d", "mlp-ratio"})
    if (from_files() && given(flag) && !(seed_used_with_files && std::string(flag) == "seed"))
      throw std::invalid_argument(std::string("--") + flag + " sets up an init; with --weights the block comes from the file");
  if (!from_files() && given("layer")) throw std::invalid_argument("--layer picks a block of a --weights file");
  if (!from_files() && given("sample"))
    throw std::invalid_argument("--sample picks a sample of [m, n, d] --tokens, which go with --weights");
  if (!(logit_scale >= 0) || !std::isfinite(logit_scale))
    throw std::invalid_argument("--logit-scale must be >= 0 (0: 1/sqrt(d_h)), got " + fmt(logit_scale));
  if (heads < 0) throw std::invalid_argument("--heads must be >= 1 (0: the default), got " + std::to_string(heads));
  parse_flag("--skip", [&] { return parse_skip_mode(skip); });
  if (from_files()) {
    if (tokens.empty()) throw std::invalid_argument("--weights needs --tokens (a safetensors file with tensor `tokens`)");
    if (layer < 0) throw std::invalid_argument("--layer must be >= 0, got " + std::to_string(layer));
    if (sample < 0) throw std::invalid_argument("--sample must be >= 0, got " + std::to_string(sample));
    if (!norm.empty() && norm != "pre" && norm != "post")
      throw std::invalid_argument("--norm must be pre or post, got '" + norm + "'");
    return;
  }
  if (!norm.empty()) throw std::invalid_argument("--norm describes a --weights file; an --init block is pre-norm");
  if (!tokens.empty()) throw std::invalid_argument("--tokens needs --weights (or drop both to use --init)");
  if (n < 2) throw std::invalid_argument("--n must be at least 2, got " + std::to_string(n));
  if (d < 1 || mlp_ratio < 1) throw std::invalid_argument("--d and --mlp-ratio must be >= 1");
  if (d % init_heads() != 0)
    throw std::invalid_argument("--d " + std::to_string(d) + " is not divisible by --heads " + std::to_string(init_heads()));
  const models::InitScheme scheme = parse_flag("--init", [&] { return models::parse_init_scheme(init); });
  if (mlp_init != "default") parse_flag("--mlp-init", [&] { return models::parse_mlp_init(mlp_init); });
  // α, β, c shape `ours` only (as sweep and train): another init would ignore them, and the table
  // records them as nan.
  if (scheme != models::InitScheme::kOurs)
    for (const char* knob : {"alpha", "beta", "c"})
      if (given(knob))
        throw std::invalid_argument(std::string("--") + knob + " is a knob of --init ours; --init " + init + " ignores it");
  for (const auto& [flag, v] : {std::pair{"--alpha", alpha}, {"--beta", beta}, {"--c", c}})
    if (!std::isfinite(v)) throw std::invalid_argument(std::string(flag) + " must be finite");
}

models::TensorMap init_tensors(const std::string& init, double alpha, double beta, double c, const std::string& mlp_init,
                               uint64_t seed, int64_t d, int64_t heads, int64_t hidden) {
  if (d <= 0 || heads <= 0 || hidden <= 0) throw std::invalid_argument("--d, --heads and --mlp-ratio must be positive");
  if (d % heads != 0) throw std::invalid_argument("--d " + std::to_string(d) + " is not divisible by --heads " + std::to_string(heads));
  models::InitConfig cfg;
  cfg.scheme = models::parse_init_scheme(init);
  cfg.alpha = alpha;
  cfg.beta = beta;
  cfg.c = c;
  cfg.mlp = mlp_init == "default" ? models::default_mlp_init(cfg.scheme) : models::parse_mlp_init(mlp_init);
  cfg.seed = seed;
  models::TensorMap tensors;
  models::init_block(tensors, 0, d, heads, hidden, cfg);
  return tensors;
}

BlockWeights init_weights(const std::string& init, double alpha, double beta, double c, const std::string& mlp_init,
                          uint64_t seed, int64_t d, int64_t heads, int64_t hidden, double logit_scale) {
  return models::block_from_timm(init_tensors(init, alpha, beta, c, mlp_init, seed, d, heads, hidden), 0, heads,
                                 logit_scale);
}

namespace {

struct FileArchitecture {
  int64_t heads = 0;
  double ln_eps = 1e-6;
  bool post_norm = false;
  std::string norm_note;  // set when the placement is assumed
  std::optional<models::ViTConfig> config;  // the file's jacond config, when it has one
};

// What the tensors alone cannot say: the head count, where the LayerNorms sit (pre- and post-norm
// blocks have the same tensors), the residuals and LayerNorm's eps. A checkpoint jacond wrote
// carries them in its "config" metadata; a --heads, --norm or --skip that contradicts it is a usage
// error (analysing a 6-head block as 2 heads, a post-norm block with a LayerNorm before its
// attention, or a full-residual block as skipless gives a valid-looking, wrong κ); a file without
// it needs --heads, is read as pre-norm unless --norm says post, and with --skip's residuals.
FileArchitecture file_architecture(const BlockSource& src, const std::map<std::string, std::string>& meta) {
  const std::optional<models::ViTConfig> cfg = models::ViTConfig::from_metadata(meta, src.weights);
  if (!cfg) {
    if (src.heads == 0)
      throw std::invalid_argument(src.weights + " has no jacond config metadata: pass --heads (the block's head count)");
    if (!src.norm.empty())
      return {src.heads, 1e-6, models::parse_norm_placement(src.norm) == models::NormPlacement::kPost, "", std::nullopt};
    return {src.heads, 1e-6, false, assumed_pre_norm_note(src.weights), std::nullopt};
  }
  if (src.heads != 0 && src.heads != cfg->heads)
    throw UsageError("--heads " + std::to_string(src.heads) + " contradicts " + src.weights + "'s config (heads " +
                     std::to_string(cfg->heads) + "); drop --heads");
  if (!src.norm.empty() && models::parse_norm_placement(src.norm) != cfg->norm)
    throw UsageError("--norm " + src.norm + " contradicts " + src.weights + "'s config (norm " +
                     models::to_string(cfg->norm) + "); drop --norm");
  if (src.skip_typed && cfg->norm == models::NormPlacement::kPre &&
      parse_skip_mode(src.skip) != models::analysis_skip_mode(cfg->skip))
    throw UsageError("--skip " + src.skip + " contradicts " + src.weights + "'s config (skip " +
                     models::to_string(cfg->skip) + "); drop --skip");
  return {cfg->heads, cfg->ln_eps, cfg->norm == models::NormPlacement::kPost, "", cfg};
}

// The config's dim, depth and MLP width against the tensors (as audit: a config that disagrees with
// its tensors describes another model).
void check_config_against_block(const BlockSource& src, const models::TensorMap& w, const models::ViTConfig& cfg,
                                const BlockWeights& block) {
  try {
    models::check_blocks_match(w, cfg);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(src.weights + ": " + e.what());
  }
  const std::string p = "blocks." + std::to_string(src.layer) + ".";
  if (block.d != cfg.dim)
    throw std::invalid_argument(src.weights + ": config says dim " + std::to_string(cfg.dim) + ", " + p +
                                "norm1.weight has " + std::to_string(block.d) + " entries");
  if (block.hidden != cfg.hidden())
    throw std::invalid_argument(src.weights + ": config says mlp_ratio " + fmt(cfg.mlp_ratio) + " (hidden " +
                                std::to_string(cfg.hidden()) + "), " + p + "mlp.fc1.weight has " +
                                std::to_string(block.hidden) + " rows");
}

// The key of the branch scale block `layer` stores for one branch (the first of `keys` present), "".
std::string branch_scale_key(const models::TensorMap& w, int64_t layer, std::initializer_list<const char*> keys) {
  for (const char* key : keys) {
    const std::string full = "blocks." + std::to_string(layer) + "." + key;
    if (w.count(full)) return full;
  }
  return "";
}

bool has_rezero_scales(const models::TensorMap& w, int64_t layer) {
  return !branch_scale_key(w, layer, {"rezero_attn", "rezero_mlp"}).empty();
}

}  // namespace

void refuse_forward_that_cannot_fit(int64_t n, int64_t d, int64_t heads, int64_t mlp_ratio) {
  // The forward pass alone keeps heads n × n attention maps, and the MLP's two d × r·d weights and
  // its n × r·d hidden activations.
  const double hidden = static_cast<double>(mlp_ratio) * d;
  const double forward_bytes = 8.0 * n * (static_cast<double>(heads) * n + 8.0 * d) + 8.0 * hidden * (2.0 * d + 2.0 * n);
  if (forward_bytes > physical_memory_bytes())
    throw std::invalid_argument("--n " + std::to_string(n) + " --d " + std::to_string(d) + " --mlp-ratio " +
                                std::to_string(mlp_ratio) + ": the forward pass alone needs " +
                                fmt(std::round(forward_bytes / 1e9)) + " GB, more than this machine's " +
                                fmt(std::round(physical_memory_bytes() / 1e9)) + " GB");
}

LoadedBlock load_block(const BlockSource& src) {
  LoadedBlock out;
  if (!src.from_files()) {
    if (!src.tokens.empty()) throw std::invalid_argument("--tokens needs --weights (or drop both to use --init)");
    if (src.n < 2) throw std::invalid_argument("--n must be at least 2");
    refuse_forward_that_cannot_fit(src.n, src.d, src.init_heads(), src.mlp_ratio);
    out.weights = init_weights(src.init, src.alpha, src.beta, src.c, src.mlp_init, src.seed, src.d, src.init_heads(),
                               src.mlp_ratio * src.d, src.logit_scale);
    out.tokens = gaussian_tokens(src.n, src.d, src.seed ^ 0x5eedULL);
    out.skip = parse_skip_mode(src.skip);
    out.skip_name = src.skip;
    try {  // flags whose weights overflow the forward pass are named here, not as "K_sa contains NaN" later
      block_forward(out.weights, out.tokens, SkipMode::kFull);
    } catch (const std::invalid_argument& e) {
      throw UsageError("--init " + src.init + " --alpha " + fmt(src.alpha) + " --beta " + fmt(src.beta) + " --c " +
                       fmt(src.c) + (src.logit_scale != 0 ? " --logit-scale " + fmt(src.logit_scale) : "") + ": " +
                       e.what());
    }
    return out;
  }
  if (src.tokens.empty()) throw std::invalid_argument("--weights needs --tokens (a safetensors file with tensor `tokens`)");
  std::map<std::string, std::string> meta;
  const models::TensorMap w = models::load_safetensors(src.weights, &meta);
  const FileArchitecture arch = file_architecture(src, meta);
  if (arch.post_norm && src.skip_typed)
    throw UsageError("--skip: " + src.weights + " is a post-norm model, analysed at each block's input with its own "
                     "residuals; drop --skip");
  try {  // e.g. --layer past the file's blocks: "missing key blocks.5.norm1.weight" alone names neither
    out.weights = models::block_from_timm(w, src.layer, arch.heads, src.logit_scale, arch.ln_eps);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(src.weights + " block " + std::to_string(src.layer) + " (--layer): " + e.what());
  }
  if (arch.config) check_config_against_block(src, w, *arch.config, out.weights);
  out.post_norm = arch.post_norm;
  out.norm_note = arch.norm_note;
  if (arch.config) {
    out.skip = models::analysis_skip_mode(arch.config->skip);
    out.skip_name = models::to_string(arch.config->skip);
  } else if (!arch.post_norm && has_rezero_scales(w, src.layer)) {
    // rezero_attn / rezero_mlp are jacond's names for ReZero's α₁, α₂ (models/vit/vit.h): the block is
    // x + α₁ a(LN1 x), x + α₂ m(LN2 x), a full residual with the α folded into W^O, W_2 below (as audit
    // infers from the same keys). Read as --skip none it would be α·F alone: K_sab ≈ 0 at init.
    if (src.skip_typed && parse_skip_mode(src.skip) != SkipMode::kFull)
      throw UsageError("--skip " + src.skip + " contradicts " + src.weights + ": its blocks." +
                       std::to_string(src.layer) + ".rezero_* make it a ReZero block (skip rezero, a full residual); "
                       "drop --skip");
    out.skip = SkipMode::kFull;
    out.skip_name = models::to_string(models::SkipKind::kRezero);
  } else {
    out.skip = parse_skip_mode(src.skip);
    out.skip_name = src.skip;
  }
  out.attn_scale_key = branch_scale_key(w, src.layer, {"ls1.gamma", "rezero_attn"});
  out.mlp_scale_key = branch_scale_key(w, src.layer, {"ls2.gamma", "rezero_mlp"});
  const models::TensorMap t = models::load_safetensors(src.tokens);
  const auto it = t.find("tokens");
  if (it == t.end()) throw std::invalid_argument(src.tokens + ": no tensor named `tokens`");
  at::Tensor tok = it->second;
  if (tok.dim() == 3) {
    if (src.sample < 0 || src.sample >= tok.size(0))
      throw std::invalid_argument(src.tokens + ": --sample " + std::to_string(src.sample) + " out of range [0, " +
                                  std::to_string(tok.size(0)) + ")");
    tok = tok[src.sample];
    out.sample = src.sample;
  } else if (src.sample_typed && tok.dim() == 2) {
    throw UsageError("--sample picks a sample of [m, n, d] --tokens; " + src.tokens + "'s `tokens` is [n, d] (" +
                     std::to_string(tok.size(0)) + " x " + std::to_string(tok.size(1)) + "): drop --sample");
  }
  if (tok.dim() != 2) throw std::invalid_argument(src.tokens + ": `tokens` must be [n, d] or [m, n, d], got " + std::to_string(tok.dim()) + "-D");
  if (tok.size(1) != out.weights.d) {
    std::ostringstream os;
    os << src.tokens << ": tokens have d=" << tok.size(1) << " but " << src.weights << " block " << src.layer << " has d=" << out.weights.d;
    throw std::invalid_argument(os.str());
  }
  if (tok.size(0) < 2) throw std::invalid_argument(src.tokens + ": need at least 2 tokens");
  if (!tok.is_floating_point())
    throw std::invalid_argument(src.tokens + ": `tokens` has dtype " + std::string(c10::toString(tok.scalar_type())) +
                                ", not a floating dtype");
  out.tokens = models::to_eigen(tok);
  if (!out.tokens.allFinite()) throw std::invalid_argument(src.tokens + ": `tokens` contains NaN or inf");
  return out;
}

}  // namespace jacond::cli
