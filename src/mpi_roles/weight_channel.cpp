#include "mpi_roles/weight_channel.hpp"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "core/error.hpp"
#include "core/timer.hpp"
#include "mpi_roles/int_pieces.hpp"

namespace forge {

bool await_first_weights(WeightChannel& control, double startup_s) {
  for (Stopwatch first; control.latest_version() < 0;) {
    if (control.stop_code() != 0) return false;
    if (first.seconds() > startup_s) throw Error(first_weights_late(startup_s));
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

std::string first_weights_late(double startup_s) {
  char s[64];
  std::snprintf(s, sizeof s, "%g", startup_s);
  return std::string("no weights published by learner rank 0 within mpi.startup_s = ") + s +
         " s (it loads the model and any checkpoint first: raise mpi.startup_s for a larger model or a slower disk)";
}
namespace {

constexpr int kVersion = 0, kStop = 1, kSeq0 = 2;
constexpr MPI_Aint kHeaderBytes = 4 * sizeof(int64_t);

}  // namespace

WeightChannel::WeightChannel(MPI_Comm comm, int host_rank, size_t n_floats) : host_(host_rank), n_(n_floats) {
  MPI_Comm_rank(comm, &rank_);
  const MPI_Aint bytes = rank_ == host_ ? kHeaderBytes + MPI_Aint(2 * n_ * sizeof(float)) : 0;
  uint8_t* base = nullptr;
  if (MPI_Win_allocate(bytes, 1, MPI_INFO_NULL, comm, &base, &win_) != MPI_SUCCESS)
    throw Error("weight channel: MPI_Win_allocate of " + std::to_string(bytes) + " bytes failed");
  if (rank_ == host_) {
    const int64_t header[4] = {-1, 0, -1, -1};
    std::memcpy(base, header, sizeof header);
    buffers_ = reinterpret_cast<float*>(base + kHeaderBytes);
    int* model = nullptr;
    int found = 0;
    MPI_Win_get_attr(win_, MPI_WIN_MODEL, &model, &found);
    unified_ = found && *model == MPI_WIN_UNIFIED;
  }
  // The header's local stores made visible to the window (the separate
  // memory model needs the sync) before any rank reads it.
  MPI_Win_lock_all(0, win_);
  MPI_Win_sync(win_);
  MPI_Barrier(comm);
}

WeightChannel::~WeightChannel() {
  MPI_Win_unlock_all(win_);
  MPI_Win_free(&win_);
}

int64_t WeightChannel::read_word(int index) {
  int64_t v = 0;
  MPI_Fetch_and_op(nullptr, &v, MPI_INT64_T, host_, index * sizeof(int64_t), MPI_NO_OP, win_);
  MPI_Win_flush(host_, win_);
  return v;
}

void WeightChannel::write_word(int index, int64_t value) {
  MPI_Accumulate(&value, 1, MPI_INT64_T, host_, index * sizeof(int64_t), 1, MPI_INT64_T, MPI_REPLACE, win_);
  MPI_Win_flush(host_, win_);
}

void WeightChannel::transfer(int buffer, float* data, bool put) {
  for_int_pieces(n_, [&](size_t off, int count) {
    const MPI_Aint disp = kHeaderBytes + MPI_Aint((buffer * n_ + off) * sizeof(float));
    if (put)
      MPI_Put(data + off, count, MPI_FLOAT, host_, disp, count, MPI_FLOAT, win_);
    else
      MPI_Get(data + off, count, MPI_FLOAT, host_, disp, count, MPI_FLOAT, win_);
  }, kMpiPieceBytes / sizeof(float));
  MPI_Win_flush(host_, win_);
}

void WeightChannel::publish(const float* weights, int64_t version) {
  float* dst = begin_publish(version);
  std::memcpy(dst, weights, n_ * sizeof(float));
  commit_publish(version);
}

float* WeightChannel::begin_publish(int64_t version) {
  FORGE_CHECK(rank_ == host_, "only the host rank publishes weights");
  FORGE_CHECK(version >= 0, "weight versions are >= 0");
  FORGE_CHECK(pending_ < 0, "weight channel: version " + std::to_string(pending_) + " begun and not committed");
  const int b = static_cast<int>(version % 2);
  write_word(kSeq0 + b, -1);
  pending_ = version;
  if (!unified_) {
    staging_.resize(n_);
    return staging_.data();
  }
  MPI_Win_sync(win_);  // the stores that follow come after seq[b] = -1
  return buffers_ + size_t(b) * n_;
}

void WeightChannel::commit_publish(int64_t version) {
  FORGE_CHECK(rank_ == host_ && pending_ >= 0 && pending_ == version,
              "weight channel: commit of version " + std::to_string(version) + " without its begin_publish");
  const int b = static_cast<int>(version % 2);
  if (unified_) MPI_Win_sync(win_);  // the stores are public before seq[b] = version
  else transfer(b, staging_.data(), /*put=*/true);
  pending_ = -1;
  write_word(kSeq0 + b, version);
  write_word(kVersion, version);
}

std::pair<void*, size_t> WeightChannel::publish_memory() {
  FORGE_CHECK(rank_ == host_, "only the host rank publishes weights");
  if (unified_) return {buffers_, 2 * n_ * sizeof(float)};
  staging_.resize(n_);
  return {staging_.data(), n_ * sizeof(float)};
}

void WeightChannel::request_stop(int64_t code) {
  FORGE_CHECK(rank_ == host_, "only the host rank stops the job");
  write_word(kStop, code);
}

int64_t WeightChannel::latest_version() { return read_word(kVersion); }
int64_t WeightChannel::stop_code() { return read_word(kStop); }

int64_t WeightChannel::try_pull(int64_t have, std::vector<float>& out) {
  // (on the host, staging_ may hold a publication between begin and commit)
  FORGE_CHECK(pending_ < 0, "weight channel: pull while version " + std::to_string(pending_) + " is being published");
  const int64_t v = read_word(kVersion);
  if (v < 0 || v <= have) return -1;
  const int b = static_cast<int>(v % 2);
  if (read_word(kSeq0 + b) != v) return -1;
  staging_.resize(n_);
  transfer(b, staging_.data(), /*put=*/false);
  if (read_word(kSeq0 + b) != v) return -1;
  out.swap(staging_);
  return v;
}

}  // namespace forge
