#include "io_hdf5/rollout_reader.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <type_traits>

#include "core/error.hpp"
#include "episode/trajectory_fields.hpp"

namespace forge {

namespace rs = rollout_schema;

namespace {

const char* type_name(rs::Type t) {
  switch (t) {
    case rs::Type::kU8: return "uint8";
    case rs::Type::kI16: return "int16";
    case rs::Type::kI32: return "int32";
    case rs::Type::kI64: return "int64";
    case rs::Type::kU64: return "uint64";
    case rs::Type::kF32: return "float32";
    case rs::Type::kF64: return "float64";
  }
  return "?";
}

bool type_matches(hid_t file_type, rs::Type t) {
  const bool is_float = t == rs::Type::kF32 || t == rs::Type::kF64;
  const H5T_class_t cls = H5Tget_class(file_type);
  if (cls != (is_float ? H5T_FLOAT : H5T_INTEGER)) return false;
  if (H5Tget_size(file_type) != rs::type_size(t)) return false;
  if (is_float) return true;
  const bool is_signed = !(t == rs::Type::kU8 || t == rs::Type::kU64);
  return (H5Tget_sign(file_type) == H5T_SGN_2) == is_signed;
}

// A row of the calls or episodes table as the span it names in the table
// it points into (tokens, calls).
struct Span {
  int64_t offset, length;
};

// The number of leading rows of a table that are whole. spans(start, count)
// gives rows [start, start + count) as spans into a table of `limit` rows.
// A writer appends in order, so whole rows come first and rows a killed
// flush left partial after; a whole row after a partial one is damage (an
// offset overwritten), which must not silently shorten the file (a resume
// would then cut every row after it).
// `committed`: the rows lie within the file's commit record, so every one was
// flushed whole and one outside `limit` is damage too. Rows below `verified`
// were checked by an earlier refresh.
// Without a commit record (schema 3 and 4) a row is whole when it follows the
// row before it (the writer lays them back to back from 0): rows whose extent
// was set but whose data never landed read as offset 0 and length 0, inside
// the table but not where the rows before them end. After the whole rows
// only such rows may come: another inside the table is damage.
template <typename F>
int64_t whole_prefix(const std::string& path, const char* table, int64_t n, bool committed, int64_t verified,
                     int64_t limit, F spans) {
  const auto inside = [limit](const Span& r) { return r.offset >= 0 && r.length >= 0 && r.offset <= limit - r.length; };
  const std::string row_name = std::string(table).substr(0, std::strlen(table) - 1);
  if (committed) {
    const int64_t from = std::min(verified, n);
    const std::vector<Span> rows = spans(from, n - from);
    const auto bad = std::find_if_not(rows.begin(), rows.end(), inside);
    if (bad != rows.end())
      throw InputError("'" + path + "': " + row_name + " " + std::to_string(from + (bad - rows.begin())) +
                       " (row of " + table + ") points outside its table though a flush recorded it whole (corrupted?)");
    return n;
  }
  constexpr int64_t kBlock = int64_t{1} << 16;
  int64_t whole = 0, end = 0;
  bool stopped = false;
  for (int64_t start = 0; start < n && !stopped; start += kBlock)
    for (const Span& r : spans(start, std::min(kBlock, n - start))) {
      if (!inside(r) || r.offset != end) {
        stopped = true;
        break;
      }
      end = r.offset + r.length;
      ++whole;
    }
  for (int64_t start = whole; start < n; start += kBlock) {
    const std::vector<Span> rows = spans(start, std::min(kBlock, n - start));
    for (size_t i = 0; i < rows.size(); ++i)
      if (rows[i].offset != 0 && inside(rows[i]) && start + static_cast<int64_t>(i) > whole)
        throw InputError("'" + path + "': " + table + " row " + std::to_string(whole) +
                         " does not follow the rows before it while row " + std::to_string(start + i) +
                         " after it points into its table (corrupted?)");
  }
  return whole;
}

}  // namespace

namespace {

// The rollout file at `path`, opened to follow a writer; a truncated one's
// error says what a resume does with it.
h5::File open_rollouts(const std::string& path, bool* swmr) {
  try {
    return h5::File::open_follow(path, swmr);
  } catch (const InputError& e) {
    const std::string what = e.what();
    if (what.find("is truncated") == std::string::npos) throw;
    throw InputError(what + ". After a full disk, forge train --resume extends the file to its recorded end and "
                     "goes on from the rows its commit record names");
  }
}

}  // namespace

RolloutReader::RolloutReader(const std::string& path) : file_(open_rollouts(path, &swmr_)) {
  if (!file_.has_attr("format"))
    throw InputError("'" + path + "' is not a forge rollout file (no 'format' attribute)");
  const std::string format = file_.attr_string("format");
  if (format != rs::kFormat)
    throw InputError("'" + path + "' is not a forge rollout file (format '" + format + "', expected '" +
                     rs::kFormat + "')");
  schema_version_ = file_.attr_int("schema_version");
  if (schema_version_ > rs::kSchemaVersion)
    throw InputError("'" + path + "' has rollout schema version " + std::to_string(schema_version_) +
                     ", newer than this forge reads (" + std::to_string(rs::kSchemaVersion) +
                     "); use a newer forge");
  if (schema_version_ < 1)
    throw InputError("'" + path + "' has rollout schema version " + std::to_string(schema_version_) +
                     "; versions start at 1 (damaged file)");
  config_ = file_.attr_string("config");
  std::vector<rs::Column> to_open = rs::columns();
  for (const auto& [c, last] : rs::legacy_columns())
    if (schema_version_ <= last) to_open.push_back(c);
  for (const auto& c : to_open) {
    const std::string name = c.path;
    // A column newer than the file is not read, even where present (a
    // resume's upgrade that was cut short leaves some, with no rows).
    if (schema_version_ < rs::introduced_in(name)) continue;
    if (!file_.exists(name)) throw InputError("'" + path + "' has no dataset '" + name + "' (corrupted?)");
    Dataset d{h5::Handle(H5Dopen2(file_.id(), c.path, H5P_DEFAULT), H5Dclose), c, 0};
    if (!d.id.valid()) throw InputError("'" + path + "': cannot open dataset '" + name + "' (corrupted?)");
    h5::Handle type(H5Dget_type(d.id.id()), H5Tclose);
    h5::Handle space(H5Dget_space(d.id.id()), H5Sclose);
    const int rank = space.valid() ? H5Sget_simple_extent_ndims(space.id()) : -1;
    hsize_t dims[2] = {0, 0};
    const bool shape_ok = rank == (c.width == 1 ? 1 : 2) &&
                          H5Sget_simple_extent_dims(space.id(), dims, nullptr) >= 0 &&
                          (c.width == 1 || dims[1] == static_cast<hsize_t>(c.width));
    if (!type.valid() || !type_matches(type.id(), c.type) || !shape_ok)
      throw InputError("'" + path + "': dataset '" + name + "' is not " + type_name(c.type) +
                       (c.width == 1 ? " [n]" : " [n, " + std::to_string(c.width) + "]") + " (corrupted?)");
    datasets_.emplace(name, std::move(d));
  }
  domains_ = read_names("episodes/env");
  families_ = read_names("episodes/template_family");
  refresh();
}

std::vector<std::string> RolloutReader::read_names(const std::string& dataset_name) const {
  const hid_t ds = dataset(dataset_name).id.id();
  auto bad = [&](const std::string& why) {
    throw InputError("'" + path() + "': attribute '" + dataset_name + "/names' " + why);
  };
  if (H5Aexists(ds, rs::kNamesAttr) <= 0) bad("is missing");
  h5::Handle a(H5Aopen(ds, rs::kNamesAttr, H5P_DEFAULT), H5Aclose);
  h5::Handle type(H5Aget_type(a.id()), H5Tclose);
  h5::Handle space(H5Aget_space(a.id()), H5Sclose);
  if (!type.valid() || H5Tget_class(type.id()) != H5T_STRING || H5Tis_variable_str(type.id()) > 0 ||
      H5Sget_simple_extent_ndims(space.id()) != 1)
    bad("is not a list of fixed-length strings");
  hsize_t n = 0;
  H5Sget_simple_extent_dims(space.id(), &n, nullptr);
  const size_t width = H5Tget_size(type.id());
  std::vector<char> data(n * width + 1, '\0');
  if (n > 0 && H5Aread(a.id(), type.id(), data.data()) < 0) bad("cannot be read (corrupted?)");
  std::vector<std::string> out;
  for (hsize_t i = 0; i < n; ++i) {
    const char* s = data.data() + i * width;
    out.emplace_back(s, std::find(s, s + width, '\0'));
  }
  return out;
}

const RolloutReader::Dataset& RolloutReader::dataset(const std::string& name) const {
  const auto it = datasets_.find(name);
  FORGE_CHECK(it != datasets_.end(), "no rollout dataset '" + name + "'");
  return it->second;
}

void RolloutReader::corrupted(const std::string& what) const {
  throw InputError("'" + path() + "' is corrupted: " + what);
}

void RolloutReader::check_rows(const Dataset& d, int64_t start, int64_t count) const {
  if (start < 0 || count < 0 || start > d.rows - count)
    corrupted(std::to_string(count) + " rows from row " + std::to_string(start) + " of '" + d.column.path +
              "' lie outside its " + std::to_string(d.rows) + " rows");
}

void RolloutReader::read_raw(const Dataset& d, int64_t start, int64_t count, void* out) const {
  check_rows(d, start, count);
  if (count == 0) return;
  const int rank = d.column.width == 1 ? 1 : 2;
  const hsize_t width = static_cast<hsize_t>(d.column.width);
  const hsize_t offs[2] = {static_cast<hsize_t>(start), 0}, cnt[2] = {static_cast<hsize_t>(count), width};
  h5::Handle fspace(H5Dget_space(d.id.id()), H5Sclose);
  h5::Handle mspace(H5Screate_simple(rank, cnt, nullptr), H5Sclose);
  if (!fspace.valid() || H5Sselect_hyperslab(fspace.id(), H5S_SELECT_SET, offs, nullptr, cnt, nullptr) < 0 ||
      H5Dread(d.id.id(), rs::native_type(d.column.type), mspace.id(), fspace.id(), H5P_DEFAULT, out) < 0)
    throw InputError("'" + path() + "': cannot read dataset '" + d.column.path + "' (corrupted?): " +
                     h5::last_error());
}

template <typename T>
std::vector<T> RolloutReader::read(const std::string& name, int64_t start, int64_t count) const {
  const Dataset& d = dataset(name);
  FORGE_CHECK(sizeof(T) == rs::type_size(d.column.type) && d.column.width == 1,
              "reading '" + name + "' with the wrong element type");
  check_rows(d, start, count);  // before the allocation: a damaged length once zero-filled 16 GiB
  std::vector<T> out(static_cast<size_t>(count));
  read_raw(d, start, count, out.data());
  return out;
}

template std::vector<int32_t> RolloutReader::read(const std::string&, int64_t, int64_t) const;
template std::vector<int64_t> RolloutReader::read(const std::string&, int64_t, int64_t) const;
template std::vector<float> RolloutReader::read(const std::string&, int64_t, int64_t) const;
template std::vector<uint8_t> RolloutReader::read(const std::string&, int64_t, int64_t) const;
template std::vector<int16_t> RolloutReader::read(const std::string&, int64_t, int64_t) const;
template std::vector<uint64_t> RolloutReader::read(const std::string&, int64_t, int64_t) const;
template std::vector<double> RolloutReader::read(const std::string&, int64_t, int64_t) const;

// The record's last row a flush wrote ({0, 0, 0, 0} when none): rows past
// it whose extent was set but whose data did not land read the dataset's
// fill value, rs::kUnwrittenRecord, and are passed over; in files written
// before that fill value (0), so is an all-zero row after a non-zero one.
std::array<int64_t, 4> RolloutReader::last_record(const Dataset& record, int64_t* written) const {
  *written = 0;
  int64_t fill = 0;
  h5::Handle dcpl(H5Dget_create_plist(record.id.id()), H5Pclose);
  if (!dcpl.valid() || H5Pget_fill_value(dcpl.id(), H5T_NATIVE_INT64, &fill) < 0)
    corrupted("its commit record's fill value cannot be read");
  constexpr int64_t kWindow = 256;
  std::vector<int64_t> rows;
  for (int64_t end = record.rows; end > 0; end -= kWindow) {
    const int64_t start = std::max<int64_t>(0, end - kWindow);
    rows.resize(static_cast<size_t>(4 * (end - start)));
    read_raw(record, start, end - start, rows.data());
    for (int64_t i = end - start - 1; i >= 0; --i) {
      std::array<int64_t, 4> r;
      std::copy_n(rows.begin() + 4 * i, 4, r.begin());
      const bool unwritten = fill == rs::kUnwrittenRecord
                                 ? std::count(r.begin(), r.end(), rs::kUnwrittenRecord) == 4
                                 : fill == 0 && start + i > 0 && r == std::array<int64_t, 4>{};
      if (unwritten) continue;
      for (int64_t n : r)
        if (n < 0)
          corrupted("its flush record " + std::to_string(start + i) + " counts " + std::to_string(n) + " rows");
      *written = start + i + 1;
      return r;
    }
  }
  return {0, 0, 0, 0};
}

void RolloutReader::refresh() {
  auto rows_of = [&](Dataset& d) {
    if (swmr_ && H5Drefresh(d.id.id()) < 0)
      throw InputError("'" + path() + "': cannot refresh dataset '" + d.column.path + "'");
    h5::Handle space(H5Dget_space(d.id.id()), H5Sclose);
    hsize_t dims[2] = {0, 0};
    if (!space.valid() || H5Sget_simple_extent_dims(space.id(), dims, nullptr) < 0)
      throw InputError("'" + path() + "': cannot read the shape of '" + d.column.path + "' (corrupted?)");
    d.rows = static_cast<int64_t>(dims[0]);
    // Rows past the allocated chunks are fill values, not data: an extent a
    // writer set before its rows landed, or damage (2^40 rows of a sparse
    // file once made a reader allocate terabytes).
    // A dataset stored whole (not chunked, as no forge writes a table, but
    // a foreign or damaged file may) holds the rows its storage holds.
    hsize_t chunks = 0, chunk[2] = {0, 0};
    h5::Handle dcpl(H5Dget_create_plist(d.id.id()), H5Pclose);
    if (dcpl.valid() && H5Pget_layout(dcpl.id()) != H5D_CHUNKED) {
      const hsize_t row_bytes = rs::type_size(d.column.type) * static_cast<hsize_t>(d.column.width);
      d.rows = std::min<int64_t>(d.rows, static_cast<int64_t>(H5Dget_storage_size(d.id.id()) / row_bytes));
    } else if (dcpl.valid() && H5Pget_chunk(dcpl.id(), 2, chunk) >= 1 && chunk[0] > 0 &&
               H5Dget_num_chunks(d.id.id(), space.id(), &chunks) >= 0) {  // HDF5 1.10 refuses H5S_ALL here
      d.rows = std::min<int64_t>(d.rows, static_cast<int64_t>(std::min<hsize_t>(chunks, hsize_t{1} << 40) * chunk[0]));
    }
  };
  // The commit record's last row bounds every table (schema 5; an older
  // file's tables are bounded by their own rows). None yet: nothing flushed.
  std::array<int64_t, 4> committed;
  committed.fill(std::numeric_limits<int64_t>::max());
  const auto read_record = [&] {
    if (const auto it = datasets_.find(rs::kFlushes); it != datasets_.end()) {
      rows_of(it->second);
      committed = last_record(it->second, &record_rows_);
    }
  };
  read_record();
  // Rows present in every dataset of each table. The writer records rows
  // only after they are on the file: a dataset shorter than the record is
  // damage, never a write in progress, but for a resume that recorded fewer
  // rows and then cut the tables while this reader read the record before
  // and the tables after (so the record is read again once).
  std::array<int64_t, 4> rows;
  for (int attempt = 0;; ++attempt) {
    rows = committed;
    std::string short_table;
    for (auto& [name, d] : datasets_) {
      const int table = rs::table_of(name);
      if (table < 0) continue;
      rows_of(d);
      if (d.rows < committed[table] && committed[table] != std::numeric_limits<int64_t>::max() && short_table.empty())
        short_table = "dataset '" + name + "' holds " + std::to_string(d.rows) +
                      " rows but the commit record (flushes) names " + std::to_string(committed[table]);
      rows[table] = std::min(rows[table], d.rows);
    }
    if (short_table.empty()) break;
    if (!swmr_ || attempt > 0) corrupted(short_table);
    read_record();
  }
  n_tokens_ = rows[0];
  const bool recorded = datasets_.count(rs::kFlushes) > 0;
  n_calls_ = whole_prefix(path(), "calls", rows[1], recorded, n_calls_, n_tokens_,
                          [&](int64_t start, int64_t count) {
    const std::vector<int64_t> off = read<int64_t>("calls/token_offset", start, count);
    const std::vector<int32_t> ctx = read<int32_t>("calls/context_len", start, count);
    const std::vector<int32_t> gen = read<int32_t>("calls/generated_len", start, count);
    std::vector<Span> spans(static_cast<size_t>(count));
    for (size_t i = 0; i < spans.size(); ++i)
      spans[i] = {off[i], ctx[i] < 0 || gen[i] < 0 ? -1 : int64_t{ctx[i]} + gen[i]};
    return spans;
  });
  // A file without a record (schema 3, 4) holds the tokens of its whole
  // calls: rows past them are a killed writer's extension, never written.
  if (!recorded) {
    n_tokens_ = 0;
    if (n_calls_ > 0)
      n_tokens_ = read<int64_t>("calls/token_offset", n_calls_ - 1, 1)[0] +
                  read<int32_t>("calls/context_len", n_calls_ - 1, 1)[0] +
                  read<int32_t>("calls/generated_len", n_calls_ - 1, 1)[0];
  }
  n_episodes_ = whole_prefix(path(), "episodes", rows[2], recorded, n_episodes_, n_calls_,
                             [&](int64_t start, int64_t count) {
    const std::vector<int64_t> off = read<int64_t>("episodes/call_offset", start, count);
    const std::vector<int32_t> n = read<int32_t>("episodes/n_calls", start, count);
    std::vector<Span> spans(static_cast<size_t>(count));
    for (size_t i = 0; i < spans.size(); ++i) spans[i] = {off[i], n[i]};
    return spans;
  });
  // Steps increase along the table. A file without a commit record
  // (schema 3 and 4) may hold extended rows never written, which read as
  // step 0: its steps end at the first row that does not increase (what
  // n_steps() counts, a resume keeps and an upgrade records).
  n_steps_ = rows[3];
  if (!recorded && n_steps_ > 1) {
    const std::vector<int64_t> step = read<int64_t>("steps/step", 0, n_steps_);
    for (int64_t i = 1; i < n_steps_; ++i)
      if (step[i] <= step[i - 1]) {
        n_steps_ = i;
        break;
      }
  }
}

EpisodeTable RolloutReader::episodes() const {
  const int64_t n = n_episodes_;
  EpisodeTable t;
  t.episode_id = read<uint64_t>("episodes/episode_id", 0, n);
  t.task_id = read<uint64_t>("episodes/task_id", 0, n);
  t.call_offset = read<int64_t>("episodes/call_offset", 0, n);
  t.n_calls = read<int32_t>("episodes/n_calls", 0, n);
  t.group = read<int32_t>("episodes/group", 0, n);
  t.turns = read<int32_t>("episodes/turns", 0, n);
  t.tool_errors = read<int32_t>("episodes/tool_errors", 0, n);
  t.recoveries = read<int32_t>("episodes/recoveries", 0, n);
  t.staleness = read<int32_t>("episodes/staleness", 0, n);
  t.consumed_step = read<int32_t>("episodes/consumed_step", 0, n);
  t.env = read<int16_t>("episodes/env", 0, n);
  t.template_family = read<int16_t>("episodes/template_family", 0, n);
  t.outcome = read<float>("episodes/outcome", 0, n);
  t.process = read<float>("episodes/process", 0, n);
  t.efficiency = read<float>("episodes/efficiency", 0, n);
  t.success = read<uint8_t>("episodes/success", 0, n);
  t.abandoned = datasets_.count("episodes/abandoned") ? read<uint8_t>("episodes/abandoned", 0, n)
                                                      : std::vector<uint8_t>(n, 0);
  // Schema 4 (older files: no safety events).
  t.safety = datasets_.count("episodes/safety") ? read<float>("episodes/safety", 0, n) : std::vector<float>(n, 0.0f);
  t.safety_events = datasets_.count("episodes/safety_events") ? read<int32_t>("episodes/safety_events", 0, n)
                                                              : std::vector<int32_t>(n, 0);
  t.test_runs = datasets_.count("episodes/test_runs") ? read<int32_t>("episodes/test_runs", 0, n)
                                                      : std::vector<int32_t>(n, 0);
  const auto ctx = read<int32_t>("calls/context_len", 0, n_calls_);
  const auto gen = read<int32_t>("calls/generated_len", 0, n_calls_);
  const auto token_offset = read<int64_t>("calls/token_offset", 0, n_calls_);
  // The tables as the writer lays them out: episodes back to back in the
  // calls table, their calls back to back in the token arrays
  // (docs/hdf5-schema.md). Calls past the last episode (a writer stopped
  // between the two tables) are not the episodes' and not checked.
  int64_t next_call = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t first = t.call_offset[i];
    if (first != next_call || t.n_calls[i] < 0 || t.n_calls[i] > n_calls_ - first)
      corrupted("episode " + std::to_string(i) + " (call_offset " + std::to_string(first) + ", n_calls " +
                std::to_string(t.n_calls[i]) + ") does not follow the episode before it within the " +
                std::to_string(n_calls_) + " calls");
    next_call = first + t.n_calls[i];
  }
  // Each call names its episode's row (what an h5py reader follows).
  if (datasets_.count("calls/episode")) {
    const auto owner = read<int64_t>("calls/episode", 0, next_call);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = t.call_offset[i]; c < t.call_offset[i] + t.n_calls[i]; ++c)
        if (owner[c] != i)
          corrupted("call " + std::to_string(c) + " names episode " + std::to_string(owner[c]) + " but lies in episode " +
                    std::to_string(i) + "'s calls");
  }
  int64_t next_token = 0;
  for (int64_t c = 0; c < next_call; ++c) {
    if (ctx[c] < 0 || gen[c] < 0 || token_offset[c] != next_token || ctx[c] + int64_t{gen[c]} > n_tokens_ - next_token)
      corrupted("call " + std::to_string(c) + " (token_offset " + std::to_string(token_offset[c]) + ", lengths " +
                std::to_string(ctx[c]) + " + " + std::to_string(gen[c]) + ") does not follow the call before it "
                "within the " + std::to_string(n_tokens_) + " tokens");
    next_token += ctx[c] + int64_t{gen[c]};
  }
  t.generated_tokens.assign(n, 0);
  t.final_length.assign(n, 0);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t first = t.call_offset[i], last = first + t.n_calls[i];
    for (int64_t c = first; c < last; ++c) t.generated_tokens[i] += gen[c];
    if (last > first) t.final_length[i] = int64_t{ctx[last - 1]} + gen[last - 1];
    if (t.env[i] < 0 || t.env[i] >= static_cast<int64_t>(domains_.size()) || t.template_family[i] < 0 ||
        t.template_family[i] >= static_cast<int64_t>(families_.size()))
      corrupted("episode " + std::to_string(i) + " has an env or template_family code outside its names");
  }
  return t;
}

std::vector<StepMetrics> RolloutReader::steps() const {
  const int64_t n = n_steps_;
  std::vector<StepMetrics> out(n);
  const auto step = read<int64_t>("steps/step", 0, n);
  auto fill = [&](const char* name, double StepMetrics::*field) {
    const auto v = read<double>(name, 0, n);
    for (int64_t i = 0; i < n; ++i) out[i].*field = v[i];
  };
  fill("steps/objective", &StepMetrics::objective);
  fill("steps/reward_mean", &StepMetrics::reward_mean);
  fill("steps/outcome_mean", &StepMetrics::outcome_mean);
  fill("steps/process_mean", &StepMetrics::process_mean);
  fill("steps/efficiency_mean", &StepMetrics::efficiency_mean);
  fill("steps/success_rate", &StepMetrics::success_rate);
  fill("steps/clip_fraction", &StepMetrics::clip_fraction);
  fill("steps/masked_fraction", &StepMetrics::masked_fraction);
  auto fill_if_present = [&](const char* name, double StepMetrics::*field) {
    if (datasets_.count(name)) fill(name, field);
    else for (auto& m : out) m.*field = std::numeric_limits<double>::quiet_NaN();
  };
  fill_if_present("steps/engine_mismatch", &StepMetrics::engine_mismatch);
  fill_if_present("steps/stale_drift", &StepMetrics::stale_drift);
  fill_if_present("steps/logprob_mismatch", &StepMetrics::mixed_mismatch);
  fill("steps/kl", &StepMetrics::kl);
  fill("steps/entropy", &StepMetrics::entropy);
  fill("steps/tree_token_ratio", &StepMetrics::tree_token_ratio);
  fill("steps/tokens_per_s", &StepMetrics::tokens_per_s);
  fill("steps/step_seconds", &StepMetrics::step_seconds);
  fill("steps/store_seconds", &StepMetrics::store_seconds);
  fill_if_present("steps/safety_mean", &StepMetrics::safety_mean);
  fill_if_present("steps/grad_norm", &StepMetrics::grad_norm);
  fill_if_present("steps/lr", &StepMetrics::lr);
  const auto count_if_present = [&](const char* name, int32_t StepMetrics::*field) {
    if (datasets_.count(name)) {
      const auto v = read<int32_t>(name, 0, n);
      for (int64_t i = 0; i < n; ++i) out[i].*field = v[i];
    } else {
      for (auto& m : out) m.*field = -1;  // rs::absent_value
    }
  };
  count_if_present("steps/groups", &StepMetrics::groups);
  count_if_present("steps/zero_variance_groups", &StepMetrics::zero_variance_groups);
  count_if_present("steps/dropped_groups", &StepMetrics::dropped_groups);
  count_if_present("steps/masked_groups", &StepMetrics::masked_groups);
  count_if_present("steps/abandoned", &StepMetrics::abandoned);
  std::vector<int32_t> hist(static_cast<size_t>(n) * rs::kStalenessBins);
  read_raw(dataset("steps/staleness_hist"), 0, n, hist.data());
  // Steps increase along the table (a resume cuts the rows past its
  // checkpoint; a file without a record ends its steps before a row that
  // does not: refresh). In a file with a record such a row is damage.
  for (int64_t i = 0; i < n; ++i) {
    if (step[i] < 0 || step[i] > std::numeric_limits<int32_t>::max())
      corrupted("steps/step[" + std::to_string(i) + "] = " + std::to_string(step[i]) + " is not a step index");
    if (i > 0 && step[i] <= step[i - 1])
      corrupted("steps/step[" + std::to_string(i) + "] = " + std::to_string(step[i]) + " follows step " +
                std::to_string(step[i - 1]) + " (steps increase along the table)");
    out[i].step = step[i];
    std::copy_n(hist.begin() + i * rs::kStalenessBins, rs::kStalenessBins, out[i].staleness_hist.begin());
  }
  if (datasets_.count("steps/drift_by_staleness")) {
    std::vector<double> drift(static_cast<size_t>(n) * rs::kStalenessBins);
    read_raw(dataset("steps/drift_by_staleness"), 0, n, drift.data());
    for (int64_t i = 0; i < n; ++i)
      std::copy_n(drift.begin() + i * rs::kStalenessBins, rs::kStalenessBins, out[i].drift_by_staleness.begin());
  } else {
    for (auto& m : out) m.drift_by_staleness.fill(std::numeric_limits<double>::quiet_NaN());
  }
  return out;
}

Trajectory RolloutReader::episode(int64_t i) const {
  if (i < 0 || i >= n_episodes_)
    throw InputError("'" + path() + "' has no episode " + std::to_string(i) + " (it holds " +
                     std::to_string(n_episodes_) + ")");
  Trajectory t;
  // Every number or flag of the field table that the file has a column for
  // (a version-1 file lacks episodes/abandoned: false).
  for_each_field(t, [&](const char* name, auto& value) {
    using V = std::decay_t<decltype(value)>;
    if constexpr (std::is_arithmetic_v<V>) {
      const std::string column = std::string("episodes/") + name;
      if (!datasets_.count(column)) return;
      if constexpr (std::is_same_v<V, bool>) value = read<uint8_t>(column, i, 1)[0] != 0;
      else value = read<V>(column, i, 1)[0];
    }
  });
  const int16_t env = read<int16_t>("episodes/env", i, 1)[0];
  const int16_t family = read<int16_t>("episodes/template_family", i, 1)[0];
  if (env < 0 || env >= static_cast<int64_t>(domains_.size()) || family < 0 ||
      family >= static_cast<int64_t>(families_.size()))
    corrupted("episode " + std::to_string(i) + " has an env or template_family code outside its names");
  t.env = domains_[env];
  t.template_family = families_[family];

  const int64_t first = read<int64_t>("episodes/call_offset", i, 1)[0];
  const int32_t n = read<int32_t>("episodes/n_calls", i, 1)[0];
  if (first < 0 || n < 0 || first > n_calls_ - n)
    corrupted("episode " + std::to_string(i) + " lists calls outside the calls table");
  const auto offset = read<int64_t>("calls/token_offset", first, n);
  const auto ctx = read<int32_t>("calls/context_len", first, n);
  const auto gen = read<int32_t>("calls/generated_len", first, n);
  const auto owner = datasets_.count("calls/episode") ? read<int64_t>("calls/episode", first, n)
                                                      : std::vector<int64_t>(static_cast<size_t>(n), i);
  for (int32_t c = 0; c < n; ++c) {
    if (owner[c] != i)
      corrupted("episode " + std::to_string(i) + ", call " + std::to_string(c) + " names episode " +
                std::to_string(owner[c]));
    if (ctx[c] < 0 || gen[c] < 0)
      corrupted("episode " + std::to_string(i) + ", call " + std::to_string(c) +
                " has a negative context or generated length");
    if (c > 0 && offset[c] != offset[c - 1] + ctx[c - 1] + gen[c - 1])
      corrupted("episode " + std::to_string(i) + ", call " + std::to_string(c) + " (token_offset " +
                std::to_string(offset[c]) + ") does not follow the call before it");
    const int64_t len = int64_t{ctx[c]} + gen[c];
    if (offset[c] < 0 || offset[c] > n_tokens_ - len)
      corrupted("episode " + std::to_string(i) + ", call " + std::to_string(c) + " lists tokens " +
                std::to_string(offset[c]) + " + " + std::to_string(len) + " outside the " +
                std::to_string(n_tokens_) + " tokens");
    const auto tokens = read<int32_t>("tokens", offset[c], len);
    const auto lp = read<float>("logprobs", offset[c] + ctx[c], gen[c]);
    const auto ver = read<int32_t>("versions", offset[c] + ctx[c], gen[c]);
    LlmCall call;
    call.context.assign(tokens.begin(), tokens.begin() + ctx[c]);
    call.generated.assign(tokens.begin() + ctx[c], tokens.end());
    call.logprobs = lp;
    call.versions = ver;
    t.calls.push_back(std::move(call));
  }
  return t;
}

}  // namespace forge
