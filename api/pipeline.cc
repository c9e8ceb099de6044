// The public pipeline API over core/pipeline/pipeline_job.h: the steps
// `collage pipeline --measure in-process` and `collage run --pipeline
// --verify` take (app/cli_pipeline.cc), without the printing.
#include "collage/pipeline.h"

#include <algorithm>

#include "api/api_internal.h"
#include "backends/backend_list.h"
#include "core/pipeline/microbatch_schedule.h"
#include "core/pipeline/pipeline_file.h"
#include "core/pipeline/pipeline_job.h"
#include "core/pipeline/pipeline_runtime.h"
#include "core/pipeline/profiled_stage_cost.h"
#include "core/runtime/session.h"

namespace collage::api {

struct Pipeline::Impl {
  collage::PipelineFile file;
};

namespace {

collage::StageBackendsFactory backendsNamed(const std::string& name) {
  return [name] {
    auto set = std::make_shared<BackendSet>(loadBackendSet({name}));
    return collage::BackendLookup([set](const std::string& n) { return set->find(n); });
  };
}

}  // namespace

Pipeline::Pipeline(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

Pipeline Pipeline::load(const std::string& path) {
  return translateErrors([&] {
    auto impl = std::make_shared<Impl>();
    impl->file = collage::loadPipelineFile(path);
    return Pipeline(std::move(impl));
  });
}

void Pipeline::save(const std::string& path) const {
  translateErrors([&] { collage::savePipelineFile(impl_->file, path); });
}

std::string Pipeline::toJson() const {
  return translateErrors([&] { return collage::pipelineToJson(impl_->file); });
}

std::vector<PipelineStage> Pipeline::stages() const {
  std::vector<PipelineStage> out;
  for (const auto& s : impl_->file.stages)
    out.push_back({s.devices, s.nodes, s.inFlight, s.secondsPerMicroBatch});
  return out;
}

std::vector<std::pair<int, int>> Pipeline::edges() const { return impl_->file.edges; }
int Pipeline::batch() const { return impl_->file.batch; }
int Pipeline::microBatch() const { return impl_->file.microBatch; }
std::string Pipeline::modelPath() const { return impl_->file.modelPath; }
std::map<std::string, int> Pipeline::pins() const { return impl_->file.pins; }

double Pipeline::predictedSamplesPerSecond() const {
  const double s = impl_->file.bottleneckSecondsPerSample;
  return s > 0 ? 1 / s : 0;
}

std::string Pipeline::summary() const {
  std::string out = std::to_string(impl_->file.stages.size()) + " stage(s), micro-batch " +
                    std::to_string(impl_->file.microBatch) + ":";
  for (const auto& s : impl_->file.stages) {
    std::string devices;
    for (const auto& d : s.devices) devices += (devices.empty() ? "" : "+") + d;
    out += " " + devices + " " + std::to_string(s.nodes.size()) + " node(s);";
  }
  out.pop_back();
  return out;
}

Pipeline planPipeline(const std::string& model, const PipelineOptions& options) {
  return translateErrors([&] {
    if (options.strategy != "gpp" && options.strategy != "spp")
      throw api::Error("--strategy " + options.strategy + ": expected gpp or spp");
    if (options.runs < 1)
      throw api::Error("--runs " + std::to_string(options.runs) + ": expected a positive number");
    const collage::Topology topology = options.topology.empty()
                                           ? collage::topologyFromDevices(options.devices, nullptr)
                                           : collage::loadTopologyFile(options.topology);
    collage::assignCores(topology);  // a device this machine lacks is refused now
    const std::vector<int> sizes = collage::microBatchSizes(options.microBatches, options.batch);
    const std::vector<int> shares = collage::profiledShares(sizes, topology, 0);
    const collage::ImportOptions import;
    const collage::Graph graph = collage::loadAtMicroBatch(model, import, sizes.front(), true);
    std::vector<std::string> pinSpecs;
    for (const auto& [node, stage] : options.pins)
      pinSpecs.push_back(node + "=" + std::to_string(stage));
    const std::map<std::string, int> pinNames = collage::parsePins(
        pinSpecs, graph, static_cast<int>(topology.devices().size()));
    collage::ProfiledStageCost cost(graph);
    const collage::BackendLookup backends = backendsNamed(options.backend)();
    int threads = 1;
    for (const collage::PipeDevice& d : topology.devices())
      threads = d.kind == collage::DeviceKind::Cpu ? d.cores : threads;
    for (int share : shares) {
      const collage::Graph at = collage::loadAtMicroBatch(model, import, share, true);
      cost.add(share, collage::profileNodes(at, options.backend, backends, threads, options.runs));
    }
    const collage::PipeGraph pipe = collage::pipeGraphOf(graph, sizes.front());
    collage::PartitionOptions po;
    po.batch = options.batch;
    po.microBatches = sizes;
    po.pins = collage::pinsByName(pipe, pinNames);
    const collage::PipelineCandidates candidates =
        collage::partitionBoth(pipe, topology, cost, po);
    const collage::StageGraph& chosen = options.strategy == "spp" ? candidates.spp : candidates.gpp;
    const collage::MicroBatchSchedule schedule =
        collage::scheduleMicroBatches(chosen, topology, pipe);
    const collage::Graph atMicroBatch =
        collage::loadAtMicroBatch(model, import, chosen.microBatch, true);
    auto impl = std::make_shared<Pipeline::Impl>();
    impl->file =
        collage::pipelineFileOf(chosen, &schedule, atMicroBatch, topology, model, options.batch);
    impl->file.pins = pinNames;
    return Pipeline(std::move(impl));
  });
}

PipelineRun runPipeline(const std::string& model, const Pipeline& pipeline,
                        const PipelineRunOptions& options) {
  return translateErrors([&] {
    const collage::PipelineFile& file = pipeline.impl().file;
    const collage::PipelineRunInputs run =
        collage::preparePipelineRun(file, model, {}, options.batch, options.seed, true);
    const collage::StageBackendsFactory backends = backendsNamed(options.backend);
    collage::PipelineRuntimeOptions ro;
    ro.backend = options.backend;
    ro.inFlight = run.inFlight;
    collage::PipelineRuntime runtime(run.graph, run.stages, file.topology, backends, ro);
    collage::PipelineRunReport report;
    const std::vector<std::vector<collage::Tensor>> outputs = runtime.run(run.batches, &report);
    PipelineRun out;
    out.microBatches = report.microBatches;
    out.wallSeconds = report.wallSeconds;
    out.samplesPerSecond = report.samplesPerSecond;
    out.medianLatencyMs = report.medianLatencySeconds * 1e3;
    out.maxLatencyMs = report.maxLatencySeconds * 1e3;
    for (const auto& s : report.stages)
      out.stages.push_back({s.devices, s.busySeconds, s.busyShare, s.microBatches});
    for (const auto& m : collage::memoryPerDevice(report.stages))
      out.memory.push_back({m.device, m.weightBytes, m.activationBytes});
    out.report = report.toString();
    if (options.verify) {
      const collage::BackendLookup lookup = backends();
      const collage::WholeModelComparison c = collage::compareWithWholeModel(
          run, collage::singleNodePlan(run.graph, options.backend), lookup, collage::kFloat32Bound,
          outputs);
      out.verified = true;
      out.outputsMatch = c.ok();
      out.largestError = c.largestError;
      out.mismatches = c.mismatches;
    }
    return out;
  });
}

}  // namespace collage::api
