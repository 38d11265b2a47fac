// forge export of values that are not plain numbers, written into a
// rollouts.h5 through the store as a run would: NaN is empty in CSV and null
// in JSON; an infinity is inf / -inf in CSV (pandas reads them) and null in
// JSON, which has no infinities (it read as empty / null, like NaN, while
// forge inspect showed -inf).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <limits>
#include <sstream>

#include "e2e/forge_runner.hpp"
#include "env/perturbation.hpp"
#include "io_hdf5/rollout_store.hpp"

namespace forge {
namespace {

using forge_e2e::forge;
using forge_e2e::Result;

TEST(Export, InfinitiesAndNanAreWrittenAsEachFormatCan) {
  const std::string dir = forge_e2e::fresh_dir("export_values");
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/rollouts.h5";
  {
    RolloutStoreOptions o;
    o.config_ini = "[train]\nsteps = 1\n";
    o.domains = {"calc"};
    o.template_families = all_template_families();
    RolloutStore store(path, o);
    Trajectory t;
    t.env = "calc";
    t.template_family = o.template_families.front();
    t.reward.outcome = 1;
    t.reward.process = std::numeric_limits<float>::quiet_NaN();
    t.reward.efficiency = -std::numeric_limits<float>::infinity();
    t.reward.safety = std::numeric_limits<float>::infinity();
    store.append_episodes({t}, 0, 0);
  }
  const Result csv = forge("export " + path + " --format csv");
  ASSERT_EQ(csv.rc, 0) << csv.err;
  std::istringstream lines(csv.out);
  std::string header, row;
  std::getline(lines, header);
  std::getline(lines, row);
  // outcome, process, efficiency, safety are adjacent columns
  ASSERT_NE(header.find(",outcome,process,efficiency,safety,"), std::string::npos) << header;
  EXPECT_NE(row.find(",1,,-inf,inf,"), std::string::npos) << row;
  const Result jsonl = forge("export " + path + " --format jsonl");
  ASSERT_EQ(jsonl.rc, 0) << jsonl.err;
  for (const char* field : {"\"process\": null", "\"efficiency\": null", "\"safety\": null"})
    EXPECT_NE(jsonl.out.find(field), std::string::npos) << field << " in " << jsonl.out;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace forge
