// The layout of RUN_DIR/rollouts.h5, shared by the writer (rollout_store) and
// the reader (rollout_reader); docs/hdf5-schema.md documents each entry and
// tests/reference/test_hdf5_schema.py checks a written file against it.
//
//   root attributes   format = "forge-rollouts", schema_version, config (INI)
//   tokens, logprobs, versions, loss_mask       [n_tokens]   every call's
//       context then generated tokens, calls back to back; logprob is NaN and
//       version -1 for context tokens; loss_mask 1 = generated
//   calls/{token_offset, context_len, generated_len, episode}        [n_calls]
//   episodes/{call_offset, n_calls, env, template_family, ...}    [n_episodes]
//       env and template_family are codes into their "names" attribute
//   steps/{step, objective, ...}   [n_steps]; steps/staleness_hist and
//       steps/drift_by_staleness [n_steps, 16]
//   flushes [n_flushes, 4]   the commit record (kFlushes below)
//
// Every dataset is 1-D (or [n, width]) with an unlimited first dimension,
// chunked, shuffled and deflated. Rows are appended tokens first, then calls,
// then episodes, then steps, then the flush's commit record, so a reader that
// clamps each table to the record (and to the rows whose references are
// present) always sees a consistent prefix.
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace forge::rollout_schema {

inline constexpr const char* kFormat = "forge-rollouts";
// 2: episodes/abandoned (a version-1 file lacks it; read as all 0).
// 3: steps/engine_mismatch, steps/stale_drift and steps/drift_by_staleness
//    replace steps/logprob_mismatch, which mixed the two (an older file's is
//    read as StepMetrics::mixed_mismatch; the new ones read as NaN).
// 4: episodes/safety, episodes/safety_events and episodes/test_runs (older
//    files: read as 0).
// 5: steps/safety_mean, grad_norm, lr, groups, zero_variance_groups,
//    dropped_groups, masked_groups and abandoned (older files: NaN, or -1
//    for the counts), and the commit record `flushes` (older files: readers
//    judge partial rows by their offsets alone).
inline constexpr int64_t kSchemaVersion = 5;
inline constexpr int kStalenessBins = 16;  // bin k = staleness k, the last bin >= 15
// The commit record (schema 5): one row per flush, [n_tokens, n_calls,
// n_episodes, n_steps] the file holds whole after it; readers take the rows
// the last record names, never more (a reader during a write, or of a file
// a killed writer left, sees exactly what a flush completed).
// Its fill value is kUnwrittenRecord (files before: 0): a row whose extent
// was set but whose data did not land (a kill, damage) reads -1 and is
// passed over for the last row written.
inline constexpr const char* kFlushes = "flushes";
inline constexpr int64_t kUnwrittenRecord = -1;
inline constexpr const char* kNamesAttr = "names";

enum class Type { kU8, kI16, kI32, kI64, kU64, kF32, kF64 };

struct Column {
  const char* path;
  Type type;
  int width;        // elements per row (1 for a 1-D dataset)
  hsize_t chunk;    // rows per chunk
};

inline hid_t native_type(Type t) {
  switch (t) {
    case Type::kU8: return H5T_NATIVE_UINT8;
    case Type::kI16: return H5T_NATIVE_INT16;
    case Type::kI32: return H5T_NATIVE_INT32;
    case Type::kI64: return H5T_NATIVE_INT64;
    case Type::kU64: return H5T_NATIVE_UINT64;
    case Type::kF32: return H5T_NATIVE_FLOAT;
    case Type::kF64: return H5T_NATIVE_DOUBLE;
  }
  return H5T_NATIVE_INT32;
}

inline size_t type_size(Type t) {
  switch (t) {
    case Type::kU8: return 1;
    case Type::kI16: return 2;
    case Type::kI32: case Type::kF32: return 4;
    case Type::kI64: case Type::kU64: case Type::kF64: return 8;
  }
  return 0;
}

// Rows a chunk. Small: under SWMR each flush rewrites every dataset's partly
// filled last chunk and HDF5 never reuses the old copy's space
// (docs/hdf5-schema.md measures it).
inline constexpr hsize_t kTokenChunk = 1 << 13, kRowChunk = 1 << 9, kStepChunk = 1 << 5;

// In write order (see above).
inline const std::vector<Column>& columns() {
  static const std::vector<Column> c = {
      {"tokens", Type::kI32, 1, kTokenChunk},
      {"logprobs", Type::kF32, 1, kTokenChunk},
      {"versions", Type::kI32, 1, kTokenChunk},
      {"loss_mask", Type::kU8, 1, kTokenChunk},
      {"calls/token_offset", Type::kI64, 1, kRowChunk},
      {"calls/context_len", Type::kI32, 1, kRowChunk},
      {"calls/generated_len", Type::kI32, 1, kRowChunk},
      {"calls/episode", Type::kI64, 1, kRowChunk},
      {"episodes/episode_id", Type::kU64, 1, kRowChunk},
      {"episodes/call_offset", Type::kI64, 1, kRowChunk},
      {"episodes/n_calls", Type::kI32, 1, kRowChunk},
      {"episodes/env", Type::kI16, 1, kRowChunk},
      {"episodes/template_family", Type::kI16, 1, kRowChunk},
      {"episodes/task_id", Type::kU64, 1, kRowChunk},
      {"episodes/group", Type::kI32, 1, kRowChunk},
      {"episodes/outcome", Type::kF32, 1, kRowChunk},
      {"episodes/process", Type::kF32, 1, kRowChunk},
      {"episodes/efficiency", Type::kF32, 1, kRowChunk},
      {"episodes/safety", Type::kF32, 1, kRowChunk},
      {"episodes/safety_events", Type::kI32, 1, kRowChunk},
      {"episodes/test_runs", Type::kI32, 1, kRowChunk},
      {"episodes/success", Type::kU8, 1, kRowChunk},
      {"episodes/abandoned", Type::kU8, 1, kRowChunk},
      {"episodes/turns", Type::kI32, 1, kRowChunk},
      {"episodes/tool_errors", Type::kI32, 1, kRowChunk},
      {"episodes/recoveries", Type::kI32, 1, kRowChunk},
      {"episodes/staleness", Type::kI32, 1, kRowChunk},
      {"episodes/consumed_step", Type::kI32, 1, kRowChunk},
      {"steps/step", Type::kI64, 1, kStepChunk},
      {"steps/objective", Type::kF64, 1, kStepChunk},
      {"steps/reward_mean", Type::kF64, 1, kStepChunk},
      {"steps/outcome_mean", Type::kF64, 1, kStepChunk},
      {"steps/process_mean", Type::kF64, 1, kStepChunk},
      {"steps/efficiency_mean", Type::kF64, 1, kStepChunk},
      {"steps/safety_mean", Type::kF64, 1, kStepChunk},
      {"steps/success_rate", Type::kF64, 1, kStepChunk},
      {"steps/clip_fraction", Type::kF64, 1, kStepChunk},
      {"steps/masked_fraction", Type::kF64, 1, kStepChunk},
      {"steps/engine_mismatch", Type::kF64, 1, kStepChunk},
      {"steps/stale_drift", Type::kF64, 1, kStepChunk},
      {"steps/kl", Type::kF64, 1, kStepChunk},
      {"steps/entropy", Type::kF64, 1, kStepChunk},
      {"steps/tree_token_ratio", Type::kF64, 1, kStepChunk},
      {"steps/tokens_per_s", Type::kF64, 1, kStepChunk},
      {"steps/step_seconds", Type::kF64, 1, kStepChunk},
      {"steps/store_seconds", Type::kF64, 1, kStepChunk},
      {"steps/grad_norm", Type::kF64, 1, kStepChunk},
      {"steps/lr", Type::kF64, 1, kStepChunk},
      {"steps/groups", Type::kI32, 1, kStepChunk},
      {"steps/zero_variance_groups", Type::kI32, 1, kStepChunk},
      {"steps/dropped_groups", Type::kI32, 1, kStepChunk},
      {"steps/masked_groups", Type::kI32, 1, kStepChunk},
      {"steps/abandoned", Type::kI32, 1, kStepChunk},
      {"steps/staleness_hist", Type::kI32, kStalenessBins, kStepChunk},
      {"steps/drift_by_staleness", Type::kF64, kStalenessBins, kStepChunk},
      {kFlushes, Type::kI64, 4, kStepChunk},
  };
  return c;
}

// Columns of older schemas that a reader still opens: (column, last schema
// version that wrote it).
inline const std::vector<std::pair<Column, int64_t>>& legacy_columns() {
  static const std::vector<std::pair<Column, int64_t>> c = {
      {{"steps/logprob_mismatch", Type::kF64, 1, kStepChunk}, 2},
  };
  return c;
}

// The version that introduced a column (1 for the original ones).
inline int64_t introduced_in(const std::string& path) {
  if (path == "episodes/abandoned") return 2;
  if (path == "episodes/safety" || path == "episodes/safety_events" || path == "episodes/test_runs") return 4;
  if (path == "steps/safety_mean" || path == "steps/grad_norm" || path == "steps/lr" || path == "steps/groups" ||
      path == "steps/zero_variance_groups" || path == "steps/dropped_groups" || path == "steps/masked_groups" ||
      path == "steps/abandoned" || path == kFlushes)
    return 5;
  if (path == "steps/engine_mismatch" || path == "steps/stale_drift" || path == "steps/drift_by_staleness") return 3;
  return 1;
}

// The table a column belongs to, as an index into the commit record's row
// [n_tokens, n_calls, n_episodes, n_steps]; -1 for the record itself.
inline int table_of(const std::string& path) {
  if (path == kFlushes) return -1;
  if (path.rfind("calls/", 0) == 0) return 1;
  if (path.rfind("episodes/", 0) == 0) return 2;
  if (path.rfind("steps/", 0) == 0) return 3;
  return 0;  // tokens, logprobs, versions, loss_mask
}

// What a reader gives each row of a column its file predates (and what a
// resume that upgrades the file writes): NaN for a step metric, -1 for a
// step count, 0 for an episode column.
inline double absent_value(const Column& c) {
  const std::string path = c.path;
  if (path.rfind("steps/", 0) != 0) return 0;
  return c.type == Type::kF64 ? std::numeric_limits<double>::quiet_NaN() : -1;
}

// The oldest schema a resume upgrades in place (its missing columns written
// with absent_value); older ones had columns since replaced.
inline constexpr int64_t kOldestResumable = 3;

}  // namespace forge::rollout_schema
