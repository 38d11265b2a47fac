#include "io_hdf5/rollout_store.hpp"


#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <type_traits>

#include "core/error.hpp"
#include "core/log.hpp"
#include "episode/trajectory_fields.hpp"
#include "io_hdf5/rollout_reader.hpp"

namespace forge {

namespace rs = rollout_schema;

// Chunk positions a resume may cut from one dataset (each a lookup in
// HDF5's chunk index): far more than a run's unflushed tail ever leaves.
constexpr hsize_t kMaxChunksCut = hsize_t{1} << 20;

// One extendible dataset and the rows appended to it since the last write.
class RolloutStore::Series {
 public:
  Series(const h5::File& file, const rs::Column& c) : column_(c) {
    const int rank = c.width == 1 ? 1 : 2;
    const hsize_t dims[2] = {0, static_cast<hsize_t>(c.width)};
    const hsize_t maxdims[2] = {H5S_UNLIMITED, static_cast<hsize_t>(c.width)};
    const hsize_t chunk[2] = {c.chunk, static_cast<hsize_t>(c.width)};
    h5::Handle space(H5Screate_simple(rank, dims, maxdims), H5Sclose);
    h5::Handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
    H5Pset_chunk(dcpl.id(), rank, chunk);
    // The commit record's unwritten rows read -1, never a record of 0 rows
    // (rollout_reader.cpp skips them).
    const int64_t unwritten = rs::kUnwrittenRecord;
    if (rs::table_of(c.path) < 0) H5Pset_fill_value(dcpl.id(), H5T_NATIVE_INT64, &unwritten);
    H5Pset_shuffle(dcpl.id());
    H5Pset_deflate(dcpl.id(), 4);
    h5::Handle lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
    H5Pset_create_intermediate_group(lcpl.id(), 1);
    ds_ = h5::Handle(H5Dcreate2(file.id(), c.path, rs::native_type(c.type), space.id(), lcpl.id(),
                                dcpl.id(), H5P_DEFAULT),
                     H5Dclose);
    if (!ds_.valid())
      throw Error("cannot create dataset '" + std::string(c.path) + "' in '" + file.path() + "'");
  }

  // An existing dataset to append to (cut() then sets its rows); InputError
  // when it cannot grow, before anything of the file was cut.
  // An extent far past the rows kept (damage: 2^40 rows) is refused too:
  // HDF5 visits every chunk position it cuts (hours for 2^40 rows).
  Series(const h5::File& file, const rs::Column& c, int64_t rows) : column_(c) {
    ds_ = h5::Handle(H5Dopen2(file.id(), c.path, H5P_DEFAULT), H5Dclose);
    h5::Handle space(ds_.valid() ? H5Dget_space(ds_.id()) : -1, H5Sclose);
    hsize_t dims[2] = {0, 0}, maxdims[2] = {0, 0};
    if (!space.valid() || H5Sget_simple_extent_dims(space.id(), dims, maxdims) < 1 || maxdims[0] != H5S_UNLIMITED)
      throw InputError("cannot resume '" + file.path() + "': its dataset '" + std::string(c.path) +
                       "' cannot be appended to (not as forge writes it: corrupted or rewritten?); nothing was cut");
    rows_ = static_cast<hsize_t>(rows);
    if (dims[0] > rows_ && (dims[0] - rows_) / c.chunk > kMaxChunksCut)
      throw InputError("cannot resume '" + file.path() + "': its dataset '" + std::string(c.path) + "' has an extent of " +
                       std::to_string(dims[0]) + " rows, far past the " + std::to_string(rows_) +
                       " it holds (corrupted?); nothing was cut");
    // A cut inside a chunk rewrites it, which decompresses it: a damaged one
    // is refused now, before anything is written (it failed in cut(), after
    // the record of the cut was on the disk: exit 1, the file changed).
    if (dims[0] > rows_ && rows_ % c.chunk != 0) {
      const hsize_t first = rows_ - rows_ % c.chunk, count = std::min<hsize_t>(dims[0], first + c.chunk) - first;
      std::vector<uint8_t> chunk(count * c.width * rs::type_size(c.type));
      const hsize_t start[2] = {first, 0}, size[2] = {count, static_cast<hsize_t>(c.width)};
      const int rank = c.width == 1 ? 1 : 2;
      h5::Handle file_space(H5Dget_space(ds_.id()), H5Sclose), memory(H5Screate_simple(rank, size, nullptr), H5Sclose);
      if (!file_space.valid() || !memory.valid() ||
          H5Sselect_hyperslab(file_space.id(), H5S_SELECT_SET, start, nullptr, size, nullptr) < 0 ||
          H5Dread(ds_.id(), rs::native_type(c.type), memory.id(), file_space.id(), H5P_DEFAULT, chunk.data()) < 0)
        throw InputError("cannot resume '" + file.path() + "': the chunk of its dataset '" + std::string(c.path) +
                         "' at row " + std::to_string(first) + ", which the resume cuts, cannot be read (corrupted?: " +
                         h5::last_error() + "); nothing was cut");
    }
  }

  // Cuts the dataset opened above to its first `rows` rows.
  void cut(const std::string& file) {
    const hsize_t dims[2] = {rows_, static_cast<hsize_t>(column_.width)};
    if (H5Dset_extent(ds_.id(), dims) < 0)
      throw Error("cannot cut dataset '" + std::string(column_.path) + "' of '" + file + "' to " +
                  std::to_string(rows_) + " rows: " + h5::last_error());
  }

  template <typename T>
  void push(T v) {
    FORGE_CHECK(sizeof(T) == rs::type_size(column_.type), std::string("element size of ") + column_.path);
    const size_t at = buf_.size();
    buf_.resize(at + sizeof(T));
    std::memcpy(buf_.data() + at, &v, sizeof(T));
  }
  template <typename T>
  void push_n(const T* v, size_t n) {
    FORGE_CHECK(sizeof(T) == rs::type_size(column_.type), std::string("element size of ") + column_.path);
    const size_t at = buf_.size();
    buf_.resize(at + n * sizeof(T));
    if (n) std::memcpy(buf_.data() + at, v, n * sizeof(T));
  }

  // Buffers n elements of `value` in the column's type.
  void fill(double value, size_t n) {
    switch (column_.type) {
      case rs::Type::kU8: return fill_as<uint8_t>(value, n);
      case rs::Type::kI16: return fill_as<int16_t>(value, n);
      case rs::Type::kI32: return fill_as<int32_t>(value, n);
      case rs::Type::kI64: return fill_as<int64_t>(value, n);
      case rs::Type::kU64: return fill_as<uint64_t>(value, n);
      case rs::Type::kF32: return fill_as<float>(value, n);
      case rs::Type::kF64: return fill_as<double>(value, n);
    }
  }

  hid_t id() const { return ds_.id(); }

  // Appends the buffered rows to the dataset.
  bool buffered() const { return !buf_.empty(); }

  void write(const std::string& file) {
    const hsize_t row_bytes = rs::type_size(column_.type) * column_.width;
    const hsize_t n = buf_.size() / row_bytes;
    if (n == 0) return;
    const int rank = column_.width == 1 ? 1 : 2;
    const hsize_t new_dims[2] = {rows_ + n, static_cast<hsize_t>(column_.width)};
    const hsize_t start[2] = {rows_, 0}, count[2] = {n, static_cast<hsize_t>(column_.width)};
    bool ok = H5Dset_extent(ds_.id(), new_dims) >= 0;
    h5::Handle fspace(H5Dget_space(ds_.id()), H5Sclose);
    h5::Handle mspace(H5Screate_simple(rank, count, nullptr), H5Sclose);
    ok = ok && fspace.valid() &&
         H5Sselect_hyperslab(fspace.id(), H5S_SELECT_SET, start, nullptr, count, nullptr) >= 0 &&
         H5Dwrite(ds_.id(), rs::native_type(column_.type), mspace.id(), fspace.id(), H5P_DEFAULT,
                  buf_.data()) >= 0;
    if (!ok) throw Error("cannot append to dataset '" + std::string(column_.path) + "' of '" + file + "'");
    rows_ += n;
    buf_.clear();
  }

 private:
  template <typename T>
  void fill_as(double value, size_t n) {
    const std::vector<T> v(n, static_cast<T>(value));
    push_n(v.data(), n);
  }

  rs::Column column_;
  h5::Handle ds_;
  hsize_t rows_ = 0;
  std::vector<unsigned char> buf_;
};

namespace {

// A fixed-length string array attribute (h5py reads it as bytes).
void write_names(hid_t obj, const std::string& where, const std::vector<std::string>& names) {
  size_t width = 1;
  for (const auto& n : names) width = std::max(width, n.size() + 1);
  std::vector<char> data(names.size() * width, '\0');
  for (size_t i = 0; i < names.size(); ++i) std::memcpy(data.data() + i * width, names[i].data(), names[i].size());
  h5::Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.id(), width);
  H5Tset_strpad(type.id(), H5T_STR_NULLTERM);
  const hsize_t n = names.size();
  h5::Handle space(H5Screate_simple(1, &n, nullptr), H5Sclose);
  h5::Handle a(H5Acreate2(obj, rs::kNamesAttr, type.id(), space.id(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!a.valid() || H5Awrite(a.id(), type.id(), data.data()) < 0)
    throw Error("cannot write attribute 'names' of " + where);
}

std::map<std::string, int16_t> codes_of(const std::vector<std::string>& names, const std::string& what) {
  if (names.size() > static_cast<size_t>(std::numeric_limits<int16_t>::max()))
    throw Error("too many " + what + " for an int16 code: " + std::to_string(names.size()));
  std::map<std::string, int16_t> out;
  for (size_t i = 0; i < names.size(); ++i)
    if (!out.emplace(names[i], static_cast<int16_t>(i)).second)
      throw Error("duplicate " + what + " name '" + names[i] + "'");
  return out;
}

int16_t code_of(const std::map<std::string, int16_t>& codes, const std::string& name, const std::string& what,
                const std::string& path) {
  const auto it = codes.find(name);
  if (it == codes.end())
    throw Error("rollout store '" + path + "': " + what + " '" + name +
                "' was not declared when the file was created");
  return it->second;
}

// Opens the file for writing; one shorter than the end it records is
// extended to it first. A flush that failed part-way (a full disk) recorded
// an end of the file past what reached it; the rows its commit record names
// are whole before that, and the space between is zeros, never written. (A
// copy cut short reads the same: the constructor cuts the file back when
// the resume then fails.)
h5::File open_extended(const std::string& path) {
  uint64_t recorded = 0;
  try {
    return h5::File::open_append(path, &recorded);
  } catch (const InputError&) {
    std::error_code ec;
    const uint64_t size = std::filesystem::file_size(path, ec);
    // (Not a damaged end that names far more than the file: a sparse giant.)
    if (ec || recorded <= size || recorded - size > size + (uint64_t{1} << 30)) throw;
    std::filesystem::resize_file(path, recorded, ec);
    if (ec)
      throw Error("cannot extend '" + path + "' to its recorded end of " + std::to_string(recorded) + " bytes: " +
                  ec.message());
    log_warn("'" + path + "' ended at " + std::to_string(size) + " of its " + std::to_string(recorded) +
             " bytes (a write that failed, a full disk?): extended with zeros; its commit record bounds what is read");
  }
  return h5::File::open_append(path);
}

}  // namespace

RolloutStore::RolloutStore(const std::string& path, RolloutStoreOptions options)
    : path_(path), options_(std::move(options)) {
  domain_code_ = codes_of(options_.domains, "domain");
  family_code_ = codes_of(options_.template_families, "template family");
  if (options_.resume_step >= 0 && std::filesystem::exists(path)) {
    // open_extended extends a file shorter than its recorded end (a flush
    // that failed on a full disk); a resume refused after that leaves the
    // file as it was, and says it is truncated (a copy cut short reads the
    // same).
    std::error_code ec;
    const std::uintmax_t size = std::filesystem::file_size(path, ec);
    try {
      reopen();  // starts SWMR writing itself, before it cuts
    } catch (const InputError& e) {
      std::error_code now;
      if (ec || std::filesystem::file_size(path, now) <= size || now) throw;
      file_ = h5::File();
      std::filesystem::resize_file(path, size, now);
      throw InputError(std::string(e.what()) + " ('" + path + "' is truncated: extended to its recorded end for " +
                       "this resume, it did not read whole, and is cut back to its " + std::to_string(size) +
                       " bytes; a copy stopped short leaves this, which only the original repairs)");
    }
    return;
  }
  if (options_.resume_step > 0)
    log_warn("rollout store: '" + path + "' is missing although the checkpoint resumes after step " +
             std::to_string(options_.resume_step - 1) + ": a new file starts, without the rows of steps 0 to " +
             std::to_string(options_.resume_step - 1));
  create();
  start_swmr();
}

void RolloutStore::start_swmr() {
  file_.flush();
  if (H5Fstart_swmr_write(file_.id()) < 0) throw Error("cannot start SWMR writing on '" + path_ + "'");
}

void RolloutStore::create() {
  file_ = h5::File::create(path_);  // latest format: required for SWMR
  file_.set_attr("format", std::string(rs::kFormat));
  file_.set_attr("schema_version", rs::kSchemaVersion);
  file_.set_attr("config", options_.config_ini);
  for (const auto& c : rs::columns()) {
    series_.push_back(std::make_unique<Series>(file_, c));
    by_name_[c.path] = series_.back().get();
  }
  write_names(col("episodes/env").id(), "episodes/env in '" + path_ + "'", options_.domains);
  write_names(col("episodes/template_family").id(), "episodes/template_family in '" + path_ + "'",
              options_.template_families);
}

void RolloutStore::reopen() {
  // Rows to keep: the leading episodes and steps before resume_step, with
  // their calls and tokens (the reader already clamps partial rows away).
  int64_t steps = 0;
  bool grown_domains = false, grown_families = false;
  std::vector<std::string> families;  // the file's template families, then the run's it lacks
  int64_t file_version = 0;
  std::array<int64_t, 4> seen{};  // the rows a reader sees, per table
  int64_t record_rows = 0;        // the commit record's, up to its last written row
  // A writer killed while it held the file outside SWMR left its "open for
  // write" flag, which no reader gets past: cleared first (the run folder's
  // lock says no writer is alive; open_append also trusts the file's real
  // end over a killed writer's stale one; a file short of its recorded end
  // is extended to it).
  try {
    open_extended(path_);
  } catch (const InputError&) {
    // Not HDF5, or damaged: the reader below says which.
  }
  {
    const RolloutReader r(path_);
    // A run may add domains at the end of the list (a new domain in a newer
    // forge): the file's codes stay valid and its list is rewritten below.
    const std::vector<std::string> old = r.domains();
    const bool prefix = old.size() <= options_.domains.size() &&
                        std::equal(old.begin(), old.end(), options_.domains.begin());
    file_version = r.schema_version();
    if (file_version < rs::kOldestResumable)
      throw InputError("cannot resume '" + path_ + "': it was written with rollout schema version " +
                       std::to_string(file_version) + ", older than this forge resumes (" +
                       std::to_string(rs::kOldestResumable) + "); nothing was changed");
    if (!prefix)
      throw InputError("cannot resume '" + path_ + "': it was written with another domain list than this run uses");
    grown_domains = old.size() < options_.domains.size();
    // Template families keep the file's codes, whatever the run's order (a
    // family added since interleaves with the old ones); the run's new ones
    // are appended.
    families = r.template_families();
    const size_t file_families = families.size();
    for (const std::string& f : options_.template_families)
      if (std::find(families.begin(), families.end(), f) == families.end()) families.push_back(f);
    grown_families = families.size() > file_families;
    family_code_ = codes_of(families, "template family");
    const EpisodeTable e = r.episodes();  // checks that calls and episodes lie back to back
    // The rows past the checkpoint are cut below: that needs them in step
    // order, as a run writes them.
    for (size_t i = 1; i < e.size(); ++i)
      if (e.consumed_step[i] < e.consumed_step[i - 1])
        throw InputError("cannot resume '" + path_ + "': episode " + std::to_string(i) + " has consumed_step " +
                         std::to_string(e.consumed_step[i]) + " after " + std::to_string(e.consumed_step[i - 1]) +
                         " (rows out of step order: corrupted?); nothing was cut");
    while (n_episodes_ < static_cast<int64_t>(e.size()) && e.consumed_step[n_episodes_] < options_.resume_step)
      ++n_episodes_;
    n_calls_ = n_episodes_ ? e.call_offset[n_episodes_ - 1] + e.n_calls[n_episodes_ - 1] : 0;
    if (n_calls_ > 0) {
      const int64_t last = n_calls_ - 1;
      n_tokens_ = r.read<int64_t>("calls/token_offset", last, 1)[0] +
                  r.read<int32_t>("calls/context_len", last, 1)[0] +
                  r.read<int32_t>("calls/generated_len", last, 1)[0];
    }
    // Steps increase along the table: a row that does not (in a schema 3
    // or 4 file, which has no record, an extended row never written reads
    // as step 0) ends what is kept.
    int64_t last_kept = -1;
    for (const auto& m : r.steps())
      if (m.step < options_.resume_step && m.step > last_kept) ++steps, last_kept = m.step;
      else break;
    // The checkpoint trained steps 0 .. resume_step - 1; a file that stops
    // before (its last flushes lost with the node) keeps a gap.
    if (last_kept < options_.resume_step - 1)
      log_warn("rollout store: '" + path_ + "' holds steps up to " + std::to_string(last_kept) +
               " but the checkpoint resumes after step " + std::to_string(options_.resume_step - 1) +
               ": the rows of steps " + std::to_string(last_kept + 1) + " to " +
               std::to_string(options_.resume_step - 1) + " were lost (not on the disk when the run stopped)");
    seen = {r.n_tokens(), r.n_calls(), r.n_episodes(), r.n_steps()};
    record_rows = r.record_rows();
  }
  // An older schema is upgraded on a copy, which replaces the file only once
  // every dataset below has been opened and checked: a resume refused by a
  // check leaves the file as it was (the upgraded file was cut back to the
  // original's size, unreadable, by the constructor's undo).
  const std::string upgraded = file_version < rs::kSchemaVersion ? upgrade(file_version, seen) : std::string();
  n_steps_ = steps;
  const std::array<int64_t, 4> kept{n_tokens_, n_calls_, n_episodes_, n_steps_};
  const auto drop_upgraded = [&] {
    series_.clear();
    by_name_.clear();
    file_ = h5::File();
    std::error_code ec;
    std::filesystem::remove(upgraded, ec);
  };
  try {
    open_checked(upgraded.empty() ? path_ : upgraded, kept, file_version, record_rows);
  } catch (const InputError& e) {
    if (upgraded.empty()) throw;
    drop_upgraded();
    throw InputError(std::string(e.what()) + " (in the copy upgraded from schema version " +
                     std::to_string(file_version) + ", which is removed: '" + path_ + "' is as it was)");
  } catch (...) {
    if (!upgraded.empty()) drop_upgraded();
    throw;
  }
  if (!upgraded.empty()) {
    std::error_code ec;
    std::filesystem::rename(upgraded, path_, ec);  // the open handle follows the file
    if (ec) {
      const std::string why = ec.message();
      drop_upgraded();
      throw Error("cannot move the upgraded copy over '" + path_ + "': " + why);
    }
    file_.renamed_to(path_);
    h5::sync_to_disk(std::filesystem::path(path_).parent_path().string(), true);
    log_info("rollout store: '" + path_ + "' upgraded from schema version " + std::to_string(file_version) + " to " +
             std::to_string(rs::kSchemaVersion) + " (the columns it predates added, as older readers saw them)");
  }
  if (grown_domains) {  // an attribute: before SWMR writing, which cannot change one
    const hid_t env = col("episodes/env").id();
    if (H5Adelete(env, rs::kNamesAttr) < 0) throw Error("cannot rewrite the domain names of '" + path_ + "'");
    write_names(env, "episodes/env in '" + path_ + "'", options_.domains);
  }
  if (grown_families) {
    const hid_t fam = col("episodes/template_family").id();
    if (H5Adelete(fam, rs::kNamesAttr) < 0) throw Error("cannot rewrite the template family names of '" + path_ + "'");
    write_names(fam, "episodes/template_family in '" + path_ + "'", families);
  }
  // Under SWMR, whose flushes order what readers see: first the record of
  // the kept rows (readers and a later resume then take those, whatever the
  // tables still hold), then the cut. A kill anywhere leaves a record that
  // names rows the file holds.
  start_swmr();
  commit();
  col(rs::kFlushes).write(path_);
  file_.flush();
  for (auto& s : series_) s->cut(path_);
  file_.flush();
}

void RolloutStore::open_checked(const std::string& file, const std::array<int64_t, 4>& kept, int64_t file_version,
                                int64_t record_rows) {
  // Every dataset opened (and checked) first; nothing is cut yet.
  file_ = open_extended(file);
  for (const auto& c : rs::columns()) {
    // The record keeps its written rows (a schema 3 or 4 file's upgrade
    // wrote one) and grows; unwritten ones past them are cut with the rest.
    const int table = rs::table_of(c.path);
    // Nothing kept: the record restarts at its first row (in a file written
    // before its fill value was -1, an all-zero row after others reads as
    // unwritten).
    const bool nothing_kept = kept == std::array<int64_t, 4>{};
    const int64_t record_kept = nothing_kept ? 0 : file_version < rs::kSchemaVersion ? 1 : record_rows;
    series_.push_back(std::make_unique<Series>(file_, c, table < 0 ? record_kept : kept[table]));
    by_name_[c.path] = series_.back().get();
  }
}

std::string RolloutStore::upgrade(int64_t from, const std::array<int64_t, 4>& rows) {
  // On a copy (reopen renames it over the file once checked): an upgrade cut
  // short leaves the file as it was. The columns it predates get the rows a
  // reader of it sees (absent_value), the record one row of them, then the
  // version.
  // One name: a copy left by an upgrade killed mid-way is overwritten by
  // the next resume's (the run folder has one writer: run_folder.hpp).
  const std::string tmp = path_ + ".upgrade";
  std::error_code ec;
  std::filesystem::copy_file(path_, tmp, std::filesystem::copy_options::overwrite_existing, ec);
  if (ec) {
    const std::string why = ec.message();
    std::filesystem::remove(tmp, ec);  // a partial copy (a full disk) goes
    throw Error("cannot copy '" + path_ + "' to upgrade it: " + why);
  }
  try {
    h5::File f = h5::File::open_append(tmp);
    for (const auto& c : rs::columns()) {
      const std::string name = c.path;
      if (rs::introduced_in(name) <= from) continue;
      // One an earlier, cut short upgrade of the file itself left goes (readers skip it).
      if (f.exists(name) && H5Ldelete(f.id(), c.path, H5P_DEFAULT) < 0)
        throw Error("cannot remove the partly upgraded dataset '" + name + "' of '" + tmp + "'");
      Series s(f, c);
      if (const int table = rs::table_of(name); table < 0) s.push_n(rows.data(), rows.size());
      else s.fill(rs::absent_value(c), static_cast<size_t>(rows[table]) * c.width);
      s.write(tmp);
    }
    f.set_attr("schema_version", rs::kSchemaVersion);
    f.flush();
    f.close();
    h5::sync_to_disk(tmp, false);  // whole on the disk before it replaces the file
  } catch (...) {
    std::filesystem::remove(tmp, ec);
    throw;
  }
  return tmp;
}

RolloutStore::~RolloutStore() {
  try {
    close();
  } catch (const std::exception& e) {
    log_warn(std::string("rollout store: ") + e.what());
  }
}

RolloutStore::Series& RolloutStore::col(const std::string& name) {
  const auto it = by_name_.find(name);
  FORGE_CHECK(it != by_name_.end(), "no rollout column '" + name + "'");
  return *it->second;
}

void RolloutStore::append_episodes(const std::vector<Trajectory>& episodes, int consumed_step,
                                   int learner_version) {
  FORGE_CHECK(file_.id() >= 0, "append to the closed rollout store '" + path_ + "'");
  Stopwatch sw;
  Series &tokens = col("tokens"), &logprobs = col("logprobs"), &versions = col("versions"),
         &mask = col("loss_mask");
  auto& hist = pending_hist_[consumed_step];
  for (const auto& t : episodes) {
    col("episodes/env").push<int16_t>(code_of(domain_code_, t.env, "domain", path_));
    col("episodes/template_family").push<int16_t>(code_of(family_code_, t.template_family, "template family", path_));
    // Every number or flag of the field table with an episodes/<name> column.
    for_each_field(t, [&](const char* name, const auto& value) {
      using V = std::decay_t<decltype(value)>;
      if constexpr (std::is_arithmetic_v<V>) {
        const auto it = by_name_.find(std::string("episodes/") + name);
        if (it == by_name_.end()) return;
        if constexpr (std::is_same_v<V, bool>) it->second->push<uint8_t>(value ? 1 : 0);
        else it->second->push<V>(value);
      }
    });
    col("episodes/call_offset").push<int64_t>(n_calls_);
    col("episodes/n_calls").push<int32_t>(static_cast<int32_t>(t.calls.size()));
    const int32_t oldest = t.oldest_version();
    const int32_t staleness = oldest < 0 ? -1 : learner_version - oldest;
    col("episodes/staleness").push<int32_t>(staleness);
    col("episodes/consumed_step").push<int32_t>(consumed_step);
    if (staleness >= 0) ++hist[std::min(staleness, rs::kStalenessBins - 1)];

    for (const auto& c : t.calls) {
      FORGE_CHECK(c.logprobs.size() == c.generated.size() && c.versions.size() == c.generated.size(),
                  "LLM call with " + std::to_string(c.generated.size()) + " generated tokens but " +
                      std::to_string(c.logprobs.size()) + " logprobs and " +
                      std::to_string(c.versions.size()) + " versions");
      const size_t nc = c.context.size(), ng = c.generated.size();
      col("calls/token_offset").push<int64_t>(n_tokens_);
      col("calls/context_len").push<int32_t>(static_cast<int32_t>(nc));
      col("calls/generated_len").push<int32_t>(static_cast<int32_t>(ng));
      col("calls/episode").push<int64_t>(n_episodes_);
      tokens.push_n(c.context.data(), nc);
      tokens.push_n(c.generated.data(), ng);
      const std::vector<float> nan(nc, std::numeric_limits<float>::quiet_NaN());
      logprobs.push_n(nan.data(), nc);
      logprobs.push_n(c.logprobs.data(), ng);
      const std::vector<int32_t> no_version(nc, -1);
      versions.push_n(no_version.data(), nc);
      versions.push_n(c.versions.data(), ng);
      std::vector<uint8_t> m(nc + ng, 0);
      std::fill(m.begin() + static_cast<std::ptrdiff_t>(nc), m.end(), uint8_t{1});
      mask.push_n(m.data(), m.size());
      n_tokens_ += static_cast<int64_t>(nc + ng);
      buffered_tokens_ += static_cast<int64_t>(nc + ng);
      ++n_calls_;
    }
    ++n_episodes_;
  }
  seconds_spent_ += sw.seconds();
  maybe_flush();
}

void RolloutStore::append_step(StepMetrics m) {
  FORGE_CHECK(file_.id() >= 0, "append to the closed rollout store '" + path_ + "'");
  Stopwatch sw;
  const auto it = pending_hist_.find(m.step);
  if (it != pending_hist_.end()) {
    m.staleness_hist = it->second;
    pending_hist_.erase(it);
  }
  m.store_seconds = seconds_spent_ - seconds_at_last_step_;
  col("steps/step").push<int64_t>(m.step);
  ++n_steps_;
  const std::pair<const char*, double> values[] = {
      {"steps/objective", m.objective}, {"steps/reward_mean", m.reward_mean},
      {"steps/outcome_mean", m.outcome_mean}, {"steps/process_mean", m.process_mean},
      {"steps/efficiency_mean", m.efficiency_mean}, {"steps/safety_mean", m.safety_mean},
      {"steps/success_rate", m.success_rate},
      {"steps/clip_fraction", m.clip_fraction}, {"steps/masked_fraction", m.masked_fraction},
      {"steps/engine_mismatch", m.engine_mismatch}, {"steps/stale_drift", m.stale_drift}, {"steps/kl", m.kl},
      {"steps/entropy", m.entropy}, {"steps/tree_token_ratio", m.tree_token_ratio},
      {"steps/tokens_per_s", m.tokens_per_s}, {"steps/step_seconds", m.step_seconds},
      {"steps/store_seconds", m.store_seconds}, {"steps/grad_norm", m.grad_norm}, {"steps/lr", m.lr}};
  for (const auto& [name, v] : values)
    col(name).push<double>(v);
  const std::pair<const char*, int32_t> counts[] = {
      {"steps/groups", m.groups}, {"steps/zero_variance_groups", m.zero_variance_groups},
      {"steps/dropped_groups", m.dropped_groups}, {"steps/masked_groups", m.masked_groups},
      {"steps/abandoned", m.abandoned}};
  for (const auto& [name, v] : counts)
    col(name).push<int32_t>(v);
  col("steps/staleness_hist").push_n(m.staleness_hist.data(), m.staleness_hist.size());
  col("steps/drift_by_staleness").push_n(m.drift_by_staleness.data(), m.drift_by_staleness.size());
  seconds_spent_ += sw.seconds();
  seconds_at_last_step_ = seconds_spent_;
  maybe_flush();
}

void RolloutStore::maybe_flush() {
  if (since_flush_.seconds() >= options_.flush_seconds || buffered_tokens_ >= options_.max_buffered_tokens)
    flush();
}

void RolloutStore::commit() {
  const std::array<int64_t, 4> now{n_tokens_, n_calls_, n_episodes_, n_steps_};
  if (now == committed_) return;
  col(rs::kFlushes).push_n(now.data(), now.size());
  committed_ = now;
}

void RolloutStore::write_buffers() {
  // The rows, flushed, then their record, flushed: HDF5 orders what a reader
  // sees within a dataset, not across them, so the record must not reach
  // the file in the same flush as the rows it names.
  Series& record = col(rs::kFlushes);
  if (std::none_of(series_.begin(), series_.end(), [](const auto& s) { return s->buffered(); })) return;
  for (auto& s : series_)
    if (s.get() != &record) s->write(path_);  // schema order: tokens, calls, episodes, steps
  file_.flush();
  commit();
  record.write(path_);
  buffered_tokens_ = 0;
}

void RolloutStore::flush() {
  if (file_.id() < 0) return;
  Stopwatch sw;
  write_buffers();
  file_.flush();
  since_flush_.reset();
  seconds_spent_ += sw.seconds();
}

void RolloutStore::sync() {
  if (file_.id() < 0) return;
  flush();
  Stopwatch sw;
  h5::sync_to_disk(path_, false);
  seconds_spent_ += sw.seconds();
}

void RolloutStore::close() {
  if (file_.id() < 0) return;
  flush();
  series_.clear();
  by_name_.clear();
  file_.close();
}

}  // namespace forge
