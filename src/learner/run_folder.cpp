#include "learner/run_folder.hpp"

#include <filesystem>
#include <fstream>
#include <system_error>

#include "core/error.hpp"
#include "io_hdf5/checkpoint.hpp"

namespace forge {

void create_run_folder(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir))
    throw InputError("run.dir = '" + dir + "': cannot create the run folder" +
                     (ec ? ": " + ec.message() : std::string(" (a file is in the way)")));
}

void write_run_config(const std::string& dir, const std::string& ini) {
  const std::string path = dir + "/config.ini", tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << ini;
    out.flush();
    if (!out) {
      std::error_code ec;
      std::filesystem::remove(tmp, ec);
      throw Error("cannot write '" + path + "' (disk full or not writable)");
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw Error("cannot write '" + path + "': " + ec.message());
}

void refuse_existing_run(const std::string& dir, const std::string& command, bool resumable) {
  const std::string checkpoint = latest_checkpoint(dir + "/checkpoints");
  if (!checkpoint.empty())
    throw InputError("run.dir = '" + dir + "' holds an earlier run (" + checkpoint + "); " + command +
                     " does not overwrite it: " + (resumable ? "continue it with --resume, " : "") +
                     "choose another run.dir, or delete that one");
  std::error_code ec;
  const std::string rollouts = dir + "/rollouts.h5";
  if (std::filesystem::exists(rollouts, ec))
    throw InputError("run.dir = '" + dir + "' holds the rollouts of an earlier run that stopped before its first "
                     "checkpoint (" + rollouts + "); " + command + " does not overwrite them: move that file "
                     "aside, choose another run.dir, or delete that one");
}

}  // namespace forge
