// Plans: JSON round trip, every malformed file and every mismatch with the
// model as a clear Error naming the fault, building a plan from chosen
// candidates, and the three exports (annotated ONNX, Chrome trace, Model
// Explorer node data).
#include "core/plan/plan.h"

#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unistd.h>

#include "core/ir/error.h"
#include "core/ir/hashing.h"
#include "core/onnx/onnx_import.h"
#include "core/plan/plan_export.h"
#include "core/search/plan_from_cover.h"

#include "tests/unit/test_support.h"

namespace collage {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const std::string kModels = std::string(COLLAGE_SOURCE_DIR) + "/resources/models/";

// A fresh directory per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    const auto* info = testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() /
            ("collage_plan_test_" + std::to_string(getpid()) + "_" + info->name());
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Expects `f` to throw a collage::Error whose message contains every one of `parts`.
using test_support::expectError;

// x -> relu -> {sig, tanh} -> add: a diamond of four elementwise nodes.
struct Diamond {
  Graph g;
  Diamond() {
    const TensorType t{ElementType::Float32, {2, 3}};
    ValueId x = g.addInput("x", t);
    ValueId r = g.addValue("r", t), s = g.addValue("s", t), th = g.addValue("th", t),
            y = g.addValue("y", t);
    g.addNode(Node{"relu", "Relu", {}, {x}, {r}});
    g.addNode(Node{"sig", "Sigmoid", {}, {r}, {s}});
    g.addNode(Node{"tanh", "Tanh", {}, {r}, {th}});
    g.addNode(Node{"add", "Add", {}, {s, th}, {y}});
    g.markOutput(y);
    g.finalize();
  }
};

PlanGroup group(std::vector<std::string> nodes, std::string backend = "native") {
  PlanGroup g;
  g.nodes = std::move(nodes);
  g.backend = std::move(backend);
  g.origin = PlanOrigin::User;
  return g;
}

Plan diamondPlan() {
  Plan p;
  p.inputShapes["x"] = {2, 3};
  p.backends = {{"native", "0.1"}};
  p.groups = {group({"relu"}), group({"sig", "tanh"}), group({"add"})};
  return p;
}

const std::vector<BackendVersion> kNative = {{"native", "0.1"}};

// ---- JSON ------------------------------------------------------------------

TEST(Plan, JsonRoundTripKeepsEveryField) {
  TempDir dir;
  Plan p;
  p.modelPath = "models/resnet.onnx";
  p.modelSha256 = std::string(64, 'a');
  p.inputShapes = {{"input", {1, 3, 224, 224}}, {"mask", {}}};
  p.fingerprint.cpuVendor = "GenuineIntel";
  p.fingerprint.cpuModel = "Xeon \"quoted\"";
  p.fingerprint.isaFlags = "avx2 fma";
  p.fingerprint.cores = 8;
  p.fingerprint.threads = 4;
  p.fingerprint.libraryVersions = "onednn=3.0;native=0.1";
  p.backends = {{"onednn", "3.0.0"}, {"native", "0.1"}};
  p.predictedNs = 123456.5;
  p.kernelsAloneNs = 98765.25;
  p.createdBy = "collage optimize";
  p.createdAt = "2024-05-01T12:00:00Z";
  PlanGroup a = group({"conv1", "relu1"}, "onednn");
  a.pattern = "pattern:conv_relu";
  a.costNs = 1500.25;
  a.spread = 0.03;
  a.samples = 41;
  a.origin = PlanOrigin::OpLevel;
  PlanGroup b = group({"fc"});
  b.costNs = kUnknownCost;
  b.origin = PlanOrigin::GraphLevel;
  PlanGroup c = group({"weird"});
  c.costNs = kInvalidCost;
  p.groups = {a, b, c};
  p.graphLevel = GraphLevelSummary{true, 2.5, 2.25, 1.1111, 7, 120, {"onednn region of 2 nodes (conv1 .. relu1)"}};

  const std::string path = dir.file("plan.json");
  savePlan(p, path);
  Plan q = loadPlan(path);
  EXPECT_EQ(q.sourcePath, path);
  EXPECT_TRUE(p == q) << planToJson(q);
  EXPECT_TRUE(std::isnan(q.groups[1].costNs));
  EXPECT_TRUE(isInvalid(q.groups[2].costNs));
  EXPECT_EQ(q.groups[0].origin, PlanOrigin::OpLevel);
  EXPECT_EQ(q.groups[1].origin, PlanOrigin::GraphLevel);
  // Saving what was loaded gives the same bytes.
  EXPECT_EQ(planToJson(q), readFile(path));

  json j = json::parse(readFile(path));
  EXPECT_EQ(j["format"], "collage-plan");
  EXPECT_EQ(j["version"], 1);
  EXPECT_EQ(j["groups"][0]["nodes"][1], "relu1");
  EXPECT_EQ(j["groups"][1]["cost_ns"], nullptr);
  EXPECT_EQ(j["groups"][2]["cost_ns"], "invalid");
  EXPECT_EQ(j["model"]["input_shapes"]["input"][3], 224);
  EXPECT_EQ(j["graph_level"]["plans_run"], 120);
  EXPECT_EQ(j["kernels_alone_ns"], 98765.25);
  EXPECT_EQ(j["graph_level"]["changes"][0], "onednn region of 2 nodes (conv1 .. relu1)");
  // A plan the graph-level search did not make has no such object.
  p.graphLevel = GraphLevelSummary{};
  EXPECT_FALSE(json::parse(planToJson(p)).contains("graph_level"));
  // Nor a plan predicted by its kernels' sum a second sum.
  p.kernelsAloneNs = kUnknownCost;
  EXPECT_FALSE(json::parse(planToJson(p)).contains("kernels_alone_ns"));
}

// A plan timed whole is predicted by that time, like `collage run` measures
// it; the kernels' sum it replaces is kept, once, whatever times it after.
TEST(Plan, AWholeRunBecomesThePredictionAndTheKernelsSumIsKept) {
  Plan p = diamondPlan();
  p.groups[0].costNs = 1000;
  p.groups[1].costNs = 2000;
  p.groups[2].costNs = 500;
  p.predictedNs = 3600;  // the DP's sum with a switching charge
  p.predictByWholeRun(0.0052);
  EXPECT_DOUBLE_EQ(p.predictedNs, 5200);
  EXPECT_DOUBLE_EQ(p.kernelsAloneNs, 3600);
  p.predictByWholeRun(0.0049);  // the graph-level search kept it, timed again
  EXPECT_DOUBLE_EQ(p.predictedNs, 4900);
  EXPECT_DOUBLE_EQ(p.kernelsAloneNs, 3600);
  // A run that did not happen changes nothing.
  p.predictByWholeRun(0);
  p.predictByWholeRun(std::numeric_limits<double>::infinity());
  EXPECT_DOUBLE_EQ(p.predictedNs, 4900);
  // A plan the search built from regions has no sum yet: its groups' costs.
  Plan q = diamondPlan();
  q.groups[0].costNs = 1000;
  q.groups[1].costNs = 2000;
  q.groups[2].costNs = 500;
  q.predictByWholeRun(0.004);
  EXPECT_DOUBLE_EQ(q.kernelsAloneNs, 3500);
}

TEST(Plan, MinimalHandWrittenPlanLoads) {
  Plan p = planFromJson(R"({"format": "collage-plan", "version": 1,
                            "model": {"sha256": "abc"},
                            "groups": [{"backend": "native", "nodes": ["a", "b"]}]})",
                        "hand.json");
  ASSERT_EQ(p.groups.size(), 1u);
  EXPECT_EQ(p.groups[0].origin, PlanOrigin::User);
  EXPECT_TRUE(std::isnan(p.groups[0].costNs));
  EXPECT_EQ(p.groups[0].nodes, (std::vector<std::string>{"a", "b"}));
}

TEST(Plan, MalformedFilesAreErrorsNamingFileAndField) {
  const std::string ok = R"("format": "collage-plan", "version": 1, "model": {"sha256": "x"})";
  expectError([] { planFromJson("{not json", "p.json"); }, {"p.json", "not valid JSON"});
  // Found by plan_json_fuzzer: a number no double holds escaped as nlohmann's
  // out_of_range and ended the process.
  expectError([] { planFromJson(R"({"version": 81e324})", "p.json"); }, {"p.json", "not valid JSON"});
  expectError([] { planFromJson("[1, 2]", "p.json"); }, {"p.json", "not a Collage plan"});
  expectError([] { planFromJson(R"({"version": 1})", "p.json"); }, {"p.json", "not a Collage plan", "format"});
  expectError([] { planFromJson(R"({"format": "onnx", "version": 1})", "p.json"); },
              {"not a Collage plan", "\"onnx\""});
  expectError([] { planFromJson(R"({"format": "collage-plan", "version": 2, "groups": []})", "p.json"); },
              {"p.json", "version 2", "newer"});
  expectError([] { planFromJson(R"({"format": "collage-plan", "version": 0})", "p.json"); },
              {"'version'", "positive"});
  expectError([] { planFromJson(R"({"format": "collage-plan", "version": "1"})", "p.json"); },
              {"'version'", "integer"});
  expectError([] { planFromJson(R"({"format": "collage-plan"})", "p.json"); },
              {"p.json", "'version'", "missing"});
  expectError([&] { planFromJson("{" + ok + "}", "p.json"); }, {"p.json", "'groups'", "missing"});
  expectError([] { planFromJson(R"({"format": "collage-plan", "version": 1, "groups": []})", "p.json"); },
              {"'model'", "missing"});
  expectError([&] { planFromJson("{" + ok + R"(, "groups": {}})", "p.json"); },
              {"'groups'", "must be an array", "an object"});
  expectError([&] { planFromJson("{" + ok + R"(, "groups": [{"nodes": ["a"]}]})", "p.json"); },
              {"'groups[0].backend'", "missing"});
  expectError([&] { planFromJson("{" + ok + R"(, "groups": [{"backend": "native", "nodes": "a"}]})", "p.json"); },
              {"'groups[0].nodes'", "array"});
  expectError([&] { planFromJson("{" + ok + R"(, "groups": [{"backend": "native", "nodes": ["a", 3]}]})", "p.json"); },
              {"'groups[0].nodes[1]'", "string", "a number"});
  expectError([&] { planFromJson("{" + ok + R"(, "groups": [{"backend": "native", "nodes": []}]})", "p.json"); },
              {"'groups[0].nodes'", "at least one"});
  expectError([&] {
    planFromJson("{" + ok + R"(, "groups": [{"backend": "native", "nodes": ["a"], "cost_ns": "fast"}]})", "p.json");
  }, {"'groups[0].cost_ns'", "number"});
  expectError([&] {
    planFromJson("{" + ok + R"(, "groups": [{"backend": "native", "nodes": ["a"], "origin": "magic"}]})", "p.json");
  }, {"'groups[0].origin'", "magic"});
  expectError([&] {
    planFromJson("{" + ok + R"(, "model": {"sha256": "x", "input_shapes": {"x": [1, -2]}}, "groups": []})", "p.json");
  }, {"'model.input_shapes.x[1]'", "negative"});
}

TEST(Plan, MissingFileIsAnError) {
  expectError([] { loadPlan("/nonexistent/plan.json"); }, {"/nonexistent/plan.json", "cannot open"});
}

// ---- Checking against a model ---------------------------------------------

TEST(Plan, ValidPlanPassesTheChecks) {
  Diamond d;
  Plan p = diamondPlan();
  EXPECT_TRUE(checkPlanAgainst(p, d.g, "", kNative).empty());
  auto sets = resolvePlanGroups(p, d.g);
  ASSERT_EQ(sets.size(), 3u);
  EXPECT_EQ(sets[1].count(), 2);
  EXPECT_TRUE(groupNodes(p, 1, d.g) == sets[1]);
}

TEST(Plan, NodeErrorsNameTheNode) {
  Diamond d;
  Plan unknown = diamondPlan();
  unknown.groups[1].nodes.push_back("ghost");
  expectError([&] { checkPlanAgainst(unknown, d.g, "", kNative); }, {"'ghost'", "does not have"});

  Plan twice = diamondPlan();
  twice.groups[2].nodes.push_back("relu");
  expectError([&] { checkPlanAgainst(twice, d.g, "", kNative); }, {"'relu'", "two groups", "group 0", "group 2"});

  Plan twiceSame = diamondPlan();
  twiceSame.groups[0].nodes.push_back("relu");
  expectError([&] { checkPlanAgainst(twiceSame, d.g, "", kNative); }, {"'relu'", "listed twice"});

  Plan missing = diamondPlan();
  missing.groups.pop_back();
  expectError([&] { checkPlanAgainst(missing, d.g, "", kNative); }, {"'add' (Add)", "no group"});
}

TEST(Plan, UnknownBackendListsTheAvailableOnes) {
  Diamond d;
  Plan p = diamondPlan();
  p.groups[1].backend = "tpu";
  expectError([&] { checkPlanAgainst(p, d.g, "", {{"native", ""}, {"onednn", ""}}); },
              {"'tpu'", "not available", "native, onednn", "group 1"});
}

TEST(Plan, NonConvexGroupIsAnError) {
  Diamond d;
  Plan p = diamondPlan();
  p.groups = {group({"relu", "add"}), group({"sig"}), group({"tanh"})};
  expectError([&] { checkPlanAgainst(p, d.g, "", kNative); },
              {"group 0", "cannot be one kernel", "convex"});
}

TEST(Plan, GroupsThatWaitOnEachOtherAreAnError) {
  // a1 = Relu(x), b1 = Sigmoid(x), a2 = Add(x, b1), b2 = Add(x, a1):
  // {a1, a2} and {b1, b2} are each convex but each needs the other's result.
  Graph g;
  const TensorType t{ElementType::Float32, {4}};
  ValueId x = g.addInput("x", t);
  ValueId a1 = g.addValue("a1", t), b1 = g.addValue("b1", t), a2 = g.addValue("a2", t),
          b2 = g.addValue("b2", t);
  g.addNode(Node{"a1", "Relu", {}, {x}, {a1}});
  g.addNode(Node{"b1", "Sigmoid", {}, {x}, {b1}});
  g.addNode(Node{"a2", "Add", {}, {x, b1}, {a2}});
  g.addNode(Node{"b2", "Add", {}, {x, a1}, {b2}});
  g.markOutput(a2);
  g.markOutput(b2);
  g.finalize();
  Plan p;
  p.groups = {group({"a1", "a2"}), group({"b1", "b2"})};
  expectError([&] { checkPlanAgainst(p, g, "", kNative); }, {"cycle", "group 0", "group 1"});
}

TEST(Plan, ExecutionOrderFollowsDependenciesNotGroupIndex) {
  Diamond d;
  Plan p = diamondPlan();
  std::swap(p.groups[0], p.groups[2]);  // add first, relu last
  auto order = planExecutionOrder(p, d.g, resolvePlanGroups(p, d.g));
  EXPECT_EQ(order, (std::vector<size_t>{2, 1, 0}));
}

TEST(Plan, InputShapeMismatchIsAnError) {
  Diamond d;
  Plan p = diamondPlan();
  p.inputShapes["x"] = {4, 3};
  expectError([&] { checkPlanAgainst(p, d.g, "", kNative); }, {"input 'x'", "4x3", "2x3", "--input-shape"});
  Plan extra = diamondPlan();
  extra.inputShapes["mask"] = {1};
  expectError([&] { checkPlanAgainst(extra, d.g, "", kNative); }, {"'mask'", "not an input"});
}

TEST(Plan, PlanForAnotherModelIsAnErrorWithBothHashes) {
  const std::string model = kModels + "dcgan_small.onnx";
  Graph g = importOnnx(model);
  Plan p = singleNodePlan(g, "native");
  p.sourcePath = "plan.json";
  p.modelSha256 = std::string(64, '0');
  const std::string actual = sha256File(model);
  expectError([&] { checkPlanAgainst(p, g, model, kNative); },
              {"plan.json was made for a model with sha256 " + std::string(64, '0'), model + " has " + actual});
  p.modelSha256 = actual;
  EXPECT_NO_THROW(checkPlanAgainst(p, g, model, kNative));

  // A plan for dcgan loaded against resnet: the sha256 is checked first, and
  // without it the node names give the model away.
  Graph other = importOnnx(kModels + "resnet50_small.onnx");
  expectError([&] { checkPlanAgainst(p, other, kModels + "resnet50_small.onnx", kNative); },
              {"was made for a model with sha256"});
  p.inputShapes.clear();
  expectError([&] { checkPlanAgainst(p, other, "", kNative); }, {"does not have"});
}

TEST(Plan, VersionAndMachineDifferencesAreWarnings) {
  Diamond d;
  Plan p = diamondPlan();
  p.fingerprint.cpuModel = "Some other CPU";
  HardwareFingerprint here = HardwareFingerprint::current();
  here.cpuModel = "This CPU";
  auto warnings = checkPlanAgainst(p, d.g, "", {{"native", "0.2"}}, &here);
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_NE(warnings[0].find("native 0.1"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[1].find("another machine"), std::string::npos) << warnings[1];
}

// ---- Building -------------------------------------------------------------

TEST(Plan, MakePlanFromChosenCandidates) {
  Diamond d;
  const Graph& g = d.g;
  CandidateSet cands(g.numNodes());
  auto add = [&](std::vector<std::string> names, std::string backend, std::string origin) {
    NodeSet s(g.numNodes());
    for (const auto& n : names) s.insert(*g.findNode(n));
    cands.add(Candidate{s, backend, origin, {}});
  };
  add({"relu"}, "native", "rule:op");
  add({"sig", "tanh", "add"}, "onednn", "pattern:tail");
  add({"sig"}, "native", "rule:op");
  std::vector<Measurement> ms(3);
  ms[0].status = MeasurementStatus::Ok;
  ms[0].medianNs = 100;
  ms[0].spread = 0.1;
  ms[0].samples = 9;
  ms[1].status = MeasurementStatus::Ok;
  ms[1].medianNs = 250;
  ms[1].samples = 12;

  Plan p = makePlan(g, "", cands, {1, 0}, ms, PlanOrigin::OpLevel, HardwareFingerprint{},
                    {{"onednn", "3.0"}, {"native", "0.1"}, {"openblas", "0.3"}});
  ASSERT_EQ(p.groups.size(), 2u);
  EXPECT_EQ(p.groups[0].nodes, (std::vector<std::string>{"sig", "tanh", "add"}));
  EXPECT_EQ(p.groups[0].backend, "onednn");
  EXPECT_EQ(p.groups[0].pattern, "pattern:tail");
  EXPECT_EQ(p.groups[0].costNs, 250);
  EXPECT_EQ(p.groups[0].samples, 12);
  EXPECT_EQ(p.groups[1].spread, 0.1);
  EXPECT_EQ(p.predictedNs, 350);
  EXPECT_EQ(p.inputShapes.at("x"), (Shape{2, 3}));
  EXPECT_EQ(p.backends, (std::vector<BackendVersion>{{"onednn", "3.0"}, {"native", "0.1"}}));
  EXPECT_TRUE(checkPlanAgainst(p, g, "", {{"native", "0.1"}, {"onednn", "3.0"}}).empty());

  expectError([&] { makePlan(g, "", cands, {0}, ms, PlanOrigin::OpLevel, {}, {}); }, {"do not cover", "'sig'"});
  expectError([&] { makePlan(g, "", cands, {1, 0, 2}, ms, PlanOrigin::OpLevel, {}, {}); }, {"overlap"});
  // Without measurements costs are unknown; a failed measurement is invalid.
  Plan unknown = makePlan(g, "", cands, {0, 1}, {}, PlanOrigin::User, {}, {});
  EXPECT_TRUE(std::isnan(unknown.groups[0].costNs));
  ms[0].status = MeasurementStatus::Failed;
  Plan invalid = makePlan(g, "", cands, {0, 1}, ms, PlanOrigin::User, {}, {});
  EXPECT_TRUE(isInvalid(invalid.groups[0].costNs));
}

TEST(Plan, MakePlanRecordsTheModelHash) {
  const std::string model = kModels + "dcgan_small.onnx";
  Graph g = importOnnx(model);
  CandidateSet cands(g.numNodes());
  std::vector<int32_t> chosen;
  for (NodeId n = 0; n < g.numNodes(); ++n) {
    cands.add(Candidate{NodeSet::of(g.numNodes(), {n}), "native", "rule:op", {}});
    chosen.push_back(n);
  }
  Plan p = makePlan(g, model, cands, chosen, {}, PlanOrigin::OpLevel, HardwareFingerprint::current(),
                    {{"native", "0.1"}});
  EXPECT_EQ(p.modelSha256, sha256File(model));
  EXPECT_EQ(p.inputShapes.at("noise"), (Shape{1, 16, 1, 1}));
  EXPECT_TRUE(checkPlanAgainst(p, g, model, kNative).empty());
}

// ---- Exports --------------------------------------------------------------

// The node metadata_props the export writes (field 9 of NodeProto).
std::map<std::string, std::string> nodeMetadata(const onnx::NodeProto& node) {
  std::map<std::string, std::string> props;
  const auto& unknown = node.unknown_fields();
  for (int i = 0; i < unknown.field_count(); ++i) {
    const auto& f = unknown.field(i);
    if (f.number() != 9) continue;
    onnx::StringStringEntryProto e;
    EXPECT_TRUE(e.ParseFromString(f.length_delimited()));
    EXPECT_FALSE(props.count(e.key())) << "duplicate key " << e.key();
    props[e.key()] = e.value();
  }
  return props;
}

onnx::ModelProto readModel(const std::string& path) {
  onnx::ModelProto m;
  std::string bytes = readFile(path);
  EXPECT_TRUE(m.ParseFromString(bytes));
  return m;
}

// One group per node on native, the first moved to oneDNN with a cost: what
// the annotated-model tests write and read back.
Plan annotatedTestPlan(const Graph& g, const std::string& model) {
  Plan p = singleNodePlan(g, "native");
  p.modelSha256 = sha256File(model);
  p.groups[0].backend = "onednn";
  p.groups[0].pattern = "rule:op";
  p.groups[0].costNs = 12345;
  return p;
}

TEST(PlanExport, AnnotatedOnnxCarriesEveryNodesPlacement) {
  TempDir dir;
  const std::string model = kModels + "dcgan_small.onnx";
  Graph g = importOnnx(model);
  Plan p = annotatedTestPlan(g, model);
  const std::string out = dir.file("annotated.onnx");
  exportAnnotatedOnnx(model, p, out);
  // Exporting the exported model again replaces, not duplicates, the entries.
  exportAnnotatedOnnx(out, p, out);

  onnx::ModelProto m = readModel(out);
  int annotated = 0;
  for (const auto& node : m.graph().node()) {
    auto props = nodeMetadata(node);
    auto gi = g.findNode(node.name());
    if (!gi) continue;  // folded away
    ++annotated;
    ASSERT_TRUE(props.count("collage.backend")) << node.name();
    const size_t group = std::stoul(props.at("collage.group"));
    ASSERT_LT(group, p.groups.size());
    EXPECT_EQ(p.groups[group].nodes[0], node.name());
    EXPECT_EQ(props.at("collage.backend"), p.groups[group].backend);
    EXPECT_NE(node.doc_string().find("collage: backend " + p.groups[group].backend + ", group " + props.at("collage.group")), std::string::npos);
    EXPECT_EQ(node.doc_string().find("collage:"), node.doc_string().rfind("collage:")) << "doc line duplicated";
  }
  EXPECT_EQ(annotated, g.numNodes());
  const onnx::NodeProto* first = nullptr;
  for (const auto& node : m.graph().node())
    if (node.name() == p.groups[0].nodes[0]) first = &node;
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(nodeMetadata(*first).at("collage.cost_us"), "12.345");
  bool shaFound = false;
  for (const auto& e : m.metadata_props())
    if (e.key() == "collage.model_sha256") shaFound = e.value() == p.modelSha256;
  EXPECT_TRUE(shaFound);
  // The annotated model is still a model Collage imports, with the same graph.
  Graph again = importOnnx(out);
  EXPECT_EQ(again.numNodes(), g.numNodes());
}

TEST(PlanExport, AnnotatedOnnxReadsBackAsAPlanForItself) {
  TempDir dir;
  const std::string model = kModels + "dcgan_small.onnx";
  Graph g = importOnnx(model);
  Plan p = annotatedTestPlan(g, model);
  p.predictedNs = 2e6;
  const std::string out = dir.file("annotated.onnx");
  exportAnnotatedOnnx(model, p, out);

  Plan back = planFromAnnotatedOnnx(out);
  ASSERT_EQ(back.groups.size(), p.groups.size());
  for (size_t i = 0; i < p.groups.size(); ++i) {
    EXPECT_EQ(back.groups[i].nodes, p.groups[i].nodes) << i;
    EXPECT_EQ(back.groups[i].backend, p.groups[i].backend) << i;
    EXPECT_EQ(back.groups[i].pattern, p.groups[i].pattern) << i;
  }
  EXPECT_DOUBLE_EQ(back.groups[0].costNs, 12345);
  EXPECT_DOUBLE_EQ(back.predictedNs, 2e6);
  // Pinned to the annotated file (the model it runs with), not the original.
  EXPECT_EQ(back.modelSha256, sha256File(out));
  Graph annotated = importOnnx(out);
  EXPECT_TRUE(checkPlanAgainst(back, annotated, out, {{"onednn", ""}, {"native", ""}}).empty());
  EXPECT_THROW(checkPlanAgainst(back, g, model, {{"onednn", ""}, {"native", ""}}), Error);
  // A model without annotations says so.
  try {
    planFromAnnotatedOnnx(model);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no Collage placement"), std::string::npos) << e.what();
  }
}

TEST(PlanExport, ChromeTraceHasOneEventPerKernel) {
  TempDir dir;
  Diamond d;
  Plan p = diamondPlan();
  p.groups[1].pattern = "rule:fusion";
  std::vector<KernelTiming> timings = {
      {0, 10.0, 2.0, 0}, {1, 12.5, 3.0, 0}, {2, 16.0, 1.0, 0}, {0, 30.0, 2.0, 1}};
  const std::string path = dir.file("trace.json");
  exportChromeTrace(p, timings, path);
  json j = json::parse(readFile(path));
  ASSERT_TRUE(j["traceEvents"].is_array());
  int kernels = 0, runs = 0;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] != "X") continue;
    if (e["cat"] == "session") {
      ++runs;
      continue;
    }
    ++kernels;
    EXPECT_TRUE(e["ts"].is_number());
    EXPECT_TRUE(e["dur"].is_number());
    EXPECT_EQ(e["cat"], "native");
    if (e["args"]["group"] == 1) {
      EXPECT_EQ(e["name"], "sig +1");
      EXPECT_EQ(e["args"]["pattern"], "rule:fusion");
      EXPECT_EQ(e["args"]["nodes"].size(), 2u);
      EXPECT_EQ(e["ts"], 12.5);
    }
  }
  EXPECT_EQ(kernels, 4);
  EXPECT_EQ(runs, 2);
  timings.push_back({7, 0, 0, 0});
  expectError([&] { exportChromeTrace(p, timings, path); }, {"group 7"});
}

TEST(PlanExport, ModelExplorerNodeDataByBackendAndLatency) {
  TempDir dir;
  Plan p = diamondPlan();
  p.groups[1].backend = "onednn";
  p.groups[0].costNs = 3000;
  p.groups[1].costNs = 8000;  // two nodes: 4 us each per node
  const std::string path = dir.file("nd.json");

  exportModelExplorerNodeData(p, path, NodeDataKind::Backend);
  json b = json::parse(readFile(path));
  ASSERT_TRUE(b["results"].is_object());
  EXPECT_EQ(b["results"].size(), 4u);
  EXPECT_EQ(b["results"]["tanh"]["value"], "onednn");
  EXPECT_EQ(b["results"]["tanh"]["bgColor"], backendColor("onednn"));
  EXPECT_EQ(b["results"]["relu"]["value"], "native");
  // Colours come from the spec files (distinct for the built-in backends),
  // else from the name.
  loadAllSpecs();
  EXPECT_NE(backendColor("onednn"), backendColor("native"));
  parseBackendSpec("name = \"painted\"\ncolor = \"#123456\"\n[patterns]\nr = \"Relu(*)\"\n",
                   "painted.toml");
  EXPECT_EQ(backendColor("painted"), "#123456");

  exportModelExplorerNodeData(p, path, NodeDataKind::Latency);
  json l = json::parse(readFile(path));
  EXPECT_EQ(l["results"].size(), 3u);  // 'add' has no cost
  EXPECT_DOUBLE_EQ(l["results"]["relu"]["value"].get<double>(), 3.0);
  EXPECT_DOUBLE_EQ(l["results"]["sig"]["value"].get<double>(), 4.0);
  ASSERT_TRUE(l["gradient"].is_array());
  EXPECT_EQ(l["gradient"].front()["stop"], 0);
  EXPECT_EQ(l["gradient"].back()["stop"], 1);

  exportModelExplorerNodeData(p, path, NodeDataKind::GroupLatency);
  json gl = json::parse(readFile(path));
  EXPECT_DOUBLE_EQ(gl["results"]["sig"]["value"].get<double>(), 8.0);

  // Measured timings replace the plan's costs: mean over runs.
  std::vector<KernelTiming> t = {{2, 0, 1.0, 0}, {2, 5, 3.0, 1}};
  exportModelExplorerNodeData(p, path, NodeDataKind::Latency, &t);
  json m = json::parse(readFile(path));
  EXPECT_EQ(m["results"].size(), 1u);
  EXPECT_DOUBLE_EQ(m["results"]["add"]["value"].get<double>(), 2.0);

  EXPECT_EQ(nodeDataKindFromName("group-latency"), NodeDataKind::GroupLatency);
  expectError([] { nodeDataKindFromName("color"); }, {"'color'"});
}

}  // namespace
}  // namespace collage
