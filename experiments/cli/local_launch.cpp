#include "experiments/cli/local_launch.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/dist/process_group.h"

namespace jacond::cli {

namespace fs = std::filesystem;

namespace {

// A rank's stderr: an unlinked temporary file (no path is left behind on any exit), which the
// launcher reads once the rank has ended. The ranks of a failed run fail together, each printing
// its own copy of the error; N copies interleaved on one terminal are not one line.
class RankStderr {
 public:
  explicit RankStderr(int rank) {
    std::string name = (fs::temp_directory_path() / ("jacond-rank" + std::to_string(rank) + "-XXXXXX")).string();
    fd_ = ::mkostemp(name.data(), O_CLOEXEC);  // a rank gets its own as fd 2 (dup2 clears the flag), not the others'
    if (fd_ < 0)
      throw std::runtime_error("--nproc: cannot make a file for rank " + std::to_string(rank) + "'s stderr: " + std::strerror(errno));
    ::unlink(name.c_str());
  }
  ~RankStderr() {
    if (fd_ >= 0) ::close(fd_);
  }
  RankStderr(RankStderr&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  RankStderr(const RankStderr&) = delete;
  RankStderr& operator=(const RankStderr&) = delete;
  RankStderr& operator=(RankStderr&&) = delete;

  int fd() const { return fd_; }
  std::string text() const {  // pread: the rank's writes moved the shared offset
    std::string out;
    char buf[4096];
    for (off_t at = 0;;) {
      const ssize_t n = ::pread(fd_, buf, sizeof buf, at);
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
      at += n;
    }
    return out;
  }
  std::string last_line() const {
    std::istringstream in(text());
    std::string line, last;
    while (std::getline(in, line))
      if (line.find_first_not_of(" \t\r") != std::string::npos) last = line;
    return last;
  }

 private:
  int fd_ = -1;
};

// A collective that failed because a peer died: the peer's own error is the one to show.
bool is_peer_failure(const std::string& line) { return line.find("(a rank died, or did not answer") != std::string::npos; }

// The one line for a rank that exited with `code`: its own error with "rank R: " after
// "jacond train: error: ", or what it printed otherwise.
std::string exit_line(const std::string& last, int rank, int code) {
  const std::string prefix = "jacond train: error: ", tag = "rank " + std::to_string(rank) + ": ";
  if (last.rfind(prefix, 0) == 0)
    return last.rfind(prefix + tag, 0) == 0 ? last : prefix + tag + last.substr(prefix.size());
  if (last.rfind("jacond train --nproc: ", 0) == 0) return last;  // the launcher's own (exec failed)
  return "jacond train --nproc: " + tag + "exited with " + std::to_string(code) + (last.empty() ? " and no message" : ": " + last);
}

// A signal sent to the launcher alone (a supervisor's SIGTERM to its main pid, a SIGHUP) is passed
// on to the ranks, which would otherwise train on as orphans and race a later --resume. The ranks'
// pids live where the handler can read them without locks; 0 marks a rank not started or reaped.
// Forks, pid records and clears happen with the signals held (SignalsHeld), so the handler never
// sees a rank half-recorded, and a forked child never runs it.
volatile sig_atomic_t g_rank_pid[kMaxLocalRanks];
volatile sig_atomic_t g_ranks = 0;
volatile sig_atomic_t g_forwarded = 0;  // the first signal passed on (0: none)

constexpr std::array<int, 3> kForwarded{SIGTERM, SIGINT, SIGHUP};

sigset_t forwarded_set() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : kForwarded) sigaddset(&set, sig);
  return set;
}

extern "C" void forward_to_ranks(int sig) {
  const int saved_errno = errno;
  const int send = g_forwarded != 0 ? SIGKILL : sig;  // a second signal: ranks that did not stop are killed
  if (g_forwarded == 0) g_forwarded = sig;
  for (sig_atomic_t i = 0; i < g_ranks; ++i)
    if (g_rank_pid[i] > 0) ::kill(static_cast<pid_t>(g_rank_pid[i]), send);
  errno = saved_errno;
}

// Installs forward_to_ranks for the forwarded signals while the ranks run, except a signal the
// launcher ignores (nohup's SIGHUP stays ignored, by the ranks too); the launcher's former
// dispositions come back on destruction, and in each forked rank before it execs.
class ForwardSignals {
 public:
  explicit ForwardSignals(int nproc) {
    g_forwarded = 0;
    for (int i = 0; i < nproc; ++i) g_rank_pid[i] = 0;
    g_ranks = nproc;
    struct sigaction sa {};
    sa.sa_handler = forward_to_ranks;
    sa.sa_mask = forwarded_set();  // one handler at a time
    for (size_t i = 0; i < kForwarded.size(); ++i) {
      ::sigaction(kForwarded[i], nullptr, &old_[i]);
      if (old_[i].sa_handler != SIG_IGN) ::sigaction(kForwarded[i], &sa, nullptr);
    }
  }
  ~ForwardSignals() {
    restore();
    g_ranks = 0;
  }
  ForwardSignals(const ForwardSignals&) = delete;
  ForwardSignals& operator=(const ForwardSignals&) = delete;
  void restore() const {
    for (size_t i = 0; i < kForwarded.size(); ++i) ::sigaction(kForwarded[i], &old_[i], nullptr);
  }

 private:
  std::array<struct sigaction, 3> old_{};
};

// Holds the forwarded signals while in scope (they are delivered when it ends).
class SignalsHeld {
 public:
  SignalsHeld() {
    const sigset_t set = forwarded_set();
    ::pthread_sigmask(SIG_BLOCK, &set, &old_);
  }
  ~SignalsHeld() { ::pthread_sigmask(SIG_SETMASK, &old_, nullptr); }
  SignalsHeld(const SignalsHeld&) = delete;
  SignalsHeld& operator=(const SignalsHeld&) = delete;
  // In a forked child, after ForwardSignals::restore: the launcher's own mask (a signal that came
  // while held now acts as it would on the rank itself).
  void release_in_child() const { ::pthread_sigmask(SIG_SETMASK, &old_, nullptr); }

 private:
  sigset_t old_;
};

}  // namespace

int launch_local_ranks(int nproc, int argc, char** args) {
  if (nproc > kMaxLocalRanks) throw std::logic_error("launch_local_ranks: more ranks than kMaxLocalRanks");
  const std::string port = std::to_string(models::dist::free_loopback_port());
  std::vector<char*> child_argv{const_cast<char*>("jacond")};
  for (int i = 0; i < argc; ++i) child_argv.push_back(args[i]);
  child_argv.push_back(nullptr);
  std::cout.flush();
  std::vector<RankStderr> stderr_of;
  for (int rank = 0; rank < nproc; ++rank) stderr_of.emplace_back(rank);
  std::map<pid_t, int> rank_of;
  const pid_t launcher = ::getpid();
  ForwardSignals forward(nproc);
  for (int rank = 0; rank < nproc; ++rank) {
    const SignalsHeld held;
    const pid_t pid = ::fork();
    if (pid < 0) {
      for (const auto& [started, r] : rank_of) ::kill(started, SIGTERM);
      throw std::runtime_error(std::string("--nproc: fork failed: ") + std::strerror(errno));
    }
    if (pid == 0) {
      const std::map<std::string, std::string> env{
          {"RANK", std::to_string(rank)},      {"LOCAL_RANK", std::to_string(rank)},
          {"WORLD_SIZE", std::to_string(nproc)}, {"LOCAL_WORLD_SIZE", std::to_string(nproc)},
          {"MASTER_ADDR", "127.0.0.1"},        {"MASTER_PORT", port},
          {kLocalLaunchVariable, "1"}};
      for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
      ::dup2(stderr_of[rank].fd(), STDERR_FILENO);
      // A launcher killed outright (SIGKILL: nothing to forward) takes its ranks with it. The
      // setting survives execv; a launcher that died before it was made is caught by getppid.
      if (::prctl(PR_SET_PDEATHSIG, SIGTERM) != 0) {
        std::cerr << "jacond train --nproc: rank " << rank << ": cannot set its parent-death signal: " << std::strerror(errno) << "\n";
        std::_Exit(1);
      }
      if (::getppid() != launcher) std::_Exit(1);  // the launcher is gone: nobody to report to
      forward.restore();
      held.release_in_child();
      ::execv("/proc/self/exe", child_argv.data());
      std::cerr << "jacond train --nproc: cannot start rank " << rank << ": " << std::strerror(errno) << "\n";
      std::_Exit(127);
    }
    rank_of[pid] = rank;
    g_rank_pid[rank] = pid;
  }
  // Every rank is waited for; the first failure stops the others. Of the ranks that exited with an
  // error, the first whose error is its own (not a collective that lost a peer) is the one shown.
  int result = 0;
  std::string first, own;
  while (!rank_of.empty()) {
    // Which child ended, left unreaped (WNOWAIT) until its pid is out of the handler's table: a
    // reaped pid may be reused by another process, which a forwarded signal must not reach.
    siginfo_t info{};
    if (::waitid(P_ALL, 0, &info, WEXITED | WNOWAIT) != 0) {
      if (errno == EINTR) continue;
      break;
    }
    const pid_t pid = info.si_pid;
    const auto it = rank_of.find(pid);
    if (it != rank_of.end()) {
      const SignalsHeld held;
      g_rank_pid[it->second] = 0;
    }
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (it == rank_of.end()) continue;
    const int rank = it->second;
    rank_of.erase(it);
    const bool exited = WIFEXITED(status);
    if (exited && WEXITSTATUS(status) == 0) continue;
    const std::string last = stderr_of[rank].last_line();
    if (exited && own.empty() && !is_peer_failure(last)) own = exit_line(last, rank, WEXITSTATUS(status));
    if (result != 0) continue;  // stopped by us, or failed after the first
    result = exited ? WEXITSTATUS(status) : 1;
    first = exited ? exit_line(last, rank, result)
                   : "jacond train --nproc: rank " + std::to_string(rank) + " was killed by signal " +
                         std::to_string(WTERMSIG(status)) + (last.empty() ? "" : " after: " + last);
    for (const auto& [other, r] : rank_of) ::kill(other, SIGTERM);
  }
  if (g_forwarded != 0 && result != 0 && own.empty()) {  // stopped from outside: said, and the shell's exit code
    std::cerr << "jacond train --nproc: stopped by signal " << g_forwarded << ", passed on to the ranks\n";
    return 128 + g_forwarded;
  }
  if (result == 0) {
    std::cerr << stderr_of[0].text();  // a run that succeeded passes rank 0's stderr on (a library's notices)
  } else {
    std::cerr << (own.empty() ? first : own) << "\n";
  }
  return result;
}

}  // namespace jacond::cli
