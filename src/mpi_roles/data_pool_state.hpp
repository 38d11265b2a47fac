// The data pool's resume state, owned by the pool and stored in a checkpoint
// section (io_hdf5/checkpoint.hpp) named "data_pool":
//
//   head          int64[1]  slots below head were all trained on
//   consumed      int64[]   trained (or already skipped) slots at or above head
//   kept_slot     int64[]   groups that had finished but were not trained on;
//   kept_version  int64[]     their payloads are saved so that a resumed run
//   kept_offset   int64[]     trains them without generating them again
//   kept_bytes    uint8[]     (kept_offset: kept_slot.size() + 1 offsets)
//
// A batch that SIGTERM interrupted can leave kept slots below head (the pool
// had handed them to the learner). Every other slot at or above head (in
// flight at the checkpoint) is generated again after a resume.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "io_hdf5/checkpoint_section.hpp"

namespace forge {

struct CheckpointState;

inline constexpr const char* kDataPoolSection = "data_pool";

struct DataPoolState {
  int64_t head = 0;
  std::vector<int64_t> consumed;
  std::vector<int64_t> kept_slot, kept_version;
  std::vector<int64_t> kept_offset{0};  // kept_slot.size() + 1 offsets into kept_bytes
  std::vector<uint8_t> kept_bytes;

  // Appends a kept group.
  void keep(int64_t slot, int64_t version, const std::vector<uint8_t>& payload);
  std::vector<uint8_t> kept_payload(size_t i) const;

  CheckpointSection to_section() const;
  // InputError naming `where` (the checkpoint) when the arrays are missing or
  // inconsistent.
  static DataPoolState from_section(const CheckpointSection& section, const std::string& where);
};

// The pool state of a checkpoint; none for a checkpoint of a one-process run.
std::optional<DataPoolState> data_pool_state_of(const CheckpointState& checkpoint, const std::string& path);
// The same, read from the file without loading the model.
std::optional<DataPoolState> load_data_pool_state(const std::string& path);

// The slots a resumed pool skips lie in [head, head + kMaxResumeSpan): the
// skip bitmap every rank holds (data_pool.hpp) stays under 32 MiB.
inline constexpr int64_t kMaxResumeSpan = int64_t{1} << 28;
// InputError when a checkpoint's pool state is not one a pool can resume
// from (call it before the collective construction, on the rank that holds
// the state, so that an error ends the job cleanly).
void check_resume_state(const DataPoolState& state);

}  // namespace forge
