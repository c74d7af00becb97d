#include "models/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <stdexcept>

#include "models/safetensors.h"

namespace fs = std::filesystem;

namespace jacond::models {

namespace {

bool parse_step_name(const std::string& name, int64_t* step) {
  static const std::regex re("step-([0-9]{7,})");
  std::smatch m;
  if (!std::regex_match(name, m, re)) return false;
  *step = std::stoll(m[1].str());
  return true;
}

std::string one_line(std::string s) {
  const auto nl = s.find('\n');
  if (nl != std::string::npos) s = s.substr(0, nl);
  return s;
}

}  // namespace

std::string checkpoint_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%07lld", static_cast<long long>(step));
  return buf;
}

void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw std::runtime_error(path + ": cannot open for fsync: " + std::strerror(errno));
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) throw std::runtime_error(path + ": fsync failed: " + std::strerror(errno));
}

void write_text_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw std::runtime_error(tmp + ": cannot create");
    out << text;
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      throw std::runtime_error(tmp + ": write failed");
    }
  }
  fsync_path(tmp);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    throw std::runtime_error(path + ": rename failed: " + why);
  }
}

std::vector<CheckpointEntry> list_checkpoints(const std::string& run_dir) {
  std::vector<CheckpointEntry> out;
  std::error_code ec;
  if (!fs::is_directory(run_dir, ec)) return out;
  for (const auto& e : fs::directory_iterator(run_dir, ec)) {
    int64_t step;
    if (!e.is_directory() || !parse_step_name(e.path().filename().string(), &step)) continue;
    const fs::path d = e.path();
    if (fs::exists(d / "meta.json") && fs::exists(d / "model.safetensors") && fs::exists(d / "optimizer.pt"))
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
  const fs::path tmp_dir = fs::path(run_dir) / (".tmp-" + name + "." + std::to_string(::getpid()));
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  fs::remove_all(tmp_dir, ec);
  if (!fs::create_directory(tmp_dir, ec)) throw std::runtime_error(tmp_dir.string() + ": cannot create: " + ec.message());
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

    write_text_atomic((tmp_dir / "meta.json").string(), meta.dump(2) + "\n");
    fsync_path(tmp_dir.string());
    if (fs::exists(final_dir)) fs::remove_all(final_dir);  // a stale checkpoint of the same step
    fs::rename(tmp_dir, final_dir);
    fsync_path(run_dir);
  } catch (const c10::Error& e) {
    fs::remove_all(tmp_dir, ec);
    throw std::runtime_error(final_dir.string() + ": checkpoint write failed: " + one_line(e.what_without_backtrace()));
  } catch (...) {
    fs::remove_all(tmp_dir, ec);
    throw;
  }
  return final_dir.string();
}

void prune_checkpoints(const std::string& run_dir, int64_t keep) {
  if (keep <= 0) return;
  auto all = list_checkpoints(run_dir);
  const int64_t excess = static_cast<int64_t>(all.size()) - keep;
  for (int64_t i = 0; i < excess; ++i) {
    std::error_code ec;
    fs::remove_all(all[i].dir, ec);
  }
}

void clean_partial_checkpoints(const std::string& run_dir) {
  std::error_code ec;
  if (!fs::is_directory(run_dir, ec)) return;
  for (const auto& e : fs::directory_iterator(run_dir, ec))
    if (e.path().filename().string().rfind(".tmp-step-", 0) == 0) fs::remove_all(e.path(), ec);
}

Checkpoint read_checkpoint(const std::string& dir) {
  Checkpoint c;
  c.dir = dir;
  const std::string meta_path = dir + "/meta.json";
  std::ifstream in(meta_path);
  if (!in) throw std::runtime_error(meta_path + ": missing (not a jacond checkpoint directory)");
  try {
    c.meta = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(meta_path + ": malformed JSON: " + one_line(e.what()));
  }
  if (!c.meta.is_object() || c.meta.value("format", "") != kCheckpointFormat)
    throw std::runtime_error(meta_path + ": not a " + std::string(kCheckpointFormat) + " meta.json");
  if (!c.meta.contains("step") || !c.meta["step"].is_number_integer())
    throw std::runtime_error(meta_path + ": no integer 'step'");
  if (!c.meta.contains("model") || !c.meta["model"].is_object())
    throw std::runtime_error(meta_path + ": no 'model' config");
  c.model = load_safetensors(dir + "/model.safetensors");
  if (!fs::exists(dir + "/optimizer.pt")) throw std::runtime_error(dir + "/optimizer.pt: missing");
  return c;
}

void read_optimizer_state(const std::string& dir,
                          const std::function<void(torch::serialize::InputArchive&)>& load_optimizer) {
  const std::string path = dir + "/optimizer.pt";
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(path);
    load_optimizer(archive);
  } catch (const c10::Error& e) {
    throw std::runtime_error(path + ": unreadable optimizer state: " + one_line(e.what_without_backtrace()));
  }
}

std::string resolve_resume_checkpoint(const std::string& path) {
  if (fs::exists(fs::path(path) / "meta.json")) return path;
  auto all = list_checkpoints(path);
  if (all.empty()) throw std::runtime_error(path + ": no complete checkpoint (step-XXXXXXX/) to resume from");
  return all.back().dir;
}

}  // namespace jacond::models
