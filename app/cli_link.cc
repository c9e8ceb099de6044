// `collage link [--mpi] [--cpus A,B]`: measures the link between two core
// groups of this process, or (under mpirun -n 2, with --mpi) between two MPI
// ranks, by a ping-pong of 4 KiB to 16 MiB messages; prints each size's
// one-way time beside the fit (latency + bytes / bandwidth) and stores the
// fit in the measurement database (core/pipeline/link_measurement.h), where
// `collage pipeline` and `collage run --pipeline` find it.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <sstream>

#include "app/cli_common.h"
#include "core/ir/error.h"
#include "core/measure/measurement_db.h"
#include "core/pipeline/link_measurement.h"
#include "core/pipeline/pipeline_runtime.h"
#ifdef COLLAGE_HAVE_MPI
#include "core/pipeline/mpi_link.h"
#include "core/pipeline/mpi_pipeline_runtime.h"
#endif

namespace collage::cli {
namespace {

struct LinkOptions {
  bool mpi = false;
  std::vector<int> cpus;
  std::string db = MeasurementDb::defaultPath();
  bool noDb = false;
};

void printFit(const LinkKey& key, const std::vector<LinkSample>& samples, const LinkFit& fit) {
  std::printf("link %s (%s), %s:\n", key.transport.c_str(), key.endpoints.c_str(),
              key.protocol.c_str());
  for (const LinkSample& s : samples)
    std::printf("  %9.0f B: %10.3f us one way, fit %10.3f us\n", s.bytes, s.seconds * 1e6,
                fit.cost.seconds(s.bytes) * 1e6);
  std::printf("fit: latency %.3g s, bandwidth %.3g B/s (largest error %.1f%%)\n",
              fit.cost.latencyS, fit.cost.bandwidthBytesPerS, fit.worstError * 100);
}

int store(const LinkOptions& o, const LinkKey& key, const std::vector<LinkSample>& samples) {
  const LinkFit fit = fitLink(samples);
  printFit(key, samples, fit);
  if (o.noDb) return 0;
  MeasurementDb db(o.db);
  db.storeLink(linkFingerprint(), linkRecordOf(key, fit, samples.size()));
  std::printf("stored in %s\n", db.path().c_str());
  return 0;
}

}  // namespace

Action addLinkCommand(CLI::App& app) {
  auto* command = app.add_subcommand(
      "link", "measure the link between two core groups (or, with --mpi, two MPI ranks)");
  auto o = std::make_shared<LinkOptions>();
  command->add_flag("--mpi", o->mpi, "between MPI ranks 0 and 1 (start with mpirun -n 2)");
  command->add_option("--cpus", o->cpus, "in process: the two CPUs (default: the first two allowed)")
      ->delimiter(',')
      ->expected(2);
  command->add_option("--db", o->db, "the measurement database (default: this machine's)");
  command->add_flag("--no-db", o->noDb, "measure and print, store nothing");
  return [o]() {
    if (o->mpi) {
#ifdef COLLAGE_HAVE_MPI
      MpiScope mpi;
      try {
        const MpiLinkMeasurement m = pingPongMpi(kLinkRounds);
        if (mpi.rank() != 0) return 0;
        return store(*o, mpiLinkKey(m.transport, m.endpoints), m.samples);
      } catch (const std::exception& e) {
        abortMpiRun("error: rank " + std::to_string(mpi.rank()) + ": " + e.what(), 1);
      }
#else
      throw Error(
          "--mpi: this collage was built without MPI (CMake found none); install Open MPI "
          "(Debian's openmpi-bin and libopenmpi-dev) and build again");
#endif
    }
    int a = 0, b = 0;
    if (o->cpus.size() == 2) {
      a = o->cpus[0];
      b = o->cpus[1];
    } else {
      // The first two CPUs this process may run on (an error names what is missing).
      const LinkCost unpriced;
      const Topology two({{"cpu0", DeviceKind::Cpu, 1}, {"cpu1", DeviceKind::Cpu, 1}}, {},
                         &unpriced, "collage link");
      const auto cores = assignCores(two);
      a = cores.at("cpu0").front();
      b = cores.at("cpu1").front();
    }
    return store(*o, inProcessLinkKey(a, b), pingPongInProcess(a, b, kLinkRounds));
  };
}

}  // namespace collage::cli
