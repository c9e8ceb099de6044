// ONNX conformance runner: imports every test case of ONNX's backend test data
// (node, pytorch-converted, pytorch-operator, simple), runs it with the
// reference executor and compares each output with the expected one.
//
//   conformance_runner DATA_DIR [--filter REGEX] [--verbose] [--list-failures] [--no-fork]
//                      [--backend NAME[,NAME...]]...
//
// With --backend, each case runs through that backend instead: every node the
// backend has a single-node candidate for is compiled on it and the rest runs
// on native, in a Session, and the outputs are compared with the expected
// ones exactly as in the reference mode (same tolerance). A case where the
// backend runs none of its ops is skipped; a compile refusal is not a failure
// but is counted and listed separately. Cases of a known, reported backend bug
// are skipped with a reason naming the bug (kKnownBackendBugs), and listed.
//
// Each case runs in a forked child so that a crashing or hanging kernel counts
// as one failed case instead of ending the run. Cases that need something we
// deliberately do not cover (an op, an element type, sequences, an old opset)
// are skipped with the reason; the summary counts reasons so kernel authors
// see what is missing, and its last line counts the cases skipped for an op
// missing from the op set, float32 and other (isFloat32Case). Cases of
// random ops are checked by type, shape and range and count as skipped.
// Exit status: 1 if any case failed, else 0.
#include <onnx/defs/schema.h>
#include <onnx/onnx-data.pb.h>
#include <onnx/onnx_pb.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "backends/backend_list.h"
#include "core/patterns/candidate.h"
#include "core/ir/error.h"
#include "core/onnx/onnx_import.h"
#include "core/ops/op_registry.h"
#include "core/plan/plan.h"
#include "core/ops/reference_executor.h"
#include "core/runtime/session.h"
#include "core/onnx/tensor_proto.h"

namespace fs = std::filesystem;
using namespace collage;

namespace {

// ONNX's own test tolerance, for the reference and every float32 backend.
constexpr Tolerance kOnnxTolerance{1e-3, 1e-7};
constexpr unsigned kCaseTimeoutSeconds = 300;
constexpr double kSlowCaseSeconds = 20.0;

enum class Status { Pass, Fail, Skip };

struct CaseResult {
  Status status = Status::Fail;
  std::string message;  // why it failed or was skipped
  double seconds = 0;
  std::vector<std::string> refusals;  // backend mode: "Op: reason", one per refused node
};

// The backend under test ("" = the reference executor), set once per pass
// before the cases fork, and the tolerance its results are held to: ONNX's,
// or the precision a reduced-precision backend declares (TF32).
std::string gBackend;
Tolerance gTolerance = kOnnxTolerance;

// Conformance cases a backend gets wrong because of a reported bug that is
// not fixed yet: skipped (never counted as passed) with the bug in the
// reason, and listed in the summary so the bug stays visible.
struct KnownBug {
  const char* backend;
  const char* caseId;  // "node/test_relu"
  const char* bug;
};
// Empty today. oneDNN's eltwise_log was listed here (Log(1) = -1.43e-6, not
// 0); the oneDNN backend no longer offers Log, so the search sends it elsewhere.
// A nullptr entry keeps the array non-empty; knownBug() skips it.
constexpr KnownBug kKnownBackendBugs[] = {
    {"", nullptr, nullptr},
};

const char* knownBug(const std::string& backend, const std::string& caseId) {
  for (const auto& k : kKnownBackendBugs)
    if (k.caseId && backend == k.backend && caseId == k.caseId) return k.bug;
  return nullptr;
}

// Thrown inside a case to mark it skipped with a reason.
struct SkipCase {
  std::string reason;
};

struct CaseInfo {
  std::string id;  // "node/test_relu"
  fs::path dir;
  std::string group;  // op for single-op cases, "(multi-op)" otherwise
  std::vector<std::string> ops;
  std::vector<std::string> missingOps;  // ops the importer cannot take
  bool float32 = false;                 // see isFloat32Case
};

// Whether a case is about float32 data, for counting the cases skipped for a
// missing op (the op set's goal is every float32 case). A case is float32
// when
//  - every node is in the default ONNX domain (ai.onnx.preview.training is
//    not part of what exporters emit), and
//  - one of its graph inputs is float32, and
//  - no graph input or output is another floating type (float16, float64,
//    bfloat16), a string, or an 8- or 16-bit integer (quantised data).
// So QuantizeLinear, ConvInteger and the other quantised ops, string ops,
// and ops whose inputs are only integers or booleans (NonZero over bool,
// TfIdfVectorizer over int32 tokens, the window ops' int size) are "other",
// even where an output is float32: their subject is not float32 data.
bool isFloat32Case(const onnx::ModelProto& m) {
  const auto& g = m.graph();
  for (const auto& n : g.node())
    if (!isOnnxDefaultDomain(n.domain())) return false;
  auto excluded = [](ElementType t) {
    switch (t) {
      case ElementType::Float16:
      case ElementType::Float64:
      case ElementType::BFloat16:
      case ElementType::String:
      case ElementType::Int8:
      case ElementType::UInt8:
      case ElementType::Int16:
      case ElementType::UInt16:
        return true;
      default:
        return false;
    }
  };
  bool floatInput = false;
  for (const auto& vi : g.input()) {
    if (!vi.type().has_tensor_type()) continue;
    const int32_t code = vi.type().tensor_type().elem_type();
    if (code == onnx::TensorProto::STRING) return false;
    const ElementType t = elementTypeFromOnnx(code);
    if (excluded(t)) return false;
    floatInput = floatInput || t == ElementType::Float32;
  }
  for (const auto& vi : g.output()) {
    if (!vi.type().has_tensor_type()) continue;
    const int32_t code = vi.type().tensor_type().elem_type();
    if (code == onnx::TensorProto::STRING || excluded(elementTypeFromOnnx(code))) return false;
  }
  return floatInput;
}

// Ops whose outputs are random draws: their cases can only be checked by
// type, shape and value range (ONNX's expected values are numpy's draws).
bool isRandomOp(const std::string& op) {
  return op == "Bernoulli" || op == "RandomUniformLike" || op == "RandomNormalLike" ||
         op == "RandomUniform" || op == "RandomNormal" || op == "Multinomial";
}

// For a case with random outputs: "" if `got` has the expected type and
// shape and stays in the expected values' range (0/1 when every expected
// value is 0 or 1, finite otherwise), else what is wrong.
std::string checkRandomOutput(const Tensor& got, const Tensor& want) {
  if (got.type() != want.type())
    return "type " + got.type().toString() + ", expected " + want.type().toString();
  const std::vector<double> a = got.toDoubles(), b = want.toDoubles();
  const bool binary = std::all_of(b.begin(), b.end(), [](double v) { return v == 0 || v == 1; });
  for (size_t i = 0; i < a.size(); ++i) {
    if (binary && a[i] != 0 && a[i] != 1)
      return "value " + std::to_string(a[i]) + " at index " + std::to_string(i) +
             " where every expected draw is 0 or 1";
    if (!std::isfinite(a[i])) return "non-finite value at index " + std::to_string(i);
  }
  return "";
}

std::string opLabel(const onnx::NodeProto& n) {
  return isOnnxDefaultDomain(n.domain()) ? n.op_type() : n.domain() + "." + n.op_type();
}

onnx::ModelProto loadModelProto(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path.string() + ": cannot open");
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  onnx::ModelProto m;
  if (!m.ParseFromString(bytes)) throw Error(path.string() + ": not a valid ONNX model");
  return m;
}

int64_t defaultOpset(const onnx::ModelProto& m) {
  for (const auto& o : m.opset_import())
    if (isOnnxDefaultDomain(o.domain())) return o.version();
  return 0;
}

// Graph inputs whose values must be known at import: they feed (possibly
// through other nodes) an input that the canonical form turns into an
// attribute, such as Reshape's shape.
// A graph input or output of type seq(tensor(T)): Collage's sequence kind.
// Sequences of sequences, maps and optionals are not covered.
bool isTensorSequence(const onnx::TypeProto& t) {
  return t.has_sequence_type() && t.sequence_type().elem_type().has_tensor_type();
}

// A serialized onnx.SequenceProto (the test data of a sequence input or
// output) as a sequence Tensor; `declared` gives the element type when the
// sequence is empty.
Tensor readSequenceProtoFile(const fs::path& path, const onnx::TypeProto& declared,
                             std::string* name = nullptr) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path.string() + ": cannot open");
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  onnx::SequenceProto proto;
  if (!proto.ParseFromString(bytes)) throw Error(path.string() + ": not a valid onnx.SequenceProto");
  if (proto.elem_type() != onnx::SequenceProto::TENSOR)
    throw SkipCase{"a sequence of non-tensors"};
  if (name) *name = proto.name();
  std::vector<Tensor> items;
  for (const auto& t : proto.tensor_values()) {
    items.push_back(tensorFromProto(t));
    if (items.back().shape() != items.front().shape())
      throw SkipCase{"a sequence of tensors of different shapes"};
  }
  TensorType element{elementTypeFromOnnx(declared.sequence_type().elem_type().tensor_type().elem_type()), {}};
  if (!items.empty()) element = items.front().type();
  return Tensor::sequence(element, std::move(items));
}

std::set<std::string> inputsNeedingConstants(const onnx::ModelProto& m) {
  const auto& g = m.graph();
  const int64_t opset = defaultOpset(m);
  std::map<std::string, const onnx::NodeProto*> producer;
  for (const auto& n : g.node())
    for (const auto& o : n.output()) producer[o] = &n;
  std::set<std::string> need, seen;
  std::vector<std::string> work;
  for (const auto& n : g.node()) {
    if (!isOnnxDefaultDomain(n.domain())) continue;
    for (int slot : constInputSlots(n.op_type(), opset))
      if (slot < n.input_size() && !n.input(slot).empty()) work.push_back(n.input(slot));
  }
  while (!work.empty()) {
    std::string v = work.back();
    work.pop_back();
    if (!seen.insert(v).second) continue;
    auto it = producer.find(v);
    if (it == producer.end()) {
      need.insert(v);
      continue;
    }
    // Shape and Size only need their input's (static) type.
    const std::string& op = it->second->op_type();
    if (op == "Shape" || op == "Size") continue;
    for (const auto& in : it->second->input())
      if (!in.empty()) work.push_back(in);
  }
  return need;
}

std::vector<fs::path> numberedFiles(const fs::path& dir, const std::string& prefix) {
  std::vector<std::pair<int, fs::path>> found;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) != 0 || e.path().extension() != ".pb") continue;
    try {
      found.push_back({std::stoi(name.substr(prefix.size())), e.path()});
    } catch (...) {
    }
  }
  std::sort(found.begin(), found.end());
  std::vector<fs::path> out;
  for (auto& f : found) out.push_back(f.second);
  return out;
}

bool isNaN(double v) { return std::isnan(v); }

// Empty string if equal within tolerance, else a description of the mismatch.
std::string compareWithExpected(const Tensor& got, const Tensor& want) {
  if (got.type() != want.type())
    return "type " + got.type().toString() + ", expected " + want.type().toString();
  const ElementType et = want.elementType();
  const int64_t n = want.numElements();
  if (isFloatingPoint(et)) {
    std::vector<double> a = tensorToDoubles(got), b = tensorToDoubles(want);
    double maxAbs = 0, maxRel = 0;
    int64_t firstBad = -1, bad = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double x = a[i], y = b[i];
      if (x == y || (isNaN(x) && isNaN(y))) continue;
      const double diff = std::fabs(x - y);
      const bool ok = !std::isnan(diff) && diff <= gTolerance.atol + gTolerance.rtol * std::fabs(y);
      if (std::isnan(diff) || std::isinf(diff)) {
        maxAbs = INFINITY;
      } else {
        maxAbs = std::max(maxAbs, diff);
        if (y != 0) maxRel = std::max(maxRel, diff / std::fabs(y));
      }
      if (!ok) {
        ++bad;
        if (firstBad < 0) firstBad = i;
      }
    }
    if (firstBad < 0) return "";
    std::ostringstream os;
    os.precision(8);
    os << bad << " of " << n << " values differ; max abs err " << maxAbs << ", max rel err "
       << maxRel << "; first bad index " << firstBad << ": got " << a[firstBad] << ", expected "
       << b[firstBad];
    return os.str();
  }
  const size_t size = elementSize(et);
  if (size == 0) throw Unsupported("cannot compare " + want.type().toString());
  const auto* pa = static_cast<const uint8_t*>(got.raw());
  const auto* pb = static_cast<const uint8_t*>(want.raw());
  int64_t firstBad = -1, bad = 0;
  for (int64_t i = 0; i < n; ++i)
    if (std::memcmp(pa + i * size, pb + i * size, size) != 0) {
      ++bad;
      if (firstBad < 0) firstBad = i;
    }
  if (firstBad < 0) return "";
  std::vector<double> a = tensorToDoubles(got), b = tensorToDoubles(want);
  std::ostringstream os;
  os << bad << " of " << n << " values differ (exact comparison); first bad index " << firstBad
     << ": got " << a[firstBad] << ", expected " << b[firstBad];
  return os.str();
}

// The backend set for the backend under test (plus native, which runs the
// rest), loaded on first use: in the forked child, so that no library starts
// threads in the parent before a fork. User patterns are not read, so a
// run does not depend on whoever runs it.
BackendSet& backendSet() {
  static std::map<std::string, BackendSet> sets;  // by backend under test (--no-fork)
  auto it = sets.find(gBackend);
  if (it == sets.end()) {
    std::vector<std::string> names{gBackend};
    if (gBackend != "native") names.push_back("native");
    it = sets.emplace(gBackend, loadBackendSet(names, "")).first;
  }
  return it->second;
}

// Runs the graph with the backend under test on every node it has a
// single-node candidate for and native on the rest. Refusals go to
// `refusals`; a case where the backend runs nothing is a SkipCase.
std::vector<Tensor> runOnBackend(const Graph& graph, const std::vector<Tensor>& inputs,
                                 std::vector<std::string>& refusals) {
  BackendSet& set = backendSet();
  Backend* backend = set.find(gBackend);
  std::vector<BackendCapabilities> caps;
  for (const auto& c : set.capabilities())
    if (c.spec->name == gBackend) caps.push_back(c);
  CandidateSet candidates = enumerateCandidates(graph, caps, EnumerationOptions{false});
  std::map<NodeId, std::string> claimed;  // node -> the candidate's origin
  for (const auto& c : candidates.all())
    if (c.backend == gBackend && c.nodes.count() == 1) claimed.emplace(c.firstNode(), c.origin);
  if (claimed.empty()) throw SkipCase{"backend " + gBackend + " runs none of its ops"};

  Plan plan = singleNodePlan(graph, "native");  // group i holds node i
  plan.backends = {{gBackend, ""}, {"native", ""}};
  int compiled = 0;
  for (const auto& [node, origin] : claimed) {
    CompileResult r =
        backend->compile(KernelRequest::of(graph, NodeSet::of(graph.numNodes(), {node}), origin));
    if (!r) {
      std::string why = r.refusal.empty() ? "no reason given" : r.refusal;
      std::replace(why.begin(), why.end(), '\n', ' ');
      refusals.push_back(graph.node(node).op + ": " + why);
      continue;
    }
    PlanGroup& g = plan.groups.at(static_cast<size_t>(node));
    g.backend = gBackend;
    g.pattern = origin;
    ++compiled;
  }
  if (compiled == 0) throw SkipCase{"refused: " + refusals.front()};

  std::unique_ptr<Session> session;
  try {
    session =
        std::make_unique<Session>(graph, plan, [&](const std::string& n) { return set.find(n); });
  } catch (const Error& e) {
    // The backend's own nodes compiled above, so this is native refusing
    // a node of the rest: nothing of the backend under test is tested.
    if (gBackend != "native") throw SkipCase{std::string("native, running the rest: ") + e.what()};
    throw;
  }
  return session->run(inputs);
}

// Runs one case; throws SkipCase, Unsupported (-> skip) or anything else (-> fail).
// Returns a failure message, or "" if every output matched.
std::string runCase(const CaseInfo& info, std::vector<std::string>& refusals) {
  const fs::path modelPath = info.dir / "model.onnx";
  onnx::ModelProto model = loadModelProto(modelPath);
  const auto& g = model.graph();

  // Sequence inputs are bound as constants (a Session exchanges tensors only).
  std::map<std::string, const onnx::TypeProto*> sequenceTypes;
  for (const auto& vi : g.input()) {
    if (isTensorSequence(vi.type())) sequenceTypes[vi.name()] = &vi.type();
    else if (!vi.type().has_tensor_type()) throw SkipCase{"optional/map/nested sequence input"};
  }
  for (const auto& vi : g.output()) {
    if (isTensorSequence(vi.type())) sequenceTypes[vi.name()] = &vi.type();
    else if (!vi.type().has_tensor_type()) throw SkipCase{"optional/map/nested sequence output"};
  }
  for (const auto& n : g.node())
    if (!isOnnxDefaultDomain(n.domain()) || !isImportableOp(n.op_type()))
      throw SkipCase{"unsupported op " + opLabel(n)};
  bool random = false;
  for (const auto& n : g.node()) random = random || isRandomOp(n.op_type());
  const int64_t opset = defaultOpset(model);
  if (opset < kMinLegacyOnnxOpset || opset > kMaxOnnxOpset)
    throw SkipCase{"opset " + std::to_string(opset)};

  std::set<std::string> initNames;
  for (const auto& init : g.initializer()) initNames.insert(init.name());
  std::vector<std::string> inputNames;
  for (const auto& vi : g.input())
    if (!initNames.count(vi.name())) inputNames.push_back(vi.name());
  std::vector<std::string> outputNames;
  for (const auto& vi : g.output()) outputNames.push_back(vi.name());
  const std::set<std::string> constNames = inputsNeedingConstants(model);

  std::vector<fs::path> sets;
  for (const auto& e : fs::directory_iterator(info.dir))
    if (e.is_directory() && e.path().filename().string().rfind("test_data_set_", 0) == 0)
      sets.push_back(e.path());
  std::sort(sets.begin(), sets.end());
  if (sets.empty()) throw SkipCase{"no test data"};

  for (const auto& set : sets) {
    const std::string setName = set.filename().string();
    std::map<std::string, Tensor> given;
    std::vector<fs::path> inFiles = numberedFiles(set, "input_");
    for (size_t k = 0; k < inFiles.size(); ++k) {
      std::string name;
      const std::string declaredName = k < inputNames.size() ? inputNames[k] : std::string();
      Tensor t = sequenceTypes.count(declaredName)
                     ? readSequenceProtoFile(inFiles[k], *sequenceTypes.at(declaredName), &name)
                     : readTensorProtoFile(inFiles[k].string(), &name);
      bool known = std::find(inputNames.begin(), inputNames.end(), name) != inputNames.end();
      if (!known) {
        if (k >= inputNames.size())
          throw Error(setName + ": " + inFiles[k].filename().string() +
                      " has no matching graph input");
        name = inputNames[k];
      }
      given[name] = std::move(t);
    }
    // Some upstream cases ship data that contradicts the model's static
    // input type (castlike *_expanded): nothing of ours is tested there.
    for (const auto& vi : g.input()) {
      auto it = given.find(vi.name());
      if (it == given.end() || constNames.count(vi.name()) || sequenceTypes.count(vi.name())) continue;
      const auto& tt = vi.type().tensor_type();
      bool ok = elementTypeFromOnnx(tt.elem_type()) == it->second.elementType();
      if (tt.has_shape()) {
        ok = ok && tt.shape().dim_size() == it->second.rank();
        for (int d = 0; ok && d < tt.shape().dim_size(); ++d)
          if (tt.shape().dim(d).has_dim_value() &&
              tt.shape().dim(d).dim_value() != it->second.shape()[static_cast<size_t>(d)])
            ok = false;
      }
      if (!ok)
        throw SkipCase{"test data does not match the model's type of input '" + vi.name() + "'"};
    }
    ImportOptions options;
    options.allowLegacyOpsets = true;
    for (const auto& [name, t] : given) {
      if (constNames.count(name) || t.isSequence())
        options.constantInputs[name] = t;
      else
        options.inputShapes[name] = t.shape();
    }
    Graph graph = importOnnx(modelPath.string(), options);
    std::map<std::string, Tensor> feeds;
    for (ValueId v : graph.inputs()) {
      const std::string& name = graph.value(v).name;
      auto it = given.find(name);
      if (it == given.end()) throw Error(setName + ": no test data for input '" + name + "'");
      feeds[name] = it->second;
    }
    std::vector<Tensor> outputs;
    if (gBackend.empty()) {
      ReferenceExecutor exec(graph);
      outputs = exec.run(feeds);
    } else {
      std::vector<Tensor> inputs;
      for (ValueId v : graph.inputs()) inputs.push_back(feeds.at(graph.value(v).name));
      outputs = runOnBackend(graph, inputs, refusals);
    }
    std::vector<fs::path> outFiles = numberedFiles(set, "output_");
    if (outFiles.size() != outputNames.size())
      throw Error(setName + ": " + std::to_string(outFiles.size()) + " expected outputs for " +
                  std::to_string(outputNames.size()) + " graph outputs");
    for (size_t k = 0; k < outFiles.size(); ++k) {
      const bool isSeq = sequenceTypes.count(outputNames[k]) != 0;
      Tensor want = isSeq ? readSequenceProtoFile(outFiles[k], *sequenceTypes.at(outputNames[k]))
                          : readTensorProtoFile(outFiles[k].string());
      // Graph::outputs() lists each value once; find ours by name.
      const Tensor* got = nullptr;
      for (size_t j = 0; j < graph.outputs().size(); ++j)
        if (graph.value(graph.outputs()[j]).name == outputNames[k]) got = &outputs[j];
      if (!got) throw Error(setName + ": graph output '" + outputNames[k] + "' missing");
      std::string diff;
      if (isSeq || got->isSequence()) {
        if (!got->isSequence() || !want.isSequence())
          diff = "got " + got->type().toString() + ", expected " + want.type().toString();
        else if (got->items().size() != want.items().size())
          diff = "a sequence of " + std::to_string(got->items().size()) + " tensors, expected " +
                 std::to_string(want.items().size());
        for (size_t i = 0; diff.empty() && i < want.items().size(); ++i) {
          diff = compareWithExpected(got->items()[i], want.items()[i]);
          if (!diff.empty()) diff = "element " + std::to_string(i) + ": " + diff;
        }
      } else {
        diff = random ? checkRandomOutput(*got, want) : compareWithExpected(*got, want);
      }
      if (!diff.empty())
        return setName + ": output '" + outputNames[k] + "' (#" + std::to_string(k) + "): " + diff;
    }
  }
  // Checked, but not comparable value by value: never counted as passed.
  if (random) throw SkipCase{"random outputs: type, shape and range checked, values not comparable"};
  return "";
}

CaseResult runCaseCaught(const CaseInfo& info) {
  CaseResult r;
  auto start = std::chrono::steady_clock::now();
  try {
    std::string failure = runCase(info, r.refusals);
    r.status = failure.empty() ? Status::Pass : Status::Fail;
    r.message = failure;
  } catch (const SkipCase& s) {
    r.status = Status::Skip;
    r.message = s.reason;
  } catch (const Unsupported& e) {
    r.status = Status::Skip;
    r.message = e.what();
  } catch (const Error& e) {
    r.message = e.what();
  } catch (const std::exception& e) {
    r.message = std::string("exception: ") + e.what();
  } catch (...) {
    r.message = "unknown exception";
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

// Runs the case in a child process; a crash or a hang becomes a failure.
CaseResult runCaseIsolated(const CaseInfo& info) {
  int fds[2];
  if (pipe(fds) != 0) return runCaseCaught(info);
  std::cout.flush();
  std::cerr.flush();
  auto start = std::chrono::steady_clock::now();
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return runCaseCaught(info);
  }
  if (pid == 0) {
    close(fds[0]);
    alarm(kCaseTimeoutSeconds);
    CaseResult r = runCaseCaught(info);
    std::string out = std::to_string(static_cast<int>(r.status)) + "\n" +
                      std::to_string(r.seconds) + "\n" + std::to_string(r.refusals.size()) + "\n";
    for (const auto& f : r.refusals) out += f + "\n";  // one line each (newlines replaced)
    out += r.message;
    const char* p = out.data();
    size_t left = out.size();
    while (left > 0) {
      ssize_t w = write(fds[1], p, left);
      if (w <= 0) break;
      p += w;
      left -= static_cast<size_t>(w);
    }
    close(fds[1]);
    _exit(0);
  }
  close(fds[1]);
  std::string data;
  char buf[4096];
  for (;;) {
    ssize_t n = read(fds[0], buf, sizeof buf);
    if (n > 0) {
      data.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    break;
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  CaseResult r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    r.status = Status::Fail;
    r.message = sig == SIGALRM
                    ? "timed out after " + std::to_string(kCaseTimeoutSeconds) + " s"
                    : "crashed with signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
    return r;
  }
  size_t a = data.find('\n');
  size_t b = a == std::string::npos ? a : data.find('\n', a + 1);
  size_t c = b == std::string::npos ? b : data.find('\n', b + 1);
  if (c == std::string::npos) {
    r.status = Status::Fail;
    r.message = "the case process exited without a result (status " + std::to_string(status) + ")";
    return r;
  }
  r.status = static_cast<Status>(std::stoi(data.substr(0, a)));
  const size_t numRefusals = std::stoul(data.substr(b + 1, c - b - 1));
  size_t pos = c + 1;
  for (size_t i = 0; i < numRefusals && pos <= data.size(); ++i) {
    size_t end = data.find('\n', pos);
    if (end == std::string::npos) end = data.size();
    r.refusals.push_back(data.substr(pos, end - pos));
    pos = end + 1;
  }
  r.message = pos <= data.size() ? data.substr(pos) : "";
  return r;
}

// Groups skip reasons: drops file paths and the names of nodes and tensors.
std::string reasonKey(std::string msg) {
  static const std::regex filePrefix(R"(^.*?\.(onnx|pb): )");
  msg = std::regex_replace(msg, filePrefix, "", std::regex_constants::format_first_only);
  static const std::regex named(R"((node|tensor|input|output|initializer) '[^']*')");
  msg = std::regex_replace(msg, named, "$1");
  static const std::regex nodesList(R"( \(nodes? [^)]*\))");
  msg = std::regex_replace(msg, nodesList, "");
  if (msg.size() > 140) msg = msg.substr(0, 140) + "...";
  return msg;
}

void usage() {
  std::cerr << "usage: conformance_runner DATA_DIR [--filter REGEX] [--verbose] "
               "[--list-failures] [--no-fork] [--backend NAME[,NAME...]]...\n";
}

}  // namespace

int main(int argc, char** argv) {
  std::string dataDir, filter;
  bool verbose = false, listFailures = false, fork = true;
  std::vector<std::string> backends;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--filter" && i + 1 < argc)
      filter = argv[++i];
    else if (a == "--backend" && i + 1 < argc) {
      std::stringstream list(argv[++i]);
      for (std::string name; std::getline(list, name, ',');)
        if (!name.empty()) backends.push_back(name);
    } else if (a == "--verbose" || a == "-v")
      verbose = true;
    else if (a == "--list-failures")
      listFailures = true;
    else if (a == "--no-fork")
      fork = false;
    else if (a == "--help" || a == "-h") {
      usage();
      return 0;
    } else if (!a.empty() && a[0] != '-' && dataDir.empty())
      dataDir = a;
    else {
      usage();
      return 2;
    }
  }
  if (dataDir.empty()) {
    usage();
    return 2;
  }
  for (const auto& name : backends)
    if (!createBackend(name)) {
      std::string known;
      for (const auto& n : builtinBackendNames()) known += (known.empty() ? "" : ", ") + n;
      std::cerr << "unknown backend '" << name << "' (known backends: " << known << ")\n";
      return 2;
    }
  std::regex filterRe;
  try {
    if (!filter.empty()) filterRe = std::regex(filter);
  } catch (const std::regex_error& e) {
    std::cerr << "bad --filter regex '" << filter << "': " << e.what() << "\n";
    return 2;
  }
  // Build both op registries once, before forking, so that each case's child
  // inherits them instead of building them again (ONNX's takes ~30 ms).
  (void)OpRegistry::instance();
  (void)onnx::OpSchemaRegistry::Schema("Relu", 13, "");

  std::vector<CaseInfo> cases;
  for (const char* sub : {"node", "pytorch-converted", "pytorch-operator", "simple"}) {
    fs::path dir = fs::path(dataDir) / sub;
    if (!fs::is_directory(dir)) continue;
    std::vector<fs::path> dirs;
    for (const auto& e : fs::directory_iterator(dir))
      if (e.is_directory()) dirs.push_back(e.path());
    std::sort(dirs.begin(), dirs.end());
    for (const auto& d : dirs) {
      CaseInfo info;
      info.id = std::string(sub) + "/" + d.filename().string();
      info.dir = d;
      if (!filter.empty() && !std::regex_search(info.id, filterRe)) continue;
      cases.push_back(std::move(info));
    }
  }
  if (cases.empty()) {
    std::cerr << "no test cases under " << dataDir
              << " (expected node/, pytorch-converted/, pytorch-operator/, simple/)\n";
    return 2;
  }

  // Each case's group: the op of a single-op case, else "(multi-op)".
  for (auto& info : cases) {
    try {
      onnx::ModelProto m = loadModelProto(info.dir / "model.onnx");
      std::set<std::string> ops;
      for (const auto& n : m.graph().node()) {
        if (!ops.insert(opLabel(n)).second) continue;
        info.ops.push_back(opLabel(n));
        if (!isOnnxDefaultDomain(n.domain()) || !isImportableOp(n.op_type()))
          info.missingOps.push_back(opLabel(n));
      }
      info.float32 = isFloat32Case(m);
    } catch (const std::exception&) {
    }
    // Constant nodes only feed the op under test: they do not make a case multi-op.
    std::vector<std::string> tested;
    for (const auto& op : info.ops)
      if (op != "Constant") tested.push_back(op);
    if (tested.empty()) tested = info.ops;
    info.group = tested.size() == 1 ? tested[0] : tested.empty() ? "(no ops)" : "(multi-op)";
  }

  if (backends.empty()) backends.push_back("");  // the reference executor
  bool anyFailed = false;
  for (const auto& backendName : backends) {
    gBackend = backendName;
    gTolerance = reducedPrecisionTolerance(gBackend).value_or(kOnnxTolerance);
    if (!gBackend.empty()) std::cout << "== backend " << gBackend << " ==\n";
    if (gTolerance.rtol != kOnnxTolerance.rtol || gTolerance.atol != kOnnxTolerance.atol)
      std::cout << "checked at the precision it declares: rtol " << gTolerance.rtol << ", atol "
                << gTolerance.atol << "\n";
    struct Counts {
      int pass = 0, fail = 0, skip = 0;
    };
    std::vector<std::pair<std::string, std::string>> refusals;  // case, "Op: reason"
    std::vector<std::pair<std::string, std::string>> knownBugSkips;
    std::map<std::string, Counts> byGroup;
    std::map<std::string, int> skipReasons;
    std::vector<std::pair<std::string, std::string>> failures;
    std::map<std::string, std::vector<std::string>> multiOpFailures;
    // Cases skipped because an op is not in the op set, by op (a case
    // missing several ops counts under each), float32 cases and others.
    std::map<std::string, int> missingFloat32, missingOther;
    int missingFloat32Cases = 0, missingOtherCases = 0;
    Counts total;

    for (auto& info : cases) {
      CaseResult r;
      if (const char* bug = knownBug(gBackend, info.id)) {
        r.status = Status::Skip;
        r.message = std::string("known bug: ") + bug;
        knownBugSkips.push_back({info.id, bug});
      } else {
        r = fork ? runCaseIsolated(info) : runCaseCaught(info);
      }
      for (const auto& f : r.refusals) refusals.push_back({info.id, f});
      Counts& c = byGroup[info.group];
      switch (r.status) {
        case Status::Pass:
          ++c.pass;
          ++total.pass;
          if (verbose) std::cout << "PASS " << info.id;
          break;
        case Status::Skip:
          ++c.skip;
          ++total.skip;
          ++skipReasons[reasonKey(r.message)];
          if (r.message.rfind("unsupported op ", 0) == 0 && !info.missingOps.empty()) {
            ++(info.float32 ? missingFloat32Cases : missingOtherCases);
            for (const auto& op : info.missingOps) ++(info.float32 ? missingFloat32 : missingOther)[op];
          }
          if (verbose) std::cout << "SKIP " << info.id << ": " << r.message;
          break;
        case Status::Fail:
          ++c.fail;
          ++total.fail;
          failures.push_back({info.id, r.message});
          if (info.group == "(multi-op)") {
            std::string ops;
            for (const auto& op : info.ops) ops += (ops.empty() ? "" : " ") + op;
            multiOpFailures[info.id].push_back(ops);
          }
          std::cout << "FAIL " << info.id << ": " << r.message;
          break;
      }
      if (verbose || r.status == Status::Fail) {
        if (verbose || r.seconds > kSlowCaseSeconds) std::cout << " [" << r.seconds << " s]";
        if (r.seconds > kSlowCaseSeconds) std::cout << " (slow)";
        std::cout << "\n";
      }
      std::cout.flush();
    }

    std::cout << "\n" << std::left;
    std::cout << "op                              pass  fail  skip\n";
    for (const auto& [group, c] : byGroup) {
      std::string name = group.size() > 30 ? group.substr(0, 30) : group;
      std::cout << name << std::string(32 - name.size(), ' ');
      auto col = [](int v) {
        std::string s = std::to_string(v);
        return s + std::string(s.size() < 6 ? 6 - s.size() : 1, ' ');
      };
      std::cout << col(c.pass) << col(c.fail) << col(c.skip) << "\n";
    }
    if (!multiOpFailures.empty()) {
      std::cout << "\nfailed multi-op cases (their ops):\n";
      for (const auto& [id, ops] : multiOpFailures)
        std::cout << "  " << id << ": " << ops[0] << "\n";
    }
    if (!skipReasons.empty()) {
      std::vector<std::pair<int, std::string>> sorted;
      for (const auto& [reason, n] : skipReasons) sorted.push_back({-n, reason});
      std::sort(sorted.begin(), sorted.end());
      std::cout << "\nskip reasons (" << sorted.size() << " distinct):\n";
      const size_t shown = verbose ? sorted.size() : std::min<size_t>(sorted.size(), 25);
      for (size_t i = 0; i < shown; ++i)
        std::cout << "  " << -sorted[i].first << "  " << sorted[i].second << "\n";
      if (shown < sorted.size()) std::cout << "  ... " << sorted.size() - shown << " more\n";
    }
    if (listFailures && !failures.empty()) {
      std::cout << "\nfailures:\n";
      for (const auto& [id, msg] : failures) std::cout << "  " << id << ": " << msg << "\n";
    }
    if (!refusals.empty()) {
      std::cout << "\nrefused by " << gBackend << " (" << refusals.size()
                << " nodes; not failures):\n";
      for (const auto& [id, why] : refusals)
        std::cout << "  " << id << ": refused: " << why << "\n";
    }
    if (!knownBugSkips.empty()) {
      std::cout << "\nknown " << gBackend << " bugs (cases skipped):\n";
      for (const auto& [id, bug] : knownBugSkips) std::cout << "  " << id << ": " << bug << "\n";
    }
    auto listMissing = [](const char* what, int cases, const std::map<std::string, int>& ops) {
      if (ops.empty()) return;
      std::cout << "\nskipped for a missing op, " << what << " (" << cases << " cases):\n ";
      for (const auto& [op, n] : ops) std::cout << " " << op << " (" << n << ")";
      std::cout << "\n";
    };
    listMissing("float32", missingFloat32Cases, missingFloat32);
    listMissing("other element types", missingOtherCases, missingOther);
    std::cout << "\n";
    std::cout << total.pass << " passed, " << total.fail << " failed, " << total.skip
              << " skipped (missing op: " << missingFloat32Cases << " float32, "
              << missingOtherCases << " other)\n";
    if (total.fail > 0) anyFailed = true;
  }
  return anyFailed ? 1 : 0;
}
