// A small generated knowledge graph and the multi-hop questions built on it
// by "explore and evolve" (seeds/000: start from a seed entity, walk facts,
// then obfuscate the question so that retrieval is not trivial).
//
// Schema (entity type: relation -> target type):
//   person: works_at -> org,   born_in -> city, friend -> person
//   org:    based_in -> city,  founder -> person
//   city:   mayor -> person,   twin -> city
// Every entity has a short unique name ("Kavo") and one tag word, unique in
// the graph ("jade"), which describes it: "the jade person".
//
// explore_and_evolve(): explore = pick a seed entity; evolve = extend the
// question one hop at a time along a random relation to an entity not yet
// visited (each hop makes the question harder), up to `hops` hops (fewer if
// the walk is stuck, but never fewer than `min_hops`: a walk stuck below
// it starts again from another seed, up to kWalkAttempts walks; nullopt when
// none reached it, and the caller draws another graph). Obfuscate: with probability `obfuscate` the seed's name
// is replaced by its description, and the intermediate entities are never
// named (the easy facts are left out), so the question reads
//   "Name the born_in of the works_at of the jade person."
// and the answer is the name of the last entity of the walk.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "core/rng.hpp"

namespace forge {

struct Entity {
  std::string name;
  std::string type;  // person | org | city
  std::string tag;
  std::vector<std::pair<std::string, int>> relations;  // (relation, target index)

  std::string description() const { return "the " + tag + " " + type; }
  int target(const std::string& relation) const;  // -1 if it has no such relation
};

struct KnowledgeGraph {
  std::vector<Entity> entities;

  // n_entities in [6, 40], at least two of each type.
  static KnowledgeGraph generate(Rng& rng, int n_entities);
  int by_name(const std::string& name) const;  // case-insensitive; -1 if none
  int by_tag(const std::string& tag) const;    // -1 if none
};

struct MultiHopQuestion {
  std::vector<int> path;               // seed, then one entity per hop
  std::vector<std::string> relations;  // relations[i] leads path[i] -> path[i+1]
  bool obfuscated = false;             // seed described, not named
  std::string text;
  int hops() const { return static_cast<int>(relations.size()); }
};

inline constexpr int kWalkAttempts = 100;

std::optional<MultiHopQuestion> explore_and_evolve(const KnowledgeGraph& kg, Rng& rng, int min_hops, int hops,
                                                   double obfuscate);

}  // namespace forge
