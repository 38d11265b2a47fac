// Token-in/token-out generation between environment ranks (clients) and
// rollout ranks (servers): nonblocking two-sided messages, one per request
// and one per result (the data pool carries finished trajectories; this is
// only the RPC of the agent loop).
//
//   request  tag kRequestTag, client -> server: id, prompt tokens, sampling
//            parameters, session key (prefix reuse on the server), the
//            oldest weights version that may serve it (held_requests.hpp)
//   result   tag kResultTag, server -> client: id, tokens, behaviour
//            logprobs, policy version per token, finish reason, error text
//   cancel   tag kCancelTag, client -> server: id (an abandoned episode's
//            request). The server ends it (kCancelled) unless its result is
//            already on the way: either way exactly one result per request,
//            so the client keeps it outstanding until that result. A cancel
//            the server reads before its request (the tags differ, and MPI
//            orders messages of one tag only) waits there for the request.
//
// Ids are the client's; a server remaps them to its engine's and back. Each
// message is encoded with wire_codec.hpp and received with MPI_Improbe /
// MPI_Mrecv, so its size is known before the receive. Sends are MPI_Isend
// whose buffers live until MPI_Test completes them.
//
// Deadlines: a client reports (Error naming the rollout rank and the request)
// a request that has no result after deadline_s.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <string>
#include <vector>

#include "model/rollout_engine.hpp"

namespace forge {

inline constexpr int kRequestTag = 101;
inline constexpr int kResultTag = 102;
inline constexpr int kCancelTag = 103;

std::vector<uint8_t> encode_request(const GenerationRequest& r);
GenerationRequest decode_request(const std::vector<uint8_t>& bytes, const std::string& what);
std::vector<uint8_t> encode_result(const GenerationResult& r);
GenerationResult decode_result(const std::vector<uint8_t>& bytes, const std::string& what);
std::vector<uint8_t> encode_cancel(uint64_t id);
uint64_t decode_cancel(const std::vector<uint8_t>& bytes, const std::string& what);

// Nonblocking sends whose buffers are kept until they complete.
class SendQueue {
 public:
  SendQueue() = default;
  SendQueue(const SendQueue&) = delete;
  SendQueue& operator=(const SendQueue&) = delete;
  // Sends still pending (an error is unwinding towards MPI_Abort) keep their
  // buffers: MPI may still read them.
  ~SendQueue();
  void send(MPI_Comm comm, int dest, int tag, std::vector<uint8_t> bytes);
  void progress();  // completes what it can
  bool empty() const { return sends_.empty(); }

 private:
  struct Pending {
    std::vector<uint8_t> bytes;
    MPI_Request request;
  };
  std::list<Pending> sends_;
};

// One message with `tag` from any source, if one has arrived.
bool try_receive(MPI_Comm comm, int tag, int* source, std::vector<uint8_t>* bytes);

class GenerationClient {
 public:
  GenerationClient(MPI_Comm comm, double deadline_s) : comm_(comm), deadline_s_(deadline_s) {}
  void send(int server, const GenerationRequest& request);
  // Asks the server of outstanding request `id` to end it; its result (kCancelled,
  // or the finished one) still comes through poll(). No-op when not outstanding.
  void cancel(uint64_t id);
  // Results that arrived; Error naming the rollout rank of a request past
  // its deadline (describe(rank) names it).
  std::vector<GenerationResult> poll(const std::function<std::string(int)>& describe);
  size_t outstanding() const { return outstanding_.size(); }
  size_t outstanding_to(int server) const;  // requests sent to `server` without a result yet
  SendQueue& sends() { return sends_; }

 private:
  struct Outstanding {
    int server;
    double sent_at;
  };
  MPI_Comm comm_;
  double deadline_s_;
  SendQueue sends_;
  std::map<uint64_t, Outstanding> outstanding_;
};

class Watchdog;

// Drains and discards any request or result message still in flight, then
// meets every rank of comm at a barrier (MPI_Ibarrier), completing its own
// sends meanwhile, and drains once more. A send completes locally (eager)
// before it is received and MPI does not order point-to-point against a
// collective, so a late message may still arrive after: it is only ever
// dropped at MPI_Finalize, as nothing reuses the RPC's tags. Error after
// deadline_s, naming the ranks it waits for when given the job's watchdog
// (whose shutdown words it sets: watchdog.hpp).
void quiesce(MPI_Comm comm, SendQueue& sends, double deadline_s, Watchdog* watchdog = nullptr);

}  // namespace forge
