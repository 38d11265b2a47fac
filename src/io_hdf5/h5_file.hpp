// A thin RAII layer over the HDF5 C API for forge's files: handles that close
// themselves, typed datasets and attributes, and errors that name the file and
// the object (InputError for a file that is missing, not HDF5, or lacks what
// forge expects; the HDF5 library's own error printing is turned off).
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>

namespace forge::h5 {

// Owns an hid_t and closes it with the right H5*close.
class Handle {
 public:
  Handle() = default;
  Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~Handle() { reset(); }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  Handle(Handle&& o) noexcept : id_(o.id_), close_(o.close_) { o.id_ = -1; }
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = o.id_;
      close_ = o.close_;
      o.id_ = -1;
    }
    return *this;
  }
  hid_t id() const { return id_; }
  bool valid() const { return id_ >= 0; }
  void reset();
  // Gives up ownership: the id, which the caller closes.
  hid_t release() {
    const hid_t id = id_;
    id_ = -1;
    return id;
  }

 private:
  hid_t id_ = -1;
  herr_t (*close_)(hid_t) = nullptr;
};

class File {
 public:
  // Creates (truncating) a file for writing.
  static File create(const std::string& path);
  // Opens an existing file read-only; InputError if it is missing or not HDF5.
  static File open_read(const std::string& path);
  // Opens an existing file for writing (latest format), clearing the "open
  // for writing" flag that a killed writer leaves set (as `h5clear -s`).
  // InputError if it cannot; for a file shorter than the end it records (a
  // flush that failed on a full disk), *recorded_end (when given) is set to
  // that end first (0 otherwise).
  static File open_append(const std::string& path, uint64_t* recorded_end = nullptr);
  // Opens read-only a file that a SWMR writer may still be writing, or whose
  // writer was killed: in SWMR-read mode when the file format allows it (*swmr
  // = true; datasets can then be refreshed), else plainly. InputError for a
  // missing, non-HDF5, truncated or unopenable file, with HDF5's reason.
  static File open_follow(const std::string& path, bool* swmr);

  const std::string& path() const { return path_; }
  // After the open file was renamed (its handle follows it): the name its
  // messages use from then on.
  void renamed_to(const std::string& path) { path_ = path; }
  hid_t id() const { return file_.id(); }
  void flush();
  void close();  // Error naming the file when HDF5 cannot finish writing it

  void create_group(const std::string& name);
  bool exists(const std::string& name) const;  // a link at this path
  // Names of the links in a group, in name order; InputError if it is not one.
  std::vector<std::string> members(const std::string& group) const;
  // Bytes per element of a dataset; InputError if absent.
  size_t element_size(const std::string& name) const;

  void write_f32(const std::string& name, const std::vector<int64_t>& shape, const float* data);
  void write_u64(const std::string& name, const std::vector<int64_t>& shape, const uint64_t* data);
  void write_i64(const std::string& name, const std::vector<int64_t>& shape, const int64_t* data);
  void write_u8(const std::string& name, const std::vector<int64_t>& shape, const uint8_t* data);
  std::vector<int64_t> shape(const std::string& name) const;  // InputError if absent
  std::vector<float> read_f32(const std::string& name) const;
  std::vector<uint64_t> read_u64(const std::string& name) const;
  std::vector<int64_t> read_i64(const std::string& name) const;
  std::vector<uint8_t> read_u8(const std::string& name) const;

  // Attributes on the root group.
  void set_attr(const std::string& key, const std::string& value);
  void set_attr(const std::string& key, int64_t value);  // overwrites one that exists
  std::string attr_string(const std::string& key) const;  // InputError if absent
  int64_t attr_int(const std::string& key) const;
  bool has_attr(const std::string& key) const;  // InputError if the header cannot be read

 private:
  Handle open_scalar_attr(const std::string& key) const;

  std::string path_;
  Handle file_;
};

// Whether `path` is an HDF5 file by its signature (H5Fis_hdf5, user blocks
// included); false for anything else, a missing file too.
bool is_hdf5(const std::string& path);

// The innermost message of the current HDF5 error stack ("" if none).
std::string last_error();

// Writes a file or folder to the disk (fsync). A file that cannot be synced
// (EIO, ENOSPC) is an Error naming it: renamed into place, or named by a
// checkpoint, it would pass for whole. A folder's sync is best effort (some
// file systems refuse it).
void sync_to_disk(const std::string& path, bool folder);

}  // namespace forge::h5
