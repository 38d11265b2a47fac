// Configuration: typed options with dotted keys, read from an INI file and the
// command line through Boost.Program_options.
//
// Precedence, lowest to highest:
//   1. the default given when the option is registered,
//   2. each `--config FILE` in the order given (INI; `[model]` then
//      `d_model = 256` sets model.d_model; `;` and `#` start comments),
//   3. `--key=value` / `--key value` on the command line, left to right.
//      `--key value` never takes a flag ("--...") as the value: the value is
//      then missing, an error. A bare bool `--flag` means true; it takes the
//      next argument as its value only when that is a boolean (`--flag false`),
//      so `--json FILE` leaves FILE to the positional.
//
// Every value is checked when it is set: an unknown key (with a did-you-mean
// suggestion), a value of the wrong type, a value outside the validator's set,
// a key set twice in one INI file, a missing file or a missing positional
// argument throws forge::InputError
// whose message names the key, the bad value and what is allowed. The CLI maps
// that to "forge: error: <message>" and exit code 2.
//
//   ModelConfig model;
//   OptionSet opts("forge sft", "Supervised fine-tuning.");
//   opts.add("model.d_model", &model.d_model, 256, "width of the residual stream",
//            in_range(8, 65536));
//   opts.add("model.n_layers", &model.n_layers, "number of blocks", at_least(1));
//   if (opts.parse(argc, argv).help_requested) { std::cout << opts.help(); return 0; }
//   std::string ini = opts.dump_ini();  // the resolved config, stored with the run
//
// The second form of add() takes the field's current value as the default, so
// that a struct's member initializers stay the single source of defaults.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

namespace forge {

// ---- validators ---------------------------------------------------------------

// What values an option accepts beyond its type. `allowed` completes the sentence
// "must be ..." ("in (0, 10]", ">= 1", "one of: constant, cosine"); an empty
// validator accepts every value of the type.
struct Validator {
  std::string allowed;
  std::function<bool(double)> number;              // set for numeric validators
  std::function<bool(const std::string&)> text;    // set for string validators
  std::vector<std::string> choices;                // one_of(): for did-you-mean

  bool empty() const { return !number && !text; }
};

// Which ends of in_range() belong to the range.
enum class Interval {
  kClosed,      // [lo, hi]
  kOpenLow,     // (lo, hi]
  kOpenHigh,    // [lo, hi)
  kOpen,        // (lo, hi)
};

Validator in_range(double lo, double hi, Interval ends = Interval::kClosed);
Validator at_least(double lo);                       // >= lo
Validator greater_than(double lo);                   // > lo
Validator one_of(std::vector<std::string> choices);  // strings
Validator non_empty();                               // strings
// Any numeric predicate; `allowed` completes "must be ...".
Validator satisfies(std::string allowed, std::function<bool(double)> ok);

// ---- options -------------------------------------------------------------------

template <class T>
concept OptionValueType =
    std::is_same_v<T, int> || std::is_same_v<T, int64_t> || std::is_same_v<T, uint64_t> ||
    std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, bool> ||
    std::is_same_v<T, std::string>;

using OptionTarget =
    std::variant<int*, int64_t*, uint64_t*, float*, double*, bool*, std::string*>;

struct ParseResult {
  bool help_requested = false;  // --help / -h was given: print help() and stop
};

class OptionSet {
 public:
  // `usage` heads the help text ("forge config"); `description` follows it.
  explicit OptionSet(std::string usage = "forge", std::string description = "");

  // Registers `key` writing into *target; sets *target = default_value.
  template <OptionValueType T>
  OptionSet& add(const std::string& key, T* target, std::type_identity_t<T> default_value,
                 const std::string& help, Validator validator = {}) {
    if (target) *target = std::move(default_value);
    return add_option(key, OptionTarget(target), help, std::move(validator));
  }
  // Registers `key` with the current value of *target as its default.
  template <OptionValueType T>
  OptionSet& add(const std::string& key, T* target, const std::string& help,
                 Validator validator = {}) {
    return add_option(key, OptionTarget(target), help, std::move(validator));
  }

  // A positional argument (e.g. the FILE of `forge inspect FILE`), filled in
  // declaration order. Optional ones must come after the required ones.
  OptionSet& add_positional(const std::string& name, std::string* target,
                            const std::string& help, bool required = true);

  // One-line description of a section, shown in the help ("model": "...").
  OptionSet& describe_section(const std::string& section, const std::string& help);

  // A check across options, run after parsing (e.g. n_heads divides d_model);
  // it throws InputError naming the keys.
  OptionSet& add_check(std::function<void()> check);

  // Whether `--config FILE` is accepted (default: yes).
  OptionSet& allow_config_file(bool allow);
  // Marks `key` (registered) as a flag of one invocation (`--resume`), not a
  // part of the run's configuration: dump_ini() leaves it out, so that the
  // stored config.ini is read by every command, and an INI file that sets it
  // is refused (a stored `resume = true` would resume a new run).
  OptionSet& command_line_only(const std::string& key);
  // Marks `key` (registered, a string) as a secret (gateway.token): dump_ini()
  // writes it empty, so that config.ini, rollouts.h5 and checkpoints, which
  // store the dump, never hold it.
  OptionSet& secret(const std::string& key);
  // InputError naming the first stored string value that dump_ini() would
  // not give back when read ('#' anywhere, ';' at the start or after a
  // space, a line break, spaces at either end): called by the commands that
  // store their configuration (config.ini of sft and train; forge config).
  void require_storable() const;

  // Parses argv[1..argc) (argv[0] is the program or command name) or a list
  // of arguments without it: reads the --config files, then applies the flags,
  // fills the positionals and runs the checks. With --help nothing is parsed.
  ParseResult parse(int argc, const char* const argv[]);
  ParseResult parse(int argc, char* argv[]) {
    return parse(argc, const_cast<const char* const*>(argv));
  }
  ParseResult parse(const std::vector<std::string>& args);

  // Applies an INI file or text; `source` names it in messages. Does not run
  // the checks (parse() does; call run_checks() after loading by hand).
  void load_ini_file(const std::string& path);
  void load_ini_text(const std::string& text, const std::string& source = "<ini text>");
  // Sets one option from text, with all the checks of parsing.
  void set(const std::string& key, const std::string& value,
           const std::string& source = "command line");
  void run_checks() const;

  // Help text: usage, description, then every option with its type, default,
  // allowed values and help, grouped by section in registration order.
  std::string help() const;
  // The current values of all options as INI text that load_ini_text() and
  // `--config` read back to the same values (floats are printed exactly).
  // Strings cannot hold '#' or a newline in INI form.
  std::string dump_ini(bool with_comments = false) const;

  bool has(const std::string& key) const;
  std::vector<std::string> keys() const;                     // registration order
  std::string value_text(const std::string& key) const;      // current value
  std::string default_text(const std::string& key) const;
  std::string source(const std::string& key) const;  // "default", a file, "command line"
  const std::vector<std::string>& config_files() const { return config_files_; }

  // The registered key closest to `key` by edit distance, or "" if none is
  // close; for a command-line `flag`, "help" and "config" are candidates too.
  std::string suggest(const std::string& key, bool flag = false) const;

 private:
  struct Option {
    std::string key, section, name, help;
    OptionTarget target;
    std::string default_text;
    Validator validator;
    std::string source = "default";
    bool stored = true;  // written by dump_ini()
    bool secret = false;  // written by dump_ini() with an empty value
  };
  struct Positional {
    std::string name, help;
    std::string* target = nullptr;
    bool required = true;
  };

  OptionSet& add_option(const std::string& key, OptionTarget target, const std::string& help,
                        Validator validator);
  std::vector<std::string> attach_values(const std::vector<std::string>& args) const;
  // A hint for the surplus argument `surplus`: a word that is no boolean
  // right after a bare boolean flag, a misspelt boolean (`--json tru`) or
  // `surplus` where the command takes no arguments, was read as an
  // argument; "" if none.
  std::string word_after_bare_bool(const std::vector<std::string>& args, const std::string& surplus) const;
  Option* find(const std::string& key);
  const Option& get(const std::string& key) const;  // throws Error if absent
  std::string unknown_message(const std::string& shown, const std::string& key,
                              const std::string& where) const;

  std::string usage_, description_;
  std::vector<Option> options_;
  std::vector<Positional> positionals_;
  std::vector<std::pair<std::string, std::string>> sections_;  // name, help
  std::vector<std::function<void()>> checks_;
  std::vector<std::string> config_files_;
  bool allow_config_ = true;
};

// Text form of a value as dump_ini() and help() print it (floats exact, shortest).
std::string format_number(double v);
std::string format_float(float v);

}  // namespace forge
