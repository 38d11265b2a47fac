#include "env/perturbation.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "core/strings.hpp"

namespace forge {
namespace {

struct Dimension {
  const char* name;
  std::vector<const char*> variants;  // index = enum value
};

const std::vector<Dimension>& dimensions() {
  static const std::vector<Dimension> d = {
      {"tools", {"short", "long", "alias"}},
      {"system", {"terse", "role", "none"}},
      {"template", {"special", "text", "tool_as_user", "tool_as_system"}},
      {"call", {"paren", "json", "xml", "special"}},
      {"response", {"plain", "tagged", "json"}},
  };
  return d;
}

std::string family(size_t dim, int variant) {
  return std::string(dimensions()[dim].name) + "." + dimensions()[dim].variants[variant];
}

std::vector<int> to_indices(const ScaffoldStyle& s) {
  return {static_cast<int>(s.tools), static_cast<int>(s.system),
          static_cast<int>(s.chat_template), static_cast<int>(s.call),
          static_cast<int>(s.response)};
}

ScaffoldStyle from_indices(const std::vector<int>& v) {
  ScaffoldStyle s;
  s.tools = static_cast<ToolsStyle>(v[0]);
  s.system = static_cast<SystemStyle>(v[1]);
  s.chat_template = static_cast<TemplateStyle>(v[2]);
  s.call = static_cast<CallFormat>(v[3]);
  s.response = static_cast<ResponseFormat>(v[4]);
  return s;
}

}  // namespace

std::vector<std::string> ScaffoldStyle::families() const {
  std::vector<std::string> out;
  const auto idx = to_indices(*this);
  for (size_t d = 0; d < idx.size(); ++d) out.push_back(family(d, idx[d]));
  return out;
}

std::string ScaffoldStyle::name() const {
  std::string out;
  for (const auto& f : families()) out += (out.empty() ? "" : "/") + f;
  return out;
}

const std::vector<std::string>& all_families() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (size_t d = 0; d < dimensions().size(); ++d)
      for (size_t i = 0; i < dimensions()[d].variants.size(); ++i)
        v.push_back(family(d, static_cast<int>(i)));
    return v;
  }();
  return names;
}

std::string displayed_tool_name(ToolsStyle style, const std::string& canonical) {
  if (style != ToolsStyle::kAlias) return canonical;
  if (canonical == "calc") return "math";
  if (canonical == "find") return "locate";
  if (canonical == "lookup") return "fetch";
  return "tool_" + canonical;
}

std::vector<std::string> perturbation_dimensions() {
  std::vector<std::string> out;
  for (const auto& d : dimensions()) out.emplace_back(d.name);
  return out;
}

PerturbationSampler::PerturbationSampler(bool perturb, const std::vector<std::string>& heldout, double share,
                                         const std::vector<std::string>& dims)
    : perturb_(perturb), heldout_(heldout), share_(share), perturbed_dims_(dimensions().size(), false) {
  if (!(share >= 0 && share <= 1))
    throw InputError("env.perturb_share = " + std::to_string(share) + " must be in [0, 1]");
  const auto names = perturbation_dimensions();
  if (dims.empty())
    throw InputError("env.perturb_dims is empty: name the dimensions to perturb (" + join(names, ", ") +
                     "); env.perturb=false turns perturbations off");
  for (const auto& d : dims) {
    const auto it = std::find(names.begin(), names.end(), d);
    if (it == names.end())
      throw InputError("env.perturb_dims: unknown dimension '" + d + "' (known: " + join(names, ", ") + ")");
    perturbed_dims_[static_cast<size_t>(it - names.begin())] = true;
  }
  const auto& all = all_families();
  for (const auto& h : heldout_)
    if (std::find(all.begin(), all.end(), h) == all.end())
      throw InputError("env.heldout_families: unknown family '" + h + "' (known: " + join(all, ", ") + ")");
  for (size_t d = 0; d < dimensions().size(); ++d) {
    bool any_left = false;
    for (size_t i = 0; i < dimensions()[d].variants.size(); ++i)
      any_left |= std::find(heldout_.begin(), heldout_.end(), family(d, static_cast<int>(i))) ==
                  heldout_.end();
    if (!any_left)
      throw InputError(std::string("env.heldout_families holds out every ") + dimensions()[d].name +
                       " family; training needs at least one");
  }
}

ScaffoldStyle PerturbationSampler::draw(uint64_t seed, StyleMode mode) const {
  if (mode == StyleMode::kHeldOut && heldout_.empty())
    throw InputError("held-out evaluation asked for, but env.heldout_families is empty");
  std::vector<int> idx;
  bool heldout = false;
  const bool perturbed = perturb_ && (share_ >= 1 || counter_uniform(seed ^ 0x5EED5CAFull, 1000) < share_);
  for (size_t d = 0; d < dimensions().size(); ++d) {
    std::vector<int> train, held;
    for (size_t i = 0; i < dimensions()[d].variants.size(); ++i) {
      const bool h = std::find(heldout_.begin(), heldout_.end(), family(d, static_cast<int>(i))) !=
                     heldout_.end();
      (h ? held : train).push_back(static_cast<int>(i));
    }
    const double u = counter_uniform(seed ^ 0x5EED5CAFull, d);
    if (mode == StyleMode::kHeldOut && !held.empty()) {
      idx.push_back(held[static_cast<size_t>(u * held.size())]);
      heldout = true;
    } else if (perturbed && perturbed_dims_[d]) {
      idx.push_back(train[static_cast<size_t>(u * train.size())]);
    } else {
      idx.push_back(train.front());
    }
  }
  ScaffoldStyle s = from_indices(idx);
  s.heldout = heldout;
  return s;
}

std::vector<std::string> all_template_families() {
  // Group the families by dimension ("tools.short" -> "tools"), in order.
  std::vector<std::vector<std::string>> dims;
  std::string last;
  for (const auto& f : all_families()) {
    const std::string dim = f.substr(0, f.find('.'));
    if (dims.empty() || dim != last) dims.emplace_back();
    dims.back().push_back(f);
    last = dim;
  }
  std::vector<std::string> out = {""};
  for (const auto& variants : dims) {
    std::vector<std::string> next;
    for (const auto& prefix : out)
      for (const auto& v : variants) next.push_back(prefix.empty() ? v : prefix + "/" + v);
    out = std::move(next);
  }
  return out;
}

}  // namespace forge
