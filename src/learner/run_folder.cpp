#include "learner/run_folder.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <system_error>
#include <vector>

#include "core/error.hpp"
#include "core/log.hpp"
#include "io_hdf5/checkpoint.hpp"
#include "io_hdf5/h5_file.hpp"

namespace forge {

void create_run_folder(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir))
    throw InputError("run.dir = '" + dir + "': cannot create the run folder" +
                     (ec ? ": " + ec.message() : std::string(" (a file is in the way)")));
}

namespace {

std::mutex held_mu;
std::set<std::string> held;     // canonical folders this process holds
// The folders (as given) hold_run_folder created, each with the parent
// folders it had to create for them, deepest first (runs/ for runs/latest).
std::map<std::string, std::vector<std::string>> created;

}  // namespace

void hold_run_folder(const std::string& dir) {
  // Whether a folder exists is asked of its normal form: "x/../y" does not
  // resolve while x is missing, though y may be there (and creating the run
  // folder creates x). The folders above it that do not exist yet, deepest
  // first, by their normal form ("a/b/run/": the trailing '/' is no folder).
  namespace fs = std::filesystem;
  std::error_code exists_ec;
  const auto normal = [](const fs::path& p) { return fs::absolute(p).lexically_normal(); };
  const bool existed = fs::exists(normal(dir), exists_ec);
  std::vector<std::string> new_parents;
  fs::path above = fs::path(dir);
  while (!above.empty() && !above.has_filename() && above != above.root_path()) above = above.parent_path();
  for (above = above.parent_path(); !above.empty() && above != above.root_path(); above = above.parent_path()) {
    if (above.filename() == "." || above.filename() == "..") continue;
    const fs::path n = normal(above);
    if (!fs::exists(n, exists_ec) && std::find(new_parents.begin(), new_parents.end(), n.string()) == new_parents.end())
      new_parents.push_back(n.string());
  }
  create_run_folder(dir);
  // Held already by this process (learner 0 takes it before choosing its
  // checkpoint, then its learner again): a second open would conflict.
  std::lock_guard lock(held_mu);
  const std::string key = std::filesystem::weakly_canonical(dir).string();
  if (held.count(key)) return;
  const std::string path = dir + "/forge.lock";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) throw InputError("run.dir = '" + dir + "': cannot open " + path + ": " + std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err == EWOULDBLOCK) {
      char holder[256] = {};
      const ssize_t n = ::pread(fd, holder, sizeof holder - 1, 0);
      ::close(fd);
      std::string who(holder, n > 0 ? static_cast<size_t>(n) : 0);
      while (!who.empty() && (who.back() == '\n' || who.back() == '\0')) who.pop_back();
      throw InputError("run.dir = '" + dir + "' is in use by another forge (" + (who.empty() ? "unknown" : who) +
                       ", holding " + path + "): two runs in one folder would overwrite each other's files; wait "
                       "for it to end or choose another run.dir");
    }
    ::close(fd);
    log_warn("run.dir = '" + dir + "': the file system does not lock files (" + std::strerror(err) +
             "); nothing stops a second forge from using this folder at the same time");
    if (!existed) created[dir] = new_parents;
    return;
  }
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const std::string who = "pid " + std::to_string(::getpid()) + " on " + host + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, who.data(), who.size(), 0) != static_cast<ssize_t>(who.size()))
    log_warn("cannot write the holder into " + path);
  // The descriptor stays open (and the lock held) for the process's life;
  // the kernel releases it at exit, however the process ends.
  held.insert(key);
  if (!existed) created[dir] = new_parents;  // only once held: another forge's new folder is not ours to remove
}

void remove_unused_run_folders() {
  // try_lock: a job's abort may come from another thread (the watchdog)
  // while this one holds the lock; it then leaves the folders as they are.
  std::unique_lock lock(held_mu, std::try_to_lock);
  if (!lock.owns_lock()) return;
  for (const auto& [dir, parents] : created) {
    std::error_code ec;
    std::filesystem::directory_iterator it(dir, ec), end;
    bool unused = !ec;  // forge.lock, and the empty checkpoints folder a start makes
    for (; unused && it != end; it.increment(ec))
      unused = !ec && (it->path().filename() == "forge.lock" ||
                       (it->path().filename() == "checkpoints" && std::filesystem::is_empty(it->path(), ec)));
    if (!unused) continue;
    std::filesystem::remove(dir + "/checkpoints", ec);
    std::filesystem::remove(dir + "/forge.lock", ec);
    std::filesystem::remove(dir, ec);
    // remove() leaves a folder that is not empty (another run's) as it is.
    for (const std::string& parent : parents)
      if (!std::filesystem::remove(parent, ec)) break;
  }
  created.clear();
}

void make_checkpoints_folder(const std::string& dir) {
  const std::string checkpoints = dir + "/checkpoints";
  std::error_code ec;
  std::filesystem::create_directories(checkpoints, ec);
  if (ec || !std::filesystem::is_directory(checkpoints))
    throw InputError("run.dir '" + dir + "': its checkpoints folder '" + checkpoints + "' cannot be made (" +
                     (ec ? ec.message() : std::string("a file of that name is in the way")) + ")");
}

void write_run_config(const std::string& dir, const std::string& ini) {
  const std::string path = dir + "/config.ini", tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << kRunConfigMark << "\n" << ini;
    out.close();
    try {
      if (!out) throw Error("cannot write '" + path + "' (disk full or not writable)");
      h5::sync_to_disk(tmp, false);  // whole on the disk before it replaces the old one
    } catch (...) {
      std::error_code ec;
      std::filesystem::remove(tmp, ec);
      throw;
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw Error("cannot write '" + path + "': " + ec.message());
}

void refuse_existing_run(const std::string& dir, const std::string& command, bool resumable) {
  const std::string checkpoint = latest_checkpoint(dir + "/checkpoints");
  // The other command's run (forge sft's checkpoints where forge train
  // starts): --resume cannot continue it, so the advice is another folder.
  std::string other;
  if (!checkpoint.empty()) {
    try {
      const std::vector<std::string> rngs = checkpoint_rng_names(checkpoint);
      const auto has = [&](const char* name) { return std::find(rngs.begin(), rngs.end(), name) != rngs.end(); };
      if (command == "forge train" && has("data") && !has("tasks")) other = "forge sft";
      if (command == "forge sft" && has("tasks") && !has("data")) other = "forge train";
    } catch (const InputError&) {
      // Not readable: the generic refusal; a --resume would say what is wrong.
    }
  }
  if (!other.empty())
    throw InputError("run.dir = '" + dir + "' holds a " + other + " run (" + checkpoint + "); " + command +
                     " neither overwrites nor continues it: " +
                     (command == "forge train" ? "start from it with --train.init=" + checkpoint + " and another "
                                                 "run.dir, "
                                               : std::string("choose another run.dir, ")) +
                     "or delete that one");
  if (!checkpoint.empty())
    throw InputError("run.dir = '" + dir + "' holds an earlier run (" + checkpoint + "); " + command +
                     " does not overwrite it: " + (resumable ? "continue it with --resume, " : "") +
                     "choose another run.dir, or delete that one");
  std::error_code ec;
  // A config.ini that a run did not write (a --config file kept in the run
  // folder, notes): forge would replace it with the resolved configuration.
  const std::string config = dir + "/config.ini";
  if (std::filesystem::exists(config, ec)) {
    std::ifstream in(config);
    std::string first;
    std::getline(in, first);
    if (!first.empty() && first.back() == '\r') first.pop_back();  // saved by an editor with CRLF
    if (first != kRunConfigMark)
      throw InputError("run.dir = '" + dir + "' holds a config.ini without the first line a run writes (" + config +
                       ": a file of yours, such as a --config file kept there, or one of a forge before 2026-12 "
                       "whose run stopped before training); " + command + " writes the run's resolved "
                       "configuration there and does not overwrite it: move that file aside (a --config file can "
                       "live anywhere), choose another run.dir, or delete it");
  }
  const std::string rollouts = dir + "/rollouts.h5";
  if (std::filesystem::exists(rollouts, ec))
    throw InputError("run.dir = '" + dir + "' holds the rollouts of an earlier run that stopped before its first "
                     "checkpoint (" + rollouts + "); " + command + " does not overwrite them: move that file "
                     "aside, choose another run.dir, or delete that one");
}

std::string resolve_rollouts(const std::string& given) {
  std::error_code ec;
  if (!std::filesystem::is_directory(given, ec)) return given;
  const std::string path = given + "/rollouts.h5";
  if (!std::filesystem::exists(path, ec))
    throw InputError("'" + given + "' is a folder without a rollouts.h5 (give a run folder of forge train, or the file)");
  return path;
}

}  // namespace forge
