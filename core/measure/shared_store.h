// SharedMeasurementStore: a team's measurements in one PostgreSQL database
// (libpq), so that a kernel measured by one engineer is not measured again by
// the next on the same kind of machine.
//
//   collage (machine A) ─┐                         ┌─ reader: median of the
//   collage (machine B) ─┼─ INSERT ... ON CONFLICT ┤  per-machine medians,
//   collage (machine A) ─┘   DO NOTHING (append)   └─ with how many machines
//
// The key is MeasurementDb's, exactly: the hardware fingerprint (which holds
// the backend versions and the measurement protocol), the backend and its
// version, the kernel signature; plus the machine that measured. A row is
// never updated: a machine's first measurement of a key is its answer, and a
// second writer of the same key (another process racing on the same kernel)
// is a no-op. So concurrent writers are safe by construction, and a writer
// killed mid-batch loses only what it had not committed (each row commits on
// its own). Failures are rows too, keyed by the backend version that failed:
// a newer version is tried again. A key with any Ok row reads as Ok.
//
// Two processes that would measure the same kernel at once take turns: each
// claims a key while measuring it (a PostgreSQL advisory lock, which the
// server drops with the connection of a process that dies), and one that
// finds a key claimed measures others first and then reads the answer.
//
// The database has a version table (collage_schema); a client older than
// the database's schema is refused with a message rather than misreading it.
// MeasurementDb puts its SQLite file in front of this as a read-through cache;
// nothing else in the tree talks to PostgreSQL.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/measure/connection_string.h"
#include "core/measure/measurement_db.h"

typedef struct pg_conn PGconn;

namespace collage {

class SharedMeasurementStore {
 public:
  // 1: measurements and switching costs; 2: plan runs (collage_plan_runs).
  static constexpr int kSchemaVersion = 3;

  // "postgresql://..." or "postgres://...": the URI forms libpq accepts.
  static bool isUrl(const std::string& location);
  // The URL (or key=value conninfo) with its password replaced by "***", as
  // libpq reads it (ConnectionString::shown), for every message and log line.
  static std::string redacted(const std::string& url);
  // This machine's name in the rows it writes (the host name).
  static std::string thisMachine();

  // Connects and creates or checks the schema. Throws Error naming the
  // redacted URL when the server is unreachable, refuses the login, or has
  // a newer schema than this program, and before connecting when libpq
  // would read the URL otherwise than it is written (ConnectionString::
  // ambiguous). No message carries the password: libpq's and the server's
  // text is redacted too (ConnectionString::redact).
  explicit SharedMeasurementStore(const std::string& url, std::string machine = thisMachine());
  ~SharedMeasurementStore();
  SharedMeasurementStore(const SharedMeasurementStore&) = delete;
  SharedMeasurementStore& operator=(const SharedMeasurementStore&) = delete;

  // The aggregate of every machine's row for the key: Ok with the median of
  // the per-machine medians (Measurement::machines says how many) when any
  // machine timed it, else the first failure stored for this backend
  // version, else nothing. The record's other fields are the first row's.
  std::optional<MeasurementRecord> find(const HardwareFingerprint& fp,
                                        const MeasurementKey& key) const;
  // Appends this machine's measurement; false when the machine had already
  // stored one for the key (kept as it was), or when it is a failure of the
  // machine rather than of the kernel (Measurement::environmental: never shared).
  bool append(const MeasurementRecord& record);
  // The switching cost between two backends' kernels (switch_costs.h), by
  // the same rules: the median of per-machine medians; appended, never updated.
  using BackendVersion = MeasurementDb::BackendVersion;
  std::optional<double> findSwitchCost(const HardwareFingerprint& fp, const BackendVersion& from,
                                       const BackendVersion& to) const;
  bool appendSwitchCost(const HardwareFingerprint& fp, const BackendVersion& from,
                        const BackendVersion& to, const Measurement& m);

  // A plan of the graph-level search timed paired with an incumbent on a
  // node (a Slurm task): appended, never updated; false when this machine
  // had already stored the pair. `runsJson` is toJson(PairedPlanRuns).
  struct PlanRunRow {
    std::string modelKey, planKey, incumbentKey;
    std::string machine;  // set by findPlanRun
    std::string genome;
    std::string status;   // measurementStatusName
    double medianRatio = 0;
    std::string runsJson;
    // The submission that timed it (a Slurm job's own run id): a re-timing
    // of the same pair on the same node is a row of its own, read back by
    // this id, never the earlier one.
    std::string runId;
  };
  bool appendPlanRun(const HardwareFingerprint& fp, const PlanRunRow& row);
  // The pair's row of the run `runId` under the target's fingerprint id (the
  // first, if several nodes timed it), if any; with an empty runId, the
  // pair's first row of any run.
  std::optional<PlanRunRow> findPlanRun(const std::string& fingerprintId, const std::string& modelKey,
                                        const std::string& planKey, const std::string& incumbentKey,
                                        const std::string& runId = "") const;

  // Who is measuring a key now: a session-level advisory lock named by the
  // key, so two processes do not measure the same kernel at once, and one
  // that dies releases it with its connection. tryLock is false while
  // another session holds it.
  static std::string lockName(const HardwareFingerprint& fp, const MeasurementKey& key);
  bool tryLock(const std::string& lockName);
  void unlock(const std::string& lockName);
  // One aggregated record per key (for `collage db pull`).
  std::vector<MeasurementRecord> aggregated() const;
  // Rows, distinct keys and machines, for `collage db stats`.
  struct Stats {
    int64_t rows = 0, keys = 0, machines = 0;
  };
  Stats stats() const;

  int schemaVersion() const;
  const std::string& url() const { return conninfo_.shown(); }  // the password as ***
  const std::string& machine() const { return machine_; }

 private:
  void migrate();

  ConnectionString conninfo_;
  std::string machine_;
  PGconn* conn_ = nullptr;
};

}  // namespace collage
