// Errors with context. Edges (CLI, config, files, network) throw these; the CLI
// maps InputError (bad config, flag or file: the user's to fix) to exit code 2
// and everything else to 1. Messages say what was wrong and where.
#pragma once
#include <stdexcept>
#include <string>

namespace forge {

// A bug or an unexpected state inside forge.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bad input from the user: config key, CLI flag, file, tool call, message.
class InputError : public Error {
 public:
  using Error::Error;
};

}  // namespace forge

#define FORGE_CHECK(cond, msg)                                                  \
  do {                                                                          \
    if (!(cond))                                                                \
      throw ::forge::Error(std::string(__FILE__) + ":" + std::to_string(__LINE__) + \
                           ": check failed (" #cond "): " + (msg));             \
  } while (0)
