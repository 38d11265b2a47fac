// OpenBLAS core selection and its fallback fix (the rule is in blas_core.hpp).
#include "backend/cpu/blas_core.hpp"

#include "backend/cpu/sgemm_library.hpp"
#include "core/scoped_env.hpp"

#include <cblas.h>

#include <strings.h>

#include <cstdlib>

// OpenBLAS's DYNAMIC_ARCH entry points (driver/others/dynamic.c). Weak: a
// BLAS build without them (a single-core build) simply cannot be re-selected.
extern "C" void gotoblas_dynamic_init(void) __attribute__((weak));
extern "C" void gotoblas_dynamic_quit(void) __attribute__((weak));

namespace forge {

namespace {

// OpenBLAS's core names (driver/others/dynamic.c spells them; its
// OPENBLAS_CORETYPE lookup ignores case, and so does forge).
// The Bulldozer family's kernels use AMD's FMA4, which no later CPU
// (Intel's, AMD's Zen 2 on) runs, whatever its level.
struct CoreRank {
  const char* name;
  int rank;
  bool fma4 = false;
};
constexpr CoreRank kCores[] = {
    {"Katmai", 1},      {"Coppermine", 1},   {"Northwood", 1},  {"Prescott", 1},
    {"Banias", 1},      {"Atom", 1},         {"Core2", 1},      {"Penryn", 1},
    {"Dunnington", 1},  {"Nehalem", 1},      {"Athlon", 1},     {"Opteron", 1},
    {"Opteron_SSE3", 1}, {"Barcelona", 1},   {"Nano", 1},       {"Bobcat", 1},
    {"Sandybridge", 2}, {"Bulldozer", 2, true}, {"Piledriver", 2, true}, {"Steamroller", 2, true},
    {"Excavator", 2, true}, {"Haswell", 3},  {"Zen", 3},        {"SkylakeX", 4},
    {"Cooperlake", 4},  {"SapphireRapids", 4}};

const CoreRank* find_core(const std::string& name) {
  for (const CoreRank& c : kCores)
    if (strcasecmp(c.name, name.c_str()) == 0) return &c;
  return nullptr;
}

bool same_core(const std::string& a, const std::string& b) { return strcasecmp(a.c_str(), b.c_str()) == 0; }

// The cores a CPU of this level runs, by name, for messages.
std::string cores_up_to(int rank) {
  std::string s;
  for (const CoreRank& c : kCores)
    if (c.rank >= 3 && c.rank <= rank) s += (s.empty() ? "" : ", ") + std::string(c.name);
  return s;
}

std::string blas_library_name() {
  // "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ...": the first two words.
  const std::string config = openblas_get_config() ? openblas_get_config() : "OpenBLAS";
  const size_t first = config.find(' ');
  const size_t second = first == std::string::npos ? first : config.find(' ', first + 1);
  return config.substr(0, second);
}

}  // namespace

int blas_core_rank(const std::string& core) {
  const CoreRank* c = find_core(core);
  return c ? c->rank : 0;
}

int blas_core_rank_for(CpuLevel level) { return level >= CpuLevel::kV4 ? 4 : level >= CpuLevel::kV3 ? 3 : 1; }

std::string blas_core_for(CpuLevel level) {
  if (level >= CpuLevel::kV4) return "SkylakeX";
  if (level >= CpuLevel::kV3) return "Haswell";
  return "";
}

std::string blas_core_name() {
  const char* name = openblas_get_corename();
  return name ? name : "unknown";
}

bool switch_blas_core(const std::string& core) {
  if (!gotoblas_dynamic_init || !gotoblas_dynamic_quit) return false;
  {
    const ScopedEnv coretype("OPENBLAS_CORETYPE", core.c_str());
    gotoblas_dynamic_quit();
    gotoblas_dynamic_init();
  }
  return same_core(blas_core_name(), core);
}

bool blas_self_check() { return sgemm_self_check(cblas_sgemm); }

BlasCoreChoice correct_blas_core(CpuLevel level, const std::string& policy, bool cpu_has_fma4) {
  BlasCoreChoice c;
  c.library = blas_library_name();
  c.at_load = c.core = blas_core_name();
  auto is_fallback = [level](const std::string& core) {
    const int rank = blas_core_rank(core);
    return rank > 0 && rank < blas_core_rank_for(level) && level >= CpuLevel::kV3;
  };
  const bool fallback = is_fallback(c.core);
  // The core in use decides `slow`, whatever path led to it.
  auto done = [&](std::string note) {
    c.note = std::move(note);
    c.slow = is_fallback(c.core);
    return c;
  };
  std::string target;
  if (policy.empty() || policy == "auto") {
    if (!fallback) return done("");
    target = blas_core_for(level);
  } else if (policy == "keep") {
    return done(fallback ? "kept (FORGE_BLAS_CORETYPE=keep)" : "");
  } else {
    const CoreRank* want = find_core(policy);
    const int cpu_rank = blas_core_rank_for(level);
    if (!want || want->rank > cpu_rank || (want->fma4 && !cpu_has_fma4)) {
      c.rejected = true;
      return done("FORGE_BLAS_CORETYPE=" + policy + " ignored: " +
                  (!want ? "not an OpenBLAS core name"
                         : want->rank > cpu_rank ? "this CPU lacks its instructions"
                                                 : "this CPU lacks its instructions (FMA4)") +
                  (cpu_rank >= 3 ? "; this CPU runs " + cores_up_to(cpu_rank) : ""));
    }
    target = want->name;
    c.named = true;
    if (same_core(target, c.core)) return done("");
  }
  if (!switch_blas_core(target)) {
    switch_blas_core(c.at_load);
    return done("could not switch to " + target + " (this OpenBLAS cannot re-select its core)");
  }
  if (!blas_self_check()) {
    switch_blas_core(c.at_load);
    return done(target + " failed the SGEMM self-check; kept " + c.at_load);
  }
  c.core = blas_core_name();
  const char* forced = std::getenv("OPENBLAS_CORETYPE");
  return done("switched from " + c.at_load +
              (forced ? std::string(" (set by OPENBLAS_CORETYPE)") : fallback ? " (the library's fallback for this CPU)" : "") +
              ", self-check passed");
}

std::string slow_blas_core_advice(const BlasCoreChoice& c, CpuLevel level) {
  const std::string fast = blas_core_for(level);
  if (c.rejected || c.named || c.note.starts_with("kept"))
    return "unset FORGE_BLAS_CORETYPE (forge then selects " + fast + ")";
  if (c.note.find("failed the SGEMM self-check") != std::string::npos)
    return fast + " gave wrong SGEMM results here, so forge keeps the slow core: try another BLAS build";
  return "forge could not re-select the core in process: set OPENBLAS_CORETYPE=" + fast + " in the job's environment";
}

const BlasCoreChoice& blas_core_choice() {
  static const BlasCoreChoice choice = [] {
    const char* policy = std::getenv("FORGE_BLAS_CORETYPE");
    return correct_blas_core(detect_cpu_level(), policy ? policy : "", __builtin_cpu_supports("fma4"));
  }();
  return choice;
}

namespace {
// Before main: every binary that links the CPU backend runs on the choice.
[[maybe_unused]] const bool chosen_before_main = (blas_core_choice(), true);
}  // namespace

}  // namespace forge
