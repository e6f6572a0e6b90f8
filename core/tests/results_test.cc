#include "dpukit/core/results.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>

namespace dpukit {
namespace {

TEST(Result, CarriesEverySchemaFieldAndTheCpuPerPlace) {
  Result r("dpukit-core test", {"dpukit-core", "test", "--x", "1"});
  r.parameters()["x"] = 1;
  r.figures()["y"] = 2.5;
  CpuAccount acct;
  acct.add(Place::kHost, 11);
  acct.add(Place::kDpu, 22);
  acct.add(Place::kHw, 33);
  r.set_cpu(acct);
  r.set_wall_ns(44);
  r.set_placement(Placement::plan("", ""));
  auto j = r.to_json();
  EXPECT_EQ(j["schema"], "dpukit.result/1");
  EXPECT_EQ(j["tool"], "dpukit-core test");
  EXPECT_EQ(j["command_line"][2], "--x");
  EXPECT_EQ(j["cpu_ns"]["host"], 11);
  EXPECT_EQ(j["cpu_ns"]["dpu"], 22);
  EXPECT_EQ(j["cpu_ns"]["hw"], 33);
  EXPECT_EQ(j["wall_ns"], 44);
  EXPECT_EQ(j["figures"]["y"], 2.5);
  EXPECT_GE(j["machine"]["cores"].get<int>(), 1);
  EXPECT_FALSE(j["machine"]["cpu_model"].get<std::string>().empty());
  EXPECT_EQ(j["started_utc"].get<std::string>().size(), 20u);
  EXPECT_FALSE(j["placement"]["host_cpus"].get<std::string>().empty());
}

TEST(Result, WritesAtomicallyAndRefusesAnUnwritablePath) {
  auto dir = std::filesystem::temp_directory_path() / ("dpukit-result-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  Result r("t", {"t"});
  r.figures()["z"] = 7;
  r.write((dir / "r.json").string());
  std::ifstream in(dir / "r.json");
  auto j = nlohmann::json::parse(in);
  EXPECT_EQ(j["figures"]["z"], 7);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), {}), 1) << "no temporary file left behind";
  EXPECT_THROW(r.write((dir / "missing" / "r.json").string()), std::runtime_error);
  std::filesystem::remove_all(dir);
}

TEST(Result, ReadsBackWhatWasWrittenAndRefusesAnythingElse) {
  auto dir = std::filesystem::temp_directory_path() / ("dpukit-result-read-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  Result r("t", {"t"});
  r.figures()["z"] = 7;
  CpuAccount acct;
  acct.add(Place::kDpu, 5);
  r.set_cpu(acct);
  r.write((dir / "r.json").string());
  auto j = read_result((dir / "r.json").string());
  EXPECT_EQ(j["figures"]["z"], 7);
  EXPECT_EQ(j["cpu_ns"]["dpu"], 5);

  std::ofstream(dir / "other.json") << R"({"figures": {"z": 7}})";
  std::ofstream(dir / "broken.json") << R"({"schema": "dpukit.result/1", )";
  for (const char* name : {"other.json", "broken.json", "missing.json"}) {
    try {
      read_result((dir / name).string());
      ADD_FAILURE() << name << " was read as a result";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  }
  std::filesystem::remove_all(dir);
}

TEST(ResultSchema, AResultMatchesAndEachBreakIsNamedByItsField) {
  Result r("t", {"t", "--x"});
  r.set_placement(Placement::plan("", ""));
  const nlohmann::json good = r.to_json();
  EXPECT_EQ(result_schema_violation(good), "");
  auto broken = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = good;
    edit(j);
    return result_schema_violation(j);
  };
  // valijson's words follow the field and the value in parentheses.
  auto starts = [](const std::string& text, const std::string& head) { return text.rfind(head, 0) == 0; };
  EXPECT_PRED2(starts, broken([](auto& j) { j["schema"] = "other/2"; }), R"(schema: is the string "other/2" ()");
  EXPECT_EQ(broken([](auto& j) { j.erase("figures"); }), "figures: missing");
  EXPECT_EQ(broken([](auto& j) { j["machine"].erase("cores"); }), "machine.cores: missing");
  EXPECT_PRED2(starts, broken([](auto& j) { j["machine"]["cores"] = 0; }), "machine.cores: is the integer 0 (");
  EXPECT_PRED2(starts, broken([](auto& j) { j["machine"]["cores"] = "2"; }), R"(machine.cores: is the string "2" ()");
  EXPECT_PRED2(starts, broken([](auto& j) { j["cpu_ns"]["gpu"] = 1; }), "cpu_ns: is object (");
  EXPECT_NE(broken([](auto& j) { j["cpu_ns"]["gpu"] = 1; }).find("'gpu'"), std::string::npos);
  EXPECT_PRED2(starts, broken([](auto& j) { j["command_line"] = nlohmann::json::array(); }), "command_line: is array (");
  EXPECT_PRED2(starts, broken([](auto& j) { j["command_line"][1] = 5; }), "command_line[1]: is the integer 5 (");
  EXPECT_PRED2(starts, broken([](auto& j) { j["started_utc"] = "yesterday"; }), R"(started_utc: is the string "yesterday" ()");
  EXPECT_PRED2(starts, broken([](auto& j) { j["tool"] = ""; }), R"(tool: is the string "" ()");
  EXPECT_PRED2(starts, result_schema_violation(nlohmann::json::array()), "(top level): is array (");
}

}  // namespace
}  // namespace dpukit
