#include "mpi_roles/data_pool_state.hpp"

#include "core/error.hpp"
#include "io_hdf5/checkpoint.hpp"

namespace forge {

void DataPoolState::keep(int64_t slot, int64_t version, const std::vector<uint8_t>& payload) {
  kept_slot.push_back(slot);
  kept_version.push_back(version);
  kept_bytes.insert(kept_bytes.end(), payload.begin(), payload.end());
  kept_offset.push_back(static_cast<int64_t>(kept_bytes.size()));
}

std::vector<uint8_t> DataPoolState::kept_payload(size_t i) const {
  return std::vector<uint8_t>(kept_bytes.begin() + kept_offset[i], kept_bytes.begin() + kept_offset[i + 1]);
}

CheckpointSection DataPoolState::to_section() const {
  CheckpointSection s;
  s.i64["head"] = {head};
  s.i64["consumed"] = consumed;
  s.i64["kept_slot"] = kept_slot;
  s.i64["kept_version"] = kept_version;
  s.i64["kept_offset"] = kept_offset;
  s.u8["kept_bytes"] = kept_bytes;
  return s;
}

DataPoolState DataPoolState::from_section(const CheckpointSection& s, const std::string& where) {
  const auto bad = [&](const std::string& what) {
    return InputError("checkpoint '" + where + "': /" + kDataPoolSection + " is inconsistent: " + what);
  };
  const auto i64 = [&](const char* key) {
    const auto it = s.i64.find(key);
    if (it == s.i64.end()) throw bad(std::string("no int64 array '") + key + "'");
    return it->second;
  };
  const auto bytes = s.u8.find("kept_bytes");
  if (bytes == s.u8.end()) throw bad("no byte array 'kept_bytes'");
  DataPoolState p;
  const std::vector<int64_t> head = i64("head");
  p.consumed = i64("consumed");
  p.kept_slot = i64("kept_slot");
  p.kept_version = i64("kept_version");
  p.kept_offset = i64("kept_offset");
  p.kept_bytes = bytes->second;
  if (head.size() != 1 || head[0] < 0) throw bad("head");
  p.head = head[0];
  if (p.kept_version.size() != p.kept_slot.size() || p.kept_offset.size() != p.kept_slot.size() + 1)
    throw bad("kept_slot, kept_version and kept_offset lengths");
  for (size_t i = 0; i + 1 < p.kept_offset.size(); ++i)
    if (p.kept_offset[i] < 0 || p.kept_offset[i] > p.kept_offset[i + 1]) throw bad("kept_offset not ascending");
  if (p.kept_offset.front() != 0 || p.kept_offset.back() != static_cast<int64_t>(p.kept_bytes.size()))
    throw bad("kept_offset does not cover kept_bytes");
  for (int64_t slot : p.consumed)
    if (slot < p.head) throw bad("a consumed slot below head");
  for (int64_t slot : p.kept_slot)
    if (slot < 0) throw bad("a negative kept slot");
  return p;
}

std::optional<DataPoolState> data_pool_state_of(const CheckpointState& checkpoint, const std::string& path) {
  const auto it = checkpoint.sections.find(kDataPoolSection);
  if (it == checkpoint.sections.end()) return std::nullopt;
  return DataPoolState::from_section(it->second, path);
}

std::optional<DataPoolState> load_data_pool_state(const std::string& path) {
  const std::optional<CheckpointSection> s = load_checkpoint_section(path, kDataPoolSection);
  if (!s) return std::nullopt;
  return DataPoolState::from_section(*s, path);
}

void check_resume_state(const DataPoolState& st) {
  if (st.head < 0) throw InputError("data pool: resumed head " + std::to_string(st.head) + " is negative");
  for (const auto* list : {&st.consumed, &st.kept_slot})
    for (int64_t s : *list) {
      if (s < 0) throw InputError("data pool: resumed slot " + std::to_string(s) + " is negative");
      if (s >= st.head && s - st.head >= kMaxResumeSpan)
        throw InputError("data pool: resumed slot " + std::to_string(s) + " lies " + std::to_string(s - st.head) +
                         " slots past head " + std::to_string(st.head) + ", more than " +
                         std::to_string(kMaxResumeSpan) + " (a damaged checkpoint?)");
    }
}

}  // namespace forge
