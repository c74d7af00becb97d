// The ranks of a data-parallel run and their collectives, on PyTorch's own engine: c10d's
// ProcessGroupGloo (CPU tensors; Debian's LibTorch 1.13 ships it) or ProcessGroupNCCL (CUDA
// tensors, one GPU per rank: cuda:LOCAL_RANK; where LibTorch has CUDA) behind a TCPStore
// rendezvous, exactly what `torch.distributed.init_process_group("gloo" | "nccl")` builds in Python.
// On LibTorch >= 2.0 the backend sits inside a c10d::ProcessGroup that routes each device type to
// it (as Python does); on 1.13 the backend is the group. Both are built from the same code.
//
// Launch contract: the torchrun environment (torch.distributed.run), so `torchrun
// --nproc-per-node N jacond train ...`, Slurm's `srun` and `jacond train --nproc N` all work:
//   RANK, WORLD_SIZE          this process's rank and the number of ranks (all nodes)
//   LOCAL_RANK                its rank on this node (the GPU it uses under NCCL)
//   MASTER_ADDR, MASTER_PORT  where rank 0 serves the TCPStore the ranks meet at
// Under `srun` without torchrun, SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID stand in for
// RANK / WORLD_SIZE / LOCAL_RANK (MASTER_ADDR and MASTER_PORT still have to be exported: the
// batch script knows the first node's name). No variables, or a world of 1: one process, no group.
// GLOO_SOCKET_IFNAME picks the network interface, as it does for PyTorch.
//
// Failure contract: every collective waits at most `timeout`, the rendezvous at most
// `rendezvous_timeout` (the same by default; the CLI passes --dist-timeout for both); a rank that
// dies closes its sockets and its peers' pending collectives fail at once; either way the
// collective throws std::runtime_error naming the rank and the operation, and the run exits 1
// instead of hanging. Guarded by tests/models/test_dist.cpp and the 2-rank CLI tests
// (tests/experiments/test_train_dist_cli.cpp); the NCCL group by tests/models/test_dist_nccl.cpp
// (one rank, on a GPU: NCCL refuses two ranks on one device).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace c10d {
class ProcessGroup;
class Work;
}

namespace jacond::models::dist {

/// Where this process sits in a launch.
struct LaunchEnv {
  int rank = 0, world_size = 1, local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string launcher = "none";  // none | torchrun | slurm (which variables were read)
  // torchrun's agent serves the store itself (TORCHELASTIC_USE_AGENT_STORE=True): every rank,
  // rank 0 included, is then a client, under the key prefix of the agent's restart count
  // (TORCHELASTIC_RESTART_COUNT), as torch.distributed does.
  bool agent_store = false;
  int restart_count = 0;
  bool distributed() const { return world_size > 1; }
};

/// Reads the launch variables through `lookup` (name -> value, nullopt when unset). A malformed
/// or inconsistent value throws std::invalid_argument naming the variable ("RANK=2 is not below
/// WORLD_SIZE=2").
LaunchEnv read_launch_env(const std::function<std::optional<std::string>(const std::string&)>& lookup);
/// read_launch_env of this process's environment.
LaunchEnv read_launch_env();

/// The c10d backend of a group: Gloo all-reduces CPU tensors, NCCL CUDA tensors.
enum class DistBackend { gloo, nccl };
/// "gloo" | "nccl"; std::invalid_argument otherwise.
DistBackend parse_dist_backend(const std::string& name);
std::string to_string(DistBackend backend);
/// Whether this build has the backend: c10d with Gloo's headers, or a CUDA LibTorch with
/// ProcessGroupNCCL and nccl.h (models/CMakeLists.txt).
bool backend_available(DistBackend backend);

/// The ranks of one run joined by Gloo or NCCL. Collectives act in place on contiguous tensors;
/// the helpers below take tensors on any device and move them to device() and back.
class RankGroup {
 public:
  /// Rendezvous at env.master_addr:env.master_port (rank 0 serves the store) and connect the
  /// full mesh; std::runtime_error after `rendezvous_timeout` when a rank does not show up.
  /// The rendezvous has its own budget because a TCPStore client that comes before the server
  /// retries its connect about once a second: a collective timeout of a second or two would make
  /// a merely late start fail (seen under load in CI).
  /// Under NCCL this process's GPU is cuda:env.local_rank (std::runtime_error when this
  /// machine has no such device).
  RankGroup(const LaunchEnv& env, std::chrono::milliseconds timeout,
            std::optional<std::chrono::milliseconds> rendezvous_timeout = std::nullopt,
            DistBackend backend = DistBackend::gloo);
  ~RankGroup();
  RankGroup(const RankGroup&) = delete;
  RankGroup& operator=(const RankGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  DistBackend backend() const { return backend_; }
  /// Where the collectives run: the CPU under Gloo, cuda:LOCAL_RANK under NCCL (the device the
  /// model of this rank must live on).
  const torch::Device& device() const { return device_; }

  /// t <- Σ_ranks t.
  void allreduce_sum(torch::Tensor& t);
  /// Σ_ranks of each value (fp64), for a few scalars (losses, counts, flags).
  std::vector<double> allreduce_sum(const std::vector<double>& values);
  /// t <- t of rank `root`.
  void broadcast(torch::Tensor& t, int root = 0);
  /// Every rank's `text`, in rank order, on every rank (an all-gather of the bytes, padded to
  /// the longest).
  std::vector<std::string> allgather_text(const std::string& text);
  /// Returns when every rank has called it (an all-reduce of one number, on either backend).
  void barrier();
  /// The c10d process group (for c10d::Reducer and broadcast_coalesced).
  const c10::intrusive_ptr<c10d::ProcessGroup>& process_group() const;

 private:
  void in_place(torch::Tensor& t, const std::string& op,
                const std::function<c10::intrusive_ptr<c10d::Work>(std::vector<at::Tensor>&)>& collective);

  struct Impl;
  std::unique_ptr<Impl> impl_;
  int rank_ = 0, size_ = 1;
  std::chrono::milliseconds timeout_;
  DistBackend backend_ = DistBackend::gloo;
  torch::Device device_ = torch::kCPU;
};

/// A TCP port on 127.0.0.1 that was free a moment ago (bind to port 0, read it, close): for
/// local launches and tests. std::runtime_error when no socket can be bound.
int free_loopback_port();

/// Whether this build has c10d with Gloo (models/CMakeLists.txt); without it a Gloo RankGroup
/// throws. The same as backend_available(DistBackend::gloo).
constexpr bool c10d_available() { return JACOND_HAVE_C10D_GLOO; }

/// Runs `collective` (which waits on a c10d work), turning any c10d/Gloo error into
/// std::runtime_error("rank R: OP failed ...: WHAT").
void run_collective(int rank, const std::string& op, const std::function<void()>& collective);

}  // namespace jacond::models::dist
