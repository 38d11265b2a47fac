#include "agent/scaffold_vocabulary.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "tokenizer/byte_tokenizer.hpp"

namespace forge {

ScaffoldVocabulary::ScaffoldVocabulary()
    : tokenizer_(std::make_shared<ByteTokenizer>()), stops_{kEndOfTurn}, call_open_("<|tool_call|>"), call_close_("<|/tool_call|>") {}

ScaffoldVocabulary::ScaffoldVocabulary(std::shared_ptr<const ChatFormat> native)
    : native_(std::move(native)), call_open_("<tool_call>"), call_close_("</tool_call>") {
  FORGE_CHECK(native_ != nullptr, "a pretrained scaffold vocabulary needs its chat format");
  tokenizer_ = std::shared_ptr<const Tokenizer>(native_, &native_->tokenizer());
  stops_ = native_->stop_tokens();  // its end of turn first
}

bool ScaffoldVocabulary::is_stop(int32_t id) const { return std::find(stops_.begin(), stops_.end(), id) != stops_.end(); }

const ScaffoldVocabulary& ScaffoldVocabulary::builtin() { return *builtin_ptr(); }

std::shared_ptr<const ScaffoldVocabulary> ScaffoldVocabulary::of(std::shared_ptr<const ChatFormat> native) {
  return native ? std::make_shared<const ScaffoldVocabulary>(std::move(native)) : builtin_ptr();
}

std::shared_ptr<const ScaffoldVocabulary> ScaffoldVocabulary::builtin_ptr() {
  static const std::shared_ptr<const ScaffoldVocabulary> v(new ScaffoldVocabulary());
  return v;
}

Tokens ScaffoldVocabulary::encode(const std::string& markup) const { return encode(std::vector<Part>{{markup, true}}); }

Tokens ScaffoldVocabulary::encode(const std::vector<Part>& parts) const {
  Tokens out;
  std::string run;
  const auto flush = [&] {
    if (run.empty()) return;
    const Tokens t = tokenizer_->encode_ordinary(run);
    out.insert(out.end(), t.begin(), t.end());
    run.clear();
  };
  for (const Part& p : parts) {
    if (!p.markup) {
      run += p.text;
      continue;
    }
    for (auto& [id, piece] : tokenizer_->split_special(p.text)) {
      if (id < 0) {
        run += piece;
        continue;
      }
      flush();
      out.push_back(id);
    }
  }
  flush();
  return out;
}

std::string ScaffoldVocabulary::decode(const Tokens& tokens) const { return tokenizer_->decode(tokens); }

Tokens ScaffoldVocabulary::encode_prompt(const std::string& text) const {
  Tokens out = tokenizer_->encode(text);
  if (native_) {
    const std::vector<int32_t>& prefix = native_->text_prefix();
    const bool has = out.size() >= prefix.size() && std::equal(prefix.begin(), prefix.end(), out.begin());
    if (!has) out.insert(out.begin(), prefix.begin(), prefix.end());
  }
  return out;
}

}  // namespace forge
