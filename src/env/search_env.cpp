#include "env/search_env.hpp"

#include "core/error.hpp"
#include "core/rng.hpp"

namespace forge {
namespace {

constexpr int kGraphAttempts = 100;  // graphs drawn for one question

}  // namespace

Task SearchEnv::generate(uint64_t seed) {
  Rng rng(seed ^ 0x5EA2C4ull);
  kg_ = KnowledgeGraph::generate(rng, config().search_entities);
  const int hops = config().search_min_hops +
                   static_cast<int>(rng.below(config().search_max_hops - config().search_min_hops + 1));
  // A graph with no walk of env.search_min_hops hops (a few percent of
  // small graphs at 6 hops) is drawn again; the question is never shorter.
  for (int graphs = 1;; ++graphs) {
    if (auto q = explore_and_evolve(kg_, rng, config().search_min_hops, hops, config().search_obfuscate)) {
      q_ = std::move(*q);
      break;
    }
    if (graphs == kGraphAttempts)
      throw InputError("env.search_min_hops = " + std::to_string(config().search_min_hops) + ": " +
                       std::to_string(kGraphAttempts) + " knowledge graphs of " +
                       std::to_string(config().search_entities) +
                       " entities (env.search_entities) held no path that long; lower it or add entities");
    kg_ = KnowledgeGraph::generate(rng, config().search_entities);
  }
  found_seed_ = false;
  hop_done_.assign(q_.relations.size(), false);
  Task t;
  t.request = q_.text;
  t.tools = {{"find", "tag", "the entity with this tag", "jade"},
             {"lookup", "entity,relation", "where the relation points",
              "Kavo,works_at"}};
  t.steps_needed = q_.hops() + (q_.obfuscated ? 1 : 0);
  return t;
}

Environment::ToolResult SearchEnv::call_tool(const ToolCall& call) {
  if (call.tool == "find") {
    const std::string tag(trim(call.args));
    if (tag.empty()) return {false, "find expects a tag word"};
    const int e = kg_.by_tag(tag);
    if (e < 0) return {true, "no match", false};
    const bool useful = q_.obfuscated && e == q_.path.front() && !found_seed_;
    found_seed_ |= useful;
    return {true, kg_.entities[e].name, useful};
  }
  // lookup
  const size_t comma = call.args.find(',');
  if (comma == std::string::npos)
    return {false, "lookup expects 'entity,relation', got '" + call.args + "'"};
  const std::string entity(trim(std::string_view(call.args).substr(0, comma)));
  const std::string relation(trim(std::string_view(call.args).substr(comma + 1)));
  const int e = kg_.by_name(entity);
  if (e < 0) return {false, "unknown entity '" + entity + "'"};
  const Entity& from = kg_.entities[e];
  const int target = from.target(relation);
  if (target < 0) {
    std::string has;
    for (const auto& [r, t] : from.relations) has += (has.empty() ? "" : ", ") + r;
    return {false, from.name + " has no relation '" + relation + "' (has: " + has + ")"};
  }
  bool useful = false;
  for (size_t h = 0; h < q_.relations.size() && !useful; ++h)
    if (q_.path[h] == e && q_.relations[h] == relation && !hop_done_[h])
      useful = hop_done_[h] = true;
  return {true, kg_.entities[target].name, useful};
}

float SearchEnv::score(std::string_view answer) const {
  // The name as an answer may carry: spaces around it, one pair of quotes,
  // a closing full stop ("Pogo", 'Pogo', Pogo.). A name that is itself
  // spelled so is taken as it is first.
  std::string_view name = trim(answer);
  if (const int e = kg_.by_name(std::string(name)); e >= 0) return e == q_.path.back() ? 1.0f : 0.0f;
  const auto full_stop = [&] {
    if (!name.empty() && name.back() == '.') name = trim(name.substr(0, name.size() - 1));
  };
  full_stop();  // 'Pogo'.
  if (name.size() >= 2 && (name.front() == '"' || name.front() == '\'') && name.back() == name.front()) {
    name = trim(name.substr(1, name.size() - 2));
    full_stop();  // "Pogo."
  }
  const int e = kg_.by_name(std::string(name));
  return e >= 0 && e == q_.path.back() ? 1.0f : 0.0f;
}

Solution SearchEnv::solve() const {
  Solution s;
  if (q_.obfuscated) s.calls.push_back({"find", kg_.entities[q_.path.front()].tag});
  for (size_t h = 0; h < q_.relations.size(); ++h)
    s.calls.push_back({"lookup", kg_.entities[q_.path[h]].name + "," + q_.relations[h]});
  s.answer = kg_.entities[q_.path.back()].name;
  return s;
}

}  // namespace forge
