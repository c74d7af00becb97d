#include "experiments/bench/python_route.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

extern char** environ;

namespace jacond::cli {

namespace {
std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}
}  // namespace

std::string one_line_tail(const std::string& text, size_t max_chars) {
  std::string t = text;
  while (!t.empty() && std::isspace(static_cast<unsigned char>(t.back()))) t.pop_back();
  if (t.size() > max_chars) t = "..." + t.substr(t.size() - max_chars);
  std::string out;
  for (char c : t) {
    if (c == '\n')
      out += " | ";
    else if (c != '\r')
      out += c;
  }
  return out.empty() ? "(empty stderr)" : out;
}

PythonRun spawn_python(const std::vector<std::string>& argv, int threads, const std::string& dir) {
  const std::string out_path = dir + "/python_route.stdout", err_path = dir + "/python_route.stderr";
  std::vector<std::string> env_strings;
  const std::vector<std::string> thread_vars = {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"};
  for (char** e = environ; e && *e; ++e) {
    const std::string kv = *e;
    const std::string key = kv.substr(0, kv.find('='));
    if (std::find(thread_vars.begin(), thread_vars.end(), key) == thread_vars.end()) env_strings.push_back(kv);
  }
  for (const auto& v : thread_vars) env_strings.push_back(v + "=" + std::to_string(threads));
  std::vector<char*> envp, args;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (auto& s : argv_copy) args.push_back(s.data());
  args.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  PythonRun run;
  const auto t0 = std::chrono::steady_clock::now();
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw std::runtime_error("python route: cannot start " + argv[0] + ": " + std::strerror(rc));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) throw std::runtime_error("python route: waitpid failed: " + std::string(std::strerror(errno)));
  }
  run.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  run.stdout_text = read_text(out_path);
  run.stderr_text = read_text(err_path);
  return run;
}

nlohmann::json run_python_json(const std::vector<std::string>& argv, int threads, const std::string& dir,
                               const std::string& what, const std::vector<std::string>& required_keys,
                               PythonRun* run_out) {
  const PythonRun run = spawn_python(argv, threads, dir);
  if (run_out) *run_out = run;
  if (run.exit_code != 0)
    throw std::runtime_error(what + " exited with status " + std::to_string(run.exit_code) +
                             "; stderr: " + one_line_tail(run.stderr_text));
  std::string line;
  {
    std::stringstream ss(run.stdout_text);
    for (std::string l; std::getline(ss, l);)
      if (l.find_first_not_of(" \t\r") != std::string::npos) line = l;
  }
  try {
    nlohmann::json j = nlohmann::json::parse(line);
    for (const auto& key : required_keys)
      if (!j.contains(key)) throw std::runtime_error("missing key " + key);
    return j;
  } catch (const std::exception& e) {
    throw std::runtime_error(what + " printed no valid result line (" + e.what() + "): stdout '" +
                             one_line_tail(line, 200) + "'; stderr: " + one_line_tail(run.stderr_text));
  }
}

}  // namespace jacond::cli
