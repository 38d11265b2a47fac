// A group of a checkpoint that its caller owns and interprets
// (io_hdf5/checkpoint.hpp): named int64 and byte arrays, stored as
// /<section>/<name>. The data pool keeps its resume state in one
// (mpi_roles/data_pool_state.hpp) without knowing the rest of the file.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace forge {

struct CheckpointSection {
  std::map<std::string, std::vector<int64_t>> i64;
  std::map<std::string, std::vector<uint8_t>> u8;
};

}  // namespace forge
