#include "models/vit/vit.h"

#include "models/io/error_text.h"

#include <ATen/core/Generator.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <set>
#include <stdexcept>


namespace jacond::models {

// ---------------------------------------------------------------------------------------------
// Config

jacond::SkipMode analysis_skip_mode(SkipKind s) {
  switch (s) {
    case SkipKind::kNone: return jacond::SkipMode::kNone;
    case SkipKind::kFull: return jacond::SkipMode::kFull;
    case SkipKind::kSab: return jacond::SkipMode::kSab;
    case SkipKind::kFfn: return jacond::SkipMode::kFfn;
    case SkipKind::kRezero: return jacond::SkipMode::kFull;  // α folded into the weights (analysis_block, models/track/bridge.h)
  }
  throw std::logic_error("analysis_skip_mode: unknown SkipKind");
}

std::string to_string(SkipKind s) { return s == SkipKind::kRezero ? "rezero" : jacond::to_string(analysis_skip_mode(s)); }

SkipKind parse_skip_kind(const std::string& s) {
  if (s == to_string(SkipKind::kRezero)) return SkipKind::kRezero;
  try {  // every spelling of the four residual layouts, the earlier "sab"/"ffn" included
    const jacond::SkipMode mode = jacond::parse_skip_mode(s);
    for (SkipKind k : kSkipKinds)
      if (k != SkipKind::kRezero && analysis_skip_mode(k) == mode) return k;
  } catch (const std::invalid_argument&) {
  }
  std::string valid;
  for (SkipKind k : kSkipKinds) valid += (valid.empty() ? "" : " | ") + to_string(k);
  throw std::invalid_argument("unknown skip mode '" + printable(s) + "' (valid: " + valid + ")");
}

NormPlacement parse_norm_placement(const std::string& s) {
  if (s == "pre") return NormPlacement::kPre;
  if (s == "post") return NormPlacement::kPost;
  throw std::invalid_argument("norm placement must be pre | post, got '" + printable(s) + "'");
}

std::string to_string(NormPlacement p) { return p == NormPlacement::kPre ? "pre" : "post"; }

int64_t ViTConfig::hidden() const { return static_cast<int64_t>(std::llround(static_cast<double>(dim) * mlp_ratio)); }

void ViTConfig::validate() const {
  // Fields that `jacond train` sets are named by their flag; the others only come from files.
  auto positive = [](int64_t v, const char* name) {
    if (v <= 0) throw std::invalid_argument(std::string(name) + " must be positive, got " + std::to_string(v));
  };
  positive(image_size, "image_size");
  positive(in_chans, "in_chans");
  positive(patch, "--patch");
  positive(num_classes, "num_classes");
  positive(dim, "--dim");
  positive(depth, "--depth");
  positive(heads, "--heads");
  if (image_size % patch)
    throw std::invalid_argument("--patch " + std::to_string(patch) + " does not divide the image size " + std::to_string(image_size));
  if (dim % heads)
    throw std::invalid_argument("--heads " + std::to_string(heads) + " does not divide --dim " + std::to_string(dim));
  if (!(mlp_ratio > 0) || hidden() <= 0) throw std::invalid_argument("--mlp-ratio must be positive");
  if (!(ln_eps > 0)) throw std::invalid_argument("ln_eps must be positive");
  if (!(drop_path >= 0 && drop_path < 1)) throw std::invalid_argument("--drop-path must be in [0, 1)");
}

nlohmann::json ViTConfig::to_json() const {
  return {{"image_size", image_size}, {"in_chans", in_chans}, {"patch", patch},
          {"num_classes", num_classes}, {"dim", dim}, {"depth", depth}, {"heads", heads},
          {"mlp_ratio", mlp_ratio}, {"skip", to_string(skip)}, {"norm", to_string(norm)},
          {"ln_eps", ln_eps}, {"drop_path", drop_path},
          {"init", {{"scheme", to_string(init.scheme)}, {"alpha", init.alpha}, {"beta", init.beta},
                    {"c", init.c}, {"mlp", to_string(init.mlp)}, {"seed", init.seed}}}};
}

std::optional<ViTConfig> ViTConfig::from_metadata(const std::map<std::string, std::string>& metadata,
                                                 const std::string& file) {
  const auto it = metadata.find("config");
  if (it == metadata.end()) return std::nullopt;
  nlohmann::json j;
  try {
    j = parse_json_strict(it->second);  // a "\u0000" in the metadata string is a NUL here
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(file + ": malformed 'config' metadata: " + e.what());
  }
  // What the tensors cannot say must be there: a default would analyse the file as another model.
  if (!j.is_object()) throw std::runtime_error(file + ": malformed 'config' metadata: not a JSON object");
  if (j.contains("arch") && !j["arch"].is_string())
    throw std::runtime_error(file + ": malformed 'config' metadata: 'arch' is " + json_snippet(j["arch"]) + ", not a name");
  if (j.value("arch", std::string("vit")) != "vit")
    throw std::runtime_error(file + ": a " + printable(j.value("arch", std::string())) + " model; jacond analyses ViT blocks");
  for (const char* key : {"dim", "heads"})
    if (!j.contains(key)) throw std::runtime_error(file + ": malformed 'config' metadata: no '" + key + "'");
  try {
    return from_json(j);
  } catch (const std::exception& e) {
    throw std::runtime_error(file + ": malformed 'config' metadata: " + e.what());
  }
}

ViTConfig ViTConfig::from_json(const nlohmann::json& j) {
  ViTConfig c = fields_from_json(j);
  c.validate();
  return c;
}

ViTConfig ViTConfig::fields_from_json(const nlohmann::json& j) {
  ViTConfig c;
  if (!j.is_object()) throw std::invalid_argument("model config: not a JSON object");
  for (const char* key : {"image_size", "in_chans", "patch", "num_classes", "dim", "depth", "heads"})
    if (j.contains(key) && !(j[key].is_number_integer() && j[key].get<int64_t>() > 0))  // get<int64_t>(2.5) is 2
      throw std::invalid_argument(std::string("model config: '") + key + "' is " + json_snippet(j[key]) + ", not a positive integer");
  try {
    auto get = [&](const char* key, auto& field) {
      if (j.contains(key)) field = j.at(key).get<std::decay_t<decltype(field)>>();
    };
    get("image_size", c.image_size);
    get("in_chans", c.in_chans);
    get("patch", c.patch);
    get("num_classes", c.num_classes);
    get("dim", c.dim);
    get("depth", c.depth);
    get("heads", c.heads);
    get("mlp_ratio", c.mlp_ratio);
    get("ln_eps", c.ln_eps);
    get("drop_path", c.drop_path);
    if (j.contains("skip")) c.skip = parse_skip_kind(j.at("skip").get<std::string>());
    if (j.contains("norm")) c.norm = parse_norm_placement(j.at("norm").get<std::string>());
    if (j.contains("init")) {
      const auto& i = j.at("init");
      if (i.contains("scheme")) c.init.scheme = parse_init_scheme(i.at("scheme").get<std::string>());
      if (i.contains("alpha")) c.init.alpha = i.at("alpha").get<double>();
      if (i.contains("beta")) c.init.beta = i.at("beta").get<double>();
      if (i.contains("c")) c.init.c = i.at("c").get<double>();
      if (i.contains("mlp")) c.init.mlp = parse_mlp_init(i.at("mlp").get<std::string>());
      if (i.contains("seed")) c.init.seed = i.at("seed").get<uint64_t>();
    }
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(std::string("model config: ") + json_error_text(e));
  }
  return c;
}

// ---------------------------------------------------------------------------------------------
// Modules

namespace {
// x Wᵀ + b of a Linear layer by at::linear, which folds the bias into one addmm for a contiguous
// token tensor [B, n, d_in] as for a matrix, as Python's F.linear does. LibTorch's C++
// Linear::forward (torch::nn::functional::linear) takes that path for 2-D inputs only: on
// [B, n, d_in] it runs a matmul and then `+= bias`, an operation more for each of a block's four
// layers (on a GPU, where CUDA's addmm fuses the bias into the GEMM, a launch more each; counted
// in ViT.ALayerOnTokensIsOneAddmmAsInPython).
torch::Tensor apply_linear(const torch::nn::Linear& layer, const torch::Tensor& x) {
  return torch::linear(x, layer->weight, layer->bias);
}
}  // namespace

AttentionImpl::AttentionImpl(int64_t dim, int64_t heads_) : heads(heads_), head_dim(dim / heads_) {
  qkv = register_module("qkv", torch::nn::Linear(dim, 3 * dim));
  proj = register_module("proj", torch::nn::Linear(dim, dim));
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x, torch::Tensor* maps) {
  const int64_t B = x.size(0), n = x.size(1), d = x.size(2);
  // qkv output feature s·d + h·d_h + j  ->  [3, B, h, n, d_h]: head h owns columns [h·d_h, (h+1)·d_h).
  // unbind, not three selects: backward is then one stack. Each select's backward writes a zero
  // tensor of qkv's whole size and copies its slice in, and autograd adds the three: about eight
  // kernels a block on a GPU where stack is one, over three times the bytes. Python's
  // `q, k, v = t` unbinds too (torch_train_route.py's model); the values are the same bits.
  const std::vector<torch::Tensor> qkv_out =
      apply_linear(qkv, x).reshape({B, n, 3, heads, head_dim}).permute({2, 0, 3, 1, 4}).unbind(0);
  const torch::Tensor &q = qkv_out[0], &k = qkv_out[1], &v = qkv_out[2];
  auto scores = torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(head_dim)));
  auto A = torch::softmax(scores, -1);  // Eq. 3: A_h = softmax(s Q_h K_hᵀ)
  if (maps) *maps = A.detach();
  auto out = torch::matmul(A, v).transpose(1, 2).reshape({B, n, d});  // Concat_h(A_h V_h)
  return apply_linear(proj, out);
}

MlpImpl::MlpImpl(int64_t dim, int64_t hidden) {
  fc1 = register_module("fc1", torch::nn::Linear(dim, hidden));
  fc2 = register_module("fc2", torch::nn::Linear(hidden, dim));
}

torch::Tensor MlpImpl::forward(const torch::Tensor& x) { return apply_linear(fc2, torch::gelu(apply_linear(fc1, x))); }  // exact GELU

BlockImpl::BlockImpl(const ViTConfig& cfg, double drop_path_rate)
    : skip_(cfg.skip), norm_(cfg.norm), drop_path_(drop_path_rate) {
  norm1 = register_module("norm1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({cfg.dim}).eps(cfg.ln_eps)));
  attn = register_module("attn", Attention(cfg.dim, cfg.heads));
  norm2 = register_module("norm2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({cfg.dim}).eps(cfg.ln_eps)));
  mlp = register_module("mlp", Mlp(cfg.dim, cfg.hidden()));
  if (skip_ == SkipKind::kRezero) {
    rezero_attn = register_parameter("rezero_attn", torch::zeros({1}));
    rezero_mlp = register_parameter("rezero_mlp", torch::zeros({1}));
  }
}

double BlockImpl::attn_scale() const { return rezero_attn.defined() ? rezero_attn.item<double>() : 1.0; }
double BlockImpl::mlp_scale() const { return rezero_mlp.defined() ? rezero_mlp.item<double>() : 1.0; }

// Scales a residual branch by ReZero's α and applies drop path (per sample, training only).
torch::Tensor BlockImpl::branch(const torch::Tensor& b, const torch::Tensor& scale, bool residual) const {
  torch::Tensor out = scale.defined() ? b * scale : b;
  if (residual && drop_path_ > 0 && is_training()) {
    const double keep = 1.0 - drop_path_;
    auto mask = torch::empty({b.size(0), 1, 1}, b.options()).bernoulli_(keep);
    out = out * mask / keep;
  }
  return out;
}

torch::Tensor BlockImpl::forward(const torch::Tensor& x_in) {
  const bool res_attn = jacond::sab_residual(analysis_skip_mode(skip_));
  const bool res_mlp = jacond::ffn_residual(analysis_skip_mode(skip_));
  torch::Tensor x = x_in;
  if (norm_ == NormPlacement::kPre) {
    auto a = branch(attn(norm1(x)), rezero_attn, res_attn);
    x = res_attn ? x + a : a;
    auto m = branch(mlp(norm2(x)), rezero_mlp, res_mlp);
    x = res_mlp ? x + m : m;
  } else {
    auto a = branch(attn(x), rezero_attn, res_attn);
    x = norm1(res_attn ? x + a : a);
    auto m = branch(mlp(x), rezero_mlp, res_mlp);
    x = norm2(res_mlp ? x + m : m);
  }
  return x;
}

PatchEmbedImpl::PatchEmbedImpl(int64_t in_chans, int64_t dim, int64_t patch) {
  proj = register_module("proj", torch::nn::Conv2d(torch::nn::Conv2dOptions(in_chans, dim, patch).stride(patch)));
}

torch::Tensor PatchEmbedImpl::forward(const torch::Tensor& images) {
  return proj(images).flatten(2).transpose(1, 2);  // [B, d, g, g] -> [B, g², d]
}

VisionTransformerImpl::VisionTransformerImpl(const ViTConfig& cfg) : cfg_(cfg) {
  cfg_.validate();
  patch_embed = register_module("patch_embed", PatchEmbed(cfg.in_chans, cfg.dim, cfg.patch));
  cls_token = register_parameter("cls_token", torch::zeros({1, 1, cfg.dim}));
  pos_embed = register_parameter("pos_embed", torch::zeros({1, cfg.tokens(), cfg.dim}));
  blocks = register_module("blocks", torch::nn::ModuleList());
  for (int64_t l = 0; l < cfg.depth; ++l) {
    const bool skipless = cfg.skip == SkipKind::kNone;
    const double rate = skipless || cfg.depth == 1 ? 0.0 : cfg.drop_path * l / (cfg.depth - 1);
    blocks->push_back(Block(cfg, rate));
  }
  norm = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({cfg.dim}).eps(cfg.ln_eps)));
  head = register_module("head", torch::nn::Linear(cfg.dim, cfg.num_classes));
  reset_parameters();
}

torch::Tensor VisionTransformerImpl::embed(const torch::Tensor& images) {
  if (images.dim() != 4 || images.size(1) != cfg_.in_chans || images.size(2) != cfg_.image_size ||
      images.size(3) != cfg_.image_size)
    throw std::invalid_argument("ViT expects images [B, " + std::to_string(cfg_.in_chans) + ", " +
                                std::to_string(cfg_.image_size) + ", " + std::to_string(cfg_.image_size) + "]");
  auto tokens = patch_embed(images);
  auto cls = cls_token.expand({images.size(0), 1, cfg_.dim});
  return torch::cat({cls, tokens}, 1) + pos_embed;
}

torch::Tensor VisionTransformerImpl::forward(const torch::Tensor& images) {
  auto x = embed(images);
  for (const auto& m : *blocks) x = m->as<BlockImpl>()->forward(x);
  return apply_linear(head, norm(x).select(1, 0));
}

torch::Tensor VisionTransformerImpl::forward_with_block_inputs(const torch::Tensor& images,
                                                               std::vector<torch::Tensor>& block_inputs) {
  block_inputs.clear();
  auto x = embed(images);
  for (const auto& m : *blocks) {
    block_inputs.push_back(x.detach());
    x = m->as<BlockImpl>()->forward(x);
  }
  return apply_linear(head, norm(x).select(1, 0));
}

void VisionTransformerImpl::reset_parameters() {
  torch::NoGradGuard no_grad;
  const int64_t d = cfg_.dim;
  // Blocks: docs/design.md §3 (models/init/init.h), one generator per block.
  TensorMap fresh;
  for (int64_t l = 0; l < cfg_.depth; ++l) init_block(fresh, l, d, cfg_.heads, cfg_.hidden(), cfg_.init);
  // The rest, timm's rules, from generator layer_seed(seed, -1) in this order:
  at::Generator gen = at::detail::createCPUGenerator(layer_seed(cfg_.init.seed, -1));
  const double fan_in = static_cast<double>(cfg_.in_chans * cfg_.patch * cfg_.patch);
  const double bound = 1.0 / std::sqrt(fan_in);  // kaiming_uniform(a=√5) and PyTorch's conv bias
  fresh["patch_embed.proj.weight"] =
      torch::empty({d, cfg_.in_chans, cfg_.patch, cfg_.patch}, torch::kFloat64).uniform_(-bound, bound, gen);
  fresh["patch_embed.proj.bias"] = torch::empty({d}, torch::kFloat64).uniform_(-bound, bound, gen);
  fresh["pos_embed"] = trunc_normal({1, cfg_.tokens(), d}, 0.0, 0.02, -2.0, 2.0, gen);
  fresh["cls_token"] = torch::empty({1, 1, d}, torch::kFloat64).normal_(0.0, 1e-6, gen);
  fresh["head.weight"] = trunc_normal({cfg_.num_classes, d}, 0.0, 0.02, -2.0, 2.0, gen);
  fresh["head.bias"] = torch::zeros({cfg_.num_classes}, torch::kFloat64);
  fresh["norm.weight"] = torch::ones({d}, torch::kFloat64);
  fresh["norm.bias"] = torch::zeros({d}, torch::kFloat64);
  if (cfg_.skip == SkipKind::kRezero)
    for (int64_t l = 0; l < cfg_.depth; ++l) {
      fresh["blocks." + std::to_string(l) + ".rezero_attn"] = torch::zeros({1}, torch::kFloat64);
      fresh["blocks." + std::to_string(l) + ".rezero_mlp"] = torch::zeros({1}, torch::kFloat64);
    }
  load_state(fresh);
}

TensorMap VisionTransformerImpl::state() const { return module_state(*this); }

void VisionTransformerImpl::load_state(const TensorMap& tensors) { load_module_state(*this, tensors); }

// ---------------------------------------------------------------------------------------------
// Config inference from a timm-named state

namespace {
at::Tensor need(const TensorMap& t, const std::string& key, int64_t dims) {
  auto it = t.find(key);
  if (it == t.end()) throw std::invalid_argument("checkpoint: missing tensor '" + key + "'");
  if (it->second.dim() != dims)
    throw std::invalid_argument("checkpoint: '" + key + "' has " + std::to_string(it->second.dim()) +
                                " dims, expected " + std::to_string(dims));
  return it->second;
}
}  // namespace

ViTConfig infer_config(const TensorMap& tensors, ViTConfig base) {
  const at::Tensor conv = need(tensors, "patch_embed.proj.weight", 4);
  base.in_chans = conv.size(1);
  base.patch = conv.size(2);
  if (conv.size(3) != base.patch) throw std::invalid_argument("checkpoint: non-square patch in 'patch_embed.proj.weight'");
  const at::Tensor pos = need(tensors, "pos_embed", 3);
  const int64_t n = pos.size(1);
  const int64_t grid = static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(n - 1))));
  if (grid * grid + 1 != n)
    throw std::invalid_argument("checkpoint: pos_embed has " + std::to_string(n) +
                                " tokens, not 1 + a square grid (only cls-token ViTs are supported)");
  base.image_size = grid * base.patch;
  base.num_classes = need(tensors, "head.weight", 2).size(0);
  base = infer_block_config(tensors, base);  // dim from blocks.0.norm1.weight
  if (base.dim != conv.size(0))
    throw std::invalid_argument("checkpoint: blocks.0.norm1.weight has " + std::to_string(base.dim) +
                                " entries, patch_embed.proj.weight " + std::to_string(conv.size(0)) + " channels");
  return base;
}

namespace {
// The i of every "blocks.{i}." key; throws unless they are 0 ... max without a gap.
int64_t block_count(const TensorMap& tensors) {
  std::set<int64_t> seen;
  for (const auto& [key, value] : tensors) {
    if (key.rfind("blocks.", 0) != 0) continue;
    const size_t dot = key.find('.', 7);
    const std::string index = key.substr(7, dot == std::string::npos ? std::string::npos : dot - 7);
    if (index.empty() || index.size() > 9 || index.find_first_not_of("0123456789") != std::string::npos)
      throw std::invalid_argument("checkpoint: tensor '" + printable(key) + "' is under blocks. but not blocks.{i}.");
    seen.insert(std::stoll(index));
  }
  if (seen.empty()) throw std::invalid_argument("checkpoint: no blocks.{i}. tensors");
  const int64_t count = *seen.rbegin() + 1;
  if (static_cast<int64_t>(seen.size()) != count) {
    int64_t missing = 0;
    while (seen.count(missing)) ++missing;
    throw std::invalid_argument("checkpoint: has blocks." + std::to_string(count - 1) + ". but no blocks." +
                                std::to_string(missing) + ". (the block indices have a gap)");
  }
  return count;
}
}  // namespace

ViTConfig infer_block_config(const TensorMap& tensors, ViTConfig base) {
  base.depth = block_count(tensors);
  base.dim = need(tensors, "blocks.0.norm1.weight", 1).size(0);
  const int64_t hidden = need(tensors, "blocks.0.mlp.fc1.weight", 2).size(0);
  base.mlp_ratio = static_cast<double>(hidden) / static_cast<double>(base.dim);
  if (tensors.count("blocks.0.rezero_attn")) base.skip = SkipKind::kRezero;
  base.validate();
  return base;
}

void check_blocks_match(const TensorMap& tensors, const ViTConfig& cfg) {
  const int64_t depth = block_count(tensors);
  if (depth != cfg.depth)
    throw std::invalid_argument("config says depth " + std::to_string(cfg.depth) + ", the tensors hold blocks.0 ... blocks." +
                                std::to_string(depth - 1));
  const int64_t dim = need(tensors, "blocks.0.norm1.weight", 1).size(0);
  if (dim != cfg.dim)
    throw std::invalid_argument("config says dim " + std::to_string(cfg.dim) + ", blocks.0.norm1.weight has " +
                                std::to_string(dim) + " entries");
}

void fill_absent_biases(TensorMap& tensors, const ViTConfig& cfg) {
  std::vector<std::string> layers = {"patch_embed.proj.", "head."};  // Linears (and the patch conv) only
  for (int64_t l = 0; l < cfg.depth; ++l)
    for (const char* layer : {"attn.qkv.", "attn.proj.", "mlp.fc1.", "mlp.fc2."})
      layers.push_back("blocks." + std::to_string(l) + "." + layer);
  for (const std::string& layer : layers) {
    const auto weight = tensors.find(layer + "weight");
    if (weight == tensors.end() || tensors.count(layer + "bias")) continue;
    tensors[layer + "bias"] = torch::zeros({weight->second.size(0)}, weight->second.options());
  }
}

}  // namespace jacond::models
