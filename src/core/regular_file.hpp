// Files forge opens by path for random access (models, tokenizers,
// checkpoints, rollouts) must be regular files, or links to one: open() of
// a FIFO blocks until some writer comes (forge would hang with no message),
// and a device or socket reads as nonsense. Such a path is refused by name
// before it is opened. (Config files are read as a stream: a pipe, e.g.
// --config <(...), is fine there.)
#pragma once
#include <filesystem>
#include <string>

#include "core/error.hpp"

namespace forge {

// Throws InputError naming `what` and `path` when the path exists and is not
// a regular file; a missing path passes (the caller says it is missing).
inline void refuse_unless_regular_file(const std::string& path, const std::string& what) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || st.type() == fs::file_type::not_found || st.type() == fs::file_type::regular) return;
  const char* kind = st.type() == fs::file_type::directory ? "a folder"
                     : st.type() == fs::file_type::fifo    ? "a FIFO (named pipe)"
                     : st.type() == fs::file_type::socket  ? "a socket"
                     : st.type() == fs::file_type::block || st.type() == fs::file_type::character ? "a device"
                                                                                                   : "not a file";
  throw InputError(what + " '" + path + "' is " + kind + ", not a regular file");
}

}  // namespace forge
