// Weight publication from the learner to the rollout ranks, and the job's
// stop word, over MPI one-sided communication.
//
// Window on the host (learner rank 0; size 0 elsewhere), passive target:
//   header  int64[4]: latest version V, stop code, seq[0], seq[1]
//   buffers float[2][n]: version v lives in buffer v mod 2
// Publish v (host):   seq[b] := -1, flush; write the weights into buffer b;
//                     seq[b] := v, flush; V := v, flush       (b = v mod 2)
// The host writes buffer b in place, with stores followed by MPI_Win_sync
// (the window's unified memory model, which MPI_Win_allocate gives on a
// node), so that a device backend downloads its parameters straight into
// the window; with a separate model it Puts a staged copy and flushes.
// Pull (any rank):    v := V; if v is new: s1 := seq[b]; Get buffer b, flush;
//                     s2 := seq[b]; the copy is whole iff s1 == s2 == v.
// A seqlock over two buffers: the learner never waits for readers, a reader
// never waits for the learner; a reader that raced with the rewrite of its
// buffer (two versions later) sees seq change and tries again at its next
// poll, keeping the weights it has. Every header word moves with atomic
// MPI_Fetch_and_op / MPI_Accumulate (REPLACE, NO_OP).
//
// Stop code: 0 while the job runs; the learner sets it (1 = finished,
// 2 = stopped by a signal) and every other rank leaves its loop.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace forge {

// Stop codes of the stop word.
inline constexpr int64_t kStopFinished = 1, kStopSignal = 2;

class WeightChannel {
 public:
  // Collective over comm.
  WeightChannel(MPI_Comm comm, int host_rank, size_t n_floats);
  ~WeightChannel();  // collective (MPI_Win_free)
  WeightChannel(const WeightChannel&) = delete;
  WeightChannel& operator=(const WeightChannel&) = delete;

  // Host only. publish() copies n floats in; in place: begin_publish marks
  // the buffer of `version` as being rewritten and returns it (n floats),
  // the caller fills it, commit_publish makes it the latest version.
  void publish(const float* weights, int64_t version);
  float* begin_publish(int64_t version);
  void commit_publish(int64_t version);
  void request_stop(int64_t code);
  // Host only: all the memory begin_publish hands out (the window's two
  // buffers, or the staging copy where the window is not unified), for a
  // device learner to page-lock once (HostPins); valid while the channel is
  // and the host does not pull (try_pull would swap the staging copy out).
  std::pair<void*, size_t> publish_memory();

  // Any rank.
  int64_t latest_version();
  int64_t stop_code();
  // When a version newer than `have` is published and read whole, swaps it
  // into `out` (n floats; out's previous buffer becomes the next read's
  // target, so the read lands once, not read then copied) and returns it;
  // otherwise returns -1 and leaves out alone.
  int64_t try_pull(int64_t have, std::vector<float>& out);
  size_t size() const { return n_; }

 private:
  int64_t read_word(int index);
  void write_word(int index, int64_t value);
  // Put data into (or Get it from) buffer `buffer` of the host, then flush.
  void transfer(int buffer, float* data, bool put);

  int host_, rank_ = 0;
  size_t n_;
  MPI_Win win_ = MPI_WIN_NULL;
  float* buffers_ = nullptr;  // host: the window's two buffers
  bool unified_ = false;      // host: stores into the window are its public copy
  int64_t pending_ = -1;      // host: the version between begin and commit
  std::vector<float> staging_;  // host: the copy a non-unified window Puts; others: the read in progress
};

// The error of a rank that got no first weights within mpi.startup_s.
std::string first_weights_late(double startup_s);

// Waits until learner 0 has published its first weights (true) or the run
// stopped (false); Error (first_weights_late) past startup_s. Producers start
// no group before: its requests' and episodes' deadlines would run out
// while the learner loads the model.
bool await_first_weights(WeightChannel& control, double startup_s);

}  // namespace forge
