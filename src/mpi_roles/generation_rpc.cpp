#include "mpi_roles/generation_rpc.hpp"

#include <chrono>
#include <cstdio>
#include <thread>

#include "core/error.hpp"
#include "core/timer.hpp"
#include "core/wire_codec.hpp"
#include "mpi_roles/watchdog.hpp"

namespace forge {
namespace {

constexpr uint32_t kMaxTokens = 1u << 26;

std::string seconds_text(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", s);
  return b;
}

// Active seconds (core/timer.hpp): a whole-job suspend does not count.
double now_s() {
  static const Stopwatch clock;
  return clock.seconds();
}

}  // namespace

std::vector<uint8_t> encode_request(const GenerationRequest& r) {
  WireWriter w;
  w.put(r.id);
  w.put_vec(r.prompt);
  w.put(r.sampling.temperature);
  w.put(r.sampling.top_p);
  w.put(r.sampling.top_k);
  w.put(r.sampling.max_new_tokens);
  w.put_vec(r.sampling.stop_tokens);
  w.put(r.sampling.seed);
  w.put_str(r.session);
  w.put(r.min_version);
  return w.take();
}

GenerationRequest decode_request(const std::vector<uint8_t>& bytes, const std::string& what) {
  WireReader rd(bytes.data(), bytes.size(), what);
  GenerationRequest r;
  r.id = rd.get<uint64_t>();
  r.prompt = rd.get_vec<int32_t>(kMaxTokens);
  r.sampling.temperature = rd.get<float>();
  r.sampling.top_p = rd.get<float>();
  r.sampling.top_k = rd.get<int>();
  r.sampling.max_new_tokens = rd.get<int>();
  r.sampling.stop_tokens = rd.get_vec<int32_t>(1024);
  r.sampling.seed = rd.get<uint64_t>();
  r.session = rd.get_str(4096);
  r.min_version = rd.get<int32_t>();
  if (r.min_version < 0) rd.fail("minimum policy version " + std::to_string(r.min_version));
  rd.expect_end();
  return r;
}

std::vector<uint8_t> encode_result(const GenerationResult& r) {
  WireWriter w;
  w.put(r.id);
  w.put_vec(r.tokens);
  w.put_vec(r.logprobs);
  w.put_vec(r.versions);
  w.put(static_cast<int32_t>(r.finish));
  w.put_str(r.error);
  w.put(r.prefill_computed);
  w.put(r.prefill_reused);
  w.put(r.prefill_shared);
  return w.take();
}

GenerationResult decode_result(const std::vector<uint8_t>& bytes, const std::string& what) {
  WireReader rd(bytes.data(), bytes.size(), what);
  GenerationResult r;
  r.id = rd.get<uint64_t>();
  r.tokens = rd.get_vec<int32_t>(kMaxTokens);
  r.logprobs = rd.get_vec<float>(kMaxTokens);
  r.versions = rd.get_vec<int32_t>(kMaxTokens);
  const int32_t finish = rd.get<int32_t>();
  if (finish < 0 || finish > static_cast<int32_t>(FinishReason::kCancelled))
    rd.fail("finish reason " + std::to_string(finish));
  r.finish = static_cast<FinishReason>(finish);
  r.error = rd.get_str();
  r.prefill_computed = rd.get<int>();
  r.prefill_reused = rd.get<int>();
  r.prefill_shared = rd.get<int>();
  rd.expect_end();
  if (r.logprobs.size() != r.tokens.size() || r.versions.size() != r.tokens.size())
    rd.fail("a result whose tokens, logprobs and versions differ in length");
  return r;
}

std::vector<uint8_t> encode_cancel(uint64_t id) {
  WireWriter w;
  w.put(id);
  return w.take();
}

uint64_t decode_cancel(const std::vector<uint8_t>& bytes, const std::string& what) {
  WireReader rd(bytes.data(), bytes.size(), what);
  const uint64_t id = rd.get<uint64_t>();
  rd.expect_end();
  return id;
}

void SendQueue::send(MPI_Comm comm, int dest, int tag, std::vector<uint8_t> bytes) {
  FORGE_CHECK(bytes.size() < (size_t{1} << 31), "message too large for one MPI send");
  sends_.push_back({std::move(bytes), MPI_REQUEST_NULL});
  Pending& p = sends_.back();
  MPI_Isend(p.bytes.data(), static_cast<int>(p.bytes.size()), MPI_BYTE, dest, tag, comm, &p.request);
}

SendQueue::~SendQueue() {
  if (!sends_.empty()) new std::list<Pending>(std::move(sends_));  // leaked on purpose; nodes keep their buffers
}

void SendQueue::progress() {
  for (auto it = sends_.begin(); it != sends_.end();) {
    int done = 0;
    MPI_Test(&it->request, &done, MPI_STATUS_IGNORE);
    it = done ? sends_.erase(it) : std::next(it);
  }
}

bool try_receive(MPI_Comm comm, int tag, int* source, std::vector<uint8_t>* bytes) {
  int flag = 0;
  MPI_Message msg;
  MPI_Status status;
  MPI_Improbe(MPI_ANY_SOURCE, tag, comm, &flag, &msg, &status);
  if (!flag) return false;
  int count = 0;
  MPI_Get_count(&status, MPI_BYTE, &count);
  bytes->resize(static_cast<size_t>(count));
  MPI_Mrecv(bytes->data(), count, MPI_BYTE, &msg, MPI_STATUS_IGNORE);
  *source = status.MPI_SOURCE;
  return true;
}

void GenerationClient::send(int server, const GenerationRequest& request) {
  FORGE_CHECK(!outstanding_.count(request.id), "a generation request id is already outstanding");
  outstanding_[request.id] = {server, now_s()};
  sends_.send(comm_, server, kRequestTag, encode_request(request));
}

void GenerationClient::cancel(uint64_t id) {
  const auto it = outstanding_.find(id);
  if (it == outstanding_.end()) return;
  sends_.send(comm_, it->second.server, kCancelTag, encode_cancel(id));
}

size_t GenerationClient::outstanding_to(int server) const {
  size_t n = 0;
  for (const auto& [id, o] : outstanding_) n += o.server == server;
  return n;
}

std::vector<GenerationResult> GenerationClient::poll(const std::function<std::string(int)>& describe) {
  sends_.progress();
  std::vector<GenerationResult> out;
  int source = -1;
  std::vector<uint8_t> bytes;
  while (try_receive(comm_, kResultTag, &source, &bytes)) {
    GenerationResult r = decode_result(bytes, "generation result from " + describe(source));
    if (!outstanding_.erase(r.id))
      throw Error("generation result for unknown request " + std::to_string(r.id) + " from " + describe(source));
    out.push_back(std::move(r));
  }
  const double now = now_s();
  for (const auto& [id, o] : outstanding_)
    if (now - o.sent_at > deadline_s_)
      throw Error(describe(o.server) + " has not answered generation request " + std::to_string(id) +
                  " for " + std::to_string(static_cast<int>(now - o.sent_at)) +
                  " s (mpi.deadline_s = " + seconds_text(deadline_s_) + "): stalled or overloaded");
  return out;
}

void quiesce(MPI_Comm comm, SendQueue& sends, double deadline_s, Watchdog* watchdog) {
  Stopwatch sw;
  if (watchdog) watchdog->mark_shutdown(1);
  MPI_Request barrier = MPI_REQUEST_NULL;
  bool joined = false;
  std::vector<uint8_t> bytes;
  int source = -1;
  while (true) {
    while (try_receive(comm, kRequestTag, &source, &bytes) || try_receive(comm, kResultTag, &source, &bytes) ||
           try_receive(comm, kCancelTag, &source, &bytes)) {
    }
    sends.progress();
    if (!joined && sends.empty()) {
      if (watchdog) watchdog->mark_shutdown(2);
      MPI_Ibarrier(comm, &barrier);
      joined = true;
    }
    if (joined) {
      int done = 0;
      MPI_Test(&barrier, &done, MPI_STATUS_IGNORE);
      if (done) {
        // A message that arrived with the barrier's last packet (in the
        // same MPI_Test) is taken in too: none stays unmatched.
        while (try_receive(comm, kRequestTag, &source, &bytes) || try_receive(comm, kResultTag, &source, &bytes) ||
               try_receive(comm, kCancelTag, &source, &bytes)) {
        }
        return;
      }
    }
    if (sw.seconds() > deadline_s) {
      const std::string waiting = watchdog ? watchdog->shutdown_laggards() : "";
      throw Error(std::string("shutdown: ") + (joined ? "not every rank reached the final barrier"
                                                      : "own messages still undelivered") +
                  " after " + seconds_text(deadline_s) + " s" + (waiting.empty() ? "" : "; waiting for " + waiting));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace forge
