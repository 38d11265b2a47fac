// REQUIRE_SANDBOX(): for tests that run programs in the sandbox. Skips with
// the reason where this machine refuses what bwrap needs (user namespaces,
// mounts in them: bwrap then names a namespace or says the operation was not
// permitted); fails where bwrap is missing, since tools/setup.sh installs
// it, and on any other failure of the trivial probe (a regression in forge's
// own bwrap arguments, e.g. a bind of a path that does not exist, skipped
// every sandbox test).
#pragma once
#include <string>

#include <gtest/gtest.h>

#include "sandbox/sandbox.hpp"

inline bool sandbox_refused_by_this_machine(const std::string& why) {
  for (const char* refusal : {"namespace", "uid map", "Operation not permitted", "Permission denied"})
    if (why.find(refusal) != std::string::npos) return true;
  return false;
}

#define REQUIRE_SANDBOX()                                                                  \
  do {                                                                                     \
    const std::string& why = ::forge::sandbox_unavailable_reason();                        \
    ASSERT_EQ(why.find("could not execute bwrap"), std::string::npos) << why;              \
    if (!why.empty()) {                                                                    \
      ASSERT_TRUE(sandbox_refused_by_this_machine(why)) << "the trivial sandbox failed: " << why; \
      GTEST_SKIP() << "sandboxes cannot start on this machine: " << why;                   \
    }                                                                                      \
  } while (0)
