// What identifies a pretrained model beyond its tensors' shapes, so that a
// checkpoint can tell when the file its model.pretrained names has changed
// since it was trained (its weights would then be paired with another
// tokenizer, chat template or RoPE without a word):
//
//   "forge-model 1; tokenizer=H; chat_template=H; config=H"
//
// each H the 64-bit FNV-1a digest (16 hex digits, core/fnv1a.hpp) of that
// part's fields in the wire encoding (core/wire_codec.hpp): the tokenizer's
// tokens, merges, added tokens, pre-tokenizer and NFC, its text prefix and
// bos/eos/end ids; the chat template's source; the resolved configuration's
// fields (sizes, RoPE, norm epsilon, tying, biases; not the path). The
// built-in policy has none (""): the stored [model] section gives it whole.
#pragma once
#include <string>

#include "pretrained/model_source.hpp"

namespace forge {

std::string model_fingerprint(const ModelSource& source);

// The parts ("tokenizer", "chat template", "configuration") in which two
// fingerprints differ, joined by ", "; "" when they agree. A part only one
// of them has (a newer forge's) is not compared.
std::string fingerprint_differences(const std::string& stored, const std::string& now);

}  // namespace forge
