#include "core/measure/shared_store.h"

#include <libpq-fe.h>
#include <unistd.h>

#include <cstdio>
#include <memory>

#include "core/ir/error.h"

namespace collage {
namespace {

// Every client takes this lock while it creates or checks the schema, so two
// first clients do not both create the tables (CREATE TABLE IF NOT EXISTS
// races in PostgreSQL's catalog).
constexpr const char* kSchemaLock = "SELECT pg_advisory_xact_lock(2702700001)";

// Version 1. The unique keys are MeasurementDb's keys plus the machine:
// ON CONFLICT DO NOTHING makes a second writer of the same row a no-op. The
// trigger keeps the tables append-only for every client, old or buggy.
// Switching costs between backends (core/measure/switch_costs.h) are shared
// the same way. Version 2 adds kPlanRuns.
const char* kSchema = R"sql(
CREATE TABLE collage_measurements (
  id               bigserial PRIMARY KEY,
  fingerprint_id   text NOT NULL,
  cpu_vendor       text NOT NULL DEFAULT '',
  cpu_model        text NOT NULL DEFAULT '',
  isa_flags        text NOT NULL DEFAULT '',
  cores            integer NOT NULL DEFAULT 0,
  threads          integer NOT NULL DEFAULT 0,
  library_versions text NOT NULL DEFAULT '',
  backend          text NOT NULL,
  backend_version  text NOT NULL DEFAULT '',
  signature        text NOT NULL,
  signature_text   text NOT NULL DEFAULT '',
  ops              text NOT NULL DEFAULT '',
  machine          text NOT NULL,
  status           text NOT NULL,
  median_ns        double precision NOT NULL DEFAULT 0,
  spread           double precision NOT NULL DEFAULT 0,
  min_ns           double precision NOT NULL DEFAULT 0,
  samples          integer NOT NULL DEFAULT 0,
  measure_seconds  double precision NOT NULL DEFAULT 0,
  message          text NOT NULL DEFAULT '',
  measured_at      timestamptz NOT NULL DEFAULT now(),
  UNIQUE (fingerprint_id, backend, backend_version, signature, machine)
);
CREATE TABLE collage_switch_costs (
  id             bigserial PRIMARY KEY,
  fingerprint_id text NOT NULL,
  from_backend   text NOT NULL,
  from_version   text NOT NULL DEFAULT '',
  to_backend     text NOT NULL,
  to_version     text NOT NULL DEFAULT '',
  machine        text NOT NULL,
  epsilon_ns     double precision NOT NULL,
  spread         double precision NOT NULL DEFAULT 0,
  samples        integer NOT NULL DEFAULT 0,
  measured_at    timestamptz NOT NULL DEFAULT now(),
  UNIQUE (fingerprint_id, from_backend, from_version, to_backend, to_version, machine)
);
CREATE FUNCTION collage_append_only() RETURNS trigger LANGUAGE plpgsql AS
  $$BEGIN RAISE EXCEPTION '% is append-only: a measurement is never updated', TG_TABLE_NAME; END$$;
CREATE TRIGGER collage_measurements_append_only BEFORE UPDATE ON collage_measurements
  FOR EACH ROW EXECUTE FUNCTION collage_append_only();
CREATE TRIGGER collage_switch_costs_append_only BEFORE UPDATE ON collage_switch_costs
  FOR EACH ROW EXECUTE FUNCTION collage_append_only();
)sql";

// Version 2: the graph-level search's plan runs timed on the nodes of a
// Slurm constraint (core/search/slurm_plan_evaluator.h), each a plan paired
// with the incumbent in one process: keyed by the target's fingerprint, the
// model (its sha256 and shapes), the plan and the incumbent, and the machine.
const char* kPlanRuns = R"sql(
CREATE TABLE collage_plan_runs (
  id             bigserial PRIMARY KEY,
  fingerprint_id text NOT NULL,
  model_key      text NOT NULL,
  plan_key       text NOT NULL,
  incumbent_key  text NOT NULL,
  machine        text NOT NULL,
  genome         text NOT NULL DEFAULT '',
  status         text NOT NULL,
  median_ratio   double precision NOT NULL DEFAULT 0,
  runs           text NOT NULL,
  measured_at    timestamptz NOT NULL DEFAULT now(),
  UNIQUE (fingerprint_id, model_key, plan_key, incumbent_key, machine)
);
CREATE TRIGGER collage_plan_runs_append_only BEFORE UPDATE ON collage_plan_runs
  FOR EACH ROW EXECUTE FUNCTION collage_append_only();
)sql";

// Version 3: a plan run belongs to the submission that timed it (run_id, a
// Slurm job's own id). Version 2's unique key made a second timing of the
// same pair on the same node a no-op (ON CONFLICT DO NOTHING), so that a
// re-timing read the first run's row for ever; the run id joins the key.
const char* kPlanRunIds = R"sql(
ALTER TABLE collage_plan_runs ADD COLUMN run_id text NOT NULL DEFAULT '';
DO $$
DECLARE c text;
BEGIN
  FOR c IN SELECT conname FROM pg_constraint
           WHERE conrelid = 'collage_plan_runs'::regclass AND contype = 'u' LOOP
    EXECUTE format('ALTER TABLE collage_plan_runs DROP CONSTRAINT %I', c);
  END LOOP;
END $$;
ALTER TABLE collage_plan_runs ADD CONSTRAINT collage_plan_runs_run_key
  UNIQUE (fingerprint_id, model_key, plan_key, incumbent_key, machine, run_id);
)sql";

// One query answers both a single key (find: $1..$4 set) and every key
// (aggregated: $1 NULL), so there is one median. Per machine first, then
// across machines: a machine that measured more often does not outvote
// the others. A key with no Ok row reads as its first failure.
const char* kAggregate = R"sql(
WITH k AS (
  SELECT * FROM collage_measurements
  WHERE $1::text IS NULL OR (fingerprint_id = $1 AND backend = $2 AND backend_version = $3
                             AND signature = $4)),
per_machine AS (
  SELECT fingerprint_id, backend, backend_version, signature, machine,
         percentile_cont(0.5) WITHIN GROUP (ORDER BY median_ns) AS median_ns,
         percentile_cont(0.5) WITHIN GROUP (ORDER BY spread) AS spread,
         min(min_ns) AS min_ns, sum(samples) AS samples, avg(measure_seconds) AS measure_seconds
  FROM k WHERE status = 'ok' GROUP BY 1, 2, 3, 4, 5),
timed AS (
  SELECT fingerprint_id, backend, backend_version, signature, 'ok'::text AS status,
         percentile_cont(0.5) WITHIN GROUP (ORDER BY median_ns) AS median_ns,
         percentile_cont(0.5) WITHIN GROUP (ORDER BY spread) AS spread,
         min(min_ns) AS min_ns, sum(samples)::bigint AS samples,
         avg(measure_seconds) AS measure_seconds, ''::text AS message, count(*) AS machines
  FROM per_machine GROUP BY 1, 2, 3, 4),
failed AS (
  SELECT DISTINCT ON (fingerprint_id, backend, backend_version, signature)
         fingerprint_id, backend, backend_version, signature, status,
         0::float8, 0::float8, 0::float8, 0::bigint, measure_seconds, message,
         count(*) OVER (PARTITION BY fingerprint_id, backend, backend_version, signature)
  FROM k
  WHERE status <> 'ok' AND NOT EXISTS (
    SELECT 1 FROM timed t WHERE t.fingerprint_id = k.fingerprint_id AND t.backend = k.backend
      AND t.backend_version = k.backend_version AND t.signature = k.signature)
  ORDER BY fingerprint_id, backend, backend_version, signature, id),
agg AS (SELECT * FROM timed UNION ALL SELECT * FROM failed)
SELECT a.status, a.median_ns, a.spread, a.min_ns, a.samples, a.measure_seconds, a.message,
       a.machines, d.cpu_vendor, d.cpu_model, d.isa_flags, d.cores, d.threads,
       d.library_versions, a.backend, a.backend_version, a.signature, d.signature_text, d.ops,
       to_char(d.measured_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
FROM agg a CROSS JOIN LATERAL (
  SELECT * FROM k WHERE k.fingerprint_id = a.fingerprint_id AND k.backend = a.backend
    AND k.backend_version = a.backend_version AND k.signature = a.signature
  ORDER BY id LIMIT 1) d
ORDER BY a.backend, d.ops, a.signature
)sql";

struct ResultDeleter {
  void operator()(PGresult* r) const { PQclear(r); }
};
using Result = std::unique_ptr<PGresult, ResultDeleter>;

// libpq's message, first line only (the rest is hints about sockets).
std::string firstLine(const char* message) {
  std::string m = message ? message : "";
  if (auto nl = m.find('\n'); nl != std::string::npos) m.resize(nl);
  return m;
}

// Whether a failed statement failed for want of a server rather than by
// its own fault: libpq's own errors have no SQLSTATE (it may not have marked
// the connection bad yet), 08 is a connection exception, 57P0x a shutdown.
bool connectionLost(PGconn* conn, PGresult* result) {
  if (PQstatus(conn) == CONNECTION_BAD) return true;
  const char* state = PQresultErrorField(result, PG_DIAG_SQLSTATE);
  const std::string code = state ? state : "";
  return code.empty() || code.rfind("08", 0) == 0 || code.rfind("57P0", 0) == 0;
}

// Runs `sql` with text parameters (nullptr = SQL NULL); throws Error naming
// the store (its password redacted) when the server answers with an error. Without parameters it may
// be several statements (the schema). A connection that broke (the server
// restarted) is opened again once and the statement sent again, unless it
// was inside a transaction: every statement here can be repeated alone
// (appends do nothing the second time). Claims held on the old connection
// are gone with it.
Result run(PGconn* conn, const ConnectionString& store, const std::string& sql,
           const std::vector<const char*>& params = {}) {
  const bool inTransaction = PQtransactionStatus(conn) != PQTRANS_IDLE;
  for (int attempt = 0;; ++attempt) {
    Result r(params.empty() ? PQexec(conn, sql.c_str())
                            : PQexecParams(conn, sql.c_str(), static_cast<int>(params.size()),
                                           nullptr, params.data(), nullptr, nullptr, 0));
    const ExecStatusType s = PQresultStatus(r.get());
    if (s == PGRES_COMMAND_OK || s == PGRES_TUPLES_OK) return r;
    const std::string why = firstLine(PQerrorMessage(conn));
    if (attempt == 0 && !inTransaction && connectionLost(conn, r.get())) {
      PQreset(conn);
      if (PQstatus(conn) == CONNECTION_OK) continue;
    }
    // The server's text or libpq's may quote the connection string.
    throw Error("shared measurement store " + store.shown() + ": " + store.redact(why));
  }
}

// Full precision: std::to_string(double) keeps six decimals only.
std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// A row of kAggregate.
MeasurementRecord recordFrom(PGresult* r, int row) {
  MeasurementRecord rec;
  Measurement& m = rec.measurement;
  m.status = measurementStatusFromName(PQgetvalue(r, row, 0));
  m.medianNs = std::stod(PQgetvalue(r, row, 1));
  m.spread = std::stod(PQgetvalue(r, row, 2));
  m.minNs = std::stod(PQgetvalue(r, row, 3));
  m.samples = static_cast<int32_t>(std::stoll(PQgetvalue(r, row, 4)));
  m.measureSeconds = std::stod(PQgetvalue(r, row, 5));
  m.message = PQgetvalue(r, row, 6);
  m.machines = static_cast<int32_t>(std::stoll(PQgetvalue(r, row, 7)));
  m.fromCache = true;
  rec.fingerprint = HardwareFingerprint{PQgetvalue(r, row, 8),
                                        PQgetvalue(r, row, 9),
                                        PQgetvalue(r, row, 10),
                                        std::stoi(PQgetvalue(r, row, 11)),
                                        std::stoi(PQgetvalue(r, row, 12)),
                                        PQgetvalue(r, row, 13)};
  rec.key = MeasurementKey{PQgetvalue(r, row, 14), PQgetvalue(r, row, 15), PQgetvalue(r, row, 16)};
  rec.signatureText = PQgetvalue(r, row, 17);
  rec.ops = PQgetvalue(r, row, 18);
  rec.measuredAt = PQgetvalue(r, row, 19);
  return rec;
}

}  // namespace

bool SharedMeasurementStore::isUrl(const std::string& location) {
  return location.rfind("postgresql://", 0) == 0 || location.rfind("postgres://", 0) == 0;
}

std::string SharedMeasurementStore::redacted(const std::string& url) {
  return ConnectionString(url).shown();
}

std::string SharedMeasurementStore::thisMachine() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0 || !*name) return "unknown";
  return name;
}

SharedMeasurementStore::SharedMeasurementStore(const std::string& url, std::string machine)
    : conninfo_(url), machine_(std::move(machine)) {
  const std::string name = "shared measurement store " + conninfo_.shown();
  // libpq would take part of the password for the host, port or database,
  // and name that part in its error: refused before libpq sees it.
  if (conninfo_.ambiguous())
    throw Error(name + ": libpq reads this URL otherwise than it is written: an '@' or '/' in "
                       "the user name or password must be percent-encoded (%40, %2F); better, "
                       "leave the password out of the URL: " +
                ConnectionString::passwordAdvice());
  // The URL's own settings come after ours, so they win; a server that
  // does not answer is given up on after 10 s instead of libpq's forever.
  const char* keys[] = {"connect_timeout", "application_name", "dbname", nullptr};
  const char* values[] = {"10", "collage", url.c_str(), nullptr};
  conn_ = PQconnectdbParams(keys, values, /*expand_dbname=*/1);
  if (!conn_ || PQstatus(conn_) != CONNECTION_OK) {
    const std::string raw = conn_ ? firstLine(PQerrorMessage(conn_)) : "out of memory";
    PQfinish(conn_);
    conn_ = nullptr;
    const bool login = raw.find("password") != std::string::npos ||
                       raw.find("authentication") != std::string::npos;
    // libpq's text can quote the URL, or the part of it it could not read.
    const std::string why = conninfo_.redact(raw);
    if (!conninfo_.parses())
      throw Error(name + ": not a connection string libpq can read: " + why);
    throw Error(login ? name + ": the server refused the login (wrong user or password? " +
                            ConnectionString::passwordAdvice() + "): " + why
                      : name + ": cannot reach the server (is it running, and is the host right?): " +
                            why);
  }
  try {
    run(conn_, conninfo_, "SET client_min_messages = warning");
    migrate();
  } catch (...) {
    PQfinish(conn_);  // no destructor runs for a constructor that throws
    conn_ = nullptr;
    throw;
  }
}

SharedMeasurementStore::~SharedMeasurementStore() {
  if (conn_) PQfinish(conn_);
}

void SharedMeasurementStore::migrate() {
  run(conn_, conninfo_, "BEGIN");
  try {
    run(conn_, conninfo_, kSchemaLock);
    // Only a store that lacks the tables is created: a role that may only
    // insert measurements never needs to run DDL.
    const int version = schemaVersion();
    if (version > kSchemaVersion)
      throw Error("shared measurement store " + conninfo_.shown() + " has schema version " +
                  std::to_string(version) + ", newer than this program's " +
                  std::to_string(kSchemaVersion) +
                  ": refusing to read or write it; upgrade collage to use this store");
    if (version == 0) {
      run(conn_, conninfo_,
          "CREATE TABLE IF NOT EXISTS collage_schema (version integer NOT NULL)");
      run(conn_, conninfo_, kSchema);
    }
    // Each version's additions, in order: a version-1 store gains the plan
    // runs (by its owner: a role that may only insert cannot, and is told).
    if (version < 2) run(conn_, conninfo_, kPlanRuns);
    if (version < 3) run(conn_, conninfo_, kPlanRunIds);
    if (version < kSchemaVersion)
      run(conn_, conninfo_,
          "INSERT INTO collage_schema (version) VALUES (" + std::to_string(kSchemaVersion) + ")");
    run(conn_, conninfo_, "COMMIT");
  } catch (...) {
    PQclear(PQexec(conn_, "ROLLBACK"));
    throw;
  }
}

int SharedMeasurementStore::schemaVersion() const {
  Result exists = run(conn_, conninfo_, "SELECT to_regclass('collage_schema') IS NOT NULL");
  if (std::string(PQgetvalue(exists.get(), 0, 0)) != "t") return 0;
  Result v = run(conn_, conninfo_, "SELECT coalesce(max(version), 0) FROM collage_schema");
  return std::stoi(PQgetvalue(v.get(), 0, 0));
}

std::optional<MeasurementRecord> SharedMeasurementStore::find(const HardwareFingerprint& fp,
                                                              const MeasurementKey& key) const {
  const std::string id = fp.id();
  Result r =
      run(conn_, conninfo_, kAggregate,
          {id.c_str(), key.backend.c_str(), key.backendVersion.c_str(), key.signatureHash.c_str()});
  if (PQntuples(r.get()) == 0) return std::nullopt;
  return recordFrom(r.get(), 0);
}

bool SharedMeasurementStore::append(const MeasurementRecord& rec) {
  const auto& f = rec.fingerprint;
  const auto& m = rec.measurement;
  // A failure of the machine (measurement.h's FailureCause) is no verdict on
  // the kernel: never the team's.
  if (m.environmental()) return false;
  const std::string id = f.id(), cores = std::to_string(f.cores),
                    threads = std::to_string(f.threads);
  const std::string status(measurementStatusName(m.status));
  const std::string median = number(m.medianNs), spread = number(m.spread), minNs = number(m.minNs),
                    samples = std::to_string(m.samples), seconds = number(m.measureSeconds);
  Result r = run(conn_, conninfo_,
                 "INSERT INTO collage_measurements (fingerprint_id, cpu_vendor, cpu_model, "
                 "isa_flags, cores, threads, library_versions, backend, backend_version, "
                 "signature, signature_text, ops, machine, status, median_ns, spread, min_ns, "
                 "samples, measure_seconds, message) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,"
                 "$12,$13,$14,$15,$16,$17,$18,$19,$20) ON CONFLICT DO NOTHING",
                 {id.c_str(),
                  f.cpuVendor.c_str(),
                  f.cpuModel.c_str(),
                  f.isaFlags.c_str(),
                  cores.c_str(),
                  threads.c_str(),
                  f.libraryVersions.c_str(),
                  rec.key.backend.c_str(),
                  rec.key.backendVersion.c_str(),
                  rec.key.signatureHash.c_str(),
                  rec.signatureText.c_str(),
                  rec.ops.c_str(),
                  machine_.c_str(),
                  status.c_str(),
                  median.c_str(),
                  spread.c_str(),
                  minNs.c_str(),
                  samples.c_str(),
                  seconds.c_str(),
                  m.message.c_str()});
  return std::string(PQcmdTuples(r.get())) == "1";
}

std::optional<double> SharedMeasurementStore::findSwitchCost(const HardwareFingerprint& fp,
                                                             const BackendVersion& from,
                                                             const BackendVersion& to) const {
  // kAggregate's rule for one number: the median of the per-machine medians.
  const std::string id = fp.id();
  Result r = run(
      conn_, conninfo_,
      "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY m) FROM ("
      "  SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY epsilon_ns) AS m"
      "  FROM collage_switch_costs WHERE fingerprint_id = $1 AND from_backend = $2"
      "    AND from_version = $3 AND to_backend = $4 AND to_version = $5"
      "  GROUP BY machine) per_machine",
      {id.c_str(), from.first.c_str(), from.second.c_str(), to.first.c_str(), to.second.c_str()});
  if (PQgetisnull(r.get(), 0, 0)) return std::nullopt;
  return std::stod(PQgetvalue(r.get(), 0, 0));
}

bool SharedMeasurementStore::appendSwitchCost(const HardwareFingerprint& fp,
                                              const BackendVersion& from, const BackendVersion& to,
                                              const Measurement& m) {
  const std::string id = fp.id(), epsilon = number(m.medianNs), spread = number(m.spread),
                    samples = std::to_string(m.samples);
  Result r =
      run(conn_, conninfo_,
          "INSERT INTO collage_switch_costs (fingerprint_id, from_backend, from_version, "
          "to_backend, to_version, machine, epsilon_ns, spread, samples) "
          "VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9) ON CONFLICT DO NOTHING",
          {id.c_str(), from.first.c_str(), from.second.c_str(), to.first.c_str(), to.second.c_str(),
           machine_.c_str(), epsilon.c_str(), spread.c_str(), samples.c_str()});
  return std::string(PQcmdTuples(r.get())) == "1";
}

bool SharedMeasurementStore::appendPlanRun(const HardwareFingerprint& fp, const PlanRunRow& row) {
  const std::string id = fp.id(), ratio = number(row.medianRatio);
  Result r = run(conn_, conninfo_,
                 "INSERT INTO collage_plan_runs (fingerprint_id, model_key, plan_key, incumbent_key, "
                 "machine, genome, status, median_ratio, runs, run_id) VALUES "
                 "($1,$2,$3,$4,$5,$6,$7,$8,$9,$10) ON CONFLICT DO NOTHING",
                 {id.c_str(), row.modelKey.c_str(), row.planKey.c_str(), row.incumbentKey.c_str(),
                  machine_.c_str(), row.genome.c_str(), row.status.c_str(), ratio.c_str(),
                  row.runsJson.c_str(), row.runId.c_str()});
  return std::string(PQcmdTuples(r.get())) == "1";
}

std::optional<SharedMeasurementStore::PlanRunRow> SharedMeasurementStore::findPlanRun(
    const std::string& fingerprintId, const std::string& modelKey, const std::string& planKey,
    const std::string& incumbentKey, const std::string& runId) const {
  // The first machine's answer for that run (a re-timing is a run of its own).
  Result r = run(conn_, conninfo_,
                 "SELECT model_key, plan_key, incumbent_key, machine, genome, status, median_ratio, "
                 "runs, run_id FROM collage_plan_runs WHERE fingerprint_id = $1 AND model_key = $2 AND "
                 "plan_key = $3 AND incumbent_key = $4 AND ($5 = '' OR run_id = $5) ORDER BY id LIMIT 1",
                 {fingerprintId.c_str(), modelKey.c_str(), planKey.c_str(), incumbentKey.c_str(),
                  runId.c_str()});
  if (PQntuples(r.get()) == 0) return std::nullopt;
  PlanRunRow row;
  row.modelKey = PQgetvalue(r.get(), 0, 0);
  row.planKey = PQgetvalue(r.get(), 0, 1);
  row.incumbentKey = PQgetvalue(r.get(), 0, 2);
  row.machine = PQgetvalue(r.get(), 0, 3);
  row.genome = PQgetvalue(r.get(), 0, 4);
  row.status = PQgetvalue(r.get(), 0, 5);
  row.medianRatio = std::stod(PQgetvalue(r.get(), 0, 6));
  row.runsJson = PQgetvalue(r.get(), 0, 7);
  row.runId = PQgetvalue(r.get(), 0, 8);
  return row;
}

std::string SharedMeasurementStore::lockName(const HardwareFingerprint& fp,
                                             const MeasurementKey& key) {
  // The row's unique key, less the machine: the claim is across machines.
  return fp.id() + '\x1f' + key.backend + '\x1f' + key.backendVersion + '\x1f' + key.signatureHash;
}

// Advisory locks take a 64-bit number: the name's hash (a collision only
// makes one kernel wait for another).
bool SharedMeasurementStore::tryLock(const std::string& lockName) {
  Result r = run(conn_, conninfo_, "SELECT pg_try_advisory_lock(hashtextextended($1, 27))",
                 {lockName.c_str()});
  return std::string(PQgetvalue(r.get(), 0, 0)) == "t";
}

void SharedMeasurementStore::unlock(const std::string& lockName) {
  run(conn_, conninfo_, "SELECT pg_advisory_unlock(hashtextextended($1, 27))",
      {lockName.c_str()});
}

std::vector<MeasurementRecord> SharedMeasurementStore::aggregated() const {
  Result r = run(conn_, conninfo_, kAggregate, {nullptr, nullptr, nullptr, nullptr});
  std::vector<MeasurementRecord> out;
  for (int i = 0; i < PQntuples(r.get()); ++i) out.push_back(recordFrom(r.get(), i));
  return out;
}

SharedMeasurementStore::Stats SharedMeasurementStore::stats() const {
  Result r = run(conn_, conninfo_,
                 "SELECT count(*), count(DISTINCT (fingerprint_id, backend, backend_version, "
                 "signature)), count(DISTINCT machine) FROM collage_measurements");
  return Stats{std::stoll(PQgetvalue(r.get(), 0, 0)), std::stoll(PQgetvalue(r.get(), 0, 1)),
               std::stoll(PQgetvalue(r.get(), 0, 2))};
}

}  // namespace collage
