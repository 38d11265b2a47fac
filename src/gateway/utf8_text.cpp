#include "gateway/utf8_text.hpp"

namespace forge {

std::string tokens_text(const Tokens& tokens, const ScaffoldVocabulary& vocab) {
  return valid_utf8(vocab.decode(tokens));
}

}  // namespace forge
