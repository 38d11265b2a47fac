// Text for JSON: the gateway's strings must be valid UTF-8 (core/utf8.hpp's
// valid_utf8), and what an agent echoes back must compare equal to what it
// was given.
#pragma once
#include <string>

#include "agent/scaffold_vocabulary.hpp"
#include "core/utf8.hpp"

namespace forge {

// Text of tokens through the policy's vocabulary: bytes as UTF-8 (bad bytes
// as U+FFFD), specials by name.
std::string tokens_text(const Tokens& tokens, const ScaffoldVocabulary& vocab = ScaffoldVocabulary::builtin());

}  // namespace forge
