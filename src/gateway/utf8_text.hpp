// Text for JSON: the gateway's strings must be valid UTF-8, and what an agent
// echoes back must compare equal to what it was given. Bytes that do not
// form a valid UTF-8 sequence (truncated, overlong, surrogates, > U+10FFFF)
// become U+FFFD, one per byte; valid sequences are kept as they are.
#pragma once
#include <string>

#include "agent/scaffold_vocabulary.hpp"

namespace forge {

std::string valid_utf8(const std::string& bytes);
// Text of tokens through the policy's vocabulary: bytes as UTF-8 (bad bytes
// as U+FFFD), specials by name.
std::string tokens_text(const Tokens& tokens, const ScaffoldVocabulary& vocab = ScaffoldVocabulary::builtin());

}  // namespace forge
