// The perturbation pipeline: per episode, one variant of each scaffold
// dimension is drawn, so that the policy learns the task rather than one
// scaffold. A family is a named variant "<dimension>.<variant>":
//
//   tools.short  tools.long  tools.alias           tool definitions (names, descriptions)
//   system.terse system.role system.none           system prompt (none: tools go in the user turn)
//   template.special template.text template.tool_as_user template.tool_as_system
//                                                  chat template (roles as special tokens,
//                                                  as text markers, tool results as user or
//                                                  system turns)
//   call.paren call.json call.xml call.special     tool-call format (tool_call_format.hpp)
//   response.plain response.tagged response.json   tool-response format
//
// The first variant of each dimension is its default. Drawing (draw()):
//  - training mode never draws a held-out family; with perturb off every
//    dimension takes its first variant that is not held out; with perturb
//    on, an episode is perturbed with probability `share` (env.perturb_share,
//    one coin per episode) and then draws each perturbed dimension
//    (env.perturb_dims; all five by default) uniformly among its training
//    variants, the others at their defaults; an unperturbed episode takes
//    the defaults;
//  - held-out mode takes a held-out family in each dimension that has one
//    (uniformly if several) and draws the other dimensions as training does.
// The draw is a pure function of (seed, mode). The rendering of each variant
// lives in src/agent (chat_template, tool_call_format, prompt_text).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace forge {

enum class ToolsStyle { kShort, kLong, kAlias };
enum class SystemStyle { kTerse, kRole, kNone };
enum class TemplateStyle { kSpecial, kText, kToolAsUser, kToolAsSystem };
enum class CallFormat { kParen, kJson, kXml, kSpecial };
enum class ResponseFormat { kPlain, kTagged, kJson };

struct ScaffoldStyle {
  ToolsStyle tools = ToolsStyle::kShort;
  SystemStyle system = SystemStyle::kTerse;
  TemplateStyle chat_template = TemplateStyle::kSpecial;
  CallFormat call = CallFormat::kParen;
  ResponseFormat response = ResponseFormat::kPlain;
  bool heldout = false;  // drawn in held-out mode with a held-out family

  // "tools.short/system.terse/template.special/call.paren/response.plain"
  std::string name() const;
  // The family names of its five variants.
  std::vector<std::string> families() const;
  bool operator==(const ScaffoldStyle&) const = default;
};

enum class StyleMode { kTrain, kHeldOut };

// Every family name, dimension by dimension, defaults first.
const std::vector<std::string>& all_families();

// "tools.short/system.terse/..." for every combination of families
// (ScaffoldStyle::name() of each possible style): the template families a
// rollout store declares.
std::vector<std::string> all_template_families();

// The name a tool is shown under in a tool-definition style (tools.alias
// renames: calc -> math, find -> locate, lookup -> fetch, others -> tool_X).
std::string displayed_tool_name(ToolsStyle style, const std::string& canonical);

// The dimension names, in table order ("tools", "system", ...).
std::vector<std::string> perturbation_dimensions();

class PerturbationSampler {
 public:
  // `dims`: the dimensions a perturbed episode draws ("tools", "system",
  // "template", "call", "response"; default all). InputError for an empty
  // list, an unknown family or dimension name, a dimension with every variant
  // held out, or a share outside [0, 1].
  PerturbationSampler(bool perturb, const std::vector<std::string>& heldout, double share = 1.0,
                      const std::vector<std::string>& dims = perturbation_dimensions());
  ScaffoldStyle draw(uint64_t seed, StyleMode mode) const;
  // Whether held-out mode has anything to hold out.
  bool has_heldout() const { return !heldout_.empty(); }

 private:
  bool perturb_;
  std::vector<std::string> heldout_;
  double share_;
  std::vector<bool> perturbed_dims_;  // per dimension, in table order
};

}  // namespace forge
