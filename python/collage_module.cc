// The `collage` Python module: the public C++ API (include/collage/) with
// NumPy arrays in and out. Inputs are read in place when they are C-contiguous
// (others are made contiguous first); outputs are NumPy arrays over the memory
// the Session wrote, kept alive by a capsule holding its DLPack deleter.
// Every error is a Python exception (collage.Error, a RuntimeError, with the
// message the `collage` command prints), never a crash.
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <optional>
#include <string>
#include <variant>

#include "collage/collage.h"

namespace py = pybind11;
namespace api = collage::api;

namespace {

// A model argument: a path, or a Model already loaded.
using ModelArg = std::variant<std::string, api::Model>;

api::Model modelOf(const ModelArg& arg) {
  if (const auto* path = std::get_if<std::string>(&arg)) return api::Model::load(*path);
  return std::get<api::Model>(arg);
}

DLDataType dlTypeOf(const py::dtype& dtype, const std::string& input) {
  DLDataType t{};
  t.lanes = 1;
  t.bits = static_cast<uint8_t>(dtype.itemsize() * 8);
  switch (dtype.kind()) {
    case 'f':
      t.code = kDLFloat;
      break;
    case 'i':
      t.code = kDLInt;
      break;
    case 'u':
    case 'b':
      t.code = kDLUInt;
      break;  // the library's bool is uint8
    default:
      throw api::Error("input '" + input + "' has NumPy dtype " +
                       dtype.attr("name").cast<std::string>() + ", which no model input can take");
  }
  return t;
}

py::dtype numpyTypeOf(const DLTensor& t, const std::string& elementType) {
  if (elementType == "bool") return py::dtype("bool");
  const char* kind = t.dtype.code == kDLFloat ? "float" : t.dtype.code == kDLInt ? "int" : "uint";
  return py::dtype(kind + std::to_string(t.dtype.bits));
}

// An output as a NumPy array over the Session's memory (no copy).
py::array toNumpy(api::Tensor tensor, const std::string& elementType) {
  DLManagedTensor* managed = tensor.release();
  const DLTensor& dl = managed->dl_tensor;
  py::capsule owner(managed, [](void* p) {
    auto* m = static_cast<DLManagedTensor*>(p);
    if (m->deleter) m->deleter(m);
  });
  std::vector<py::ssize_t> shape(dl.shape, dl.shape + dl.ndim);
  return py::array(numpyTypeOf(dl, elementType), shape, {},
                   static_cast<char*>(dl.data) + dl.byte_offset, owner);
}

// A Python list of f(item) for every item of a C++ range.
template <class Range, class F>
py::list listOf(const Range& items, F f) {
  py::list l;
  for (const auto& item : items) l.append(f(item));
  return l;
}

py::dict tensorInfo(const api::TensorInfo& t) {
  py::dict d;
  d["name"] = t.name;
  d["dtype"] = t.elementType;
  d["shape"] = py::tuple(py::cast(t.shape));
  return d;
}

py::dict inspect(const std::string& path,
                 const std::map<std::string, std::vector<int64_t>>& inputShapes) {
  api::Model model = api::Model::load(path, inputShapes);
  py::dict d;
  d["path"] = model.path();
  py::list inputs, outputs;
  for (const auto& t : model.inputs()) inputs.append(tensorInfo(t));
  for (const auto& t : model.outputs()) outputs.append(tensorInfo(t));
  d["inputs"] = inputs;
  d["outputs"] = outputs;
  d["nodes"] = model.numNodes();
  d["summary"] = model.summary();
  d["notes"] = model.importNotes();
  return d;
}

class PySession {
 public:
  PySession(const ModelArg& model, const std::optional<std::variant<std::string, api::Plan>>& plan,
            int threads, const std::vector<std::string>& backends, bool acceptStalePlan,
            bool profile)
      : session_(
            open(model, plan, api::SessionOptions{threads, backends, acceptStalePlan, profile})) {}

  py::dict run(const py::dict& inputs, const std::vector<std::string>& outputs) {
    std::vector<py::array> arrays;  // alive (and contiguous) while the Session reads them
    std::vector<std::vector<int64_t>> shapes;
    std::map<std::string, DLTensor> views;
    arrays.reserve(inputs.size());
    shapes.reserve(inputs.size());
    for (const auto& [key, value] : inputs) {
      const std::string name = py::str(key);
      py::array array = py::array::ensure(value, py::array::c_style);
      if (!array)
        throw py::type_error("input '" + name +
                             "' is not an array (give a NumPy array or a "
                             "sequence NumPy can convert)");
      arrays.push_back(array);
      shapes.emplace_back(array.shape(), array.shape() + array.ndim());
      DLTensor t{};
      t.data = const_cast<void*>(array.data());  // only read (a read-only array is fine)
      t.device = {kDLCPU, 0};
      t.ndim = static_cast<int32_t>(array.ndim());
      t.dtype = dlTypeOf(array.dtype(), name);
      t.shape = shapes.back().data();
      t.strides = nullptr;  // C-contiguous
      views[name] = t;
    }
    std::map<std::string, api::Tensor> results;
    {
      py::gil_scoped_release unlocked;
      results = session_.run(views, outputs);
    }
    py::dict out;
    for (auto& [name, tensor] : results) {
      std::string elementType;
      for (const auto& t : session_.model().outputs())
        if (t.name == name) elementType = t.elementType;
      out[py::str(name)] = toNumpy(std::move(tensor), elementType);
    }
    return out;
  }

  api::Session& session() { return session_; }

 private:
  static api::Session open(const ModelArg& modelArg,
                           const std::optional<std::variant<std::string, api::Plan>>& plan,
                           const api::SessionOptions& options) {
    api::Model model = modelOf(modelArg);
    if (!plan) return api::Session(model, api::Plan::fromAnnotatedOnnx(model.path()), options);
    if (const auto* path = std::get_if<std::string>(&*plan))
      return api::Session(model, api::Plan::load(*path), options);
    return api::Session(model, std::get<api::Plan>(*plan), options);
  }
  api::Session session_;
};

api::Plan optimize(const ModelArg& modelArg, const std::vector<std::string>& backends,
                   const std::optional<std::string>& db, double timeout,
                   const std::optional<py::function>& progress,
                   const std::optional<std::string>& output, bool graphLevel, double budget,
                   const std::vector<std::string>& allowPrecision) {
  api::Model model = modelOf(modelArg);
  api::OptimizeOptions options;
  options.backends = backends;
  options.allowPrecisions = allowPrecision;
  options.useDb = !db || !db->empty();  // db="" measures everything and stores nothing
  if (db) options.dbPath = *db;
  options.timeoutSeconds = timeout;
  options.graphLevel = graphLevel;
  options.graphLevelBudgetSeconds = budget;
  if (progress) {
    py::function callback = *progress;
    options.progress = [callback](const api::OptimizeProgress& p) {
      py::gil_scoped_acquire locked;
      py::dict d;
      d["stage"] = p.stage;
      d["done"] = p.done;
      d["total"] = p.total;
      d["measured"] = p.measured;
      d["elapsed_s"] = p.elapsedSeconds;
      d["current"] = p.current;
      py::object answer = callback(d);
      return answer.is_none() || answer.cast<bool>();  // False stops
    };
  }
  std::optional<api::Plan> plan;
  {
    py::gil_scoped_release unlocked;
    plan = api::optimize(model, options);
  }
  if (output) plan->save(*output);
  return *plan;
}

py::dict stageDict(const api::PipelineStage& s) {
  py::dict d;
  d["devices"] = s.devices;
  d["nodes"] = s.nodes;
  d["in_flight"] = s.inFlight;
  d["seconds_per_micro_batch"] = s.secondsPerMicroBatch;
  return d;
}

py::dict runDict(const api::PipelineRun& r) {
  py::dict d;
  d["micro_batches"] = r.microBatches;
  d["wall_seconds"] = r.wallSeconds;
  d["samples_per_second"] = r.samplesPerSecond;
  d["median_latency_ms"] = r.medianLatencyMs;
  d["max_latency_ms"] = r.maxLatencyMs;
  py::list stages;
  for (const auto& s : r.stages) {
    py::dict st;
    st["devices"] = s.devices;
    st["busy_seconds"] = s.busySeconds;
    st["busy_share"] = s.busyShare;
    st["micro_batches"] = s.microBatches;
    stages.append(st);
  }
  d["stages"] = stages;
  py::dict memory;  // device -> {"weight_bytes", "activation_bytes"}, in the stages' order
  for (const auto& m : r.memory) {
    py::dict e;
    e["weight_bytes"] = m.weightBytes;
    e["activation_bytes"] = m.activationBytes;
    memory[py::str(m.device)] = e;
  }
  d["memory"] = memory;
  if (r.verified) {
    d["outputs_match"] = r.outputsMatch;
    d["largest_error"] = r.largestError;
    d["mismatches"] = r.mismatches;
  } else {
    d["outputs_match"] = py::none();
  }
  d["report"] = r.report;
  return d;
}

py::dict groupDict(const api::PlanGroup& g) {
  py::dict d;
  d["backend"] = g.backend;
  d["nodes"] = g.nodes;
  d["pattern"] = g.pattern;
  d["origin"] = g.origin;
  d["cost_ms"] = g.costMs;
  return d;
}

}  // namespace

PYBIND11_MODULE(collage, m) {
  m.doc() =
      "Collage Studio: run and optimise placements of ONNX models on backends "
      "(docs/api-python.md)";
  m.attr("__version__") = COLLAGE_VERSION_STRING;
  py::register_exception<api::Error>(m, "Error", PyExc_RuntimeError);

  m.def("inspect", &inspect, py::arg("model"),
        py::arg("input_shapes") = std::map<std::string, std::vector<int64_t>>{},
        "A model's inputs, outputs, node count and the summary `collage inspect` prints.");

  py::class_<api::Model>(m, "Model")
      .def(py::init([](const std::string& path,
                       const std::map<std::string, std::vector<int64_t>>& inputShapes) {
             return api::Model::load(path, inputShapes);
           }),
           py::arg("path"), py::arg("input_shapes") = std::map<std::string, std::vector<int64_t>>{})
      .def_property_readonly("path", &api::Model::path)
      .def_property_readonly("inputs",
                             [](const api::Model& mdl) {
                               return listOf(mdl.inputs(), tensorInfo);
                             })
      .def_property_readonly("outputs",
                             [](const api::Model& mdl) {
                               return listOf(mdl.outputs(), tensorInfo);
                             })
      .def_property_readonly("nodes", &api::Model::numNodes)
      .def_property_readonly("notes", &api::Model::importNotes)
      .def("__str__", &api::Model::summary)
      .def("__repr__",
           [](const api::Model& mdl) { return "<collage.Model '" + mdl.path() + "'>"; });

  py::class_<api::Plan>(m, "Plan")
      .def_static("load", &api::Plan::load, py::arg("path"), "A plan file (JSON).")
      .def_static("from_annotated_onnx", &api::Plan::fromAnnotatedOnnx, py::arg("path"))
      .def_static(
          "single_backend",
          [](const ModelArg& model, const std::string& backend) {
            return api::Plan::singleBackend(modelOf(model), backend);
          },
          py::arg("model"), py::arg("backend"),
          "Every node in a group of its own on one backend (costs unknown).")
      .def("save", &api::Plan::save, py::arg("path"))
      .def("to_json", &api::Plan::toJson)
      .def_property_readonly("groups",
                             [](const api::Plan& p) { return listOf(p.groups(), groupDict); })
      .def_property_readonly("predicted_ms", &api::Plan::predictedMs)
      .def_property_readonly("model_sha256", &api::Plan::modelSha256)
      .def_property_readonly("created_by", &api::Plan::createdBy)
      .def("__str__", &api::Plan::summary)
      .def("__repr__", [](const api::Plan& p) { return "<collage.Plan " + p.summary() + ">"; });

  py::class_<PySession>(m, "Session")
      .def(py::init<const ModelArg&, const std::optional<std::variant<std::string, api::Plan>>&,
                    int, const std::vector<std::string>&, bool, bool>(),
           py::arg("model"), py::arg("plan") = py::none(), py::kw_only(), py::arg("threads") = 0,
           py::arg("backends") = std::vector<std::string>{}, py::arg("accept_stale_plan") = false,
           py::arg("profile") = true,
           "plan: a plan file, a Plan, or None for the plan written into an annotated model.")
      .def("run", &PySession::run, py::arg("inputs"),
           py::arg("outputs") = std::vector<std::string>{},
           "Runs once: {input name: array} -> {output name: array}.")
      .def_property_readonly("latency_ms", [](PySession& s) { return s.session().lastLatencyMs(); })
      .def_property_readonly("peak_bytes", [](PySession& s) { return s.session().peakBytes(); })
      .def_property_readonly("placement",
                             [](PySession& s) {
                               py::list l;
                               for (const auto& b : s.session().placement()) {
                                 py::dict d;
                                 d["backend"] = b.backend;
                                 d["groups"] = b.groups;
                                 d["nodes"] = b.nodes;
                                 d["ms"] = b.ms;
                                 d["share"] = b.share;
                                 l.append(d);
                               }
                               return l;
                             })
      .def_property_readonly("backends", [](PySession& s) { return s.session().backends(); })
      .def_property_readonly("warnings", [](PySession& s) { return s.session().warnings(); })
      .def_property_readonly("plan", [](PySession& s) { return s.session().plan(); })
      .def_property_readonly("model", [](PySession& s) { return s.session().model(); });

  // The runtime's decode loop (docs/decoding.md): ids in, ids out; text
  // with the model's tokenizer (encode, decode).
  py::class_<api::Generator>(m, "Generator")
      .def(py::init([](const std::string& model, int64_t maxLength, const std::string& plan,
                       const std::string& prefillPlan, int threads) {
             api::SessionOptions options;
             options.threads = threads;
             api::Generator g(model, maxLength, plan, options);
             if (!prefillPlan.empty()) g.setPrefillPlan(prefillPlan);
             return g;
           }),
           py::arg("model"), py::arg("max_length"), py::arg("plan") = "", py::kw_only(),
           py::arg("prefill_plan") = "", py::arg("threads") = 0,
           "A decoder with past/present KV tensors; max_length: the cache's rows; plan: a plan "
           "for the step graph (see step_bindings), or '' for the reference executor; "
           "prefill_plan: a plan for the prompt's one pass (see prefill_bindings), as "
           "`collage generate --prefill-plan`.")
      .def(
          "generate",
          [](api::Generator& g, const std::vector<int64_t>& prompt, int64_t maxNewTokens,
             int64_t eos, double temperature, int64_t topK, uint64_t seed) {
            api::GenerateOptions o;
            o.maxNewTokens = maxNewTokens;
            o.eos = eos;
            o.temperature = temperature;
            o.topK = topK;
            o.seed = seed;
            api::Generation r;
            {
              py::gil_scoped_release unlocked;
              r = g.generate(prompt, o);
            }
            py::dict d;
            d["tokens"] = r.tokens;
            d["stop"] = r.stop;
            d["prefill_ms"] = r.prefillMs;
            d["step_ms"] = r.stepMs;
            d["prefill"] = r.prefill;
            return d;
          },
          py::arg("prompt"), py::kw_only(), py::arg("max_new_tokens") = 16, py::arg("eos") = -1,
          py::arg("temperature") = 0.0, py::arg("top_k") = 0, py::arg("seed") = 0,
          "Prefill, then one step per new id: {'tokens', 'stop', 'prefill_ms', 'step_ms', "
          "'prefill'} ('prefill': how the prompt ran).")
      .def_property_readonly("max_length", &api::Generator::maxLength)
      .def_property_readonly("vocabulary", &api::Generator::vocabulary)
      .def_property_readonly("step_bindings", &api::Generator::stepBindings)
      .def_property_readonly("step_model", &api::Generator::stepModel,
                             "The step graph as a Model (a merged decoder's: its branch with the "
                             "past inlined): what a plan for the steps is made for.")
      .def("prefill_model", &api::Generator::prefillModel, py::arg("prompt_length"),
           "The prompt's one-pass graph for this length as a Model (a merged decoder's: its "
           "no-cache branch inlined): what a prefill_plan is made for.")
      .def("prefill_bindings", &api::Generator::prefillBindings, py::arg("prompt_length"),
           "The --input-shape bindings of the prompt's one-pass graph for this length: what a "
           "prefill_plan is made with.")
      .def("set_tokenizer", &api::Generator::setTokenizer, py::arg("path"),
           "Text in and out with this tokenizer.json or SentencePiece model (default: the one "
           "beside the model).")
      .def("encode", &api::Generator::encode, py::arg("text"),
           "The text's ids, with the model's tokenizer.")
      .def("decode", &api::Generator::decode, py::arg("ids"),
           "The ids' text, with the model's tokenizer.")
      .def_property_readonly("tokenizer", &api::Generator::tokenizerPath,
                             "The tokenizer's file, or '' when there is none.");

  m.def("optimize", &optimize, py::arg("model"), py::kw_only(),
        py::arg("backends") = std::vector<std::string>{}, py::arg("db") = py::none(),
        py::arg("timeout") = 60.0, py::arg("progress") = py::none(), py::arg("output") = py::none(),
        py::arg("graph_level") = true, py::arg("budget") = 300.0,
        py::arg("allow_precision") = std::vector<std::string>{},
        "Measures and places the model as `collage optimize` does; returns the Plan (and writes "
        "it to `output` when given). The graph-level search runs after the op-level plan for at "
        "most `budget` seconds; graph_level=False stops at the op-level plan. progress(dict) is "
        "called as work advances (stage 'measure', 'search' or 'graph-level'); returning False "
        "stops (collage.Error 'cancelled'). allow_precision=['bf16'] lets the plan use reduced-"
        "precision backends (onednn_bf16) where measured faster, as --allow-precision does.");

  // A graph pipeline (docs/pipeline.md): planned as `collage pipeline
  // --measure in-process` plans it, run as `collage run --pipeline --verify`.
  py::class_<api::Pipeline>(m, "Pipeline")
      .def_static("load", &api::Pipeline::load, py::arg("path"), "A pipeline file (JSON).")
      .def("save", &api::Pipeline::save, py::arg("path"))
      .def("to_json", &api::Pipeline::toJson)
      .def_property_readonly("stages",
                             [](const api::Pipeline& p) { return listOf(p.stages(), stageDict); })
      .def_property_readonly("edges", &api::Pipeline::edges)
      .def_property_readonly("batch", &api::Pipeline::batch)
      .def_property_readonly("micro_batch", &api::Pipeline::microBatch)
      .def_property_readonly("model_path", &api::Pipeline::modelPath)
      .def_property_readonly("pins", &api::Pipeline::pins)
      .def_property_readonly("predicted_samples_per_second",
                             &api::Pipeline::predictedSamplesPerSecond)
      .def("__eq__", [](const api::Pipeline& a, const api::Pipeline& b) {
        return a.toJson() == b.toJson();
      })
      .def("__str__", &api::Pipeline::summary)
      .def("__repr__",
           [](const api::Pipeline& p) { return "<collage.Pipeline " + p.summary() + ">"; });

  m.def(
      "plan_pipeline",
      [](const std::string& model, const std::string& devices,
         const std::optional<std::string>& topology, int batch,
         const std::vector<int>& microBatches, const std::map<std::string, int>& pins,
         const std::string& strategy, const std::string& backend, int runs,
         const std::optional<std::string>& output) {
        api::PipelineOptions o;
        o.devices = devices;
        o.topology = topology.value_or("");
        o.batch = batch;
        o.microBatches = microBatches;
        o.pins = pins;
        o.strategy = strategy;
        o.backend = backend;
        o.runs = runs;
        std::optional<api::Pipeline> p;
        {
          py::gil_scoped_release unlocked;
          p = api::planPipeline(model, o);
        }
        if (output) p->save(*output);
        return *p;
      },
      py::arg("model"), py::kw_only(), py::arg("devices") = "cpu:2",
      py::arg("topology") = py::none(), py::arg("batch") = 8,
      py::arg("micro_batches") = std::vector<int>{},
      py::arg("pins") = std::map<std::string, int>{}, py::arg("strategy") = "gpp",
      py::arg("backend") = "native", py::arg("runs") = 3, py::arg("output") = py::none(),
      "Plans a graph pipeline of the model's stages over devices ('cpu:N', or a topology "
      "file) as `collage pipeline --measure in-process` does; pins: {node: stage}. Returns the "
      "Pipeline (and writes it to `output` when given).");

  m.def(
      "run_pipeline",
      [](const std::string& model, const std::variant<std::string, api::Pipeline>& pipeline,
         int batch, const std::string& backend, uint64_t seed, bool verify) {
        const api::Pipeline p = std::holds_alternative<std::string>(pipeline)
                                    ? api::Pipeline::load(std::get<std::string>(pipeline))
                                    : std::get<api::Pipeline>(pipeline);
        api::PipelineRunOptions o;
        o.batch = batch;
        o.backend = backend;
        o.seed = seed;
        o.verify = verify;
        api::PipelineRun r;
        {
          py::gil_scoped_release unlocked;
          r = api::runPipeline(model, p, o);
        }
        return runDict(r);
      },
      py::arg("model"), py::arg("pipeline"), py::kw_only(), py::arg("batch") = 0,
      py::arg("backend") = "native", py::arg("seed") = 0, py::arg("verify") = true,
      "Streams `batch` samples (0: the pipeline's) of seeded random inputs through the stages "
      "in this process, as `collage run --pipeline --verify`: {'samples_per_second', "
      "'median_latency_ms', 'max_latency_ms', 'stages': [{'devices', 'busy_share', ...}], "
      "'memory': {device: {'weight_bytes', 'activation_bytes'}}, 'outputs_match', "
      "'largest_error', 'mismatches', 'report'}. pipeline: a Pipeline or its file.");

  m.def(
      "load_tensor",
      [](const std::string& path) { return toNumpy(api::loadTensorProto(path), ""); },
      py::arg("path"), "An ONNX TensorProto file (.pb) as a NumPy array.");
}
