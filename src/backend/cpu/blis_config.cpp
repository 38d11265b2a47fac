// BLIS's configuration: forge's rule and what it does with BLIS_ARCH_TYPE
// (blis_config.hpp).
#include "backend/cpu/blis_config.hpp"

#include <strings.h>

#include <algorithm>
#include <cctype>

#include "core/strings.hpp"

namespace forge {

namespace {

struct ConfigRank {
  const char* name;
  int rank;
  CpuLevel needs;
};

constexpr ConfigRank kConfigs[] = {
    {"generic", 0, CpuLevel::kX86_64}, {"penryn", 1, CpuLevel::kV2},  {"sandybridge", 2, CpuLevel::kV3},
    {"haswell", 3, CpuLevel::kV3},     {"zen", 3, CpuLevel::kV3},     {"zen2", 3, CpuLevel::kV3},
    {"zen3", 3, CpuLevel::kV3},        {"excavator", 3, CpuLevel::kV3}, {"skx", 4, CpuLevel::kV4},
};

const ConfigRank* find_config(const std::string& name) {
  for (const auto& c : kConfigs)
    if (name == c.name) return &c;
  return nullptr;
}

// A configuration below AVX2 on a CPU that has AVX2 (rank < 3 on v3/v4).
bool is_fallback(int rank, CpuLevel level) { return rank < 3 && level >= CpuLevel::kV3; }

int index_of(const std::vector<std::string>& names, const std::string& name) {
  const auto it = std::find(names.begin(), names.end(), name);
  return it == names.end() ? -1 : static_cast<int>(it - names.begin());
}

// BLIS_ARCH_TYPE as a configuration name: an id into BLIS's table, or a name
// (any case); "" when it is neither.
std::string parse_arch_type(const std::string& raw, const std::vector<std::string>& names) {
  if (!raw.empty() && raw.size() <= 3 && std::all_of(raw.begin(), raw.end(), [](unsigned char ch) {
        return std::isdigit(ch) != 0;
      })) {
    const size_t id = std::stoul(raw);
    return id < names.size() ? names[id] : "";
  }
  for (const auto& n : names)
    if (strcasecmp(n.c_str(), raw.c_str()) == 0) return n;
  return "";
}

}  // namespace

int blis_config_rank(const std::string& config) {
  const ConfigRank* c = find_config(config);
  return c ? c->rank : -1;
}

bool blis_config_runs_on(const std::string& config, CpuLevel level) {
  const ConfigRank* c = find_config(config);
  return c && c->needs <= level;
}

std::string blis_config_for(const CpuIdentity& cpu, CpuLevel level) {
  const bool intel = cpu.vendor == "GenuineIntel", amd = cpu.vendor == "AuthenticAMD";
  if (level >= CpuLevel::kV4) {
    const bool skylake_sp = intel && cpu.family == 6 && cpu.model == 0x55;
    const bool zen3_or_4 = amd && cpu.family == 0x19;
    return skylake_sp || zen3_or_4 ? "" : "skx";
  }
  if (level >= CpuLevel::kV3) {
    // Zen, Zen+ (family 0x17 below model 0x30): BLIS takes 'zen', which ran
    // a Zen 1's step GEMMs 7-12% slower than zen3.
    if (amd && cpu.family == 0x17 && cpu.model < 0x30) return "zen3";
    const bool blis_names_it = intel || (amd && (cpu.family == 0x15 || cpu.family == 0x17 || cpu.family == 0x19));
    return blis_names_it ? "" : "haswell";
  }
  return "";
}

std::string blis_slow_config_warning(const CpuIdentity& cpu, CpuLevel level, const std::string& running) {
  const std::string want = blis_config_for(cpu, level);
  const int rank = blis_config_rank(running);
  if (rank < 0) return "";  // not an x86-64 configuration forge knows
  // Below forge's request, or the one same-rank configuration measured
  // slower: BLIS's zen where forge asks for zen3 (a Zen 1).
  const bool measured_slower = want == "zen3" && running == "zen";
  if (!want.empty() && (rank < blis_config_rank(want) || measured_slower))
    return "BLIS runs its " + running + " kernels on this " + cpu_level_name(level) + " CPU, where " + want +
           "'s are faster: set BLIS_ARCH_TYPE=" + want + " (or FORGE_SGEMM=openblas)";
  if (is_fallback(rank, level))
    return "BLIS runs its " + running + " kernels, a fallback on this " + cpu_level_name(level) +
           " CPU: set BLIS_ARCH_TYPE=haswell (or FORGE_SGEMM=openblas)";
  return "";
}

BlisPolicy blis_policy(bool debian_build, const char* forge_blas_coretype) {
  if (!debian_build) return BlisPolicy::kRelocated;
  return forge_blas_coretype && std::string(forge_blas_coretype) == "keep" ? BlisPolicy::kKeep
                                                                            : BlisPolicy::kForgeChooses;
}

BlisConfigRequest request_blis_config(const CpuIdentity& cpu, CpuLevel level, const char* blis_arch_type,
                                      const std::vector<std::string>& arch_names, BlisPolicy policy) {
  const bool relocated = policy == BlisPolicy::kRelocated;
  const bool keep = policy != BlisPolicy::kForgeChooses;
  auto forge_choice = [&] {
    BlisConfigRequest r;
    if (keep) return r;
    const std::string want = blis_config_for(cpu, level);
    const int id = want.empty() ? -1 : index_of(arch_names, want);
    if (id < 0) return r;  // BLIS's own choice; or a configuration not in this BLIS
    r.config = want;
    r.id = id;
    return r;
  };
  if (!blis_arch_type || !*blis_arch_type) return forge_choice();

  const std::string raw = blis_arch_type;
  const std::string name = parse_arch_type(raw, arch_names);
  const ConfigRank* c = find_config(name);
  std::string why;
  if (name.empty()) {
    why = "not a configuration id or name of this BLIS";
  } else if (!c) {
    std::vector<std::string> usable;
    for (const auto& k : kConfigs)
      if (blis_config_runs_on(k.name, level) && index_of(arch_names, k.name) >= 0) usable.push_back(k.name);
    why = name + " is not a configuration forge runs on x86-64; this CPU runs " + join(usable, ", ");
  } else if (!blis_config_runs_on(name, level)) {
    why = name + " needs " + cpu_level_name(c->needs) + " instructions this CPU lacks";
  }
  if (!why.empty()) {
    BlisConfigRequest r = forge_choice();
    r.note = "BLIS_ARCH_TYPE=" + raw + " ignored: " + why;
    r.warn = true;
    return r;
  }
  const std::string shown = name == raw ? raw : raw + " (" + name + ")";
  const bool fallback = is_fallback(c->rank, level);
  if (fallback && !keep) {
    BlisConfigRequest r = forge_choice();
    r.note = "switched from " + name + ", a fallback for this CPU set by BLIS_ARCH_TYPE";
    return r;
  }
  BlisConfigRequest r{name, index_of(arch_names, name), "BLIS_ARCH_TYPE=" + shown, false};
  if (fallback) {
    r.note = "kept " + name + ", a slow fallback for this CPU: BLIS_ARCH_TYPE=" + shown +
             (relocated ? " (forge replaces fallbacks only in Debian's BLIS; this is another build)"
                        : " with FORGE_BLAS_CORETYPE=keep");
    r.warn = true;
  }
  return r;
}

}  // namespace forge
