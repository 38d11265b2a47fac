#include "tokenizer/bpe_tokenizer.hpp"

#include <algorithm>
#include <queue>

#include "core/error.hpp"
#include "core/utf8.hpp"
#include "tokenizer/nfc.hpp"
#include "tokenizer/unicode.hpp"

namespace forge {
namespace {

constexpr size_t kCacheLimit = 1 << 16;  // cached pieces before the cache is cleared
// Longer pieces are not cached: a word's pieces are short, and distinct long
// ones (a 1 MiB run of letters is one piece) held 7 MB each, 65,536 of them
// before a clear.
constexpr size_t kCachedPieceBytes = 256;

uint64_t pair_key(int32_t a, int32_t b) { return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b); }

// The byte each code point of the byte-level alphabet stands for; -1 else.
int byte_of_char(char32_t cp) {
  static const std::vector<int> table = [] {
    std::vector<int> t(512, -1);
    for (int b = 0; b < 256; ++b) t[byte_level_char(static_cast<uint8_t>(b))] = b;
    return t;
  }();
  return cp < table.size() ? table[cp] : -1;
}

}  // namespace

char32_t byte_level_char(uint8_t b) {
  // Printable Latin-1 bytes stand for themselves; the other 68 bytes, in
  // order, for U+0100 onwards.
  const auto printable = [](int x) { return (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174; };
  if (printable(b)) return b;
  int n = 0;
  for (int x = 0; x < b; ++x) n += !printable(x);
  return 256 + n;
}

std::string to_byte_level(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) append_utf8(byte_level_char(c), &out);
  return out;
}

BpeTokenizer::BpeTokenizer(BpeVocabulary vocab, const std::string& source) : vocab_(std::move(vocab)) {
  const int32_t V = vocab_size();
  const auto bad = [&](const std::string& what) { return InputError("tokenizer of '" + source + "': " + what); };
  if (V <= 0) throw bad("an empty vocabulary");
  special_.assign(V, 0);
  std::vector<uint8_t> added(V, 0);
  for (const auto& a : vocab_.added) {
    if (a.id < 0 || a.id >= V) throw bad("added token id " + std::to_string(a.id) + " outside the vocabulary of " + std::to_string(V));
    if (vocab_.tokens[a.id].empty()) throw bad("added token " + std::to_string(a.id) + " has no text");
    added[a.id] = 1;
    special_[a.id] = a.special;
  }
  id_of_.reserve(V);
  bytes_of_.resize(V);
  for (int32_t id = 0; id < V; ++id) {
    const std::string& t = vocab_.tokens[id];
    id_of_.emplace(t, id);  // the first id of a duplicated text wins
    if (added[id]) {
      bytes_of_[id] = t;
      continue;
    }
    // Byte-level text back to bytes; a token with any character outside the
    // alphabet is its text as it is, whole ("Ġ中" stays "Ġ中"), as Hugging
    // Face's ByteLevel decoder takes it.
    std::string raw;
    for (const auto& c : unicode::decode_utf8(t)) {
      const int b = byte_of_char(c.cp);
      if (b < 0) {
        raw = t;
        break;
      }
      raw.push_back(static_cast<char>(b));
    }
    bytes_of_[id] = raw;
  }
  int byte_tokens = 0;
  for (int b = 0; b < 256; ++b) {
    std::string ch;
    append_utf8(byte_level_char(static_cast<uint8_t>(b)), &ch);
    const auto it = id_of_.find(ch);
    byte_token_[b] = it == id_of_.end() ? -1 : it->second;
    byte_tokens += it != id_of_.end();
  }
  // A byte-level vocabulary may lack a few bytes (control characters it never
  // saw); such bytes are dropped, as the reference drops them. Lacking most
  // means this is not a byte-level vocabulary at all.
  if (byte_tokens < 128) throw bad("only " + std::to_string(byte_tokens) + " of the 256 bytes have a token (not a byte-level BPE vocabulary)");
  merge_.reserve(vocab_.merges.size());
  for (size_t r = 0; r < vocab_.merges.size(); ++r) {
    const auto& [a, b] = vocab_.merges[r];
    const auto ia = id_of_.find(a), ib = id_of_.find(b), im = id_of_.find(a + b);
    if (ia == id_of_.end() || ib == id_of_.end() || im == id_of_.end())
      throw bad("merge " + std::to_string(r) + " ('" + a + "' '" + b + "') names a token the vocabulary lacks");
    merge_.emplace(pair_key(ia->second, ib->second), std::make_pair(static_cast<int32_t>(r), im->second));
  }
  added_by_first_byte_.resize(256);
  ordinary_added_by_first_byte_.resize(256);
  for (const auto& a : vocab_.added) {
    const auto first = static_cast<unsigned char>(vocab_.tokens[a.id][0]);
    added_by_first_byte_[first].push_back(a.id);
    if (!a.special) ordinary_added_by_first_byte_[first].push_back(a.id), has_ordinary_added_ = true;
  }
  for (auto* table : {&added_by_first_byte_, &ordinary_added_by_first_byte_})
    for (auto& ids : *table)
      std::stable_sort(ids.begin(), ids.end(),
                       [&](int32_t x, int32_t y) { return vocab_.tokens[x].size() > vocab_.tokens[y].size(); });
}

void BpeTokenizer::encode_piece(std::string_view piece, std::vector<int32_t>* out) const {
  {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    const auto it = cache_.find(std::string(piece));
    if (it != cache_.end()) {
      out->insert(out->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids;
  if (vocab_.ignore_merges) {
    const auto it = id_of_.find(to_byte_level(piece));
    if (it != id_of_.end()) ids.push_back(it->second);
  }
  if (ids.empty()) {
    // Symbols in a linked list; a heap of candidate merges (rank, left position).
    std::vector<int32_t> sym;
    sym.reserve(piece.size());
    for (unsigned char c : piece)
      if (byte_token_[c] >= 0) sym.push_back(byte_token_[c]);
    const int n = static_cast<int>(sym.size());
    std::vector<int> prev(n), next(n);
    for (int i = 0; i < n; ++i) {
      prev[i] = i - 1;
      next[i] = i + 1 < n ? i + 1 : -1;
    }
    struct Candidate {
      int32_t rank;
      int pos;
      int32_t merged;
      bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
    const auto consider = [&](int pos) {
      if (pos < 0 || next[pos] < 0) return;
      const auto it = merge_.find(pair_key(sym[pos], sym[next[pos]]));
      if (it != merge_.end()) heap.push({it->second.first, pos, it->second.second});
    };
    for (int i = 0; i + 1 < n; ++i) consider(i);
    while (!heap.empty()) {
      const Candidate c = heap.top();
      heap.pop();
      if (sym[c.pos] < 0 || next[c.pos] < 0) continue;  // merged away, or now the last symbol
      const auto it = merge_.find(pair_key(sym[c.pos], sym[next[c.pos]]));
      if (it == merge_.end() || it->second.second != c.merged) continue;  // an outdated candidate
      const int right = next[c.pos];
      sym[c.pos] = c.merged;
      sym[right] = -1;
      next[c.pos] = next[right];
      if (next[right] >= 0) prev[next[right]] = c.pos;
      consider(prev[c.pos]);
      consider(c.pos);
    }
    for (int i = 0; i >= 0 && i < n; i = next[i]) ids.push_back(sym[i]);
  }
  out->insert(out->end(), ids.begin(), ids.end());
  if (piece.size() > kCachedPieceBytes) return;
  std::lock_guard<std::mutex> lock(cache_mutex_);
  if (cache_.size() >= kCacheLimit) cache_.clear();
  cache_.emplace(std::string(piece), std::move(ids));
}

size_t BpeTokenizer::cached_pieces() const {
  std::lock_guard<std::mutex> lock(cache_mutex_);
  return cache_.size();
}

void BpeTokenizer::encode_plain(std::string_view text, std::vector<int32_t>* out) const {
  if (vocab_.nfc && !unicode::is_nfc_quick(text)) {
    // Each text between added tokens alone, as Hugging Face normalizes it.
    const std::string normalized = unicode::nfc(text);
    for (const auto& [b, e] : pre_tokenize(vocab_.pre, normalized))
      encode_piece(std::string_view(normalized).substr(b, e - b), out);
    return;
  }
  for (const auto& [b, e] : pre_tokenize(vocab_.pre, text)) encode_piece(text.substr(b, e - b), out);
}

std::vector<std::pair<int32_t, std::string>> BpeTokenizer::split_special(std::string_view text) const {
  return split_added(text, added_by_first_byte_);
}

std::vector<std::pair<int32_t, std::string>> BpeTokenizer::split_added(
    std::string_view text, const std::vector<std::vector<int32_t>>& by_first_byte) const {
  std::vector<std::pair<int32_t, std::string>> out;
  size_t plain = 0;
  for (size_t i = 0; i < text.size();) {
    int32_t found = -1;
    for (int32_t id : by_first_byte[static_cast<unsigned char>(text[i])]) {
      const std::string& t = vocab_.tokens[id];
      if (text.compare(i, t.size(), t) == 0) {
        found = id;
        break;
      }
    }
    if (found < 0) {
      ++i;
      continue;
    }
    if (plain < i) out.emplace_back(-1, std::string(text.substr(plain, i - plain)));
    out.emplace_back(found, "");
    i += vocab_.tokens[found].size();
    plain = i;
  }
  if (plain < text.size()) out.emplace_back(-1, std::string(text.substr(plain)));
  return out;
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  for (const auto& [id, piece] : split_special(text)) {
    if (id >= 0) out.push_back(id);
    else encode_plain(piece, &out);
  }
  return out;
}

std::vector<int32_t> BpeTokenizer::encode_ordinary(std::string_view text) const {
  std::vector<int32_t> out;
  if (!has_ordinary_added_) {  // the usual vocabulary: every added token is special
    encode_plain(text, &out);
    return out;
  }
  // The added tokens that are not special still match, as Hugging Face's
  // encode_special_tokens and llama.cpp's parse_special = false leave them.
  for (const auto& [id, piece] : split_added(text, ordinary_added_by_first_byte_)) {
    if (id >= 0) out.push_back(id);
    else encode_plain(piece, &out);
  }
  return out;
}

std::string BpeTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size())
      throw InputError("token id " + std::to_string(id) + " outside the vocabulary of " + std::to_string(vocab_size()));
    out += bytes_of_[id];
  }
  return out;
}

std::string BpeTokenizer::token_text(int32_t id) const {
  if (id < 0 || id >= vocab_size())
    throw InputError("token id " + std::to_string(id) + " outside the vocabulary of " + std::to_string(vocab_size()));
  return bytes_of_[id];
}

int32_t BpeTokenizer::special_id(std::string_view text) const {
  const auto it = id_of_.find(std::string(text));
  return it != id_of_.end() && special_[it->second] ? it->second : -1;
}

bool BpeTokenizer::is_special(int32_t id) const { return id >= 0 && id < vocab_size() && special_[id]; }

int32_t BpeTokenizer::token_id(std::string_view token) const {
  const auto it = id_of_.find(std::string(token));
  return it == id_of_.end() ? -1 : it->second;
}

}  // namespace forge
