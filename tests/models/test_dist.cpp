// models/dist: the launch environment's parsing, and two Gloo ranks (two threads of this
// process, each with its own TCPStore client and process group) averaging gradients like the
// full batch, agreeing on their parameters, and failing within the timeout when a peer is gone.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <future>
#include <map>
#include <thread>

#include "models/dist/data_parallel.h"
#include "models/dist/process_group.h"
#include "support/expect_gpu.h"

namespace jd = jacond::models::dist;

namespace {

jd::LaunchEnv env_of(const std::map<std::string, std::string>& vars) {
  return jd::read_launch_env([&](const std::string& name) -> std::optional<std::string> {
    const auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  });
}

// The error read_launch_env throws for `vars` (empty when it does not throw).
std::string env_error(const std::map<std::string, std::string>& vars) {
  try {
    env_of(vars);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

jd::LaunchEnv rank_env(int rank, int world, int port) {
  jd::LaunchEnv env;
  env.rank = rank, env.world_size = world, env.local_rank = rank;
  env.master_addr = "127.0.0.1", env.master_port = port;
  env.launcher = "torchrun";
  return env;
}

// Runs body(rank, group) on `world` threads, one rank each, and rethrows the first failure.
// `timeout` bounds the collectives; the rendezvous gets 60 s, so that a loaded CI machine (the
// store client retries its connect once a second) tests the collective timeout, not the start.
void on_ranks(int world, std::chrono::milliseconds timeout, const std::function<void(int, jd::RankGroup&)>& body) {
  const int port = jd::free_loopback_port();
  std::vector<std::future<void>> ranks;
  for (int r = 0; r < world; ++r)
    ranks.push_back(std::async(std::launch::async, [=] {
      jd::RankGroup group(rank_env(r, world, port), timeout, std::chrono::seconds(60));
      body(r, group);
    }));
  for (auto& f : ranks) f.get();
}

// A small model with a LayerNorm, in fp64 so that the averaged gradient can be compared with
// the full batch's to 1e-12.
struct TinyNet : torch::nn::Module {
  TinyNet() {
    torch::manual_seed(7);
    a = register_module("a", torch::nn::Linear(6, 8));
    norm = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({8})));
    b = register_module("b", torch::nn::Linear(8, 3));
    to(torch::kFloat64);
  }
  torch::Tensor forward(const torch::Tensor& x) { return b(torch::gelu(norm(a(x)))); }
  torch::nn::Linear a{nullptr}, b{nullptr};
  torch::nn::LayerNorm norm{nullptr};
};

std::pair<torch::Tensor, torch::Tensor> batch() {
  torch::manual_seed(11);
  return {torch::randn({8, 6}, torch::kFloat64), torch::randint(0, 3, {8}, torch::kLong)};
}

std::vector<torch::Tensor> grads(torch::nn::Module& m) {
  std::vector<torch::Tensor> g;
  for (const auto& p : m.parameters()) g.push_back(p.grad().clone());
  return g;
}

}  // namespace

TEST(LaunchEnv, NoVariablesIsOneProcess) {
  const auto env = env_of({});
  EXPECT_EQ(env.world_size, 1);
  EXPECT_FALSE(env.distributed());
  EXPECT_EQ(env.launcher, "none");
}

TEST(LaunchEnv, ReadsTorchrunVariables) {
  const auto env = env_of({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"MASTER_ADDR", "node07"},
                           {"MASTER_PORT", "29400"}, {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                           {"TORCHELASTIC_RESTART_COUNT", "2"}});
  EXPECT_EQ(env.rank, 3);
  EXPECT_EQ(env.world_size, 4);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.master_addr, "node07");
  EXPECT_EQ(env.master_port, 29400);
  EXPECT_EQ(env.launcher, "torchrun");
  EXPECT_TRUE(env.agent_store);
  EXPECT_EQ(env.restart_count, 2);
}

TEST(LaunchEnv, ReadsSlurmVariablesWhenRankIsAbsent) {
  const auto env = env_of({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "1"},
                           {"MASTER_ADDR", "n1"}, {"MASTER_PORT", "29500"}});
  EXPECT_EQ(env.launcher, "slurm");
  EXPECT_EQ(env.rank, 5);
  EXPECT_EQ(env.world_size, 8);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_FALSE(env.agent_store);
  // torchrun inside an allocation wins over Slurm's task variables.
  EXPECT_EQ(env_of({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"RANK", "0"}, {"WORLD_SIZE", "1"}}).launcher, "torchrun");
}

TEST(LaunchEnv, BadValuesNameTheVariable) {
  const std::map<std::string, std::string> good{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1234"}};
  EXPECT_EQ(env_error(good), "");
  auto with = [&](const std::string& k, const std::string& v) {
    auto vars = good;
    vars[k] = v;
    return env_error(vars);
  };
  auto without = [&](const std::string& k) {
    auto vars = good;
    vars.erase(k);
    return env_error(vars);
  };
  EXPECT_NE(with("RANK", "2").find("RANK=2 is not below WORLD_SIZE=2"), std::string::npos);
  EXPECT_NE(with("RANK", "one").find("RANK=one"), std::string::npos);
  EXPECT_NE(with("WORLD_SIZE", "-2").find("WORLD_SIZE"), std::string::npos);
  EXPECT_NE(with("WORLD_SIZE", "0").find("WORLD_SIZE"), std::string::npos);
  EXPECT_NE(with("MASTER_PORT", "0").find("MASTER_PORT"), std::string::npos);
  EXPECT_NE(with("MASTER_PORT", "80a").find("MASTER_PORT"), std::string::npos);
  EXPECT_NE(without("MASTER_ADDR").find("MASTER_ADDR"), std::string::npos);
  EXPECT_NE(without("MASTER_PORT").find("MASTER_PORT"), std::string::npos);
  EXPECT_NE(without("WORLD_SIZE").find("WORLD_SIZE"), std::string::npos);
  EXPECT_NE(env_error({{"WORLD_SIZE", "2"}}).find("RANK"), std::string::npos);
}

TEST(RankGroup, CollectivesSumAndBroadcast) {
  if (!jd::c10d_available()) GTEST_SKIP() << "built without c10d/Gloo";
  on_ranks(3, std::chrono::seconds(30), [](int rank, jd::RankGroup& group) {
    auto t = torch::full({2}, static_cast<double>(rank + 1), torch::kFloat64);
    group.allreduce_sum(t);
    EXPECT_EQ(t[0].item<double>(), 6.0);
    auto b = torch::full({1}, static_cast<double>(10 * rank), torch::kFloat64);
    group.broadcast(b, 2);
    EXPECT_EQ(b.item<double>(), 20.0);
    group.barrier();
  });
}

// The math of models/dist/data_parallel.h: with equal shards, the averaged gradient is the full
// batch's gradient (fp64: to rounding).
TEST(GradientAverager, TwoRanksAverageToTheFullBatchGradient) {
  if (!jd::c10d_available()) GTEST_SKIP() << "built without c10d/Gloo";
  const auto [x, y] = batch();
  TinyNet full;
  torch::cross_entropy_loss(full.forward(x), y).backward();
  const auto expected = grads(full);

  std::vector<std::vector<torch::Tensor>> got(2);
  std::vector<std::shared_ptr<TinyNet>> nets{std::make_shared<TinyNet>(), std::make_shared<TinyNet>()};  // seeded here, not racing in the threads
  on_ranks(2, std::chrono::seconds(30), [&](int rank, jd::RankGroup& group) {
    TinyNet& net = *nets[rank];
    jd::broadcast_module_state(net, group);
    jd::GradientAverager averager(net, group);
    for (int step = 0; step < 2; ++step) {  // the second step runs on the rebuilt buckets
      net.zero_grad();
      averager.before_forward();
      auto out = net.forward(x.narrow(0, 4 * rank, 4));
      auto loss = torch::cross_entropy_loss(out, y.narrow(0, 4 * rank, 4));
      averager.backward(loss);
    }
    got[rank] = grads(net);
  });
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_EQ(got[rank].size(), expected.size());
    for (size_t i = 0; i < expected.size(); ++i)
      EXPECT_TRUE(torch::allclose(got[rank][i], expected[i], 1e-12, 1e-14)) << "rank " << rank << " parameter " << i;
  }
}

TEST(GradientAverager, BroadcastMakesReplicasAgreeAndDriftIsCaught) {
  if (!jd::c10d_available()) GTEST_SKIP() << "built without c10d/Gloo";
  on_ranks(2, std::chrono::seconds(30), [](int rank, jd::RankGroup& group) {
    TinyNet net;
    {
      torch::NoGradGuard no_grad;
      if (rank == 1) net.a->weight.add_(1.0);
    }
    jd::broadcast_module_state(net, group);
    EXPECT_NO_THROW(jd::check_replicas_agree(net, group, 5));
    {
      torch::NoGradGuard no_grad;
      if (rank == 1) net.b->bias[0].add_(1e-12);
    }
    try {
      jd::check_replicas_agree(net, group, 6);
      ADD_FAILURE() << "rank " << rank << ": a drifted replica was not reported";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("step 6"), std::string::npos) << e.what();
    }
  });
}

// NaN ≠ NaN: parameters that diverged to NaN on every rank were reported as a drifted replica
// ("the parameters of 2 rank(s) differ from rank 0's"), and +inf on every rank gave equal Σp, Σp²
// everywhere, so the replicas "agreed" and the inf weights were checkpointed. Now every rank names
// the divergence, for NaN or inf, held by every rank or by one.
TEST(GradientAverager, NonFiniteParametersAreReportedAsADivergenceOnEveryRank) {
  if (!jd::c10d_available()) GTEST_SKIP() << "built without c10d/Gloo";
  on_ranks(2, std::chrono::seconds(30), [](int rank, jd::RankGroup& group) {
    TinyNet net;
    jd::broadcast_module_state(net, group);
    EXPECT_TRUE(jd::parameters_finite(net));
    for (const double value : {double(NAN), double(INFINITY)}) {
      for (const bool everywhere : {true, false}) {
        SCOPED_TRACE(std::to_string(value) + (everywhere ? " on every rank" : " on rank 1"));
        const bool bad = everywhere || rank == 1;
        {
          torch::NoGradGuard no_grad;
          net.a->weight[0][0].fill_(bad ? value : 0.5);
        }
        EXPECT_EQ(jd::parameters_finite(net), !bad);
        try {
          jd::check_replicas_agree(net, group, 9);
          ADD_FAILURE() << "rank " << rank << ": non-finite parameters were not reported";
        } catch (const std::runtime_error& e) {
          EXPECT_EQ(std::string(e.what()), jd::diverged_parameters_message(9)) << "rank " << rank;
          EXPECT_NE(std::string(e.what()).find("NaN or inf after step 9"), std::string::npos) << e.what();
        }
      }
    }
  });
}

// A rank that never joins a collective makes its peer fail after the timeout, not hang.
TEST(RankGroup, ASilentPeerFailsTheCollectiveAfterTheTimeout) {
  if (!jd::c10d_available()) GTEST_SKIP() << "built without c10d/Gloo";
  const auto timeout = std::chrono::milliseconds(1500);
  std::string error;
  std::chrono::duration<double> waited{0};
  on_ranks(2, timeout, [&](int rank, jd::RankGroup& group) {
    if (rank == 1) {
      std::this_thread::sleep_for(timeout * 2);  // alive but silent
      return;
    }
    auto t = torch::ones({1});
    const auto start = std::chrono::steady_clock::now();
    try {
      group.allreduce_sum(t);
    } catch (const std::runtime_error& e) {
      error = e.what();
    }
    waited = std::chrono::steady_clock::now() - start;
  });
  EXPECT_NE(error.find("rank 0: all-reduce failed"), std::string::npos) << error;
  // Failed by the timeout (Gloo: "Operation timed out!", or "Timed out waiting …" in other
  // versions): the error's cause, not a wall-clock bound (a hang is ctest's TIMEOUT).
  std::string lower = error;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  EXPECT_NE(lower.find("timed out"), std::string::npos) << error << " (after " << waited.count() << " s)";
}

// ---------------------------------------------------------------------------------------------
// NCCL (where LibTorch has CUDA): one rank, since NCCL refuses two ranks on one GPU. The group's
// helpers take CPU tensors too, and the Reducer's average over one rank is the plain gradient.

TEST(RankGroup, ABackendThisBuildLacksIsRefusedByName) {
  for (const auto backend : {jd::DistBackend::gloo, jd::DistBackend::nccl}) {
    if (jd::backend_available(backend)) continue;
    try {
      jd::RankGroup group(rank_env(0, 1, jd::free_loopback_port()), std::chrono::seconds(5), std::nullopt, backend);
      ADD_FAILURE() << jd::to_string(backend) << ": a group was made without the backend";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(jd::to_string(backend)), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(jd::parse_dist_backend("nccl"), jd::DistBackend::nccl);
  EXPECT_THROW(jd::parse_dist_backend("mpi"), std::invalid_argument);
}

namespace {

// Why the NCCL tests cannot run here ("" where they can): JACOND_REQUIRE_GPU's reason.
std::string why_no_nccl_gpu() {
  if (!jd::backend_available(jd::DistBackend::nccl)) return "this LibTorch has no NCCL (c10d ProcessGroupNCCL)";
  if (!torch::cuda::is_available()) return "this LibTorch sees no GPU";
  return "";
}

jd::RankGroup one_nccl_rank() {
  return jd::RankGroup(rank_env(0, 1, jd::free_loopback_port()), std::chrono::seconds(60), std::nullopt,
                       jd::DistBackend::nccl);
}

}  // namespace

TEST(NcclRankGroup, OneRankCollectivesRunOnItsGpu) {
  JACOND_REQUIRE_GPU(why_no_nccl_gpu().empty(), why_no_nccl_gpu());
  jd::RankGroup group = one_nccl_rank();
  ASSERT_TRUE(group.device().is_cuda());
  EXPECT_EQ(group.device().index(), 0);
  auto on_gpu = torch::arange(4, torch::TensorOptions().dtype(torch::kFloat64).device(group.device()));
  group.allreduce_sum(on_gpu);  // one rank: the sum is the tensor
  EXPECT_TRUE(on_gpu.cpu().equal(torch::arange(4, torch::kFloat64)));
  auto on_cpu = torch::full({3}, 2.5, torch::kFloat64);  // moved to the GPU and back
  group.broadcast(on_cpu, 0);
  EXPECT_TRUE(on_cpu.device().is_cpu());
  EXPECT_TRUE(on_cpu.equal(torch::full({3}, 2.5, torch::kFloat64)));
  EXPECT_EQ(group.allreduce_sum(std::vector<double>{1.5, -2.0}), (std::vector<double>{1.5, -2.0}));
  const std::string rows = "100,0,3,K_sa,1.5e3\n100,0,3,K_ffn,2.25\n";
  EXPECT_EQ(group.allgather_text(rows), std::vector<std::string>{rows});
  group.barrier();
}

TEST(NcclRankGroup, OneRankAveragerGivesThePlainGradientOnTheGpu) {
  JACOND_REQUIRE_GPU(why_no_nccl_gpu().empty(), why_no_nccl_gpu());
  const auto [x, y] = batch();
  TinyNet reference;
  torch::cross_entropy_loss(reference.forward(x), y).backward();
  const auto expected = grads(reference);

  jd::RankGroup group = one_nccl_rank();
  TinyNet net;
  net.to(group.device());
  jd::broadcast_module_state(net, group);
  jd::GradientAverager averager(net, group);
  const auto xd = x.to(group.device()), yd = y.to(group.device());
  for (int step = 0; step < 2; ++step) {  // the second step runs on the rebuilt buckets
    net.zero_grad();
    averager.before_forward();
    averager.backward(torch::cross_entropy_loss(net.forward(xd), yd));
  }
  const auto got = grads(net);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_TRUE(got[i].is_cuda());
    // fp64 on both devices; cuBLAS and the CPU sum in different orders
    EXPECT_TRUE(torch::allclose(got[i].cpu(), expected[i], 1e-12, 1e-14)) << "parameter " << i;
  }
  EXPECT_NO_THROW(jd::check_replicas_agree(net, group, 2));
}
