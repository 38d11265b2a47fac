// Shared bits of the benchmark programs: flag parsing (--key=value), median
// timing, running the PyTorch twins (python(), script(), command_lines())
// and the closing JSON line, which always ends with what the host ran
// on: "blas_core" (the SGEMM kernels in use: BLIS's configuration or
// OpenBLAS's core), "blas" (the SGEMM library), "blas_at_b" (the library and
// core of the weight gradients' A^T B where another library runs them, else "") and
// "cpu_kernels" (backend/host_runtime.hpp); the line before it says the same
// in words.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/cpu/blas_core.hpp"
#include "backend/cpu/cpu_isa.hpp"
#include "backend/host_runtime.hpp"
#include "core/error.hpp"
#include "core/json_escape.hpp"
#include "core/timer.hpp"

namespace forge::bench {

class Flags {
 public:
  Flags(int argc, char** argv) {
    const std::string self = argc > 0 ? argv[0] : "bench";
    program_ = self.substr(self.find_last_of('/') + 1);
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      if (a.rfind("--", 0) != 0) usage("unexpected argument '" + a + "'");
      a = a.substr(2);
      const auto eq = a.find('=');
      const std::string key = a.substr(0, eq);
      if (kv_.count(key)) usage("--" + key + " is given twice");
      kv_[key] = eq == std::string::npos ? "" : a.substr(eq + 1);
      if (eq == std::string::npos) bare_.insert(key);
    }
  }
  int get(const std::string& k, int def) {
    known(k, std::to_string(def));
    return used(k) ? number<int>(k, [](const std::string& v, size_t* end) { return std::stoi(v, end); }) : def;
  }
  std::string get(const std::string& k, const std::string& def) {
    known(k, def);
    return used(k) ? value(k) : def;
  }
  // A comma-separated list of numbers; an item that is not one is a usage
  // error (exit 2).
  std::vector<double> numbers(const std::string& k, const std::string& def) {
    const std::string text = get(k, def);
    std::vector<double> out;
    for (size_t at = 0;;) {
      const size_t comma = std::min(text.find(',', at), text.size());
      double x = 0;
      if (!parse_whole(text.substr(at, comma - at), stod_at, &x) || !std::isfinite(x))
        usage("--" + k + " needs a comma-separated list of finite numbers, got '" + text + "'");
      out.push_back(x);
      if (comma == text.size()) return out;
      at = comma + 1;
    }
  }
  // Whether the flag was given (not its default).
  bool given(const std::string& k) const { return kv_.count(k) > 0; }
  // Flags the chosen mode does not read: any of `keys` given is a usage
  // error, "--KEY " + why (it was accepted and ignored).
  void refuse(std::initializer_list<const char*> keys, const std::string& why) const {
    for (const char* k : keys)
      if (given(k)) usage(std::string("--") + k + " " + why);
  }
  double get(const std::string& k, double def) {
    known(k, shortest(def));
    if (!used(k)) return def;
    const double x = number<double>(k, stod_at);
    if (!std::isfinite(x)) usage("--" + k + " needs a finite number, got '" + kv_[k] + "'");
    return x;
  }
  // A switch: --k, --k=1 or --k=true is on; absent, --k=0 or --k=false is
  // off; any other value is a usage error (exit 2). internal: one the
  // program passes to itself, not listed by --help.
  bool on(const std::string& k, bool internal = false) {
    if (!internal) known(k, "");
    if (!used(k)) return false;
    if (bare_.count(k)) return true;
    const std::string& v = kv_[k];
    if (v == "1" || v == "true") return true;
    if (v == "0" || v == "false") return false;
    usage("--" + k + " is a switch (1/true or 0/false), got '" + v + "'");
  }
  // Call after all get()s: an unknown flag is an error (exit 2); --help
  // lists the flags asked for, with their defaults, and exits 0.
  void finish() {
    for (const auto& [k, v] : kv_)
      if (!seen_.count(k) && k != "help") usage("unknown flag --" + k);
    if (kv_.count("help")) {
      std::printf("usage: %s", program_.c_str());
      for (const auto& [k, def] : flags_) std::printf(" [--%s%s]", k.c_str(), def.empty() ? "" : ("=" + def).c_str());
      std::printf("\n(switches take no value; what each flag does: the comment at the top of bench/%s.cpp;\n"
                  "how to read the output: docs/performance.md)\n",
                  program_.c_str());
      std::exit(0);
    }
  }
  // A bad flag value: the message on stderr, exit 2.
  [[noreturn]] static void usage(const std::string& msg) {
    std::fprintf(stderr, "error: %s\n", msg.c_str());
    std::exit(2);
  }

 private:
  // A default as --help shows it: 0.001, not std::to_string's 0.001000.
  static std::string shortest(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.15g", v);
    return buf;
  }
  // A flag's number; a value that is not one (or has text after it) is a
  // usage error (exit 2).
  template <class T, class Parse>
  T number(const std::string& k, Parse parse) {
    T x{};
    if (!parse_whole(value(k), parse, &x)) usage("--" + k + " needs a number, got '" + kv_[k] + "'");
    return x;
  }
  // A flag's text; given bare (--k, a switch's form) it has none: a usage
  // error (it once read as "1": --reps ran one repetition).
  const std::string& value(const std::string& k) {
    if (bare_.count(k)) usage("--" + k + " needs a value (--" + k + "=...)");
    return kv_[k];
  }
  // Whether all of `text` is one number (parse as std::stoi/stod: value and end).
  template <class T, class Parse>
  static bool parse_whole(const std::string& text, Parse parse, T* out) {
    size_t end = 0;
    try {
      *out = parse(text, &end);
    } catch (const std::exception&) {
      return false;
    }
    return !text.empty() && end == text.size();
  }
  static double stod_at(const std::string& v, size_t* end) { return std::stod(v, end); }
  bool used(const std::string& k) {
    seen_[k] = true;
    return kv_.count(k) > 0;
  }
  // A flag the program asks for, with its default in words ("" for a switch).
  void known(const std::string& k, const std::string& def) {
    if (!seen_.count(k)) flags_.emplace_back(k, def);
  }
  std::string program_;
  std::map<std::string, std::string> kv_;
  std::map<std::string, bool> seen_;
  std::set<std::string> bare_;  // flags given without a value
  std::vector<std::pair<std::string, std::string>> flags_;  // in the order asked
};

// A benchmark's main: a bad value found past the flags (a model the
// program cannot load, a size its subject refuses: InputError) is exit 2
// with its message, any other error exit 1, never an uncaught exception.
inline int guarded_main(int argc, char** argv, int (*body)(int, char**)) {
  try {
    return body(argc, argv);
  } catch (const InputError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}

// The median (of an even count, the mean of the middle two); v must not be
// empty.
inline double median(std::vector<double> v) {
  if (v.empty()) throw std::logic_error("median of no values");
  std::sort(v.begin(), v.end());
  const size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

// The q-quantile by nearest rank (q in [0, 1]): the ceil(q n)-th smallest,
// the smallest for q = 0; 0 for an empty v. (It took the floor(q n)+1-th:
// the p99 of 100 values was their maximum.)
inline double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double rank = std::ceil(q * static_cast<double>(v.size()));
  return v[std::min(v.size() - 1, static_cast<size_t>(std::max(1.0, rank)) - 1)];
}

// Median of `reps` timed runs of fn (after `warmup` untimed runs), seconds.
inline double median_seconds(int warmup, int reps, const std::function<void()>& fn) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    Stopwatch sw;
    fn();
    t.push_back(sw.seconds());
  }
  return median(std::move(t));
}

// The closing line: {"k": v, ...} with numbers printed as given.
inline void print_json(std::vector<std::pair<std::string, std::string>> kv) {
  const HostRuntime& host = host_runtime();
  kv.push_back({"blas_core", "\"" + host.blas_core + "\""});
  kv.push_back({"blas", "\"" + host.blas + "\""});
  kv.push_back({"blas_at_b", "\"" + host.blas_at_b + "\""});
  kv.push_back({"cpu_kernels", "\"" + host.cpu_kernels + "\""});
  std::printf("host: %s\n", host_runtime_line().c_str());
  std::string s = "{";
  for (size_t i = 0; i < kv.size(); ++i)
    s += (i ? ", \"" : "\"") + kv[i].first + "\": " + kv[i].second;
  std::printf("%s}\n", s.c_str());
  std::fflush(stdout);
}

// The environment prefix that sets a CPU twin's OpenBLAS core (Debian's
// PyTorch runs its GEMMs on the system OpenBLAS, whose core an
// OPENBLAS_CORETYPE in the environment, or OpenBLAS's own fallback, can leave
// at half the machine's speed or below): `flag` "auto" is the core of the
// CPU's level (what forge selects for its own OpenBLAS,
// backend/cpu/blas_core.hpp), "installed" leaves the environment's choice
// (""), another value names a core. A usage error for a name OpenBLAS lacks
// or a core above this CPU.
inline std::string twin_blas_env(const std::string& flag) {
  const CpuLevel level = detect_cpu_level();
  const std::string core = flag == "auto" ? blas_core_for(level) : flag == "installed" ? "" : flag;
  if (!core.empty() && blas_core_rank(core) == 0)
    Flags::usage("--torch_blas_core is auto, installed or an OpenBLAS core name, not '" + core + "'");
  if (blas_core_rank(core) > blas_core_rank_for(level))
    Flags::usage("--torch_blas_core=" + core + ": this CPU lacks its instructions");
  return core.empty() ? "" : "OPENBLAS_CORETYPE=" + core + " ";
}

// The Python interpreter of the PyTorch twins: $FORGE_PYTHON, else Debian's
// /usr/bin/python3 (the one tools/setup.sh installs torch for).
inline std::string python() {
  const char* env = std::getenv("FORGE_PYTHON");
  return std::string("'") + (env && *env ? env : "/usr/bin/python3") + "'";  // quoted for the shell
}

// s in single quotes for the shell (a ' inside written as '\'').
inline std::string shell_quoted(const std::string& s) {
  std::string q = "'";
  for (const char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// A script of bench/: in the source tree this was built from, else under
// bench/ of the working directory (a checkout copied to another machine).
inline std::string script(const std::string& name) {
  const std::string built = std::string(FORGE_SOURCE_DIR) + "/bench/" + name;
  if (FILE* f = std::fopen(built.c_str(), "r")) {
    std::fclose(f);
    return built;
  }
  return "bench/" + name;
}

// The standard output of a shell command, line by line (stderr passes
// through); empty when it could not start.
inline std::vector<std::string> command_lines(const std::string& cmd) {
  std::vector<std::string> lines;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return lines;
  char buf[512];
  while (std::fgets(buf, sizeof buf, p)) {
    std::string line(buf);
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
    lines.push_back(line);
  }
  pclose(p);
  return lines;
}

// A string for the JSON line, quoted, with '"', '\\' and control characters
// escaped (a model's name or an environment variable may hold them).
inline std::string json_string(const std::string& text) { return "\"" + json_escape(text) + "\""; }

// `v` where it was measured, else NaN (null in the JSON line, nan in a table):
// a figure of a side left out (--no-torch, --no-hf) is not a 0 or a -1.
inline double measured(bool on, double v) { return on ? v : std::nan(""); }

// A number for the JSON line: null where it is not finite (JSON has no
// inf or nan).
inline std::string num(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

}  // namespace forge::bench
