// MeasurementDb: every measurement ever taken on this machine, in SQLite.
// The optimizer asks it first and measures only what is missing.
//
// Opened on a "postgresql://..." location instead of a file, it is also the
// front of a team's shared store (core/measure/shared_store.h): the SQLite
// file (the default one, or the one named) is then a read-through cache.
//
//   find:  SQLite ──miss──▶ PostgreSQL ──hit──▶ kept in SQLite (origin 'shared')
//   store: SQLite (origin 'local') and appended to PostgreSQL
//
// Everything that measures (the optimizer, the API, the app's worker) goes
// through this one class, so none of it knows which store is behind it.
//
// One file (default $XDG_CACHE_HOME/collage-studio/measurements.sqlite), WAL
// mode and a busy timeout so the GUI and a command-line run can share it.
// The schema is versioned (PRAGMA user_version) and migrated forward on open.
// A row is keyed by the hardware fingerprint (its fields in their own
// columns), the backend and its version, and the candidate's canonical
// signature (core/patterns/candidate_signature.h).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/ir/hardware_fingerprint.h"
#include "core/measure/measurement.h"

struct sqlite3;

namespace collage {

class SharedMeasurementStore;

struct MeasurementKey {
  std::string backend;
  std::string backendVersion;
  std::string signatureHash;
};

struct MeasurementRecord {
  HardwareFingerprint fingerprint;
  MeasurementKey key;
  std::string signatureText;
  std::string ops;  // "Conv+Add+Relu", for people reading an export
  Measurement measurement;
  std::string measuredAt;  // ISO 8601, UTC
};

// A whole plan the graph-level search ran (core/search/graph_level_search.h):
// keyed by the model (its sha256 and input shapes), the plan the search
// started from and the plan's own placement (placementKey), so a second
// search on this machine starts where the first ended.
struct PlanRunRecord {
  std::string modelKey;
  std::string baseKey;     // placementKey of the plan the genome is read against
  std::string planKey;     // placementKey of the plan run
  std::string genome;      // the genes, one character each ("0012...")
  MeasurementStatus status = MeasurementStatus::Ok;
  double relativeCost = 0;  // its time over the base plan's (paired rounds)
  double medianMs = 0;
  int rounds = 0;
  std::string message;     // why it could not run
  std::string measuredAt;  // ISO 8601, UTC (set on store)
};

// A link between two devices, measured by a ping-pong of messages of several
// sizes (core/pipeline/link_measurement.h) and fitted to latency + bytes /
// bandwidth. Keyed like a kernel: this machine's fingerprint (its thread
// count included), the transport in place of the backend ("in-process",
// "mpi", "mpi-nodes"), the protocol in place of its version (the sizes and
// rounds: a changed protocol measures again), and the endpoints in place of
// the signature ("cpus 0|1", "hosts a|b").
struct LinkKey {
  std::string transport;
  std::string protocol;
  std::string endpoints;
};

struct LinkRecord {
  LinkKey key;
  double latencySeconds = 0;
  double bandwidthBytesPerSecond = 0;
  int sizes = 0;          // message sizes the fit used
  double worstError = 0;  // the fit's largest relative error over them
  std::string measuredAt; // ISO 8601, UTC (set on store)
};

// A decode run measured on N devices (MPI ranks): `mpirun -n N collage
// generate --cache-parallel | --data-parallel | --tensor-parallel`, stored by
// rank 0 (docs/decoding.md, "Measured runs on N ranks"). Keyed by the
// machine (linkFingerprint: no thread count, no library versions), the model
// (decodeModelKey: its file's sha256), the strategy's name, the ranks, the
// threads per rank and the context; a run measured again replaces the row.
// In this file only, as links are: a fact about this machine's processes.
struct DecodeRunRecord {
  std::string modelKey;    // "sha256:..." of the model file
  std::string strategy;    // "CP", "TP", "DP" (any name: the store does not interpret it)
  int ranks = 0;
  int threadsPerRank = 0;
  int64_t context = 0;     // rows in the cache at the first timed step
  int64_t capacity = 0;    // the cache's rows (CP slices them across the ranks)
  int64_t steps = 0;       // decode steps timed (per rank)
  double stepMs = 0;       // median step (DP: the median of the ranks' medians)
  double attentionMs = 0;  // median per step of the decode attention kernels, exchange included
  double exchangeMs = 0;   // median per step of the ranks' exchanges (0: none)
  double tokensPerSecond = 0;  // DP: the sum of the ranks' 1000 / median step
  std::string detail;      // free text (DP: each rank's median)
  std::string measuredAt;  // ISO 8601, UTC (set on store)
};

struct MeasurementDbStats {
  int64_t rows = 0;
  int64_t okRows = 0;
  int64_t fingerprints = 0;
  int64_t thisMachineRows = 0;
  std::vector<std::pair<std::string, int64_t>> perBackend;
  int schemaVersion = 0;
  std::string path;
  // The shared store, when there is one: its URL without the password.
  std::string sharedUrl;
  int64_t sharedRows = 0, sharedKeys = 0, sharedMachines = 0;
};

// What `collage db push` / `pull` copied.
struct MeasurementCopyReport {
  int64_t copied = 0;   // rows new to the destination
  int64_t present = 0;  // rows the destination already had (left as they were)
};

class MeasurementDb {
 public:
  static constexpr int kSchemaVersion = 8;
  // $XDG_CACHE_HOME/collage-studio/measurements.sqlite (~/.cache/... by default).
  static std::string defaultPath();

  // Opens (creating the file and its folder) and migrates. Throws Error
  // naming the file if it is not a database or has a newer schema.
  // `location` is a file, or a shared store's URL ("postgresql://..."): then
  // `localPath` (default defaultPath()) is its cache, and Error names the URL
  // without its password when the store cannot be used.
  explicit MeasurementDb(const std::string& location = defaultPath(),
                         const std::string& localPath = "");
  ~MeasurementDb();
  MeasurementDb(const MeasurementDb&) = delete;
  MeasurementDb& operator=(const MeasurementDb&) = delete;

  // The kernel's stored verdict. A failure of the machine stored for the key
  // (Measurement::environmental) is none: it is passed over, and the kernel
  // measured again.
  std::optional<Measurement> find(const HardwareFingerprint& fp, const MeasurementKey& key) const;
  // Inserts or replaces in the file; appends to the shared store (where a
  // row this machine stored before for the key stays as it was), except a
  // failure of the machine, which stays in the file only.
  void store(const MeasurementRecord& record);

  // A kernel this process is measuring. Processes sharing a store see it
  // as busy until the Claim goes, or the process dies (the claim is a
  // PostgreSQL advisory lock on this connection: the server ends it).
  class Claim {
   public:
    Claim() = default;
    Claim(Claim&& other) noexcept;
    Claim& operator=(Claim&& other) noexcept;
    ~Claim();
    // Claimed in a shared store: another process may have stored the
    // kernel since it was looked up, so ask again before measuring.
    bool shared() const { return store_ != nullptr; }

   private:
    friend class MeasurementDb;
    SharedMeasurementStore* store_ = nullptr;
    std::string lock_;
  };
  // The claim, or nothing while another process holds it. Always granted
  // without a shared store (one machine's processes already take turns at
  // timing: core/measure/machine_timing_lock.h).
  std::optional<Claim> tryClaim(const HardwareFingerprint& fp, const MeasurementKey& key);

  // Between the file and the shared store (Error without one): push appends
  // this machine's own rows (not those the cache read from the store); pull
  // copies the store's aggregate of every key the file lacks.
  MeasurementCopyReport push();
  MeasurementCopyReport pull();

  // Switching costs between two backends' kernels (core/measure/measurer.h
  // measureSwitch); shared like measurements when there is a shared store.
  using BackendVersion = std::pair<std::string, std::string>;  // (name, version)
  std::optional<double> findSwitchCost(const HardwareFingerprint& fp, const BackendVersion& from,
                                       const BackendVersion& to) const;
  void storeSwitchCost(const HardwareFingerprint& fp, const BackendVersion& from,
                       const BackendVersion& to, const Measurement& m);

  // The plans run for a model from one base plan, cheapest first.
  // Timed-out runs are left out: they are no verdict on the plan.
  std::vector<PlanRunRecord> findPlanRuns(const HardwareFingerprint& fp, const std::string& modelKey,
                                          const std::string& baseKey) const;
  void storePlanRun(const HardwareFingerprint& fp, const PlanRunRecord& record);

  // Measured links (LinkRecord), in this file only: a link is a fact about
  // this machine's placement of processes, not shared with a team.
  std::optional<LinkRecord> findLink(const HardwareFingerprint& fp, const LinkKey& key) const;
  void storeLink(const HardwareFingerprint& fp, const LinkRecord& record);

  // Measured decode runs (DecodeRunRecord), in this file only: every
  // strategy, rank count, thread count and context stored for the model on
  // this machine, by strategy, ranks, threads, context.
  std::vector<DecodeRunRecord> findDecodeRuns(const HardwareFingerprint& fp,
                                              const std::string& modelKey) const;
  void storeDecodeRun(const HardwareFingerprint& fp, const DecodeRunRecord& record);

  std::vector<MeasurementRecord> all() const;
  MeasurementDbStats stats(const HardwareFingerprint& current) const;
  // Deletes every row (or those of one backend); returns how many.
  int64_t clear(const std::string& backend = "");
  // Writes all rows as CSV (RFC 4180 quoting), for a spreadsheet.
  void exportCsv(const std::string& path) const;

  const std::string& path() const { return path_; }
  // The shared store's URL without its password; empty without one.
  std::string sharedUrl() const;
  // Why the shared store stopped answering after it was opened (the server
  // went away twice in a row); empty while it works. From then on this
  // object uses its file only: a run goes on with what it has, and
  // `collage db push` later sends what was measured meanwhile.
  const std::string& sharedProblem() const { return sharedProblem_; }
  int schemaVersion() const;

 private:
  void migrate();
  void exec(const std::string& sql) const;
  // The file's half of store(); `replace` false keeps a row already there.
  // Returns whether a row was written.
  bool storeLocal(const MeasurementRecord& record, const char* origin, bool replace);
  void storeSwitchCostLocal(const HardwareFingerprint& fp, const BackendVersion& from,
                            const BackendVersion& to, const Measurement& m);
  // The shared store while it works, else null (see sharedProblem).
  SharedMeasurementStore* shared() const {
    return sharedProblem_.empty() ? shared_.get() : nullptr;
  }
  void loseShared(const std::string& why) const;

  std::string path_;
  sqlite3* db_ = nullptr;
  std::unique_ptr<SharedMeasurementStore> shared_;
  mutable std::string sharedProblem_;
};

}  // namespace collage
