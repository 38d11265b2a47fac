// Crash-safe checkpoints in HDF5.
//
// DIR/ckpt_step_<step, 8 digits>.h5 holds
//   attributes  format = "forge-checkpoint", schema_version, step,
//               policy_version, config (the run's resolved INI),
//               model_fingerprint (a pretrained model's; absent for the
//               built-in policy and before 2026-12-02)
//   /model/<tensor>       parameters, one dataset per ParamLayout tensor
//   /optim/m/<tensor>     AdamW first moments
//   /optim/v/<tensor>     AdamW second moments
//   /rng/<name>           uint64[4] states of the run's named RNG streams
//   /<section>/<array>    sections owned by the caller: int64 or uint8
//                         arrays (the data pool's resume state of an
//                         asynchronous run is /data_pool,
//                         mpi_roles/data_pool_state.hpp)
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

#include "io_hdf5/checkpoint_section.hpp"
#include "model/optimizer.hpp"
#include "model/policy_model.hpp"

namespace forge {

inline constexpr int64_t kCheckpointSchemaVersion = 1;

struct CheckpointState {
  int64_t step = 0;            // optimizer steps taken
  int64_t policy_version = 0;  // version of the weights
  std::string config_ini;
  std::string model_fingerprint;  // pretrained/model_fingerprint.hpp; "" = none stored
  std::map<std::string, std::array<uint64_t, 4>> rngs;
  std::map<std::string, CheckpointSection> sections;  // every other top-level group
};

// Returns the path written. keep_last <= 0 keeps every checkpoint.
std::string save_checkpoint(const std::string& dir, const PolicyModel& model, AdamW* optimizer,
                            const CheckpointState& state, int keep_last);

// The newest complete checkpoint in dir, or "" when there is none.
std::string latest_checkpoint(const std::string& dir);
// The checkpoint of dir just older than `path` (one of dir's), or "".
std::string checkpoint_before(const std::string& dir, const std::string& path);

// Loads weights (and the optimizer's moments and step when optimizer is not
// null). InputError naming the file and the problem for a missing, foreign,
// newer-schema or corrupted file, naming the tensor whose shape differs
// from the configured model, and naming the dataset and element of a weight
// or first moment that is not finite or a second moment that is NaN or
// negative (a file edited without its checksum: resumed, it would
// carry the value into every later checkpoint under a valid one).
CheckpointState load_checkpoint(const std::string& path, PolicyModel& model, AdamW* optimizer);

// The checks of load_checkpoint's model tensors that need no data: the
// format, schema and every /model tensor's shape against `layout`. Run
// before a model of a stored configuration is allocated, so that a
// configuration edited to a huge shape is refused by name, not by memory.
void check_checkpoint_shapes(const std::string& path, const ParamLayout& layout);

// The configuration (INI) a checkpoint was written with, after the format
// and schema checks of load_checkpoint (InputError for a foreign or newer
// file).
std::string checkpoint_config(const std::string& path);
// Its model_fingerprint attribute, "" when it has none; same InputErrors.
std::string checkpoint_model_fingerprint(const std::string& path);

// The names of the RNG states a checkpoint holds ("tasks": forge train's,
// "data": forge sft's), without reading the model; same InputErrors.
std::vector<std::string> checkpoint_rng_names(const std::string& path);

// One section only (none when the checkpoint lacks it), without reading the
// model; same InputErrors for a bad file.
std::optional<CheckpointSection> load_checkpoint_section(const std::string& path, const std::string& name);

}  // namespace forge
