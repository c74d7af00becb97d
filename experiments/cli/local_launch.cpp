#include "experiments/cli/local_launch.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/dist/process_group.h"

namespace jacond::cli {

namespace fs = std::filesystem;

namespace {

// A rank's stderr goes to a file the launcher reads when the rank ends: the ranks fail together,
// each with its own copy of the error, and N copies interleaved on one terminal are not one line.
struct RankStderr {
  std::string path;
  int fd = -1;
};

RankStderr open_rank_stderr(int rank) {
  RankStderr out;
  std::string name = (fs::temp_directory_path() / ("jacond-rank" + std::to_string(rank) + "-XXXXXX")).string();
  out.fd = ::mkostemp(name.data(), O_CLOEXEC);  // a rank gets its own as fd 2 (dup2 clears the flag), not the others'
  if (out.fd < 0) throw std::runtime_error("--nproc: cannot make a file for rank " + std::to_string(rank) + "'s stderr: " + std::strerror(errno));
  out.path = name;
  return out;
}

std::string last_line(const std::string& path) {
  std::ifstream in(path);
  std::string line, last;
  while (std::getline(in, line))
    if (line.find_first_not_of(" \t\r") != std::string::npos) last = line;
  return last;
}

// "jacond train: error: WHAT" from rank R becomes "jacond train: error: rank R: WHAT".
std::string with_rank(const std::string& error, int rank) {
  const std::string prefix = "jacond train: error: ";
  const std::string tag = "rank " + std::to_string(rank) + ": ";
  if (error.rfind(prefix, 0) == 0) return error.rfind(prefix + "rank ", 0) == 0 ? error : prefix + tag + error.substr(prefix.size());
  return "jacond train --nproc: " + tag + (error.empty() ? "failed without a message" : error);
}

}  // namespace

int launch_local_ranks(int nproc, int argc, char** args) {
  const std::string port = std::to_string(models::dist::free_loopback_port());
  std::vector<char*> child_argv{const_cast<char*>("jacond")};
  for (int i = 0; i < argc; ++i) child_argv.push_back(args[i]);
  child_argv.push_back(nullptr);
  std::cout.flush();
  std::map<pid_t, int> rank_of;
  std::vector<RankStderr> stderr_of;
  for (int rank = 0; rank < nproc; ++rank) stderr_of.push_back(open_rank_stderr(rank));
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
      ::dup2(stderr_of[rank].fd, STDERR_FILENO);
      ::execv("/proc/self/exe", child_argv.data());
      std::cerr << "jacond train --nproc: cannot start rank " << rank << ": " << std::strerror(errno) << "\n";
      std::_Exit(127);
    }
    rank_of[pid] = rank;
  }
  for (const RankStderr& e : stderr_of) ::close(e.fd);
  int result = 0;
  std::string error;  // the first failed rank's one line
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
    error = WIFEXITED(status) ? with_rank(last_line(stderr_of[rank].path), rank)
                              : "jacond train --nproc: rank " + std::to_string(rank) + " was killed by signal " +
                                    std::to_string(WTERMSIG(status));
    for (const auto& [other, r] : rank_of) ::kill(other, SIGTERM);
  }
  // A run that succeeded passes rank 0's stderr on (a library's notices); a failed one says its one line.
  if (result == 0) {
    std::ifstream in(stderr_of[0].path);
    if (in.peek() != std::ifstream::traits_type::eof()) std::cerr << in.rdbuf();  // an empty one would fail std::cerr
  } else {
    std::cerr << error << "\n";
  }
  for (const RankStderr& e : stderr_of) ::unlink(e.path.c_str());
  return result;
}

}  // namespace jacond::cli
