// Crash-safe checkpoints in HDF5.
//
// DIR/ckpt_step_<step, 8 digits>.h5 holds
//   attributes  format = "forge-checkpoint", schema_version, step,
//               policy_version, config (the run's resolved INI)
//   /model/<tensor>       parameters, one dataset per ParamLayout tensor
//   /optim/m/<tensor>     AdamW first moments
//   /optim/v/<tensor>     AdamW second moments
//   /rng/<name>           uint64[4] states of the run's named RNG streams
//   /data_pool/           asynchronous runs only (DataPoolState): attribute
//                         head; int64 consumed, kept_slot, kept_version,
//                         kept_offset; uint8 kept_bytes
// A checkpoint is written to a ".tmp" name, flushed, fsync'ed and renamed, so
// a crash leaves either the previous set of checkpoints or the new one, never
// a torn file; files still named .tmp are ignored and cleaned up. Retention
// keeps the newest keep_last checkpoints.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "model/optimizer.hpp"
#include "model/policy_model.hpp"

namespace forge {

inline constexpr int64_t kCheckpointSchemaVersion = 1;

// The data pool of an asynchronous run at a step boundary: slots below head
// were all trained on; `consumed` lists the trained (or already skipped)
// slots at or above head; the `kept` groups had finished but were not yet
// trained on, and their payloads are saved so that a resumed run trains them
// without generating them again (a batch that SIGTERM interrupted can leave
// kept slots below head: the pool had handed them to the learner). Every other slot at or above head (in
// flight at the checkpoint) is generated again after a resume.
struct DataPoolState {
  int64_t head = 0;
  std::vector<int64_t> consumed;
  std::vector<int64_t> kept_slot, kept_version;
  std::vector<int64_t> kept_offset;  // kept_slot.size() + 1 offsets into kept_bytes
  std::vector<uint8_t> kept_bytes;
};

struct CheckpointState {
  int64_t step = 0;            // optimizer steps taken
  int64_t policy_version = 0;  // version of the weights
  std::string config_ini;
  std::map<std::string, std::array<uint64_t, 4>> rngs;
  std::optional<DataPoolState> data_pool;
};

// Returns the path written. keep_last <= 0 keeps every checkpoint.
std::string save_checkpoint(const std::string& dir, const PolicyModel& model, AdamW* optimizer,
                            const CheckpointState& state, int keep_last);

// The newest complete checkpoint in dir, or "" when there is none.
std::string latest_checkpoint(const std::string& dir);

// Loads weights (and the optimizer's moments and step when optimizer is not
// null). InputError naming the file and the problem for a missing, foreign,
// newer-schema or corrupted file, and naming the tensor whose shape differs
// from the configured model.
CheckpointState load_checkpoint(const std::string& path, PolicyModel& model, AdamW* optimizer);

// Only the data pool's state (none for a checkpoint of a one-process run),
// without reading the model; same InputErrors for a bad file.
std::optional<DataPoolState> load_data_pool_state(const std::string& path);

}  // namespace forge
