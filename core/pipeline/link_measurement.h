// Links measured, not assumed: a ping-pong of messages from 4 KiB to 16 MiB
// between two endpoints, each size's one-way time (half the median round
// trip) fitted to latency + bytes / bandwidth, and kept in the measurement
// database (MeasurementDb::storeLink) keyed like a kernel: this machine, the
// transport, the protocol and the endpoints.
//
//   seconds ▲          ·  fit: latency + bytes / bandwidth
//           │      ·
//           │  ·
//   latency ┼·─────────────▶ bytes (4 KiB .. 16 MiB)
//
// Transports: "in-process" (two threads pinned to two CPUs, through the
// runtime's own StageQueue, so the hand-over is the one a pipeline pays: a
// condition-variable wake-up, then the receiver reads the bytes), "mpi" (two
// ranks on one host, mpi_link.h) and "mpi-nodes" (two hosts). The
// partitioner and the simulator price a crossing with the stored link of the
// transport a run uses, where there is one (docs/pipeline.md).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/ir/hardware_fingerprint.h"
#include "core/measure/measurement_db.h"
#include "core/pipeline/topology.h"

namespace collage {

// One message size: bytes and its one-way seconds.
struct LinkSample {
  double bytes = 0;
  double seconds = 0;
};

struct LinkFit {
  LinkCost cost;
  // The largest |predicted - measured| / measured over the samples.
  double worstError = 0;
};

// 4 KiB, 16 KiB, ..., 16 MiB: a latency-bound end and a bandwidth-bound one.
std::vector<size_t> linkMessageSizes();
// Round trips per size (after one warm-up).
constexpr int kLinkRounds = 30;
// "pingpong-4K-16M-r30": changes when the sizes or rounds do, so a stored
// link measured another way is not reused.
std::string linkProtocol();

// Least squares on the relative error (each sample weighs 1 / seconds², so
// 4 KiB counts as much as 16 MiB): latency >= 0 (refitted through the
// origin when the free fit goes below it) and bandwidth > 0 (+inf when
// time does not grow with size). Error for fewer than two distinct sizes or
// a sample that is not positive.
LinkFit fitLink(const std::vector<LinkSample>& samples);

// The in-process ping-pong between threads pinned to `cpuA` and `cpuB` (-1:
// not pinned), `rounds` round trips per size (after one warm-up). Error
// naming the CPU when pinning fails.
std::vector<LinkSample> pingPongInProcess(int cpuA, int cpuB, int rounds);

// The database's machine key for links: this machine's fingerprint, with no
// thread count and no library versions (a link does not depend on them).
HardwareFingerprint linkFingerprint();

LinkRecord linkRecordOf(const LinkKey& key, const LinkFit& fit, size_t sizes);
// {"in-process", linkProtocol(), "cpus A|B"}; {"mpi" or "mpi-nodes",
// linkProtocol(), "hostA|hostB"}.
LinkKey inProcessLinkKey(int cpuA, int cpuB);
LinkKey mpiLinkKey(const std::string& transport, const std::string& endpoints);
// The in-process link between two CPUs: `db`'s (may be null) when it holds
// one, else measured now (pingPongInProcess, kLinkRounds) and stored there.
// `measured` (optional): whether it was measured now.
LinkRecord inProcessLink(MeasurementDb* db, int cpuA, int cpuB, bool* measured = nullptr);
LinkCost linkCostOf(const LinkRecord& record);

// Every pair of `topology`'s devices priced at `link` (a measured link in
// place of the file's): what the simulator is given to model a run whose
// stages cross that transport.
Topology withEveryLink(const Topology& topology, const LinkCost& link, const std::string& origin);

}  // namespace collage
