// `collage pipeline model.onnx --devices cpu:2 -o pipeline.json`: plans a
// graph pipeline (core/pipeline/) from node times profiled on one device's
// cores at each micro-batch size, and writes the pipeline file.
// `collage run model.onnx --pipeline pipeline.json` (runPipeline, called by
// cli_run.cc): streams a batch through the stages in this process, or with
// --mpi through one MPI rank per stage, and reports throughput, latency and
// each stage's busy share.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <set>
#include <thread>

#include <unistd.h>

#include "app/cli_common.h"
#include "backends/backend_list.h"
#include "core/ir/error.h"
#include "core/ir/tensor_compare.h"
#include "core/ir/threading.h"
#include "core/measure/measurer.h"
#include "core/ops/reference_executor.h"
#include "core/pipeline/link_measurement.h"
#include "core/pipeline/measured_stage_cost.h"
#include "core/pipeline/microbatch_schedule.h"
#ifdef COLLAGE_HAVE_MPI
#include "core/pipeline/mpi_pipeline_runtime.h"
#endif
#include "core/pipeline/pipe_graph.h"
#include "core/pipeline/pipeline_file.h"
#include "core/pipeline/pipeline_job.h"
#include "core/pipeline/pipeline_runtime.h"
#include "core/pipeline/pipeline_simulator.h"
#include "core/pipeline/plan_choice.h"
#include "core/pipeline/profiled_stage_cost.h"
#include "core/pipeline/stage_partitioner.h"
#include "core/plan/plan.h"

namespace collage::cli {

std::string selfExecutable();  // cli_optimize.cc

namespace {

// The model at `microBatch` (pipeline_job.h), with --input-shape's bindings.
Graph loadAtMicroBatch(const ModelOptions& model, int microBatch, bool quiet) {
  return collage::loadAtMicroBatch(model.modelPath, model.importOptions(), microBatch, quiet);
}

StageBackendsFactory backendsNamed(const std::vector<std::string>& names) {
  return [names] {
    auto set = std::make_shared<BackendSet>(loadBackendSet(names));
    return BackendLookup([set](const std::string& name) { return set->find(name); });
  };
}

// "memory per device: cpu0 weights 1024 B, activations 512 B; cpu1 ...":
// what a run's stages hold on each device (StageRunReport: each stage's on
// every device of it), in the order the stages name the devices.
void printRunMemory(const std::vector<StageRunReport>& stages) {
  std::string line;
  for (const DeviceMemory& d : memoryPerDevice(stages))
    line += (line.empty() ? "" : "; ") + d.device + " weights " +
            std::to_string(static_cast<long long>(d.weightBytes)) + " B, activations " +
            std::to_string(static_cast<long long>(d.activationBytes)) + " B";
  std::printf("memory per device: %s (activations: the Session's peak for one micro-batch + "
              "its inputs in flight)\n",
              line.c_str());
}

// The simulator's options replaying a run's stage costs: each micro-batch's
// compute, the hand-over per micro-batch, the start.
SimulationOptions replaying(const PipelineRunReport& report, SimulationOptions so) {
  for (const auto& s : report.stages) {
    const double mb = s.microBatches > 0 ? static_cast<double>(s.microBatches) : 1;
    so.computeSeconds.push_back(s.busySeconds / mb);
    so.computeSecondsByMicroBatch.push_back(s.microBatchSeconds);
    so.handOverSeconds.push_back(s.handOverSeconds / mb);
    so.startSeconds.push_back(s.startSeconds);
  }
  return so;
}

// The baselines of docs/pipeline.md, run for real on the pipeline file's
// devices:
//  - one-device: the whole model as one stage on one device holding every
//    CPU core of the topology (one Session, all cores as its threads);
//  - data-parallel: one replica of the whole model per CPU device, each a
//    stage pinned to that device's cores, the micro-batches dealt round
//    robin, every replica running at once.
// Returns each micro-batch's outputs in order; prints a run report.
std::vector<std::vector<Tensor>> runBaseline(const Graph& graph, const Topology& topology,
                                             const std::string& baseline,
                                             const StageBackendsFactory& backends,
                                             PipelineRuntimeOptions options, int microBatch,
                                             const std::vector<std::vector<Tensor>>& batches) {
  PipelineStage whole;
  for (int n = 0; n < graph.numNodes(); ++n) whole.nodes.push_back(n);
  options.inFlight.clear();
  std::vector<std::string> ids = topology.idsOf(DeviceKind::Cpu);
  if (ids.empty()) throw Error("--baseline " + baseline + ": the topology has no CPU device");
  std::vector<std::unique_ptr<Topology>> topologies;
  std::vector<StageGraph> replicas;
  if (baseline == "one-device") {
    int cores = 0;
    for (const auto& id : ids) cores += topology.find(id)->cores;
    topologies.push_back(std::make_unique<Topology>(
        std::vector<PipeDevice>{{"all", DeviceKind::Cpu, cores}}, std::vector<PipeLink>{},
        nullptr, "--baseline one-device"));
    ids = {"all"};
  } else if (baseline == "data-parallel") {
    for (size_t r = 0; r < ids.size(); ++r) topologies.push_back(std::make_unique<Topology>(topology));
  } else {
    throw Error("--baseline " + baseline + ": expected one-device or data-parallel");
  }
  std::vector<std::unique_ptr<PipelineRuntime>> runtimes;
  for (size_t r = 0; r < ids.size(); ++r) {
    StageGraph g;
    g.microBatch = microBatch;
    g.stages.push_back(whole);
    g.stages.back().devices = {ids[r]};
    runtimes.push_back(
        std::make_unique<PipelineRuntime>(graph, g, *topologies[r], backends, options));
  }
  const size_t replicaCount = runtimes.size();
  std::vector<std::vector<std::vector<Tensor>>> in(replicaCount), out(replicaCount);
  for (size_t m = 0; m < batches.size(); ++m) in[m % replicaCount].push_back(batches[m]);
  std::vector<PipelineRunReport> reports(replicaCount);
  std::vector<std::string> errors(replicaCount);
  std::vector<double> begins(replicaCount, 0);  // each replica's run(), from t0
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (size_t r = 0; r < replicaCount; ++r)
    threads.emplace_back([&, r] {
      begins[r] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      try {
        if (!in[r].empty()) out[r] = runtimes[r]->run(in[r], &reports[r]);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (size_t r = 0; r < replicaCount; ++r)
    if (!errors[r].empty())
      throw Error("--baseline " + baseline + ": replica " + std::to_string(r) + " on " + ids[r] +
                  ": " + errors[r]);
  double medianLatency = 0, maxLatency = 0;
  for (const auto& rep : reports) {
    medianLatency = std::max(medianLatency, rep.medianLatencySeconds);
    maxLatency = std::max(maxLatency, rep.maxLatencySeconds);
  }
  std::printf(
      "baseline %s: %zu replica(s), %zu micro-batch(es) in %.3f s: %.1f samples/s, latency per "
      "sample median %.3f ms (the slowest replica's), max %.3f ms\n",
      baseline.c_str(), replicaCount, batches.size(), wall,
      wall > 0 ? static_cast<double>(batches.size()) * microBatch / wall : 0, medianLatency * 1e3,
      maxLatency * 1e3);
  for (size_t r = 0; r < replicaCount; ++r)
    if (!reports[r].stages.empty())
      std::printf("  replica %zu [%s] %d thread(s): busy %.1f%% (%.3f s)\n", r, ids[r].c_str(),
                  reports[r].stages[0].threads,
                  wall > 0 ? reports[r].stages[0].busySeconds / wall * 100 : 0,
                  reports[r].stages[0].busySeconds);
  // The simulator given each replica's own costs, as for a pipeline run.
  std::vector<StageGraph> graphs;
  std::vector<SimulationOptions> replayed;
  std::vector<StageRunReport> stageReports;
  for (size_t r = 0; r < replicaCount; ++r) {
    StageGraph g;
    g.microBatch = microBatch;
    g.stages.push_back(whole);
    g.stages.back().devices = {ids[r]};
    graphs.push_back(std::move(g));
    replayed.push_back(replaying(reports[r], {}));
    for (double& start : replayed.back().startSeconds) start += begins[r];  // the wall runs from t0
    stageReports.insert(stageReports.end(), reports[r].stages.begin(), reports[r].stages.end());
  }
  const SimulationReport sim =
      simulateDataParallel(graphs, pipeGraphOf(graph, microBatch), *topologies[0],
                           static_cast<int>(batches.size()), replayed);
  const double measured = wall > 0 ? static_cast<double>(batches.size()) * microBatch / wall : 0;
  std::printf(
      "simulated from this run's costs: %.1f samples/s, latency per sample median %.3f ms "
      "(measured/simulated throughput %.3f)\n",
      sim.samplesPerSecond, sim.medianLatencySeconds * 1e3,
      sim.samplesPerSecond > 0 ? measured / sim.samplesPerSecond : 0);
  printRunMemory(stageReports);
  std::vector<std::vector<Tensor>> outputs(batches.size());
  for (size_t m = 0; m < batches.size(); ++m)
    outputs[m] = std::move(out[m % replicaCount][m / replicaCount]);
  return outputs;
}

// GPP, SPP and data parallel planned and simulated on N one-core devices
// linked like the measured ones (`--simulate`): the projection to machines
// this one is not. Data parallel is N replicas of the whole model, each at
// the best one-device rate (no link, no memory contention: an upper bound).
void project(const PipeGraph& pipe, const Graph& graph, const Topology& measured,
             const StageCostModel& cost, const PartitionOptions& po, const std::vector<int>& counts) {
  const LinkCost link = measured.slowestLinkInto(DeviceKind::Cpu);
  std::vector<int> all;
  for (int n = 0; n < pipe.size(); ++n) all.push_back(n);
  const double modelWeights = weightBytesOf(graph, all);
  double oneDevice = 0;  // samples/s, the best micro-batch
  for (int b : po.microBatches) {
    const double s = cost.stage(all, DeviceKind::Cpu, 1, b).seconds;
    if (s > 0 && std::isfinite(s)) oneDevice = std::max(oneDevice, b / s);
  }
  std::printf("projection (simulated, 64 micro-batches; samples/s in steady state):\n");
  for (int n : counts) {
    std::vector<PipeDevice> devices;
    for (int i = 0; i < n; ++i) devices.push_back({"cpu" + std::to_string(i), DeviceKind::Cpu, 1});
    const Topology topology(devices, {}, &link, "--simulate " + std::to_string(n));
    auto simulateOne = [&](const StageGraph& g, double* weights) {
      std::map<std::string, double> perDevice;
      for (const auto& s : g.stages)
        for (const auto& d : s.devices) perDevice[d] += weightBytesOf(graph, s.nodes);
      *weights = 0;
      for (const auto& [d, w] : perDevice) *weights = std::max(*weights, w);
      return simulateFreshPlan(g, pipe, topology);
    };
    auto t0 = std::chrono::steady_clock::now();
    const StageGraph searched = partitionGraphPipeline(pipe, topology, cost, po);
    const double gppSearch = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    t0 = std::chrono::steady_clock::now();
    const StageGraph spp = partitionSequentialPipeline(pipe, topology, cost, po);
    const double sppSearch = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const StageGraph gpp = graphPipelineOrChain(searched, spp, pipe, topology);
    double gppWeights = 0, sppWeights = 0;
    const SimulationReport g = simulateOne(gpp, &gppWeights);
    const SimulationReport q = simulateOne(spp, &sppWeights);
    std::printf(
        "  %d devices: GPP %.1f (%zu stages, micro-batch %d, search %.3f s, weights %.0f B per "
        "device), SPP %.1f (%zu stages, search %.3f s, weights %.0f B), data parallel %.1f "
        "(weights %.0f B), one device %.1f; GPP/SPP %.2f\n",
        n, g.steadySamplesPerSecond, gpp.stages.size(), gpp.microBatch, gppSearch, gppWeights,
        q.steadySamplesPerSecond, spp.stages.size(), sppSearch, sppWeights, n * oneDevice,
        modelWeights, oneDevice,
        q.steadySamplesPerSecond > 0 ? g.steadySamplesPerSecond / q.steadySamplesPerSecond : 0);
  }
}

// GPP, SPP, data parallel and one device simulated on `topology` from the
// same costs, streaming `samples` as `collage run --pipeline` would (each
// pipeline at its own micro-batch, the baselines at `baselineMicroBatch`,
// the written file's, which `run --baseline` uses): the prediction each
// measured run is compared with (bench/pipeline_bench.py). Data parallel:
// one replica of the whole model per CPU device; one device: the whole model
// as one stage on every CPU device's cores, priced as the partitioner
// prices a stage on them (its micro-batch split over them).
void simulateStrategies(const PipeGraph& pipe, const Graph& graph, const Topology& topology,
                        const StageCostModel& cost, const StageGraph& gpp, const StageGraph& spp,
                        int baselineMicroBatch, int samples) {
  std::printf("simulated on this topology from these costs, %d sample(s):\n", samples);
  std::vector<int> all;
  for (int n = 0; n < pipe.size(); ++n) all.push_back(n);
  auto line = [&](const char* name, const SimulationReport& r, const StageGraph& g) {
    std::map<std::string, double> weights;
    for (const auto& st : g.stages)
      for (const auto& d : st.devices) weights[d] += weightBytesOf(graph, st.nodes);
    double mostWeights = 0, mostMemory = 0;
    for (const auto& [d, w] : weights) mostWeights = std::max(mostWeights, w);
    for (const auto& d : r.devices) mostMemory = std::max(mostMemory, d.memoryBytes);
    std::printf(
        "  %s: %.1f samples/s (steady %.1f), latency per sample median %.3f ms; per device at "
        "most %.0f B of weights, %.0f B in all\n",
        name, r.samplesPerSecond, r.steadySamplesPerSecond, r.medianLatencySeconds * 1e3,
        mostWeights, mostMemory);
  };
  const std::vector<std::pair<const char*, const StageGraph*>> pipelines = {{"GPP", &gpp},
                                                                             {"SPP", &spp}};
  for (const auto& [name, g] : pipelines) {
    try {
        line(name, simulateFreshPlan(*g, pipe, topology, samples / g->microBatch), *g);
    } catch (const Error& e) {
      std::printf("  %s: not simulated: %s\n", name, e.what());
    }
  }
  const int b = baselineMicroBatch;
  const std::vector<std::string> ids = topology.idsOf(DeviceKind::Cpu);
  if (ids.empty()) return;
  std::vector<StageGraph> replicas;
  for (const std::string& id : ids) {
    StageGraph g;
    g.microBatch = b;
    PipelineStage st;
    st.nodes = all;
    st.devices = {id};
    st.estimate = estimateStage(cost, topology, all, DeviceKind::Cpu, 1, b, 0);
    g.stages.push_back(st);
    replicas.push_back(std::move(g));
  }
  const int count = static_cast<int>(ids.size());
  StageGraph dpGraph;
  for (const auto& r : replicas) dpGraph.stages.push_back(r.stages.front());
  line("data parallel", simulateDataParallel(replicas, pipe, topology, samples / b, {}), dpGraph);
  if (b % count != 0) {
    std::printf("  one device: not simulated (micro-batch %d does not split over %d devices)\n", b,
                count);
    return;
  }
  int cores = 0;
  for (const auto& id : ids) cores += topology.find(id)->cores;
  const Topology one(std::vector<PipeDevice>{{"all", DeviceKind::Cpu, cores}}, {}, nullptr,
                     "one device");
  StageGraph g;
  g.microBatch = b;
  PipelineStage st;
  st.nodes = all;
  st.devices = {"all"};
  const StageEstimate split = estimateStage(cost, topology, all, DeviceKind::Cpu, count, b, 0);
  st.estimate = split;
  st.estimate.activationBytes = split.activationBytes * count;  // every share on one device
  g.stages.push_back(st);
  SimulationOptions so;
  so.microBatches = samples / b;
  line("one device", simulatePipeline(g, pipe, one, so), g);
}

}  // namespace

Action addPipelineCommand(CLI::App& app) {
  struct PipelineOptions : ModelOptions {
    std::string devices = "cpu:2";
    std::string topology;
    int batch = 8;
    std::vector<int> microBatches;
    std::string backend = "native";
    int runs = 3;
    std::string measure = "worker";
    std::string db = MeasurementDb::defaultPath();
    bool noDb = false;
    std::string output = "pipeline.json";
    std::vector<int> simulate;
    int simulateSamples = 0;
    std::string strategy = "gpp";
    std::vector<std::string> pins;
  };
  auto* command = app.add_subcommand(
      "pipeline", "plan a graph pipeline of a model's stages over several devices");
  auto options = std::make_shared<PipelineOptions>();
  options->addTo(*command);
  command->add_option("--devices", options->devices,
                      "cpu:N: N one-core devices (ignored with --topology)");
  command->add_option("--topology", options->topology, "a topology file (docs/pipeline.md)");
  command->add_option("--batch", options->batch, "samples per batch")->check(CLI::PositiveNumber);
  command->add_option(
      "--micro-batch", options->microBatches,
      "micro-batch sizes to consider (default: the powers of two that divide --batch, up to 8)");
  command->add_option("--backend", options->backend,
                      "the backend the nodes are profiled and run on");
  command
      ->add_option(
          "--measure", options->measure,
          "worker: each node's kernel timed alone in the measurement worker, through the database; "
          "in-process: a quick profiled run of the whole model (--runs runs)")
      ->check(CLI::IsMember({"worker", "in-process"}));
  command
      ->add_option("--runs", options->runs,
                   "with --measure in-process: profiled runs per micro-batch size")
      ->check(CLI::PositiveNumber);
  command->add_option("--db", options->db, "the measurement database (default: this machine's)");
  command->add_flag("--no-db", options->noDb, "measure every node and the link, store nothing");
  command->add_option("-o,--output", options->output, "the pipeline file to write");
  command
      ->add_option("--strategy", options->strategy,
                   "the plan written: gpp (a graph of stages) or spp (the chain baseline)")
      ->check(CLI::IsMember({"gpp", "spp"}));
  command->add_option("--pin", options->pins,
                      "NODE=STAGE: NODE must be in stage STAGE (0 is the first); the partitioner "
                      "plans around it (repeatable)");
  command
      ->add_option("--simulate", options->simulate,
                   "also plan and simulate on N one-core devices (like cpu:N, with the measured "
                   "link), e.g. --simulate 8,16,32")
      ->delimiter(',')
      ->check(CLI::Range(1, 4096));
  command
      ->add_option("--simulate-samples", options->simulateSamples,
                   "samples the four strategies' simulation on this topology streams (default: "
                   "--batch); give the run's --batch to compare with its measured figures")
      ->check(CLI::PositiveNumber);
  return [options]() {
    std::unique_ptr<MeasurementDb> db;
    if (!options->noDb) db = std::make_unique<MeasurementDb>(options->db);
    const Topology topology = options->topology.empty()
                                  ? topologyFromDevices(options->devices, db.get())
                                  : loadTopologyFile(options->topology);
    assignCores(topology);  // a device this machine lacks is refused now, not at run time
    const std::vector<int> sizes = microBatchSizes(options->microBatches, options->batch);
    // Profiled shares: a stage on d devices runs micro-batch / d on each.
    int simulated = 0;
    for (int n : options->simulate) simulated = std::max(simulated, n);
    const std::vector<int> shares = profiledShares(sizes, topology, simulated);

    const Graph graph = loadAtMicroBatch(*options, sizes.front(), false);
    // Pins are checked before anything is measured.
    const std::map<std::string, int> pinNames =
        parsePins(options->pins, graph, static_cast<int>(topology.devices().size()));
    ProfiledStageCost cost(graph);
    const BackendLookup backends = backendsNamed({options->backend})();
    int threads = 1;
    for (const PipeDevice& d : topology.devices())
      threads = d.kind == DeviceKind::Cpu ? d.cores : threads;
    for (int share : shares) {
      const Graph at = loadAtMicroBatch(*options, share, true);
      std::fprintf(stderr, "%s %d node(s) at micro-batch %d on %d thread(s)...\n",
                   options->measure == "worker" ? "measuring" : "profiling", at.numNodes(), share,
                   threads);
      if (options->measure == "in-process") {
        cost.add(share, profileNodes(at, options->backend, backends, threads, options->runs));
        continue;
      }
      // The worker, its fingerprint and the database key at one device's
      // thread count: kernels are timed as a stage runs them.
      setThisThreadCount(threads);
      struct Reset {
        ~Reset() { setThisThreadCount(0); }
      } reset;
      const BackendSet set = loadBackendSet({options->backend});
      const HardwareFingerprint fingerprint = set.fingerprint(at);
      std::vector<std::string> shapes;
      for (const DeclaredInput& d : readDeclaredInputs(options->modelPath)) {
        if (!d.isDynamic()) continue;
        auto v = at.findValue(d.name);
        if (!v) continue;
        std::string dims;
        for (int64_t x : at.value(*v).type.shape)
          dims += (dims.empty() ? "" : "x") + std::to_string(x);
        shapes.push_back(d.name + "=" + dims);
      }
      IsolatedMeasurer measurer(
          measurementWorkerCommand(selfExecutable(), options->modelPath, shapes),
          MeasurerOptions::forModel(at));
      CostingReport report;
      cost.add(
          share,
          measureNodes(
              at, options->backend, set.versions().front().second, db.get(), fingerprint,
              [&](const Candidate& c) { return measurer.measure(c.backend, c.nodes); }, &report));
      std::fprintf(stderr, "  %d kernel(s) measured, %d from the database\n", report.measured,
                   report.cached);
    }
    const PipeGraph pipe = pipeGraphOf(graph, sizes.front());
    PartitionOptions po;
    po.batch = options->batch;
    po.microBatches = sizes;
    po.pins = pinsByName(pipe, pinNames);
    const PipelineCandidates candidates = partitionBoth(pipe, topology, cost, po);
    const StageGraph& gpp = candidates.gpp;
    const StageGraph& spp = candidates.spp;
    const double searchS = candidates.gppSearchSeconds, sppSearchS = candidates.sppSearchSeconds;
    if (candidates.tookChain)
      std::printf("GPP: the chain's plan simulates faster here than the graph partitioner's; "
                  "GPP takes it (docs/pipeline.md, \"Which plan GPP writes\")\n");
    const StageGraph& chosen = options->strategy == "spp" ? spp : gpp;
    const MicroBatchSchedule schedule = scheduleMicroBatches(chosen, topology, pipe);
    std::printf("%s", chosen.toString(pipe).c_str());
    std::printf("schedule: %s\n", schedule.toString().c_str());
    std::printf(
        "predicted: GPP %.3f ms per sample (search %.3f s), SPP %.3f ms per sample (search %.3f "
        "s)\n",
        gpp.bottleneckTimePerSample * 1e3, searchS, spp.bottleneckTimePerSample * 1e3, sppSearchS);
    const Graph atMicroBatch = loadAtMicroBatch(*options, chosen.microBatch, true);
    PipelineFile file =
        pipelineFileOf(chosen, &schedule, atMicroBatch, topology, options->modelPath, options->batch);
    file.pins = pinNames;
    savePipelineFile(file, options->output);
    std::printf("pipeline written to %s: %zu stage(s), micro-batch %d\n", options->output.c_str(),
                file.stages.size(), file.microBatch);
    simulateStrategies(pipe, graph, topology, cost, gpp, spp, chosen.microBatch,
                       options->simulateSamples > 0 ? options->simulateSamples : options->batch);
    if (!options->simulate.empty()) {
      PartitionOptions unpinned = po;  // the pins' stage indices mean this topology's
      unpinned.pins.clear();
      project(pipe, graph, topology, cost, unpinned, options->simulate);
    }
    return 0;
  };
}

namespace {

// What both runtimes start from: the pipeline file checked against the
// model (and the topology, when given), the model at the micro-batch, the
// stages, their backends (or the plan's), and the batch's micro-batches of
// seeded random inputs (equal on every MPI rank). Not movable: `backends`
// points into it.
struct PreparedRun : PipelineRunInputs {
  PipelineFile file;
  std::optional<Plan> plan;
  StageBackendsFactory backends;
};

// `quiet`: no import notes, no plan warnings (every MPI rank but rank 0).
std::unique_ptr<PreparedRun> prepareRun(const ModelOptions& model, const PipelineRunRequest& request,
                                        PipelineFile file, bool quiet) {
  auto run = std::make_unique<PreparedRun>();
  static_cast<PipelineRunInputs&>(*run) = preparePipelineRun(
      file, model.modelPath, model.importOptions(), request.batch, request.seed, quiet);
  if (!request.topologyPath.empty())
    checkPipelineTopology(file, loadTopologyFile(request.topologyPath), request.topologyPath);
  run->file = std::move(file);
  const Graph& graph = run->graph;
  run->backends = backendsNamed({request.backend});
  // With a plan: each stage runs its groups (restricted to the stage), on
  // the backends it names, checked against the model at the micro-batch.
  if (!request.planPath.empty()) {
    run->plan = loadPlan(request.planPath);
    if (!run->plan->substitutions.empty())
      throw Error(run->plan->displayName() + " rewrites the model (" +
                  std::to_string(run->plan->substitutions.size()) +
                  " substitution(s)); a pipeline runs the model's own nodes, so far");
    std::vector<std::string> warnings;
    loadBackendsForPlan(*run->plan, graph, model.modelPath, {}, &warnings);
    if (!quiet)
      for (const auto& w : warnings) std::cerr << "warning: " << w << "\n";
    const Plan* p = &*run->plan;
    const std::string modelPath = model.modelPath;
    run->backends = [p, &graph, modelPath] {
      auto set =
          std::make_shared<BackendSet>(loadBackendsForPlan(*p, graph, modelPath, {}, nullptr));
      return BackendLookup([set](const std::string& name) { return set->find(name); });
    };
  }
  return run;
}

// The link a run's stages cross, as the measurement database holds it for
// the run's transport: in process, between the CPUs of the topology's first
// two devices; over MPI, between two ranks on this host. Nothing when the
// database (the default one: a run takes no --db) holds none; the run is
// then simulated on the pipeline file's links.
std::optional<LinkRecord> storedLinkOf(const Topology& topology, bool mpi) {
  const std::string path = MeasurementDb::defaultPath();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::nullopt;
  try {
    MeasurementDb db(path);
    if (mpi) {
      char host[256] = {};
      if (gethostname(host, sizeof host - 1) != 0) return std::nullopt;
      return db.findLink(linkFingerprint(), mpiLinkKey("mpi", std::string(host) + "|" + host));
    }
    const std::vector<std::string> ids = topology.idsOf(DeviceKind::Cpu);
    if (ids.size() < 2) return std::nullopt;
    const auto cores = assignCores(topology);
    return db.findLink(linkFingerprint(),
                       inProcessLinkKey(cores.at(ids[0]).front(), cores.at(ids[1]).front()));
  } catch (const Error&) {
    return std::nullopt;  // an unreadable database costs the report a line, not the run
  }
}

// A pipeline run's report, and the simulator's prediction of it
// (docs/pipeline.md, "The simulator"), twice: from the pipeline file's
// stage estimates (what the planner expected), and from this run's own
// stage costs (compute, hand-over, start), which checks the simulator's
// model of the run; both on the measured link of the run's transport where
// the database holds one. Then the weights on the busiest device.
void printPipelineReport(const PreparedRun& run, const PipelineRunReport& report, bool mpi) {
  std::printf("%s", report.toString().c_str());
  if (run.file.bottleneckSecondsPerSample > 0)
    std::printf("predicted: %.1f samples/s (the slowest stage's profiled time)\n",
                1 / run.file.bottleneckSecondsPerSample);
  const std::optional<LinkRecord> stored = storedLinkOf(run.file.topology, mpi);
  const Topology topology =
      stored ? withEveryLink(run.file.topology, linkCostOf(*stored), "the measured link")
             : run.file.topology;
  const PipeGraph pipe = pipeGraphOf(run.graph, run.file.microBatch);
  SimulationOptions planned;
  planned.microBatches = report.microBatches;
  planned.transferWhenReceiverWaits = mpi;
  if (mpi) planned.polling = mpiWaitPolling();
  planned.inFlight = run.inFlight;
  const SimulationReport fromPlan = simulatePipeline(run.stages, pipe, topology, planned);
  const SimulationOptions so = replaying(report, planned);
  // In process, a hand-over costs a wake-up, and under load a woken thread
  // waits for a core: the run's own wake-up is the link's latency then.
  LinkCost seen = topology.slowestLinkInto(DeviceKind::Cpu);
  const bool ownWakeUp = !mpi && report.wakeUps > 0 && std::isfinite(seen.bandwidthBytesPerS);
  if (ownWakeUp) seen.latencyS = report.wakeUpSeconds;
  const SimulationReport sim = simulatePipeline(
      run.stages, pipe, ownWakeUp ? withEveryLink(topology, seen, "this run's wake-up") : topology,
      so);
  const std::string link =
      stored ? "the measured " + stored->key.transport + " link (" + stored->key.endpoints + ")"
             : "the pipeline file's links";
  auto ratio = [&](const SimulationReport& r) {
    return r.samplesPerSecond > 0 ? report.samplesPerSecond / r.samplesPerSecond : 0;
  };
  std::printf(
      "simulated on %s: %.1f samples/s from the plan's stage estimates (measured/simulated "
      "%.3f); %.1f samples/s from this run's stage costs%s, latency per sample median %.3f ms "
      "(measured/simulated throughput %.3f)\n",
      link.c_str(), fromPlan.samplesPerSecond, ratio(fromPlan), sim.samplesPerSecond,
      ownWakeUp ? " and wake-up" : "", sim.medianLatencySeconds * 1e3, ratio(sim));
  std::vector<int> all;
  for (int n = 0; n < run.graph.numNodes(); ++n) all.push_back(n);
  std::map<std::string, double> perDevice;
  for (const auto& s : run.stages.stages)
    for (const auto& d : s.devices) perDevice[d] += weightBytesOf(run.graph, s.nodes);
  double most = 0;
  for (const auto& [d, w] : perDevice) most = std::max(most, w);
  std::printf("weights: %.0f B on the busiest device (the whole model: %.0f B)\n", most,
              weightBytesOf(run.graph, all));
  printRunMemory(report.stages);
}

// --verify: every output against the same kernels in one Session on the
// whole model, within the plan's bound (float32's without a plan). 0 when
// all match, 3 otherwise.
int verifyAgainstWhole(const PreparedRun& run, const std::string& backend,
                       const std::vector<std::vector<Tensor>>& outputs) {
  const Graph& graph = run.graph;
  const BackendLookup lookup = run.backends();
  const WholeModelComparison c =
      compareWithWholeModel(run, run.plan ? *run.plan : singleNodePlan(graph, backend), lookup,
                            run.plan ? planBound(*run.plan, lookup) : kFloat32Bound, outputs);
  for (const std::string& m : c.mismatches) std::printf("verify: MISMATCH: %s\n", m.c_str());
  const int bad = static_cast<int>(c.mismatches.size());
  const double most = c.largestError;
  if (bad) return 3;
  std::printf(
      "verify: every output of %zu micro-batch(es) matches the whole model's Session (largest "
      "error %.3g "
      "of the output's largest value)\n",
      run.batches.size(), most);
  return 0;
}

#ifdef COLLAGE_HAVE_MPI
// `collage run --pipeline P --mpi` in each rank that mpirun (or srun)
// starts: rank r runs stage r (core/pipeline/mpi_pipeline_runtime.h); rank 0
// prints the report and verifies. A rank that fails stops the run
// (abortMpiRun), naming itself; a rank count that is not the stage count is
// refused by rank 0, and every rank exits.
int runPipelineMpi(const ModelOptions& model, const PipelineRunRequest& request) {
  MpiScope mpi;
  const bool lead = mpi.rank() == 0;
  const std::string rankName = "rank " + std::to_string(mpi.rank());
  auto fail = [&](const std::string& what) {
    const bool named = what.find("(rank ") != std::string::npos;
    abortMpiRun("error: " + (named ? "" : rankName + ": ") + what, 1);
  };
  std::optional<PipelineFile> file;
  try {
    file = loadPipelineFile(request.pipelinePath);
  } catch (const std::exception& e) {
    fail(e.what());
  }
  // Every rank sees the same file and the same rank count, so every rank
  // returns here: no rank is left waiting.
  try {
    checkRankCount(file->stages.size(), mpi.size(), file->displayName());
  } catch (const Error& e) {
    if (lead) std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  try {
    std::unique_ptr<PreparedRun> run = prepareRun(model, request, std::move(*file), !lead);
    MpiPipelineOptions options;
    options.plan = run->plan ? &*run->plan : nullptr;
    options.backend = request.backend;
    options.inFlight = run->inFlight;
    options.timeoutSeconds = request.mpiTimeoutSeconds;
    MpiPipelineRuntime runtime(run->graph, run->stages, run->file.topology, run->backends,
                               options);
    PipelineRunReport report;
    const std::vector<std::vector<Tensor>> outputs = runtime.run(run->batches, &report);
    if (!lead) return 0;
    std::printf("MPI: %d rank(s), one stage each\n", mpi.size());
    printPipelineReport(*run, report, true);
    if (!request.verify) return 0;
    std::fflush(stdout);
    return verifyAgainstWhole(*run, request.backend, outputs);
  } catch (const std::exception& e) {
    fail(e.what());
  }
  return 1;
}
#endif

}  // namespace

namespace {

// The run's trace: one complete ("X") event per stage per micro-batch, on a
// thread per stage named as the report names it, times in microseconds from
// the run's start. The app (File > Open run trace) and Perfetto read it.
void writePipelineTrace(const PipelineRunReport& report, const std::string& path) {
  std::ofstream out(path);
  if (!out) throw Error("--trace: cannot write " + path);
  out << "{\"traceEvents\": [\n";
  bool first = true;
  auto event = [&](const std::string& json) {
    out << (first ? "  " : ",\n  ") << json;
    first = false;
  };
  char line[512];
  for (size_t s = 0; s < report.stages.size(); ++s) {
    std::string devices;
    for (const auto& d : report.stages[s].devices) devices += (devices.empty() ? "" : ", ") + d;
    std::snprintf(line, sizeof line,
                  "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": %zu, "
                  "\"args\": {\"name\": \"stage %zu [%s]\"}}",
                  s, s, devices.c_str());
    event(line);
    const StageRunReport& stage = report.stages[s];
    for (size_t m = 0; m < stage.starts.size() && m < stage.finishes.size(); ++m) {
      std::snprintf(line, sizeof line,
                    "{\"name\": \"micro-batch %zu\", \"cat\": \"pipeline\", \"ph\": \"X\", "
                    "\"pid\": 0, \"tid\": %zu, \"ts\": %.3f, \"dur\": %.3f, "
                    "\"args\": {\"stage\": %zu, \"micro_batch\": %zu}}",
                    m, s, stage.starts[m] * 1e6, (stage.finishes[m] - stage.starts[m]) * 1e6, s, m);
      event(line);
    }
  }
  out << "\n], \"displayTimeUnit\": \"ms\"}\n";
  if (!out) throw Error("--trace: cannot write " + path);
}

}  // namespace

int runPipeline(const ModelOptions& model, const PipelineRunRequest& request) {
  if (!request.tracePath.empty() && (request.mpi || !request.baseline.empty()))
    throw Error("--trace with --pipeline traces an in-process pipeline run: not with --mpi or --baseline");
  if (request.mpi) {
    if (!request.baseline.empty())
      throw Error("--baseline runs in one process; --mpi runs the pipeline's stages as ranks: give one");
#ifdef COLLAGE_HAVE_MPI
    return runPipelineMpi(model, request);
#else
    throw Error(
        "--mpi: this collage was built without MPI (CMake found none); install Open MPI "
        "(Debian's openmpi-bin and libopenmpi-dev) and build again");
#endif
  }
  std::unique_ptr<PreparedRun> run =
      prepareRun(model, request, loadPipelineFile(request.pipelinePath), false);
  PipelineRuntimeOptions options;
  options.backend = request.backend;
  options.inFlight = run->inFlight;
  options.plan = run->plan ? &*run->plan : nullptr;
  std::vector<std::vector<Tensor>> outputs;
  if (request.baseline.empty()) {
    PipelineRuntime runtime(run->graph, run->stages, run->file.topology, run->backends, options);
    PipelineRunReport report;
    outputs = runtime.run(run->batches, &report);
    printPipelineReport(*run, report, false);
    if (!request.tracePath.empty()) {
      writePipelineTrace(report, request.tracePath);
      std::printf("trace written to %s (the app's Pipeline > Open run trace, or Perfetto)\n",
                  request.tracePath.c_str());
    }
  } else {
    std::vector<int> all;
    for (int n = 0; n < run->graph.numNodes(); ++n) all.push_back(n);
    outputs = runBaseline(run->graph, run->file.topology, request.baseline, run->backends, options,
                          run->file.microBatch, run->batches);
    std::printf("weights: %.0f B per device (the whole model on each)\n",
                weightBytesOf(run->graph, all));
  }
  if (!request.verify) return 0;
  return verifyAgainstWhole(*run, request.backend, outputs);
}

}  // namespace collage::cli
