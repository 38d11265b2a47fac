#include "env/knowledge_graph.hpp"

#include <algorithm>
#include <cctype>
#include <map>

#include "core/error.hpp"

namespace forge {
namespace {

const char* kTypes[] = {"person", "org", "city"};

const std::map<std::string, std::vector<std::pair<std::string, std::string>>>& schema() {
  static const std::map<std::string, std::vector<std::pair<std::string, std::string>>> s = {
      {"person", {{"works_at", "org"}, {"born_in", "city"}, {"friend", "person"}}},
      {"org", {{"based_in", "city"}, {"founder", "person"}}},
      {"city", {{"mayor", "person"}, {"twin", "city"}}},
  };
  return s;
}

const std::vector<std::string>& tag_words() {
  static const std::vector<std::string> w = {
      "jade", "amber", "iron", "tea",  "salt", "oak",  "rose", "gold",  "mint", "sky",
      "fern", "ruby",  "coal", "silk", "wool", "lime", "opal", "pine",  "sand", "snow",
      "wave", "zinc",  "clay", "dusk", "echo", "flax", "glass", "honey", "ink", "kelp",
      "lava", "moss",  "nut",  "onyx", "pearl", "reed", "sage", "tin",  "vine", "wax"};
  return w;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

int Entity::target(const std::string& relation) const {
  for (const auto& [r, t] : relations)
    if (r == relation) return t;
  return -1;
}

KnowledgeGraph KnowledgeGraph::generate(Rng& rng, int n) {
  if (n < 6 || n > static_cast<int>(tag_words().size()))
    throw InputError("knowledge graph size " + std::to_string(n) + " must be in [6, 40]");
  KnowledgeGraph kg;
  std::vector<std::string> tags = tag_words();
  for (size_t i = tags.size() - 1; i > 0; --i) std::swap(tags[i], tags[rng.below(i + 1)]);
  const std::string consonants = "bdfgklmnprstvz", vowels = "aeiou";
  std::vector<std::string> used;
  for (int i = 0; i < n; ++i) {
    Entity e;
    e.type = kTypes[i % 3];
    e.tag = tags[i];
    do {
      e.name.clear();
      for (int s = 0; s < 2; ++s) {
        e.name += consonants[rng.below(consonants.size())];
        e.name += vowels[rng.below(vowels.size())];
      }
      e.name[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(e.name[0])));
    } while (std::find(used.begin(), used.end(), e.name) != used.end());
    used.push_back(e.name);
    kg.entities.push_back(std::move(e));
  }
  for (int i = 0; i < n; ++i) {
    Entity& e = kg.entities[i];
    for (const auto& [relation, type] : schema().at(e.type)) {
      std::vector<int> candidates;
      for (int j = 0; j < n; ++j)
        if (j != i && kg.entities[j].type == type) candidates.push_back(j);
      e.relations.push_back({relation, candidates[rng.below(candidates.size())]});
    }
  }
  return kg;
}

int KnowledgeGraph::by_name(const std::string& name) const {
  const std::string key = lower(name);
  for (size_t i = 0; i < entities.size(); ++i)
    if (lower(entities[i].name) == key) return static_cast<int>(i);
  return -1;
}

int KnowledgeGraph::by_tag(const std::string& tag) const {
  const std::string key = lower(tag);
  for (size_t i = 0; i < entities.size(); ++i)
    if (entities[i].tag == key) return static_cast<int>(i);
  return -1;
}

std::optional<MultiHopQuestion> explore_and_evolve(const KnowledgeGraph& kg, Rng& rng, int min_hops, int hops,
                                                   double obfuscate) {
  MultiHopQuestion q;
  // A walk stuck below min_hops (every relation of its end leads back onto
  // it) starts again from another seed entity.
  for (int attempt = 0;; ++attempt) {
    if (attempt == kWalkAttempts) return std::nullopt;
    q.path.assign(1, static_cast<int>(rng.below(kg.entities.size())));
    q.relations.clear();
    for (int h = 0; h < hops; ++h) {
      const Entity& at = kg.entities[q.path.back()];
      std::vector<std::pair<std::string, int>> fresh;
      for (const auto& rt : at.relations)
        if (std::find(q.path.begin(), q.path.end(), rt.second) == q.path.end()) fresh.push_back(rt);
      if (fresh.empty()) break;
      const auto& [relation, target] = fresh[rng.below(fresh.size())];
      q.relations.push_back(relation);
      q.path.push_back(target);
    }
    if (q.hops() >= min_hops) break;
  }
  q.obfuscated = rng.uniform() < obfuscate;
  const Entity& seed = kg.entities[q.path.front()];
  std::string chain = q.obfuscated ? seed.description() : seed.name;
  for (const auto& r : q.relations) chain = "the " + r + " of " + chain;
  q.text = "Name " + chain + ".";
  return q;
}

}  // namespace forge
