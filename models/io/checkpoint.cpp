#include "models/io/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <regex>
#include <sstream>
#include <stdexcept>

#include "models/io/error_text.h"
#include "models/io/safetensors.h"

namespace fs = std::filesystem;

namespace jacond::models {

namespace {

bool parse_step_name(const std::string& name, int64_t* step) {
  static const std::regex re("step-([0-9]{7,})");
  std::smatch m;
  if (!std::regex_match(name, m, re)) return false;
  try {
    *step = std::stoll(m[1].str());
  } catch (const std::out_of_range&) {  // more digits than int64: no step jacond writes
    return false;
  }
  return true;
}

/// The first line of a LibTorch error, sanitized: torch quotes names read from the archive
/// (record names of a corrupt zip), so it is file-derived text. Its own words run longer than
/// a name, hence the larger cap.
std::string torch_error_text(const c10::Error& e) {
  std::string s = e.what_without_backtrace();
  const auto nl = s.find('\n');
  if (nl != std::string::npos) s.resize(nl);
  return printable(s, 4 * kErrorTextMax);
}

/// Best-effort cleanup whose failure must not replace the error being reported (or fail a
/// checkpoint that is already safely in place): the failure is logged on one line, not lost.
void remove_all_logged(const fs::path& p, const char* why) {
  std::error_code ec;
  fs::remove_all(p, ec);
  if (ec)
    std::cerr << "jacond: warning: cannot remove " << p.string() << " (" << why << "): " << ec.message()
              << "\n";
}

void remove_file_logged(const std::string& p, const char* why) {
  if (std::remove(p.c_str()) != 0 && errno != ENOENT)
    std::cerr << "jacond: warning: cannot remove " << p << " (" << why << "): " << std::strerror(errno) << "\n";
}

/// Removes a checkpoint's temporary directory unless it was renamed into place.
class TempDirGuard {
 public:
  explicit TempDirGuard(fs::path dir) : dir_(std::move(dir)) {}
  ~TempDirGuard() {
    if (!committed_) remove_all_logged(dir_, "temporary directory of a failed checkpoint write");
  }
  TempDirGuard(const TempDirGuard&) = delete;
  TempDirGuard& operator=(const TempDirGuard&) = delete;
  void commit() { committed_ = true; }

 private:
  fs::path dir_;
  bool committed_ = false;
};

/// The test seam of write_checkpoint (set_checkpoint_crash_point_for_testing); empty in use.
std::function<void(const std::string&)>& crash_point_hook() {
  static std::function<void(const std::string&)> hook;
  return hook;
}

void crash_point(const char* point) {
  if (crash_point_hook()) crash_point_hook()(point);
}

/// A checkpoint directory with the files every reader needs (list_checkpoints' kModel test).
bool has_model_files(const fs::path& d) {
  std::error_code ec;
  return fs::exists(d / "meta.json", ec) && fs::exists(d / "model.safetensors", ec);
}

constexpr const char* kTmpPrefix = ".tmp-";  // .tmp-step-N.<pid>: a write in progress
constexpr const char* kOldPrefix = ".old-";  // .old-step-N.<pid>: a replaced step, set aside

/// "step-0000005" for a ".old-step-0000005.<pid>" that write_checkpoint set aside; "" otherwise.
std::string set_aside_step(const std::string& filename) {
  if (filename.rfind(std::string(kOldPrefix) + "step-", 0) != 0) return "";
  const std::string rest = filename.substr(std::string(kOldPrefix).size());
  const std::string step_name = rest.substr(0, rest.rfind('.'));
  int64_t step;
  return parse_step_name(step_name, &step) ? step_name : "";
}

}  // namespace

void set_checkpoint_crash_point_for_testing(std::function<void(const std::string& point)> hook) {
  crash_point_hook() = std::move(hook);
}

std::string checkpoint_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%07lld", static_cast<long long>(step));
  return buf;
}

void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw std::runtime_error(path + ": cannot open for fsync: " + std::strerror(errno));
  const int rc = ::fsync(fd);
  const int fsync_errno = errno;
  if (::close(fd) != 0 && rc == 0) throw std::runtime_error(path + ": close after fsync failed: " + std::strerror(errno));
  if (rc != 0) throw std::runtime_error(path + ": fsync failed: " + std::strerror(fsync_errno));
}

namespace {

// After a rename onto `path`: the rename is an entry of the parent directory, and without its
// fsync a power loss can still bring back the old file (or none), though the new one's bytes were
// on disk. Best effort, as PostgreSQL's fsync of a directory: a directory this process cannot
// open (write-only), or a file system that cannot fsync one (EINVAL, EOPNOTSUPP, ENOSYS, EBADF,
// EACCES, EPERM: some network, FUSE and 9p mounts), leaves the write as durable as it was; an I/O
// error is reported, saying the file itself is in place.
void fsync_parent_best_effort(const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  const std::string dir = parent.empty() ? "." : parent.string();
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;
  const int rc = ::fsync(fd);
  const int e = errno;
  ::close(fd);
  if (rc == 0) return;
  for (const int unsupported : {EINVAL, EOPNOTSUPP, ENOTSUP, ENOSYS, EBADF, EACCES, EPERM})
    if (e == unsupported) return;
  throw std::runtime_error(path + ": written, but the fsync of its directory " + dir + " failed: " + std::strerror(e));
}

}  // namespace

void write_text_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw std::runtime_error(tmp + ": cannot create");
    out << text;
    out.flush();
    out.close();
    if (!out) {
      const std::string why = std::strerror(errno);
      remove_file_logged(tmp, "temporary file of a failed write");
      throw std::runtime_error(tmp + ": write failed: " + why);
    }
  }
  try {
    fsync_path(tmp);
  } catch (const std::runtime_error&) {
    remove_file_logged(tmp, "temporary file of a failed write");
    throw;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    remove_file_logged(tmp, "temporary file of a failed write");
    throw std::runtime_error(path + ": rename failed: " + why);
  }
  fsync_parent_best_effort(path);
}

// The entries of a run directory: none where it is missing; one that cannot be read is an error,
// not "none" (list_checkpoints and list_set_aside_checkpoints read it alike).
namespace {
std::vector<fs::directory_entry> run_dir_entries(const std::string& run_dir) {
  std::error_code ec;
  if (!fs::is_directory(run_dir, ec)) {
    if (ec && ec != std::errc::no_such_file_or_directory && ec != std::errc::not_a_directory)
      throw std::runtime_error(run_dir + ": cannot inspect: " + ec.message());
    return {};
  }
  fs::directory_iterator it(run_dir, ec);
  if (ec) throw std::runtime_error(run_dir + ": cannot list: " + ec.message());
  return {fs::begin(it), fs::end(it)};
}
}  // namespace

std::vector<CheckpointEntry> list_checkpoints(const std::string& run_dir, CheckpointParts parts) {
  std::vector<CheckpointEntry> out;
  for (const fs::directory_entry& e : run_dir_entries(run_dir)) {
    int64_t step;
    if (!e.is_directory() || !parse_step_name(e.path().filename().string(), &step)) continue;
    const fs::path d = e.path();
    if (has_model_files(d) && (parts == CheckpointParts::kModel || fs::exists(d / "optimizer.pt")))
      out.push_back({step, d.string()});
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
  return out;
}

std::string write_checkpoint(const std::string& run_dir, int64_t step, const TensorMap& model_state,
                             const std::function<void(torch::serialize::OutputArchive&)>& save_optimizer,
                             nlohmann::json meta) {
  const std::string name = checkpoint_name(step);
  const fs::path final_dir = fs::path(run_dir) / name;
  const std::string pid = std::to_string(::getpid());
  const fs::path tmp_dir = fs::path(run_dir) / (kTmpPrefix + name + "." + pid);
  const fs::path old_dir = fs::path(run_dir) / (kOldPrefix + name + "." + pid);
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  if (ec) throw std::runtime_error(run_dir + ": cannot create the run directory: " + ec.message());
  // A leftover of an earlier process with the same pid: stale by construction.
  fs::remove_all(tmp_dir, ec);
  if (ec) throw std::runtime_error(tmp_dir.string() + ": cannot remove a stale temporary directory: " + ec.message());
  if (!fs::create_directory(tmp_dir, ec))
    throw std::runtime_error(tmp_dir.string() + ": cannot create: " + (ec ? ec.message() : "exists"));
  TempDirGuard guard(tmp_dir);  // removes it on any failure below, logging if that fails
  try {
    meta["format"] = kCheckpointFormat;
    meta["step"] = step;
    std::map<std::string, std::string> st_meta{{"format", kCheckpointFormat}, {"step", std::to_string(step)}};
    if (meta.contains("model")) st_meta["config"] = meta["model"].dump();
    save_safetensors((tmp_dir / "model.safetensors").string(), model_state, st_meta);

    torch::serialize::OutputArchive archive;
    save_optimizer(archive);
    const std::string opt_path = (tmp_dir / "optimizer.pt").string();
    archive.save_to(opt_path);
    fsync_path(opt_path);
  } catch (const c10::Error& e) {
    // LibTorch's errors carry a multi-line backtrace: one line naming the checkpoint instead.
    throw std::runtime_error(final_dir.string() + ": checkpoint write failed: " + torch_error_text(e));
  }
  write_text_atomic((tmp_dir / "meta.json").string(), meta.dump(2) + "\n");
  fsync_path(tmp_dir.string());  // every entry of the checkpoint, strictly (write_text_atomic's is best effort)
  crash_point("new-complete");
  // A checkpoint of the same step already there (a stale one) is replaced without a moment in
  // which no complete copy of the step has its final or a recoverable name: it is renamed aside
  // to .old-step-N.<pid> (which clean_partial_checkpoints renames back while step-N is missing,
  // and removes once step-N is in place), the new one is renamed in, the run directory is
  // fsync'ed, and only then is the old one removed. Removing it first, as before, left only
  // .tmp-step-N after a crash between the two steps, which the next start deleted: the step was
  // lost.
  bool replacing = false;
  if (fs::exists(final_dir)) {
    fs::remove_all(old_dir);  // a leftover of an earlier process with the same pid
    fs::rename(final_dir, old_dir);
    replacing = true;
    crash_point("old-set-aside");
  }
  try {
    fs::rename(tmp_dir, final_dir);
  } catch (const fs::filesystem_error&) {
    if (replacing) {
      std::error_code back;
      fs::rename(old_dir, final_dir, back);  // else clean_partial_checkpoints restores it
    }
    throw;
  }
  guard.commit();
  fsync_path(run_dir);
  crash_point("new-installed");
  if (replacing) remove_all_logged(old_dir, "replaced checkpoint of the same step");
  return final_dir.string();
}

void prune_checkpoints(const std::string& run_dir, int64_t keep) {
  if (keep <= 0) return;
  auto all = list_checkpoints(run_dir);  // by step: a step-0 checkpoint comes first
  if (!all.empty() && all.front().step == 0) all.erase(all.begin());
  const int64_t excess = static_cast<int64_t>(all.size()) - keep;
  // Retention runs after the new checkpoint is in place: failing to delete an old one must not
  // fail training, but it is reported.
  for (int64_t i = 0; i < excess; ++i) remove_all_logged(all[i].dir, "checkpoint beyond --keep");
}

void clean_partial_checkpoints(const std::string& run_dir) {
  std::error_code ec;
  if (!fs::is_directory(run_dir, ec)) return;
  std::vector<fs::path> tmp, old;  // collected first: the loop below renames and removes entries
  {
    fs::directory_iterator it(run_dir, ec);
    if (ec) {
      std::cerr << "jacond: warning: cannot list " << run_dir << " to clean partial checkpoints: " << ec.message()
                << "\n";
      return;
    }
    for (const auto& e : it) {
      const std::string n = e.path().filename().string();
      if (n.rfind(std::string(kTmpPrefix) + "step-", 0) == 0) tmp.push_back(e.path());
      if (!set_aside_step(n).empty()) old.push_back(e.path());  // not a name write_checkpoint makes: left alone
    }
  }
  // A .tmp-step-N is never the only copy of a step: write_checkpoint moves the old step-N aside
  // (.old-step-N) before renaming the new one in, so a .tmp-* is at most a newer duplicate.
  for (const fs::path& p : tmp) remove_all_logged(p, "partial checkpoint of an interrupted write");
  // A .old-step-N.<pid> is a complete checkpoint that was being replaced. It may be removed only
  // once a complete step-N is in place; while step-N is missing (a crash between the two
  // renames) it is the only copy of the step and is renamed back. Anything else is left alone.
  for (const fs::path& p : old) {
    const fs::path final_dir = fs::path(run_dir) / set_aside_step(p.filename().string());
    std::error_code e2;
    if (has_model_files(final_dir)) {
      remove_all_logged(p, "replaced checkpoint of an interrupted write");
    } else if (!fs::exists(final_dir, e2) && !e2) {
      fs::rename(p, final_dir, e2);
      if (e2)
        std::cerr << "jacond: warning: cannot restore " << p.string() << " as " << final_dir.string() << ": "
                  << e2.message() << "\n";
      else
        std::cerr << "jacond: warning: restored " << final_dir.string() << " from " << p.filename().string()
                  << " (a replacement of it was interrupted)\n";
    } else {
      std::cerr << "jacond: warning: kept " << p.string() << ": " << final_dir.string()
                << " exists but is not a complete checkpoint\n";
    }
  }
  try {
    if (!old.empty()) fsync_path(run_dir);
  } catch (const std::runtime_error& e) {
    std::cerr << "jacond: warning: " << e.what() << "\n";
  }
}

std::vector<CheckpointEntry> list_set_aside_checkpoints(const std::string& run_dir) {
  std::vector<CheckpointEntry> out;
  for (const fs::directory_entry& e : run_dir_entries(run_dir)) {
    const std::string step_name = set_aside_step(e.path().filename().string());
    int64_t step;
    std::error_code e2;
    if (step_name.empty() || fs::exists(fs::path(run_dir) / step_name, e2) || e2) continue;
    parse_step_name(step_name, &step);
    out.push_back({step, e.path().string()});
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
  return out;
}

namespace {

// A run's directory names its step, and a resume continues from meta's: a meta.json copied from
// another step (step-0000100 saying 50) would resume at 50 and rewrite steps 60..100 beside the
// step-0000100 the next resume picks again. The name is the directory's own ("RUN/step-0000100/.",
// a symlink "latest" to it), a copy elsewhere (best/) is not checked.
void check_meta_step_matches_directory(const std::string& dir, const std::string& meta_path, int64_t meta_step) {
  std::error_code ec;
  fs::path resolved = fs::weakly_canonical(fs::absolute(dir), ec);
  if (ec) resolved = fs::absolute(dir).lexically_normal();
  if (!resolved.has_filename()) resolved = resolved.parent_path();  // "RUN/step-0000100/"
  int64_t named_step = 0;
  if (parse_step_name(resolved.filename().string(), &named_step) && named_step != meta_step)
    throw std::runtime_error(meta_path + ": step " + std::to_string(meta_step) + ", but its directory is " +
                             checkpoint_name(named_step));
}

}  // namespace

Checkpoint read_checkpoint(const std::string& dir, CheckpointParts parts) {
  Checkpoint c;
  c.dir = dir;
  const std::string meta_path = dir + "/meta.json";
  std::ifstream in(meta_path, std::ios::binary);
  if (!in) throw std::runtime_error(meta_path + ": missing (not a jacond checkpoint directory)");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw std::runtime_error(meta_path + ": read failed");
  c.meta = parse_checkpoint_meta(text.str(), meta_path);
  check_meta_step_matches_directory(dir, meta_path, c.meta["step"].get<int64_t>());
  c.model = load_safetensors(dir + "/model.safetensors");
  if (parts == CheckpointParts::kTrainingState && !fs::exists(dir + "/optimizer.pt")) throw std::runtime_error(dir + "/optimizer.pt: missing");
  return c;
}

void read_optimizer_state(const std::string& dir, const torch::Device& device,
                          const std::function<void(torch::serialize::InputArchive&)>& load_optimizer) {
  const std::string path = dir + "/optimizer.pt";
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(path, device);  // else each tensor returns to the device it was saved from
    load_optimizer(archive);
  } catch (const c10::Error& e) {
    throw std::runtime_error(path + ": unreadable optimizer state: " + torch_error_text(e));
  }
}

std::string resolve_resume_checkpoint(const std::string& path) {
  if (fs::exists(fs::path(path) / "meta.json")) return path;
  // A crash while a step was being replaced leaves it set aside as .old-step-N with no step-N.
  // Resolving only reads (the run may be another process's, still writing), so such a step is
  // named, not restored: resuming past it would skip the newest step and then restore it as the
  // run's future.
  if (const std::vector<CheckpointEntry> aside = list_set_aside_checkpoints(path); !aside.empty()) {
    const std::string step_dir = checkpoint_name(aside.front().step);
    throw std::runtime_error(aside.front().dir + " holds " + step_dir + ", set aside by a run that stopped while " +
                             "replacing it: rename it to " + (fs::path(path) / step_dir).string() +
                             " to resume from it, or remove it");
  }
  auto all = list_checkpoints(path);
  if (all.empty()) throw std::runtime_error(path + ": no complete checkpoint (step-XXXXXXX/) to resume from");
  return all.back().dir;
}

}  // namespace jacond::models
