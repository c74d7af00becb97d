// `jacond train`: trains a ViT on Fashion-MNIST with conditioning tracked (models/trainer.h).
#include <boost/program_options.hpp>
#include <iostream>
#include <set>

#include "experiments/cli_common.h"
#include "experiments/commands.h"
#include "models/trainer.h"

namespace jacond::cli {

namespace po = boost::program_options;

namespace {
// Flags that shape the model: fixed by the checkpoint when resuming.
const std::set<std::string> kModelFlags{"dim", "depth", "heads", "patch", "mlp-ratio", "skip", "norm", "drop-path",
                                        "init", "alpha", "beta", "c", "mlp-init"};
}  // namespace

int run_train(int argc, char** argv) {
  models::TrainConfig c;
  models::ViTConfig& m = c.model;
  std::string skip = "full", norm = "pre", init = "timm", mlp_init = "default", resume;
  double alpha = 2.0, beta = 0.6, cc = 3.0;
  uint64_t seed = 0;
  po::options_description model("model"), optim("optimizer"), data("data"), runo("run"), track("conditioning tracking");
  model.add_options()
      ("dim", po::value(&m.dim)->default_value(m.dim), "embedding dimension d")
      ("depth", po::value(&m.depth)->default_value(m.depth), "number of blocks L")
      ("heads", po::value(&m.heads)->default_value(m.heads), "attention heads")
      ("patch", po::value(&m.patch)->default_value(m.patch), "patch size (divides 28)")
      ("mlp-ratio", po::value(&m.mlp_ratio)->default_value(m.mlp_ratio), "MLP hidden width / d")
      ("skip", po::value(&skip)->default_value(skip), "full | none | sab | ffn | rezero")
      ("norm", po::value(&norm)->default_value(norm), "LayerNorm placement: pre | post")
      ("drop-path", po::value(&m.drop_path)->default_value(m.drop_path), "stochastic depth rate (residual branches only)")
      ("init", po::value(&init)->default_value(init), "block init: timm | ours | mimetic (DESIGN §3)")
      ("alpha", po::value(&alpha)->default_value(alpha), "`ours`: α of T = αZ + βI (Q/K)")
      ("beta", po::value(&beta)->default_value(beta), "`ours`: β")
      ("c", po::value(&cc)->default_value(cc), "`ours`: scale c of W^V, W^O")
      ("mlp-init", po::value(&mlp_init)->default_value(mlp_init), "default | timm | dks");
  optim.add_options()
      ("optimizer", po::value(&c.optimizer)->default_value(c.optimizer), "soap | adamw")
      ("lr", po::value(&c.lr), "peak learning rate (soap 3e-3, adamw 1e-3)")
      ("min-lr", po::value(&c.min_lr)->default_value(c.min_lr), "cosine floor")
      ("beta1", po::value(&c.beta1), "first-moment β₁ (soap 0.95, adamw 0.9)")
      ("beta2", po::value(&c.beta2), "second-moment β₂ (soap 0.95, adamw 0.999)")
      ("eps", po::value(&c.eps), "ε (1e-8)")
      ("weight-decay", po::value(&c.weight_decay), "decoupled weight decay (soap 0.01, adamw 0.05)")
      ("shampoo-beta", po::value(&c.shampoo_beta)->default_value(c.shampoo_beta), "SOAP: EMA of L, R (<0: β₂)")
      ("precondition-frequency", po::value(&c.precondition_frequency)->default_value(c.precondition_frequency),
       "SOAP: eigenbasis refresh period")
      ("max-precond-dim", po::value(&c.max_precond_dim)->default_value(c.max_precond_dim), "SOAP: longest side preconditioned")
      ("warmup-steps", po::value(&c.warmup_steps)->default_value(c.warmup_steps), "linear warmup steps")
      ("clip-grad", po::value(&c.clip_grad)->default_value(c.clip_grad), "max global grad norm (<=0: off)");
  data.add_options()
      ("data-dir", po::value(&c.data_dir)->default_value(c.data_dir), "Fashion-MNIST IDX .gz files")
      ("data-limit", po::value(&c.data_limit)->default_value(c.data_limit), "use the first N training images (0: all)")
      ("test-limit", po::value(&c.test_limit)->default_value(c.test_limit), "use the first N test images (0: all)")
      ("augment", po::value(&c.augment)->default_value(c.augment), "random crop + flip")
      ("crop-pad", po::value(&c.crop_pad)->default_value(c.crop_pad), "random-crop padding")
      ("flip", po::value(&c.flip)->default_value(c.flip), "horizontal flips when augmenting");
  runo.add_options()
      ("batch", po::value(&c.batch)->default_value(c.batch), "batch size")
      ("steps", po::value(&c.steps)->default_value(c.steps), "optimizer steps (wins over --epochs)")
      ("epochs", po::value(&c.epochs)->default_value(c.epochs), "epochs when --steps is 0")
      ("threads", po::value(&c.threads)->default_value(c.threads), "torch + BLAS threads")
      ("seed", po::value(&seed)->default_value(seed), "seed of init, data order, augmentation")
      ("device", po::value(&c.device)->default_value(c.device), "cpu | cuda")
      ("out", po::value(&c.out_dir)->default_value(c.out_dir), "run directory")
      ("resume", po::value(&resume), "continue from a checkpoint dir or the newest in a run dir")
      ("log-every", po::value(&c.log_every)->default_value(c.log_every), "train_log.jsonl period")
      ("print-every", po::value(&c.print_every)->default_value(c.print_every), "progress line period")
      ("eval-every", po::value(&c.eval_every)->default_value(c.eval_every), "test evaluation period (0: each epoch)")
      ("checkpoint-every", po::value(&c.checkpoint_every)->default_value(c.checkpoint_every), "checkpoint period (0: end only)")
      ("stop-at", po::value(&c.stop_at)->default_value(c.stop_at), "stop after this step (with a checkpoint); 0: run to the end")
      ("keep", po::value(&c.keep)->default_value(c.keep), "checkpoints kept (0: all)");
  track.add_options()
      ("track-every", po::value(&c.track_every)->default_value(c.track_every), "conditioning period in steps (0: off)")
      ("probe-size", po::value(&c.probe_size)->default_value(c.probe_size), "probe images: the first N test images")
      ("track-method", po::value(&c.track_method)->default_value(c.track_method),
       "κ route: auto (dense when n·d <= 4096, else lanczos) | dense | svd | lanczos")
      ("track-seconds", po::value(&c.track_seconds)->default_value(c.track_seconds),
       "lanczos: seconds per matrix before reporting the best bracket as not-converged")
      ("track-matrices", po::value(&c.track_matrices)->default_value(c.track_matrices),
       "comma list of K_sa,B_sa,E_sa,K_sab,K_mlp,K_ffn,softmax,attention or all");
  po::options_description desc("jacond train: a ViT on Fashion-MNIST, checkpoints and conditioning.csv");
  desc.add_options()("help,h", "this help");
  desc.add(model).add(optim).add(data).add(runo).add(track);
  po::variables_map vm;
  if (!parse_options(argc, argv, desc, nullptr, &vm)) return 0;

  m.skip = models::parse_skip_kind(skip);
  m.norm = models::parse_norm_placement(norm);
  m.init = models::InitConfig::for_scheme(models::parse_init_scheme(init), seed);
  m.init.alpha = alpha;
  m.init.beta = beta;
  m.init.c = cc;
  if (mlp_init != "default") m.init.mlp = models::parse_mlp_init(mlp_init);
  c.seed = seed;

  nlohmann::json overrides = nlohmann::json::object();
  if (!resume.empty()) {
    for (const auto& kv : vm)
      if (!kv.second.defaulted() && (kModelFlags.count(kv.first) || kv.first == "seed"))
        throw std::invalid_argument("--" + kv.first + " cannot change when resuming (the checkpoint fixes the model and seed)");
    const nlohmann::json full = [&] {
      models::TrainConfig copy = c;
      copy.finalize();
      return copy.to_json();
    }();
    for (const auto& kv : vm) {
      if (kv.second.defaulted() || kv.first == "resume" || kv.first == "help") continue;
      if (kModelFlags.count(kv.first) || kv.first == "seed") continue;  // rejected above
      if (kv.first == "stop-at") continue;  // run control, not part of the saved config
      std::string key = kv.first == "out" ? "out_dir" : kv.first;
      for (auto& ch : key) ch = ch == '-' ? '_' : ch;
      if (!full.contains(key)) throw std::logic_error("no config key for --" + kv.first);
      overrides[key] = full[key];
    }
  }
  const models::TrainResult r = models::train(c, resume, overrides, std::cout);
  std::cout << "done: " << r.steps << " steps, last loss " << r.last_loss << ", test acc " << r.test_acc
            << ", checkpoint " << r.last_checkpoint << "\n";
  return 0;
}

}  // namespace jacond::cli
