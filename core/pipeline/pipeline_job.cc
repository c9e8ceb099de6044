#include "core/pipeline/pipeline_job.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <set>

#include "core/ir/error.h"
#include "core/ir/tensor_compare.h"
#include "core/ops/reference_executor.h"
#include "core/pipeline/link_measurement.h"
#include "core/pipeline/plan_choice.h"
#include "core/runtime/session.h"

namespace collage {

Graph loadAtMicroBatch(const std::string& modelPath, ImportOptions options, int microBatch,
                       bool quiet) {
  for (const DeclaredInput& d : readDeclaredInputs(modelPath)) {
    if (!d.rankKnown || d.dims.empty()) continue;
    Shape shape = d.dims;
    auto bound = options.inputShapes.find(d.name);
    if (bound != options.inputShapes.end()) shape = bound->second;
    if (d.dims[0] >= 0 && d.dims[0] != microBatch)
      throw Error(modelPath + ": input '" + d.name + "' has a static batch of " +
                  std::to_string(d.dims[0]) + "; the micro-batch must be " +
                  std::to_string(d.dims[0]));
    shape[0] = microBatch;
    for (int64_t& dim : shape)
      if (dim < 0) dim = 1;
    if (d.isDynamic()) options.inputShapes[d.name] = shape;
  }
  std::vector<std::string> notes;
  if (!quiet) options.notes = &notes;
  return importOnnx(modelPath, options);
}

Topology topologyFromDevices(const std::string& spec, MeasurementDb* db) {
  const std::string prefix = "cpu:";
  int n = 0;
  if (spec.rfind(prefix, 0) == 0) {
    try {
      n = std::stoi(spec.substr(prefix.size()));
    } catch (const std::exception&) {
      n = 0;
    }
  }
  if (n < 1) throw Error("--devices " + spec + ": expected cpu:N (N one-core devices), e.g. cpu:2");
  std::vector<PipeDevice> devices;
  for (int i = 0; i < n; ++i) devices.push_back({"cpu" + std::to_string(i), DeviceKind::Cpu, 1});
  if (n < 2) return Topology(devices, {}, nullptr, "--devices " + spec);
  const LinkCost unpriced;
  const auto cores = assignCores(Topology(devices, {}, &unpriced, "--devices " + spec));
  bool measured = false;
  const LinkRecord record =
      inProcessLink(db, cores.at("cpu0").front(), cores.at("cpu1").front(), &measured);
  const LinkCost link = linkCostOf(record);
  std::fprintf(stderr, "link between the cpu devices (%s, %s): %.3g B/s, %.3g s latency\n",
               record.key.endpoints.c_str(),
               measured ? (db ? "measured now and stored" : "measured now")
                        : ("measured " + record.measuredAt).c_str(),
               link.bandwidthBytesPerS, link.latencyS);
  return Topology(devices, {}, &link, "--devices " + spec);
}

std::vector<int> microBatchSizes(std::vector<int> sizes, int batch) {
  if (batch < 1) throw Error("--batch " + std::to_string(batch) + ": expected a positive number");
  if (sizes.empty())
    for (int b = 1; b <= std::min(8, batch); b *= 2)
      if (batch % b == 0) sizes.push_back(b);
  for (int b : sizes)
    if (b < 1 || batch % b != 0)
      throw Error("--micro-batch " + std::to_string(b) + " does not divide --batch " +
                  std::to_string(batch));
  std::sort(sizes.begin(), sizes.end());
  return sizes;
}

std::vector<int> profiledShares(const std::vector<int>& sizes, const Topology& topology,
                                int simulated) {
  std::vector<int> shares;
  for (int b : sizes)
    for (const auto kind : topology.kinds())
      for (int d = 1; d <= std::max(topology.count(kind), kind == DeviceKind::Cpu ? simulated : 0);
           ++d)
        if (b % d == 0) shares.push_back(b / d);
  std::sort(shares.begin(), shares.end());
  shares.erase(std::unique(shares.begin(), shares.end()), shares.end());
  return shares;
}

std::map<std::string, int> parsePins(const std::vector<std::string>& pins, const Graph& graph,
                                     int devices) {
  std::map<std::string, int> out;
  for (const std::string& pin : pins) {
    const size_t eq = pin.rfind('=');
    int stage = -1;
    if (eq != std::string::npos && eq > 0 && eq + 1 < pin.size()) {
      const std::string digits = pin.substr(eq + 1);
      if (digits.find_first_not_of("0123456789") == std::string::npos && digits.size() < 9)
        stage = std::stoi(digits);
    }
    if (stage < 0) throw Error("--pin " + pin + ": expected NODE=STAGE, e.g. --pin conv1=1");
    const std::string node = pin.substr(0, eq);
    if (!graph.findNode(node))
      throw Error("--pin " + pin + ": the model has no node named '" + node + "'");
    if (stage >= devices)
      throw Error("--pin " + pin + ": stage " + std::to_string(stage) + " cannot be: " +
                  std::to_string(devices) + " device(s) give at most " + std::to_string(devices) +
                  " stage(s), 0.." + std::to_string(devices - 1));
    if (out.count(node) && out[node] != stage)
      throw Error("--pin " + pin + ": '" + node + "' is pinned to stage " +
                  std::to_string(out[node]) + " already");
    out[node] = stage;
  }
  return out;
}

double weightBytesOf(const Graph& graph, const std::vector<int>& nodes) {
  std::set<ValueId> seen;
  double bytes = 0;
  for (int n : nodes)
    for (ValueId v : graph.node(n).inputs)
      if (v != kNoValue && graph.value(v).isConstant() && seen.insert(v).second)
        bytes += static_cast<double>(graph.value(v).type.byteSize());
  return bytes;
}

PipelineCandidates partitionBoth(const PipeGraph& pipe, const Topology& topology,
                                 const StageCostModel& cost, const PartitionOptions& options) {
  PipelineCandidates out;
  const auto t0 = std::chrono::steady_clock::now();
  const StageGraph searched = partitionGraphPipeline(pipe, topology, cost, options);
  const auto t1 = std::chrono::steady_clock::now();
  out.spp = partitionSequentialPipeline(pipe, topology, cost, options);
  const auto t2 = std::chrono::steady_clock::now();
  out.gppSearchSeconds = std::chrono::duration<double>(t1 - t0).count();
  out.sppSearchSeconds = std::chrono::duration<double>(t2 - t1).count();
  out.gpp = graphPipelineOrChain(searched, out.spp, pipe, topology, &out.tookChain);
  return out;
}

std::vector<DeviceMemory> memoryPerDevice(const std::vector<StageRunReport>& stages) {
  std::vector<DeviceMemory> out;
  for (const StageRunReport& s : stages)
    for (const std::string& d : s.devices) {
      auto it = std::find_if(out.begin(), out.end(),
                             [&](const DeviceMemory& m) { return m.device == d; });
      if (it == out.end()) it = out.insert(out.end(), DeviceMemory{d, 0, 0});
      it->weightBytes += s.weightBytes;
      it->activationBytes += s.activationBytes;
    }
  return out;
}

PipelineRunInputs preparePipelineRun(const PipelineFile& file, const std::string& modelPath,
                                     const ImportOptions& import, int batch, uint64_t seed,
                                     bool quiet) {
  checkPipelineModel(file, modelPath);
  if (batch <= 0) batch = file.batch;
  if (batch % file.microBatch != 0)
    throw Error("--batch " + std::to_string(batch) + " is not a multiple of " +
                file.displayName() + "'s micro-batch " + std::to_string(file.microBatch));
  PipelineRunInputs run;
  run.graph = loadAtMicroBatch(modelPath, import, file.microBatch, quiet);
  run.stages = stageGraphOf(file, run.graph);
  for (const auto& s : file.stages) run.inFlight.push_back(s.inFlight);
  for (int m = 0; m < batch / file.microBatch; ++m)
    run.batches.push_back(randomInputs(run.graph, seed + static_cast<uint64_t>(m)));
  return run;
}

WholeModelComparison compareWithWholeModel(const PipelineRunInputs& run, const Plan& plan,
                                           const BackendLookup& backends, double bound,
                                           const std::vector<std::vector<Tensor>>& outputs) {
  const Graph& graph = run.graph;
  Session whole(graph, plan, backends);
  WholeModelComparison out;
  for (size_t m = 0; m < run.batches.size(); ++m) {
    const std::vector<Tensor> expected = whole.run(run.batches[m]);
    for (size_t o = 0; o < expected.size(); ++o) {
      const CompareResult c = compareScaled(outputs.at(m).at(o), expected[o], bound);
      out.largestError = std::max(out.largestError, c.scaledError);
      if (!c.ok)
        out.mismatches.push_back("micro-batch " + std::to_string(m) + ", output '" +
                                 graph.value(graph.outputs()[o]).name + "': " + c.message);
    }
  }
  return out;
}

}  // namespace collage
