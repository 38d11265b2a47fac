#include "episode/trajectory_codec.hpp"

#include <cmath>
#include <string>
#include <type_traits>

#include "core/error.hpp"
#include "core/wire_codec.hpp"
#include "episode/trajectory_fields.hpp"

namespace forge {
namespace {

constexpr uint32_t kMagic = 0x52544746;  // "FGTR"
constexpr uint32_t kMaxTokens = 1u << 26;
constexpr uint32_t kMaxItems = 1u << 20;
constexpr uint32_t kMaxStringBytes = 1u << 20;

template <class V>
constexpr bool kIsList = std::is_same_v<V, std::vector<LlmCall>> || std::is_same_v<V, std::vector<ProcessSignal>>;

// Bytes of an episode with empty strings and lists: the fixed-size fields,
// and a 4-byte length for each string and list.
size_t min_episode_bytes() {
  size_t n = 0;
  const Trajectory t;
  for_each_field(t, [&](const char*, const auto& value) {
    using V = std::decay_t<decltype(value)>;
    if constexpr (std::is_same_v<V, std::string> || kIsList<V>) n += sizeof(uint32_t);
    else n += sizeof(V);
  });
  return n;
}

void check_tokens(const WireReader& r, const std::vector<int32_t>& tokens, int32_t vocab) {
  for (int32_t t : tokens)
    if (t < 0 || t >= vocab) r.fail("token id " + std::to_string(t) + " outside [0, " + std::to_string(vocab) + ")");
}

void put(WireWriter& w, const std::vector<LlmCall>& calls) {
  w.put(static_cast<uint32_t>(calls.size()));
  for (const LlmCall& c : calls) {
    w.put_vec(c.context);
    w.put_vec(c.generated);
    w.put_vec(c.logprobs);
    w.put_vec(c.versions);
  }
}

void put(WireWriter& w, const std::vector<ProcessSignal>& signals) {
  w.put(static_cast<uint32_t>(signals.size()));
  for (const ProcessSignal& s : signals) {
    w.put(s.turn);
    w.put_str(s.kind);
    w.put(s.value);
  }
}

void get(WireReader& r, std::vector<LlmCall>& calls, int32_t vocab) {
  const uint32_t n = r.get<uint32_t>();
  if (n > kMaxItems) r.fail("a call count of " + std::to_string(n));
  r.expect_room(n, 4 * sizeof(uint32_t), "calls");
  calls.resize(n);
  for (LlmCall& c : calls) {
    c.context = r.get_vec<int32_t>(kMaxTokens);
    c.generated = r.get_vec<int32_t>(kMaxTokens);
    c.logprobs = r.get_vec<float>(kMaxTokens);
    c.versions = r.get_vec<int32_t>(kMaxTokens);
    if (c.logprobs.size() != c.generated.size() || c.versions.size() != c.generated.size())
      r.fail("a call with " + std::to_string(c.generated.size()) + " generated tokens but " +
             std::to_string(c.logprobs.size()) + " logprobs and " + std::to_string(c.versions.size()) +
             " versions");
    check_tokens(r, c.context, vocab);
    check_tokens(r, c.generated, vocab);
    // What a rollout engine records: a sampled token's finite log
    // probability, and the policy version that generated it (-1: none known).
    for (float lp : c.logprobs)
      if (!std::isfinite(lp)) r.fail("a logprob of " + std::to_string(lp) + " (not finite)");
    for (int32_t v : c.versions)
      if (v < -1) r.fail("a policy version of " + std::to_string(v));
  }
}

void get(WireReader& r, std::vector<ProcessSignal>& signals, int32_t) {
  const uint32_t n = r.get<uint32_t>();
  if (n > kMaxItems) r.fail("a signal count of " + std::to_string(n));
  r.expect_room(n, 2 * sizeof(int32_t) + sizeof(float), "signals");
  signals.resize(n);
  for (ProcessSignal& s : signals) {
    s.turn = r.get<int32_t>();
    s.kind = r.get_str(kMaxStringBytes);
    s.value = r.get<float>();
  }
}

// What of `t` decode_trajectories would refuse as too long, or empty.
std::string beyond_decoder_limits(const Trajectory& t) {
  std::string what;
  const auto over = [&](const std::string& item, size_t n, const char* unit, uint32_t limit) {
    if (what.empty() && n > limit)
      what = "a " + item + " of " + std::to_string(n) + unit + " (the codec's limit is " + std::to_string(limit) + ")";
  };
  over("call count", t.calls.size(), "", kMaxItems);
  over("signal count", t.signals.size(), "", kMaxItems);
  if (!what.empty()) return what;
  for_each_field(t, [&](const char* name, const auto& value) {
    if constexpr (std::is_same_v<std::decay_t<decltype(value)>, std::string>)
      over(name, value.size(), " bytes", kMaxStringBytes);
  });
  for (const ProcessSignal& s : t.signals) over("signal kind", s.kind.size(), " bytes", kMaxStringBytes);
  for (const LlmCall& c : t.calls) {
    over("call context", c.context.size(), " tokens", kMaxTokens);
    over("call's generation", c.generated.size(), " tokens", kMaxTokens);
  }
  return what;
}

}  // namespace

std::vector<uint8_t> encode_trajectories(const std::vector<Trajectory>& episodes) {
  if (episodes.size() > kMaxItems)
    throw Error("trajectory codec: " + std::to_string(episodes.size()) + " episodes in one payload (at most " +
                std::to_string(kMaxItems) + ")");
  for (const Trajectory& t : episodes) {
    if (const std::string what = beyond_decoder_limits(t); !what.empty())
      throw Error("trajectory codec: episode " + std::to_string(t.episode_id) + " has " + what +
                  ": its payload could not be decoded");
    // One logprob and one version per generated token, as the decoder
    // requires (a producer's bug, refused here rather than by the learner).
    for (size_t k = 0; k < t.calls.size(); ++k) {
      const LlmCall& c = t.calls[k];
      if (c.logprobs.size() != c.generated.size() || c.versions.size() != c.generated.size())
        throw Error("trajectory codec: episode " + std::to_string(t.episode_id) + " call " + std::to_string(k) +
                    " has " + std::to_string(c.generated.size()) + " generated tokens but " +
                    std::to_string(c.logprobs.size()) + " logprobs and " + std::to_string(c.versions.size()) +
                    " versions");
    }
  }
  WireWriter w;
  w.put(kMagic);
  w.put(kTrajectoryFormatVersion);
  w.put(static_cast<uint32_t>(episodes.size()));
  for (const Trajectory& t : episodes)
    for_each_field(t, [&](const char*, const auto& value) {
      using V = std::decay_t<decltype(value)>;
      if constexpr (std::is_same_v<V, std::string>) w.put_str(value);
      else if constexpr (kIsList<V>) put(w, value);
      else if constexpr (std::is_same_v<V, bool>) w.put(static_cast<uint8_t>(value));
      else w.put(value);
    });
  return w.take();
}

std::vector<Trajectory> decode_trajectories(const uint8_t* data, size_t size, int32_t vocab,
                                            const std::string& what) {
  WireReader r(data, size, what);
  if (r.get<uint32_t>() != kMagic) r.fail("not a trajectory payload (bad magic)");
  const uint32_t version = r.get<uint32_t>();
  if (version != kTrajectoryFormatVersion)
    r.fail("format version " + std::to_string(version) + " (this build reads " +
           std::to_string(kTrajectoryFormatVersion) + ")");
  const uint32_t n = r.get<uint32_t>();
  if (n > kMaxItems) r.fail("an episode count of " + std::to_string(n));
  r.expect_room(n, min_episode_bytes(), "episodes");
  std::vector<Trajectory> out(n);
  for (size_t k = 0; k < out.size(); ++k)
    for_each_field(out[k], [&](const char* name, auto& value) {
      using V = std::decay_t<decltype(value)>;
      try {
        if constexpr (std::is_same_v<V, std::string>) {
          value = r.get_str(kMaxStringBytes);
        } else if constexpr (kIsList<V>) {
          get(r, value, vocab);
        } else if constexpr (std::is_same_v<V, bool>) {
          // 0 or 1, as written: another byte is damage, not "true"
          const uint8_t b = r.get<uint8_t>();
          if (b > 1) r.fail(std::to_string(b) + ", not a bool (0 or 1)");
          value = b == 1;
        } else {
          value = r.get<V>();
        }
      } catch (const InputError& e) {  // where: the episode and its field
        throw InputError(std::string(e.what()) + " (episode " + std::to_string(k) + " of " + std::to_string(n) +
                         ", field " + name + ")");
      }
    });
  r.expect_end();
  return out;
}

std::vector<uint8_t> encode_group_for_slot(std::vector<Trajectory>& episodes, size_t slot_bytes,
                                           std::string* dropped) {
  std::string why, advice = "raise pool.slot_mib";
  for (const Trajectory& t : episodes)
    if (const std::string what = beyond_decoder_limits(t); !what.empty()) {
      why = "its episode " + std::to_string(t.episode_id) + " has " + what;
      advice = "lower agent.max_new_tokens";
      break;
    }
  if (why.empty()) {
    std::vector<uint8_t> payload = encode_trajectories(episodes);
    if (payload.size() <= slot_bytes) return payload;
    why = "its group's record took " + std::to_string(payload.size()) + " bytes, more than its data-pool slot (" +
          std::to_string(slot_bytes) + " bytes, pool.slot_mib)";
  }
  *dropped = "a group of " + std::to_string(episodes.size()) + " episodes: " + why +
             "; its episodes are recorded as abandoned, without their calls (" + advice + ")";
  for (Trajectory& t : episodes) {
    t.calls.clear();
    t.signals.clear();
    t.final_answer.clear();
    t.abandoned = true;
    t.end_reason = "abandoned: " + why;
  }
  std::vector<uint8_t> payload = encode_trajectories(episodes);
  if (payload.size() > slot_bytes)  // the pool would refuse it and end the run, naming less
    throw InputError("a group of " + std::to_string(episodes.size()) + " episodes takes " +
                     std::to_string(payload.size()) + " bytes even without its calls, more than its data-pool slot (" +
                     std::to_string(slot_bytes) + " bytes): raise pool.slot_mib");
  return payload;
}

}  // namespace forge
