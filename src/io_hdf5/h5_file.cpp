#include "io_hdf5/h5_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "core/error.hpp"
#include "core/regular_file.hpp"

namespace forge::h5 {
namespace {

// No clean-up of the library's at exit: after a failed close (a full disk)
// HDF5 1.10's own crashes there (exit 139, a core dump on that disk); forge
// closes its files itself. Before main, as it must come before any other
// HDF5 call.
const bool kNoLibraryAtexit = [] {
  H5dont_atexit();
  return true;
}();

// Silence the library's error stack printing once; forge reports errors itself.
void quiet() {
  static const bool done = [] {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    return true;
  }();
  (void)done;
}

// "stored_eof = N" of HDF5's truncated-file message; 0 when absent.
uint64_t stored_end_of(const std::string& reason) {
  const size_t at = reason.find("stored_eof = ");
  if (reason.find("truncated file") == std::string::npos || at == std::string::npos) return 0;
  return std::strtoull(reason.c_str() + at + 13, nullptr, 10);
}

// A file a reader cannot open: missing, not a regular file, or not HDF5.
void check_readable(const std::string& path) {
  if (!std::filesystem::exists(path)) throw InputError("'" + path + "' does not exist");
  refuse_unless_regular_file(path, "HDF5 file");
  if (!is_hdf5(path))
    throw InputError("'" + path + "' is not an HDF5 file (or its header is damaged)");
}

// A lock HDF5 could not take on `path` (`reason`, its error): EAGAIN
// ("Resource temporarily unavailable") is another process's lock; anything
// else (ENOLCK on an NFS without lockd) is the file system's refusal.
std::string lock_refusal(const std::string& reason, bool writing) {
  if (reason.find(std::strerror(EAGAIN)) == std::string::npos)
    return "the file system refused to lock it (" + reason + "); run with HDF5_USE_FILE_LOCKING=FALSE";
  if (!writing) return "another process holds its lock (" + reason + ")";
  return "another process has it open (" + reason +
         "): a reader (h5py, forge inspect or export, tools/plot_rollouts.py) or a writer still running; close it (a "
         "reader only: SWMR keeps it safe, so HDF5_USE_FILE_LOCKING=FALSE also lets the run go on)";
}

// Why HDF5 could not open `path` for reading (its last error): a file
// shorter than its recorded end (a copy stopped short, or a write that
// failed on a full disk: the rollout reader says what a resume does with
// that), one locked by another process, or a damaged one.
[[noreturn]] void throw_cannot_read(const std::string& path) {
  const std::string reason = last_error();
  if (reason.find("truncated") != std::string::npos)
    throw InputError("'" + path + "' is truncated (" + reason +
                     "; a copy stopped short, or a write that failed on a full disk)");
  if (reason.find("unable to lock file") != std::string::npos)
    throw InputError("cannot open HDF5 file '" + path + "': " + lock_refusal(reason, false));
  throw InputError("cannot open HDF5 file '" + path + "' (corrupted?): " + reason);
}

std::vector<hsize_t> dims_of(const std::vector<int64_t>& shape) {
  return std::vector<hsize_t>(shape.begin(), shape.end());
}

}  // namespace

void Handle::reset() {
  if (id_ >= 0 && close_) close_(id_);
  id_ = -1;
}

File File::create(const std::string& path) {
  quiet();
  File f;
  f.path_ = path;
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  H5Pset_libver_bounds(fapl.id(), H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);
  const hid_t id = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.id());
  if (id < 0) throw InputError("cannot create HDF5 file '" + path + "': " + last_error());
  f.file_ = Handle(id, H5Fclose);
  return f;
}

File File::open_read(const std::string& path) {
  quiet();
  File f;
  f.path_ = path;
  check_readable(path);
  const hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (id < 0) throw_cannot_read(path);
  f.file_ = Handle(id, H5Fclose);
  return f;
}

File File::open_append(const std::string& path, uint64_t* recorded_end) {
  quiet();
  File f;
  f.path_ = path;
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  H5Pset_libver_bounds(fapl.id(), H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);
  hbool_t clear = 1;  // the fapl property h5clear sets
  H5Pset(fapl.id(), "clear_status_flags", &clear);
  refuse_unless_regular_file(path, "HDF5 file");
  const hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDWR, fapl.id());
  if (id < 0) {
    const std::string reason = last_error();
    if (recorded_end) *recorded_end = stored_end_of(reason);
    if (reason.find("unable to lock file") != std::string::npos)
      throw InputError("cannot open HDF5 file '" + path + "' for writing: " + lock_refusal(reason, true));
    throw InputError("cannot open HDF5 file '" + path + "' for writing: " + reason);
  }
  f.file_ = Handle(id, H5Fclose);
  // A writer killed mid-flush left an end of allocation short of data its
  // index already points to: new space from there (and the truncation at
  // close) would overwrite or cut it. Take the file's real end (h5clear -i).
  if (H5Fincrement_filesize(id, 0) < 0)
    throw InputError("cannot open HDF5 file '" + path + "' for writing: " + last_error());
  return f;
}

bool is_hdf5(const std::string& path) { return H5Fis_hdf5(path.c_str()) > 0; }

std::string last_error() {
  std::string text;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD,
           [](unsigned, const H5E_error2_t* e, void* out) -> herr_t {
             if (e->desc && *e->desc) *static_cast<std::string*>(out) = e->desc;
             return 0;
           },
           &text);
  // A system call's failure: its message, not HDF5's dump of the call
  // (time, buffer address, sizes over several lines).
  const size_t at = text.find("error message = '");
  if (at != std::string::npos) {
    const size_t from = at + 17, to = text.find('\'', from);
    // What failed: the text before the call's details ("file write failed:
    // time = ...", "unable to lock file, errno = 11, ...").
    const size_t call_end = std::min(text.find(':'), text.find(", errno"));
    const std::string what = call_end == std::string::npos ? std::string() : text.substr(0, call_end);
    if (to != std::string::npos) text = what + (what.empty() ? "" : ": ") + text.substr(from, to - from);
  }
  return text;
}

File File::open_follow(const std::string& path, bool* swmr) {
  quiet();
  File f;
  f.path_ = path;
  check_readable(path);
  // An SWMR reader re-reads metadata whose checksum fails (the writer may be
  // mid-write), sleeping 1, 2, 4, ... ns between attempts: HDF5's default of
  // 100 attempts (2^100 ns) hangs on a corrupted file; 20 bound it to ~1 ms.
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  H5Pset_metadata_read_attempts(fapl.id(), 20);
  hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDONLY | H5F_ACC_SWMR_READ, fapl.id());
  *swmr = id >= 0;
  if (id < 0) {  // not the latest file format (or damaged): a plain open says why
    id = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    if (id < 0) throw_cannot_read(path);
  }
  f.file_ = Handle(id, H5Fclose);
  // An SWMR-read open does not compare the file's end with the end of the
  // space the file says it uses; check it here.
  haddr_t eoa = 0;
  if (*swmr && H5Fget_eoa(id, &eoa) >= 0 && eoa > std::filesystem::file_size(path))
    throw InputError("'" + path + "' is truncated (it has " +
                     std::to_string(std::filesystem::file_size(path)) + " bytes of " +
                     std::to_string(eoa) + ")");
  return f;
}

void File::flush() {
  if (H5Fflush(file_.id(), H5F_SCOPE_GLOBAL) < 0) throw Error("cannot flush '" + path_ + "': " + last_error());
}

void File::close() {
  if (!file_.valid()) return;
  if (H5Fclose(file_.release()) < 0) throw Error("cannot finish writing '" + path_ + "': " + last_error());
}

void File::create_group(const std::string& name) {
  Handle g(H5Gcreate2(file_.id(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
  if (!g.valid()) throw Error("cannot create group '" + name + "' in '" + path_ + "'");
}

bool File::exists(const std::string& name) const {
  // Check each component so that a missing parent is "absent", not an error.
  size_t pos = 0;
  while (true) {
    pos = name.find('/', pos + 1);
    const std::string prefix = name.substr(0, pos);
    if (H5Lexists(file_.id(), prefix.c_str(), H5P_DEFAULT) <= 0) return false;
    if (pos == std::string::npos) return true;
  }
}

namespace {

// Checksum of a fixed-size dataset's raw data, kept in its attribute
// `fletcher64` (uint64[2]): over the data as little-endian 64-bit words w_i
// (the last one zero-padded), s1 = sum w_i and s2 = sum s1 after each word,
// both mod 2^64. A flipped bit changes s1; a reordering changes s2. HDF5's
// metadata carries checksums of its own (the latest file format), its raw
// data does not, so without this a damaged weight loads as a changed one.
// HDF5's Fletcher-32 filter would do the same, but it needs a chunked layout
// and halved the write and read speed of a 1.4 GB checkpoint here; this sum
// runs at memory speed.
constexpr const char* kChecksumAttr = "fletcher64";

std::array<uint64_t, 2> fletcher64(const void* data, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t s1 = 0, s2 = 0;
  size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    s1 += w;
    s2 += s1;
  }
  if (i < bytes) {
    uint64_t w = 0;
    std::memcpy(&w, p + i, bytes - i);
    s1 += w;
    s2 += s1;
  }
  return {s1, s2};
}

void write_dataset(const File& f, const std::string& name, const std::vector<int64_t>& shape,
                   hid_t type, const void* data) {
  const auto dims = dims_of(shape);
  Handle space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose);
  Handle ds(H5Dcreate2(f.id(), name.c_str(), type, space.id(), H5P_DEFAULT, H5P_DEFAULT,
                       H5P_DEFAULT),
            H5Dclose);
  if (!ds.valid() || H5Dwrite(ds.id(), type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
    throw Error("cannot write dataset '" + name + "' to '" + f.path() + "'");
  size_t bytes = H5Tget_size(type);
  for (const hsize_t d : dims) bytes *= d;
  const auto sum = fletcher64(data, bytes);
  const hsize_t two = 2;
  Handle sum_space(H5Screate_simple(1, &two, nullptr), H5Sclose);
  Handle a(H5Acreate2(ds.id(), kChecksumAttr, H5T_NATIVE_UINT64, sum_space.id(), H5P_DEFAULT, H5P_DEFAULT),
           H5Aclose);
  if (!a.valid() || H5Awrite(a.id(), H5T_NATIVE_UINT64, sum.data()) < 0)
    throw Error("cannot write the checksum of dataset '" + name + "' to '" + f.path() + "'");
}

// Checks `out` (the dataset just read) against its `fletcher64` attribute.
// A dataset without one (written before forge kept them) is taken as read.
void verify_checksum(const File& f, const std::string& name, hid_t ds, const void* data, size_t bytes) {
  const htri_t has = H5Aexists(ds, kChecksumAttr);
  if (has == 0) return;
  const std::string where = "'" + f.path() + "': dataset '" + name + "'";
  Handle a(has > 0 ? H5Aopen(ds, kChecksumAttr, H5P_DEFAULT) : -1, H5Aclose);
  Handle space(a.valid() ? H5Aget_space(a.id()) : -1, H5Sclose);
  Handle type(a.valid() ? H5Aget_type(a.id()) : -1, H5Tclose);
  std::array<uint64_t, 2> stored{};
  if (!space.valid() || !type.valid() || H5Sget_simple_extent_npoints(space.id()) != 2 ||
      H5Tget_class(type.id()) != H5T_INTEGER || H5Aread(a.id(), H5T_NATIVE_UINT64, stored.data()) < 0)
    throw InputError(where + ": its checksum attribute '" + kChecksumAttr + "' is not two integers (damaged file)");
  if (fletcher64(data, bytes) != stored)
    throw InputError(where + " does not match the checksum written with it (attribute '" + kChecksumAttr +
                     "'): the file is damaged, or another program changed the data without updating it");
}

// A count held in a long double (a product that may pass 2^64), as digits.
std::string whole_number(long double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.0Lf", x);
  return buf;
}

// Refuses a dataset whose stated size its file does not store: contiguous
// storage shorter than the elements, or chunks not all allocated (forge
// writes every dataset it reads this way whole). A damaged 350 KB
// checkpoint stating 2^40 elements had forge allocate them before reading.
void require_stored(const File& f, const std::string& name, hid_t ds, hid_t space, hid_t ftype, hssize_t n) {
  const std::string where = "'" + f.path() + "': dataset '" + name + "' states " + std::to_string(n) + " elements";
  Handle dcpl(H5Dget_create_plist(ds), H5Pclose);
  if (!dcpl.valid()) throw InputError(where + " and its storage cannot be read (damaged file)");
  if (H5Pget_layout(dcpl.id()) == H5D_CHUNKED) {
    const int rank = H5Sget_simple_extent_ndims(space);
    std::vector<hsize_t> dims(static_cast<size_t>(std::max(rank, 0))), chunk(dims.size());
    hsize_t allocated = 0;
    if (rank < 0 || H5Sget_simple_extent_dims(space, dims.data(), nullptr) < 0 ||
        H5Pget_chunk(dcpl.id(), rank, chunk.data()) != rank || H5Dget_num_chunks(ds, space, &allocated) < 0)
      throw InputError(where + " and its chunks cannot be read (damaged file)");
    long double needed = 1;
    for (int i = 0; i < rank; ++i)
      needed *= chunk[i] > 0 ? static_cast<long double>((dims[i] + chunk[i] - 1) / chunk[i]) : 0.0L;
    if (static_cast<long double>(allocated) < needed)
      throw InputError(where + " but stores " + std::to_string(allocated) + " of its " + whole_number(needed) +
                       " chunks (damaged or unfinished file)");
    return;
  }
  const long double stated = static_cast<long double>(n) * static_cast<long double>(H5Tget_size(ftype));
  const hsize_t stored = H5Dget_storage_size(ds);
  if (static_cast<long double>(stored) < stated)
    throw InputError(where + " (" + whole_number(stated) + " bytes) but stores " + std::to_string(stored) +
                     " bytes (damaged file)");
}

template <typename T>
std::vector<T> read_dataset(const File& f, const std::string& name, hid_t type,
                            H5T_class_t want_class) {
  if (!f.exists(name)) throw InputError("'" + f.path() + "' has no dataset '" + name + "'");
  Handle ds(H5Dopen2(f.id(), name.c_str(), H5P_DEFAULT), H5Dclose);
  if (!ds.valid()) throw InputError("'" + f.path() + "': '" + name + "' is not a dataset");
  Handle ftype(H5Dget_type(ds.id()), H5Tclose);
  if (H5Tget_class(ftype.id()) != want_class)
    throw InputError("'" + f.path() + "': dataset '" + name + "' has the wrong element type");
  Handle space(H5Dget_space(ds.id()), H5Sclose);
  const hssize_t n = H5Sget_simple_extent_npoints(space.id());
  if (n < 0) throw InputError("'" + f.path() + "': cannot read the shape of '" + name + "'");
  if (n > 0) require_stored(f, name, ds.id(), space.id(), ftype.id(), n);
  std::vector<T> out(static_cast<size_t>(n));
  if (n > 0 && H5Dread(ds.id(), type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()) < 0)
    throw InputError("'" + f.path() + "': cannot read dataset '" + name + "' (corrupted?)");
  verify_checksum(f, name, ds.id(), out.data(), out.size() * sizeof(T));
  return out;
}
}  // namespace

void File::write_f32(const std::string& name, const std::vector<int64_t>& shape, const float* data) {
  write_dataset(*this, name, shape, H5T_NATIVE_FLOAT, data);
}
void File::write_u64(const std::string& name, const std::vector<int64_t>& shape,
                     const uint64_t* data) {
  write_dataset(*this, name, shape, H5T_NATIVE_UINT64, data);
}
void File::write_i64(const std::string& name, const std::vector<int64_t>& shape,
                     const int64_t* data) {
  write_dataset(*this, name, shape, H5T_NATIVE_INT64, data);
}
void File::write_u8(const std::string& name, const std::vector<int64_t>& shape,
                    const uint8_t* data) {
  write_dataset(*this, name, shape, H5T_NATIVE_UINT8, data);
}
std::vector<uint8_t> File::read_u8(const std::string& name) const {
  return read_dataset<uint8_t>(*this, name, H5T_NATIVE_UINT8, H5T_INTEGER);
}
std::vector<float> File::read_f32(const std::string& name) const {
  return read_dataset<float>(*this, name, H5T_NATIVE_FLOAT, H5T_FLOAT);
}
std::vector<uint64_t> File::read_u64(const std::string& name) const {
  return read_dataset<uint64_t>(*this, name, H5T_NATIVE_UINT64, H5T_INTEGER);
}
std::vector<int64_t> File::read_i64(const std::string& name) const {
  return read_dataset<int64_t>(*this, name, H5T_NATIVE_INT64, H5T_INTEGER);
}

std::vector<std::string> File::members(const std::string& group) const {
  Handle g(H5Gopen2(file_.id(), group.c_str(), H5P_DEFAULT), H5Gclose);
  if (!g.valid()) throw InputError("'" + path_ + "': '" + group + "' is not a group");
  H5G_info_t info;
  if (H5Gget_info(g.id(), &info) < 0) throw InputError("'" + path_ + "': cannot list group '" + group + "'");
  std::vector<std::string> out;
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    const ssize_t n = H5Lget_name_by_idx(g.id(), ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    if (n < 0) throw InputError("'" + path_ + "': cannot list group '" + group + "'");
    std::string name(static_cast<size_t>(n) + 1, '\0');
    H5Lget_name_by_idx(g.id(), ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size(), H5P_DEFAULT);
    name.resize(static_cast<size_t>(n));
    out.push_back(name);
  }
  return out;
}

size_t File::element_size(const std::string& name) const {
  if (!exists(name)) throw InputError("'" + path_ + "' has no dataset '" + name + "'");
  Handle ds(H5Dopen2(file_.id(), name.c_str(), H5P_DEFAULT), H5Dclose);
  if (!ds.valid()) throw InputError("'" + path_ + "': '" + name + "' is not a dataset");
  Handle type(H5Dget_type(ds.id()), H5Tclose);
  return H5Tget_size(type.id());
}

std::vector<int64_t> File::shape(const std::string& name) const {
  if (!exists(name)) throw InputError("'" + path_ + "' has no dataset '" + name + "'");
  Handle ds(H5Dopen2(file_.id(), name.c_str(), H5P_DEFAULT), H5Dclose);
  if (!ds.valid()) throw InputError("'" + path_ + "': '" + name + "' is not a dataset");
  Handle space(H5Dget_space(ds.id()), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space.id());
  if (rank < 0) throw InputError("'" + path_ + "': cannot read the shape of '" + name + "'");
  std::vector<hsize_t> dims(rank);
  H5Sget_simple_extent_dims(space.id(), dims.data(), nullptr);
  return std::vector<int64_t>(dims.begin(), dims.end());
}

void File::set_attr(const std::string& key, const std::string& value) {
  Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.id(), value.size() + 1);
  H5Tset_strpad(type.id(), H5T_STR_NULLTERM);
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  Handle a(H5Acreate2(file_.id(), key.c_str(), type.id(), space.id(), H5P_DEFAULT, H5P_DEFAULT),
           H5Aclose);
  if (!a.valid() || H5Awrite(a.id(), type.id(), value.c_str()) < 0)
    throw Error("cannot write attribute '" + key + "' to '" + path_ + "'");
}

void File::set_attr(const std::string& key, int64_t value) {
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  // An existing attribute is overwritten (a scalar integer of any width).
  Handle a(H5Aexists(file_.id(), key.c_str()) > 0
               ? H5Aopen(file_.id(), key.c_str(), H5P_DEFAULT)
               : H5Acreate2(file_.id(), key.c_str(), H5T_NATIVE_INT64, space.id(), H5P_DEFAULT, H5P_DEFAULT),
           H5Aclose);
  if (!a.valid() || H5Awrite(a.id(), H5T_NATIVE_INT64, &value) < 0)
    throw Error("cannot write attribute '" + key + "' to '" + path_ + "'");
}

bool File::has_attr(const std::string& key) const {
  const htri_t exists = H5Aexists(file_.id(), key.c_str());
  // An error is damage to the root group's header, not a missing attribute
  // (which would call the file "not a forge file").
  if (exists < 0) throw InputError("'" + path_ + "': cannot read the root group's attributes (damaged file)");
  return exists > 0;
}

// Opens attribute `key`, refusing one that is not a single value (an array
// would overflow the one value read into).
Handle File::open_scalar_attr(const std::string& key) const {
  if (!has_attr(key)) throw InputError("'" + path_ + "' has no attribute '" + key + "'");
  Handle a(H5Aopen(file_.id(), key.c_str(), H5P_DEFAULT), H5Aclose);
  Handle space(a.valid() ? H5Aget_space(a.id()) : -1, H5Sclose);
  if (!space.valid()) throw InputError("'" + path_ + "': cannot open attribute '" + key + "' (damaged file)");
  if (H5Sget_simple_extent_npoints(space.id()) != 1)
    throw InputError("'" + path_ + "': attribute '" + key + "' is not a single value");
  return a;
}

std::string File::attr_string(const std::string& key) const {
  const Handle a = open_scalar_attr(key);
  Handle type(H5Aget_type(a.id()), H5Tclose);
  if (H5Tget_class(type.id()) != H5T_STRING)
    throw InputError("'" + path_ + "': attribute '" + key + "' is not a string");
  if (H5Tis_variable_str(type.id()) > 0) {  // as h5py writes a str by default
    Handle memory(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(memory.id(), H5T_VARIABLE);
    H5Tset_cset(memory.id(), H5Tget_cset(type.id()));
    char* text = nullptr;
    if (H5Aread(a.id(), memory.id(), &text) < 0)
      throw InputError("'" + path_ + "': cannot read attribute '" + key + "'");
    std::string s = text ? text : "";
    H5free_memory(text);
    return s;
  }
  std::string s(H5Tget_size(type.id()), '\0');
  if (H5Aread(a.id(), type.id(), s.data()) < 0)
    throw InputError("'" + path_ + "': cannot read attribute '" + key + "'");
  s.resize(s.find('\0') == std::string::npos ? s.size() : s.find('\0'));
  return s;
}

int64_t File::attr_int(const std::string& key) const {
  const Handle a = open_scalar_attr(key);
  Handle type(H5Aget_type(a.id()), H5Tclose);
  if (H5Tget_class(type.id()) != H5T_INTEGER)
    throw InputError("'" + path_ + "': attribute '" + key + "' is not an integer");
  int64_t v = 0;
  if (H5Aread(a.id(), H5T_NATIVE_INT64, &v) < 0)
    throw InputError("'" + path_ + "': cannot read attribute '" + key + "'");
  return v;
}

void sync_to_disk(const std::string& path, bool folder) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0 && folder) return;
  const bool ok = fd >= 0 && ::fsync(fd) == 0;
  const int err = errno;
  if (fd >= 0) ::close(fd);
  if (!ok && !folder) throw Error("cannot write '" + path + "' to the disk: " + std::strerror(err));
}

}  // namespace forge::h5
