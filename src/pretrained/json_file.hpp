// Reading the JSON files of a Hugging Face model folder (config.json,
// tokenizer.json, tokenizer_config.json, the shard index): a file that is
// missing or not JSON is an InputError naming it, and so is a key of the
// wrong type or an integer out of its range (JsonObject, json_int), never
// nlohmann's type_error nor a number silently truncated (2^32 + 576 read as
// an int is not 576).
#pragma once
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "core/regular_file.hpp"

namespace forge {

// A model's JSON nests a few levels; dumping a value for a message (or
// copying, comparing it) recurses once per level, so a crafted file nested
// deeper could overflow the stack.
inline constexpr int kMaxModelJsonDepth = 64;

// `text` (read from `where`) as JSON: InputError naming `where` when it is
// not JSON, nests deeper than kMaxModelJsonDepth, or names a key twice in
// one object (nlohmann keeps the last: a safetensors header listing a
// tensor twice read the second's bytes, where the reference refuses it).
template <typename Text>
nlohmann::json parse_model_json(Text&& text, const std::string& where) {
  using nlohmann::json;
  std::vector<std::set<std::string>> keys;  // of each object open now
  // depth: the containers around the one that starts (0 at the top).
  const json::parser_callback_t limit = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth >= kMaxModelJsonDepth &&
        (event == json::parse_event_t::object_start || event == json::parse_event_t::array_start))
      throw InputError(where + " nests deeper than " + std::to_string(kMaxModelJsonDepth) + " levels");
    if (event == json::parse_event_t::object_start) keys.emplace_back();
    if (event == json::parse_event_t::object_end) keys.pop_back();
    if (event == json::parse_event_t::key && !keys.back().insert(parsed.get<std::string>()).second)
      throw InputError(where + " names the key \"" + parsed.get<std::string>() + "\" twice in one object");
    return true;
  };
  try {
    return json::parse(std::forward<Text>(text), limit);
  } catch (const json::exception& e) {
    throw InputError(where + " is not valid JSON: " + e.what());
  }
}

inline nlohmann::json read_json_file(const std::string& path) {
  refuse_unless_regular_file(path, "JSON file");
  std::ifstream in(path);
  if (!in) throw InputError("cannot read '" + path + "'");
  return parse_model_json(in, "'" + path + "'");
}

// A value as the file has it, cut short for a message.
inline std::string json_shown(const nlohmann::json& v) {
  const std::string s = v.dump();
  return s.size() > 80 ? s.substr(0, 80) + "..." : s;
}

// v as an integer within [lo, hi]; `what` names the file and the key in the
// InputError otherwise.
inline int64_t json_int(const nlohmann::json& v, int64_t lo, int64_t hi, const std::string& what) {
  if (!v.is_number_integer()) throw InputError(what + " is " + json_shown(v) + ", not an integer");
  bool ok;
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    ok = hi >= 0 && u <= static_cast<uint64_t>(hi) && static_cast<int64_t>(u) >= lo;
  } else {
    const int64_t s = v.get<int64_t>();
    ok = s >= lo && s <= hi;
  }
  if (!ok)
    throw InputError(what + " is " + json_shown(v) + ", outside [" + std::to_string(lo) + ", " + std::to_string(hi) +
                     "]");
  return v.get<int64_t>();
}

// The keys of a JSON object read by type; an absent or null key takes the
// fallback. InputError naming the file and the key ("rope_scaling.factor")
// for a value of another type.
class JsonObject {
 public:
  // prefix: the object's own key in the file, with a dot ("rope_scaling.").
  JsonObject(const nlohmann::json& j, std::string file, std::string prefix = "")
      : j_(j), file_(std::move(file)), prefix_(std::move(prefix)) {
    const std::string what = prefix_.empty() ? "the file" : prefix_.substr(0, prefix_.size() - 1);
    if (!j_.is_object()) throw InputError("'" + file_ + "': " + what + " is " + json_shown(j_) + ", not a JSON object");
  }
  bool has(const std::string& key) const { return j_.contains(key) && !j_[key].is_null(); }
  bool has_string(const std::string& key) const { return has(key) && j_[key].is_string(); }
  // The object itself, and a key's value as it is (null when absent), for
  // structures read by hand.
  const nlohmann::json& value() const { return j_; }
  const nlohmann::json& raw(const std::string& key) const {
    static const nlohmann::json null;
    return j_.contains(key) ? j_[key] : null;
  }
  // "'config.json': rope_scaling.factor", for messages.
  std::string name(const std::string& key) const { return "'" + file_ + "': " + prefix_ + key; }

  int64_t integer(const std::string& key, int64_t lo, int64_t hi) const {
    if (!has(key)) throw InputError("'" + file_ + "' has no " + prefix_ + key);
    return json_int(j_[key], lo, hi, name(key));
  }
  int64_t integer(const std::string& key, int64_t lo, int64_t hi, int64_t fallback) const {
    return has(key) ? integer(key, lo, hi) : fallback;
  }
  double number(const std::string& key, double fallback) const {
    if (!has(key)) return fallback;
    if (!j_[key].is_number()) throw InputError(name(key) + " is " + json_shown(j_[key]) + ", not a number");
    return j_[key].get<double>();
  }
  std::string string(const std::string& key) const {
    if (!has(key)) throw InputError("'" + file_ + "' has no " + prefix_ + key);
    return string(key, "");
  }
  std::string string(const std::string& key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    if (!j_[key].is_string()) throw InputError(name(key) + " is " + json_shown(j_[key]) + ", not a string");
    return j_[key].get<std::string>();
  }
  bool boolean(const std::string& key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!j_[key].is_boolean()) throw InputError(name(key) + " is " + json_shown(j_[key]) + ", not true or false");
    return j_[key].get<bool>();
  }
  // A key that has() a value, as an object.
  JsonObject object(const std::string& key) const {
    if (!has(key)) throw InputError("'" + file_ + "' has no " + prefix_ + key);
    return JsonObject(j_[key], file_, prefix_ + key + ".");
  }

 private:
  const nlohmann::json& j_;
  std::string file_, prefix_;
};

}  // namespace forge
