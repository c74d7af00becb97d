#include "models/dist/process_group.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#if JACOND_HAVE_C10D
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#if JACOND_HAVE_C10D_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#if JACOND_HAVE_C10D_NCCL
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif
#endif

namespace jacond::models::dist {

namespace {

// A whole non-negative integer, or std::invalid_argument naming the variable.
int parse_count(const std::string& name, const std::string& text) {
  size_t used = 0;
  long v = -1;
  try {
    v = std::stol(text, &used);
  } catch (const std::logic_error&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || v < 0 || v > 65535)
    throw std::invalid_argument(name + "=" + text + " is not a whole number in [0, 65535]");
  return static_cast<int>(v);
}

}  // namespace

LaunchEnv read_launch_env(const std::function<std::optional<std::string>(const std::string&)>& lookup) {
  LaunchEnv env;
  // torchrun's names first; Slurm's when RANK is absent (srun without torchrun).
  const char* rank_var = "RANK";
  const char* size_var = "WORLD_SIZE";
  const char* local_var = "LOCAL_RANK";
  if (lookup("RANK")) {
    env.launcher = "torchrun";
  } else if (lookup("SLURM_PROCID") && lookup("SLURM_NTASKS")) {
    env.launcher = "slurm";
    rank_var = "SLURM_PROCID", size_var = "SLURM_NTASKS", local_var = "SLURM_LOCALID";
  } else {
    if (auto ws = lookup("WORLD_SIZE"); ws && parse_count("WORLD_SIZE", *ws) > 1)
      throw std::invalid_argument("WORLD_SIZE=" + *ws + " is set but RANK is not");
    return env;
  }
  const auto size_text = lookup(size_var);
  if (!size_text) throw std::invalid_argument(std::string(rank_var) + " is set but " + size_var + " is not");
  env.rank = parse_count(rank_var, *lookup(rank_var));
  env.world_size = parse_count(size_var, *size_text);
  if (env.world_size < 1) throw std::invalid_argument(std::string(size_var) + "=" + *size_text + " must be >= 1");
  if (env.rank >= env.world_size)
    throw std::invalid_argument(std::string(rank_var) + "=" + std::to_string(env.rank) + " is not below " + size_var +
                                "=" + std::to_string(env.world_size));
  if (auto local = lookup(local_var)) env.local_rank = parse_count(local_var, *local);
  if (!env.distributed()) return env;
  const auto addr = lookup("MASTER_ADDR"), port = lookup("MASTER_PORT");
  if (!addr || addr->empty()) throw std::invalid_argument("MASTER_ADDR is not set (rank 0's host, where the ranks meet)");
  if (!port) throw std::invalid_argument("MASTER_PORT is not set (the port rank 0 serves the rendezvous on)");
  env.master_addr = *addr;
  env.master_port = parse_count("MASTER_PORT", *port);
  if (env.master_port == 0) throw std::invalid_argument("MASTER_PORT=0: the other ranks cannot find a port chosen by rank 0");
  env.agent_store = lookup("TORCHELASTIC_USE_AGENT_STORE") == std::optional<std::string>("True");
  if (auto restarts = lookup("TORCHELASTIC_RESTART_COUNT")) env.restart_count = parse_count("TORCHELASTIC_RESTART_COUNT", *restarts);
  return env;
}

LaunchEnv read_launch_env() {
  return read_launch_env([](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (!v) return std::nullopt;
    return std::string(v);
  });
}

int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error(std::string("cannot open a socket: ") + std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const std::string why = std::strerror(errno);
    ::close(fd);
    throw std::runtime_error("cannot find a free port on 127.0.0.1: " + why);
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

void run_collective(int rank, const std::string& op, const std::function<void()>& collective) {
  try {
    collective();
  } catch (const std::exception& e) {
    std::string what = e.what();
    if (const auto nl = what.find('\n'); nl != std::string::npos) what.resize(nl);  // c10 appends a C++ trace
    throw std::runtime_error("rank " + std::to_string(rank) + ": " + op +
                             " failed (a rank died, or did not answer within --dist-timeout): " + what);
  }
}

DistBackend parse_dist_backend(const std::string& name) {
  if (name == "gloo") return DistBackend::gloo;
  if (name == "nccl") return DistBackend::nccl;
  throw std::invalid_argument("the data-parallel backend must be gloo or nccl, got '" + name + "'");
}

std::string to_string(DistBackend backend) { return backend == DistBackend::nccl ? "nccl" : "gloo"; }

bool backend_available(DistBackend backend) {
  return backend == DistBackend::nccl ? JACOND_HAVE_C10D_NCCL : JACOND_HAVE_C10D_GLOO;
}

#if JACOND_HAVE_C10D

namespace {

// LibTorch >= 2.4 has TCPStoreOptions::useLibUV (the store's server on libuv), on by default; 1.13
// has no such field.
template <class Options, class = void>
struct has_use_libuv : std::false_type {};
template <class Options>
struct has_use_libuv<Options, std::void_t<decltype(std::declval<Options&>().useLibUV)>> : std::true_type {};

// The rendezvous store. Where LibTorch offers the libuv server it is used unless USE_LIBUV=0 (the
// switch torch.distributed reads), and a LibTorch built without libuv (Debian's 2.x; PyTorch's
// default then fails with "use_libuv was requested but PyTorch was build without libuv support")
// gets the classic server: the wire protocol and the clients are the same either way.
// (A template so that the branch 1.13 lacks is never instantiated.)
template <class Options>
c10::intrusive_ptr<c10d::TCPStore> tcp_store(const LaunchEnv& env, Options options) {
  if constexpr (has_use_libuv<Options>::value) {
    const char* use_libuv = std::getenv("USE_LIBUV");
    options.useLibUV = !(use_libuv && std::string(use_libuv) == "0");
    if (options.useLibUV) {
      try {
        return c10::make_intrusive<c10d::TCPStore>(env.master_addr, options);
      } catch (const c10::Error& e) {
        if (std::string(e.what()).find("without libuv") == std::string::npos) throw;
        options.useLibUV = false;
      }
    }
  }
  return c10::make_intrusive<c10d::TCPStore>(env.master_addr, options);
}

c10::intrusive_ptr<c10d::Store> rendezvous(const LaunchEnv& env, std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions store_options;
  store_options.port = static_cast<std::uint16_t>(env.master_port);
  store_options.isServer = env.rank == 0 && !env.agent_store;
  store_options.numWorkers = static_cast<size_t>(env.world_size);
  store_options.waitWorkers = !env.agent_store;
  store_options.timeout = timeout;
  c10::intrusive_ptr<c10d::Store> store = tcp_store(env, store_options);
  if (env.agent_store)
    store = c10::make_intrusive<c10d::PrefixStore>("/worker/attempt_" + std::to_string(env.restart_count), store);
  return store;
}

// The process group of one backend. LibTorch >= 2.0 makes Gloo and NCCL c10d::Backends inside a
// ProcessGroup that routes `device_type`'s tensors to them, as torch.distributed's
// init_process_group builds it (the group's constructor took Options up to 2.2); in 1.13 the
// backend is itself the ProcessGroup. The branch not taken is never instantiated.
template <class BackendImpl, class Group = c10d::ProcessGroup>
c10::intrusive_ptr<c10d::ProcessGroup> group_of(const c10::intrusive_ptr<c10d::Store>& store, const LaunchEnv& env,
                                                c10::intrusive_ptr<BackendImpl> backend, c10::DeviceType device_type,
                                                std::chrono::milliseconds timeout) {
  if constexpr (std::is_base_of_v<Group, BackendImpl>) {
    return backend;
  } else {
    c10::intrusive_ptr<Group> group;
    if constexpr (std::is_constructible_v<Group, c10::intrusive_ptr<c10d::Store>, int, int>)
      group = c10::make_intrusive<Group>(store, env.rank, env.world_size);
    else
      group = c10::make_intrusive<Group>(store, env.rank, env.world_size,
                                         c10::make_intrusive<typename Group::Options>(backend->getBackendName(), timeout));
    const auto type = Group::strToBackendType(backend->getBackendName());
    group->setBackend(device_type, type, backend);
    group->setDefaultBackend(type);
    return group;
  }
}

#if JACOND_HAVE_C10D_GLOO
c10::intrusive_ptr<c10d::ProcessGroup> gloo_group(const c10::intrusive_ptr<c10d::Store>& store, const LaunchEnv& env,
                                                  std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname)
    options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
  else
    options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  auto gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(store, env.rank, env.world_size, options);
  return group_of(store, env, gloo, c10::DeviceType::CPU, timeout);
}
#endif

#if JACOND_HAVE_C10D_NCCL
// LibTorch 2.x's ProcessGroupNCCL::shutdown(), what torch.distributed.destroy_process_group
// calls; a LibTorch without it has nothing to call (the branch is never instantiated).
template <class Backend, class = void>
struct has_shutdown : std::false_type {};
template <class Backend>
struct has_shutdown<Backend, std::void_t<decltype(std::declval<Backend&>().shutdown())>> : std::true_type {};

template <class Backend>
std::function<void()> shutdown_of(const c10::intrusive_ptr<Backend>& backend) {
  if constexpr (has_shutdown<Backend>::value)
    return [backend] { backend->shutdown(); };
  else
    return {};
}

// NCCL on cuda:LOCAL_RANK, made the current device first (NCCL binds its communicator to it).
// *shut_down gets what tears its communicators down (shutdown_of).
c10::intrusive_ptr<c10d::ProcessGroup> nccl_group(const c10::intrusive_ptr<c10d::Store>& store, const LaunchEnv& env,
                                                  std::chrono::milliseconds timeout, std::function<void()>* shut_down) {
  c10::cuda::set_device(static_cast<c10::DeviceIndex>(env.local_rank));
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  auto nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, env.rank, env.world_size, options);
  *shut_down = shutdown_of(nccl);
  return group_of(store, env, nccl, c10::DeviceType::CUDA, timeout);
}
#endif

// The device a rank's collectives run on; std::runtime_error when it cannot be had here.
torch::Device collective_device(const LaunchEnv& env, DistBackend backend) {
  if (!backend_available(backend))
    throw std::runtime_error("this jacond was built without c10d's " + to_string(backend) + " backend" +
                             (backend == DistBackend::nccl ? " (it needs a CUDA LibTorch with ProcessGroupNCCL and nccl.h)"
                                                           : " (libgloo-dev and LibTorch's distributed headers)"));
  if (backend == DistBackend::gloo) return torch::kCPU;
  const auto gpus = static_cast<int>(torch::cuda::device_count());
  if (env.local_rank >= gpus)
    throw std::runtime_error("NCCL: LOCAL_RANK=" + std::to_string(env.local_rank) + " needs cuda:" +
                             std::to_string(env.local_rank) + ", but this machine has " + std::to_string(gpus) +
                             " CUDA device(s): one rank per GPU");
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(env.local_rank));
}

// Waits for a collective. Gloo's work waits on the host, up to the group's timeout. NCCL's
// wait() with a timeout polls on the host in a sleep loop, which adds a poll interval to every
// collective; without one it only orders the current CUDA stream after NCCL's, and the copy or
// .item() that follows each collective here waits on the host. The group's timeout is NCCL's
// watchdog's then (options->timeout in nccl_group), as in torch.distributed.
void wait_for(c10d::Work& work, DistBackend backend, std::chrono::milliseconds timeout) {
  if (backend == DistBackend::nccl)
    work.wait();
  else
    work.wait(timeout);
}

}  // namespace

struct RankGroup::Impl {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::ProcessGroup> group;
  std::function<void()> shut_down;  // NCCL's communicators, before the group goes (empty: nothing)
};

RankGroup::RankGroup(const LaunchEnv& env, std::chrono::milliseconds timeout,
                     std::optional<std::chrono::milliseconds> rendezvous_timeout, DistBackend backend)
    : impl_(std::make_unique<Impl>()),
      rank_(env.rank),
      size_(env.world_size),
      timeout_(timeout),
      backend_(backend),
      device_(collective_device(env, backend)) {
  run_collective(rank_, "rendezvous at " + env.master_addr + ":" + std::to_string(env.master_port), [&] {
    impl_->store = rendezvous(env, rendezvous_timeout.value_or(timeout));
#if JACOND_HAVE_C10D_NCCL
    if (backend == DistBackend::nccl) impl_->group = nccl_group(impl_->store, env, timeout, &impl_->shut_down);
#endif
#if JACOND_HAVE_C10D_GLOO
    if (backend == DistBackend::gloo) impl_->group = gloo_group(impl_->store, env, timeout);
#endif
  });
}

// NCCL's communicators go down explicitly, as destroy_process_group does: LibTorch >= 2.4 warns at
// exit otherwise, and leaving them to static destruction can race the CUDA driver's own teardown.
RankGroup::~RankGroup() {
  if (!impl_->shut_down) return;
  try {
    impl_->shut_down();
  } catch (...) {  // the run's outcome is already decided, and a destructor does not throw
  }
}

const c10::intrusive_ptr<c10d::ProcessGroup>& RankGroup::process_group() const { return impl_->group; }

// `collective` on t's copy on the group's device (t itself when it is there), then back into t.
void RankGroup::in_place(torch::Tensor& t, const std::string& op,
                         const std::function<c10::intrusive_ptr<c10d::Work>(std::vector<at::Tensor>&)>& collective) {
  std::vector<at::Tensor> tensors{t.to(device_)};
  run_collective(rank_, op, [&] { wait_for(*collective(tensors), backend_, timeout_); });
  if (!tensors[0].is_same(t)) t.copy_(tensors[0]);
}

void RankGroup::allreduce_sum(torch::Tensor& t) {
  in_place(t, "all-reduce", [&](std::vector<at::Tensor>& tensors) { return impl_->group->allreduce(tensors); });
}

void RankGroup::broadcast(torch::Tensor& t, int root) {
  c10d::BroadcastOptions o;
  o.rootRank = root;
  in_place(t, "broadcast", [&](std::vector<at::Tensor>& tensors) { return impl_->group->broadcast(tensors, o); });
}

std::vector<double> RankGroup::allreduce_sum(const std::vector<double>& values) {
  auto t = torch::tensor(values, torch::kFloat64);
  allreduce_sum(t);
  return std::vector<double>(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
}

std::vector<std::string> RankGroup::allgather_text(const std::string& text) {
  auto length = torch::tensor({static_cast<int64_t>(text.size())}, torch::kInt64).to(device_);
  std::vector<std::vector<at::Tensor>> lengths(1);
  for (int r = 0; r < size_; ++r) lengths[0].push_back(torch::empty_like(length));
  std::vector<at::Tensor> mine{length};
  run_collective(rank_, "all-gather", [&] { wait_for(*impl_->group->allgather(lengths, mine), backend_, timeout_); });
  std::vector<int64_t> sizes;
  for (const auto& l : lengths[0]) sizes.push_back(l.item<int64_t>());
  const int64_t longest = *std::max_element(sizes.begin(), sizes.end());
  auto bytes = torch::zeros({std::max<int64_t>(longest, 1)}, torch::kUInt8);
  std::copy(text.begin(), text.end(), bytes.data_ptr<uint8_t>());
  std::vector<at::Tensor> input{bytes.to(device_)};
  std::vector<std::vector<at::Tensor>> gathered(1);
  for (int r = 0; r < size_; ++r) gathered[0].push_back(torch::empty_like(input[0]));
  run_collective(rank_, "all-gather", [&] { wait_for(*impl_->group->allgather(gathered, input), backend_, timeout_); });
  std::vector<std::string> out;
  for (int r = 0; r < size_; ++r) {
    const auto host = gathered[0][r].cpu();
    const auto* p = host.data_ptr<uint8_t>();
    out.emplace_back(p, p + sizes[static_cast<size_t>(r)]);
  }
  return out;
}

// An all-reduce completes only once every rank has contributed; .item() waits for it on the
// device too. (c10d's NCCL barrier guesses the device; this one does not.)
void RankGroup::barrier() { allreduce_sum(std::vector<double>{0.0}); }

#else  // no c10d backend in this build: a rank cannot be made, so nothing below is reached

struct RankGroup::Impl {};

RankGroup::RankGroup(const LaunchEnv& env, std::chrono::milliseconds timeout, std::optional<std::chrono::milliseconds>,
                     DistBackend backend)
    : rank_(env.rank), size_(env.world_size), timeout_(timeout), backend_(backend) {
  throw std::runtime_error("this jacond was built without c10d (libgloo-dev and LibTorch's distributed "
                           "headers): no data-parallel training; run one process");
}
RankGroup::~RankGroup() = default;
const c10::intrusive_ptr<c10d::ProcessGroup>& RankGroup::process_group() const {
  throw std::logic_error("RankGroup without c10d");
}
void RankGroup::allreduce_sum(torch::Tensor&) {}
std::vector<double> RankGroup::allreduce_sum(const std::vector<double>& values) { return values; }
void RankGroup::broadcast(torch::Tensor&, int) {}
std::vector<std::string> RankGroup::allgather_text(const std::string& text) { return {text}; }
void RankGroup::barrier() {}

#endif

}  // namespace jacond::models::dist
