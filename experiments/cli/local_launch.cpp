#include "experiments/cli/local_launch.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/dist/process_group.h"

namespace jacond::cli {

int launch_local_ranks(int nproc, int argc, char** args) {
  const std::string port = std::to_string(models::dist::free_loopback_port());
  std::vector<char*> child_argv{const_cast<char*>("jacond")};
  for (int i = 0; i < argc; ++i) child_argv.push_back(args[i]);
  child_argv.push_back(nullptr);
  std::cout.flush();
  std::map<pid_t, int> rank_of;
  for (int rank = 0; rank < nproc; ++rank) {
    const pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error(std::string("--nproc: fork failed: ") + std::strerror(errno));
    if (pid == 0) {
      const std::map<std::string, std::string> env{
          {"RANK", std::to_string(rank)},      {"LOCAL_RANK", std::to_string(rank)},
          {"WORLD_SIZE", std::to_string(nproc)}, {"LOCAL_WORLD_SIZE", std::to_string(nproc)},
          {"MASTER_ADDR", "127.0.0.1"},        {"MASTER_PORT", port},
          {kLocalLaunchVariable, "1"}};
      for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
      ::execv("/proc/self/exe", child_argv.data());
      std::cerr << "jacond train --nproc: cannot start rank " << rank << ": " << std::strerror(errno) << "\n";
      std::_Exit(127);
    }
    rank_of[pid] = rank;
  }
  int result = 0;
  while (!rank_of.empty()) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, 0);
    if (pid < 0) {
      if (errno == EINTR) continue;
      break;
    }
    const auto it = rank_of.find(pid);
    if (it == rank_of.end()) continue;
    const int rank = it->second;
    rank_of.erase(it);
    const bool failed = !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    if (!failed || result != 0) continue;
    result = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
    if (WIFEXITED(status))
      std::cerr << "jacond train --nproc: rank " << rank << " exited with " << result << "; stopping the other ranks\n";
    else
      std::cerr << "jacond train --nproc: rank " << rank << " was killed by signal " << WTERMSIG(status)
                << "; stopping the other ranks\n";
    for (const auto& [other, r] : rank_of) ::kill(other, SIGTERM);
  }
  return result;
}

}  // namespace jacond::cli
