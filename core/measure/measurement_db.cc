#include "core/measure/measurement_db.h"

#include <sqlite3.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <utility>

#include "core/ir/error.h"
#include "core/measure/shared_store.h"

namespace fs = std::filesystem;

namespace collage {
namespace {

// A prepared statement that finalizes itself.
class Statement {
 public:
  Statement(sqlite3* db, const std::string& sql, const std::string& path) : db_(db) {
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt_, nullptr) != SQLITE_OK)
      throw Error(path + ": " + sqlite3_errmsg(db));
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement& bind(int i, const std::string& v) {
    sqlite3_bind_text(stmt_, i, v.c_str(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Statement& bind(int i, double v) {
    sqlite3_bind_double(stmt_, i, v);
    return *this;
  }
  Statement& bind(int i, int64_t v) {
    sqlite3_bind_int64(stmt_, i, v);
    return *this;
  }
  bool step() {
    int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    throw Error(std::string("database error: ") + sqlite3_errmsg(db_));
  }
  std::string text(int col) const {
    const unsigned char* t = sqlite3_column_text(stmt_, col);
    return t ? reinterpret_cast<const char*>(t) : "";
  }
  double real(int col) const { return sqlite3_column_double(stmt_, col); }
  int64_t integer(int col) const { return sqlite3_column_int64(stmt_, col); }

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
};

std::string nowIso8601() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

// Version 1 was the first prototype's table: a fingerprint id, a signature
// and a median. Version 2 keeps every field of the fingerprint in its own
// column and the samples' statistics. Version 3 adds the switching costs
// (early version-2 files lack that table). Version 4 adds the whole plans
// the graph-level search ran (plan_runs). Version 5 adds where a row came
// from (origin: 'local', measured here; 'shared', read from the shared store
// and cached), so that `db push` sends only this machine's own. Version 6
// adds why a failure happened when the machine, not the kernel, was at fault
// (cause: measurement.h's FailureCause; '' for the kernel's own): such rows
// are kept for the record but are no verdict, never found nor pushed.
// Version 7 adds the measured links between devices (links), version 8
// the decode runs measured on N ranks (decode_runs). Every
// statement creates only what is missing, so the same text brings any older
// file up to date (origin and cause are added by migrate()).
const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS measurements (
  fingerprint_id   TEXT NOT NULL,
  cpu_vendor       TEXT NOT NULL DEFAULT '',
  cpu_model        TEXT NOT NULL DEFAULT '',
  isa_flags        TEXT NOT NULL DEFAULT '',
  cores            INTEGER NOT NULL DEFAULT 0,
  threads          INTEGER NOT NULL DEFAULT 0,
  library_versions TEXT NOT NULL DEFAULT '',
  backend          TEXT NOT NULL,
  backend_version  TEXT NOT NULL DEFAULT '',
  signature        TEXT NOT NULL,
  signature_text   TEXT NOT NULL DEFAULT '',
  ops              TEXT NOT NULL DEFAULT '',
  status           TEXT NOT NULL,
  median_ns        REAL NOT NULL DEFAULT 0,
  spread           REAL NOT NULL DEFAULT 0,
  min_ns           REAL NOT NULL DEFAULT 0,
  samples          INTEGER NOT NULL DEFAULT 0,
  measure_seconds  REAL NOT NULL DEFAULT 0,
  message          TEXT NOT NULL DEFAULT '',
  measured_at      TEXT NOT NULL DEFAULT '',
  origin           TEXT NOT NULL DEFAULT 'local',
  cause            TEXT NOT NULL DEFAULT '',
  PRIMARY KEY (fingerprint_id, backend, backend_version, signature)
);
CREATE TABLE IF NOT EXISTS switch_costs (
  fingerprint_id TEXT NOT NULL,
  from_backend   TEXT NOT NULL,
  from_version   TEXT NOT NULL,
  to_backend     TEXT NOT NULL,
  to_version     TEXT NOT NULL,
  epsilon_ns     REAL NOT NULL,
  spread         REAL NOT NULL DEFAULT 0,
  samples        INTEGER NOT NULL DEFAULT 0,
  measured_at    TEXT NOT NULL DEFAULT '',
  PRIMARY KEY (fingerprint_id, from_backend, from_version, to_backend, to_version)
);
CREATE TABLE IF NOT EXISTS plan_runs (
  fingerprint_id TEXT NOT NULL,
  model_key      TEXT NOT NULL,
  base_key       TEXT NOT NULL,
  plan_key       TEXT NOT NULL,
  genome         TEXT NOT NULL DEFAULT '',
  status         TEXT NOT NULL,
  relative_cost  REAL NOT NULL DEFAULT 0,
  median_ms      REAL NOT NULL DEFAULT 0,
  rounds         INTEGER NOT NULL DEFAULT 0,
  message        TEXT NOT NULL DEFAULT '',
  measured_at    TEXT NOT NULL DEFAULT '',
  PRIMARY KEY (fingerprint_id, model_key, base_key, plan_key)
);
CREATE TABLE IF NOT EXISTS links (
  fingerprint_id  TEXT NOT NULL,
  transport       TEXT NOT NULL,
  protocol        TEXT NOT NULL,
  endpoints       TEXT NOT NULL,
  latency_s       REAL NOT NULL,
  bandwidth_bps   REAL NOT NULL,
  sizes           INTEGER NOT NULL DEFAULT 0,
  worst_error     REAL NOT NULL DEFAULT 0,
  measured_at     TEXT NOT NULL DEFAULT '',
  PRIMARY KEY (fingerprint_id, transport, protocol, endpoints)
);
CREATE TABLE IF NOT EXISTS decode_runs (
  fingerprint_id  TEXT NOT NULL,
  model_key       TEXT NOT NULL,
  strategy        TEXT NOT NULL,
  ranks           INTEGER NOT NULL,
  threads         INTEGER NOT NULL,
  context         INTEGER NOT NULL,
  capacity        INTEGER NOT NULL DEFAULT 0,
  steps           INTEGER NOT NULL DEFAULT 0,
  step_ms         REAL NOT NULL,
  attention_ms    REAL NOT NULL DEFAULT 0,
  exchange_ms     REAL NOT NULL DEFAULT 0,
  tokens_per_s    REAL NOT NULL DEFAULT 0,
  detail          TEXT NOT NULL DEFAULT '',
  measured_at     TEXT NOT NULL DEFAULT '',
  PRIMARY KEY (fingerprint_id, model_key, strategy, ranks, threads, context)
);
)sql";

}  // namespace

std::string MeasurementDb::defaultPath() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg)
    return std::string(xdg) + "/collage-studio/measurements.sqlite";
  const char* home = std::getenv("HOME");
  return std::string(home ? home : ".") + "/.cache/collage-studio/measurements.sqlite";
}

MeasurementDb::MeasurementDb(const std::string& location, const std::string& localPath)
    : path_(SharedMeasurementStore::isUrl(location)
                ? (localPath.empty() ? defaultPath() : localPath)
                : location) {
  const std::string& path = path_;
  fs::path p(path);
  if (p.has_parent_path()) {
    std::error_code ec;
    fs::create_directories(p.parent_path(), ec);
  }
  if (sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) !=
      SQLITE_OK) {
    std::string msg = db_ ? sqlite3_errmsg(db_) : "out of memory";
    sqlite3_close(db_);
    db_ = nullptr;
    throw Error(path + ": cannot open the measurement database: " + msg);
  }
  // Readers and writers from several processes: wait instead of failing.
  sqlite3_busy_timeout(db_, 10000);
  try {
    exec("PRAGMA journal_mode=WAL");
    exec("PRAGMA synchronous=NORMAL");
    migrate();
  } catch (const Error& e) {
    sqlite3_close(db_);
    db_ = nullptr;
    throw Error(path + ": not a usable measurement database (" + e.what() + ")");
  }
  // The store after the file, so that a broken file is reported as such.
  if (SharedMeasurementStore::isUrl(location)) {
    try {
      shared_ = std::make_unique<SharedMeasurementStore>(location);
    } catch (...) {
      sqlite3_close(db_);  // no destructor runs for a constructor that throws
      db_ = nullptr;
      throw;
    }
  }
}

MeasurementDb::~MeasurementDb() {
  if (db_) sqlite3_close(db_);
}

MeasurementDb::Claim::Claim(Claim&& other) noexcept
    : store_(std::exchange(other.store_, nullptr)), lock_(std::move(other.lock_)) {}

MeasurementDb::Claim& MeasurementDb::Claim::operator=(Claim&& other) noexcept {
  if (this != &other) {
    Claim gone(std::move(*this));
    store_ = std::exchange(other.store_, nullptr);
    lock_ = std::move(other.lock_);
  }
  return *this;
}

MeasurementDb::Claim::~Claim() {
  if (!store_) return;
  try {
    store_->unlock(lock_);
  } catch (const Error&) {
    // The connection is gone, and the server ended the lock with it.
  }
}

std::optional<MeasurementDb::Claim> MeasurementDb::tryClaim(const HardwareFingerprint& fp,
                                                            const MeasurementKey& key) {
  Claim claim;
  if (!shared()) return claim;
  std::string lock = SharedMeasurementStore::lockName(fp, key);
  try {
    if (!shared()->tryLock(lock)) return std::nullopt;
  } catch (const Error& e) {
    loseShared(e.what());
    return claim;
  }
  claim.store_ = shared_.get();
  claim.lock_ = std::move(lock);
  return claim;
}

std::string MeasurementDb::sharedUrl() const { return shared_ ? shared_->url() : ""; }

void MeasurementDb::exec(const std::string& sql) const {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    throw Error(msg);
  }
}

int MeasurementDb::schemaVersion() const {
  Statement s(db_, "PRAGMA user_version", path_);
  return s.step() ? static_cast<int>(s.integer(0)) : 0;
}

void MeasurementDb::migrate() {
  exec("BEGIN IMMEDIATE");
  try {
    int version = schemaVersion();
    if (version > kSchemaVersion)
      throw Error("its schema version " + std::to_string(version) +
                  " is newer than this program's " + std::to_string(kSchemaVersion));
    if (version == 1) {
      // v1: measurements(fingerprint, backend, signature, median_ns, status).
      exec("ALTER TABLE measurements RENAME TO measurements_v1");
      exec(kSchema);
      exec("INSERT OR REPLACE INTO measurements (fingerprint_id, backend, signature, status, "
           "median_ns, samples) SELECT fingerprint, backend, signature, status, median_ns, 1 "
           "FROM measurements_v1");
      exec("DROP TABLE measurements_v1");
    }
    if (version < kSchemaVersion) exec(kSchema);  // 0: a new file; 2, 3: adds what is missing
    // Rows from before version 5 were measured here (or copied by hand):
    // 'local'. Version 1 was recreated above with the column.
    bool hasOrigin = false;
    {
      Statement columns(db_, "SELECT 1 FROM pragma_table_info('measurements') WHERE name='origin'",
                        path_);
      hasOrigin = columns.step();
    }
    if (!hasOrigin)
      exec("ALTER TABLE measurements ADD COLUMN origin TEXT NOT NULL DEFAULT 'local'");
    bool hasCause = false;
    {
      Statement columns(db_, "SELECT 1 FROM pragma_table_info('measurements') WHERE name='cause'",
                        path_);
      hasCause = columns.step();
    }
    if (!hasCause) {
      exec("ALTER TABLE measurements ADD COLUMN cause TEXT NOT NULL DEFAULT ''");
      // Failures stored before version 6 whose message shows the machine
      // at fault get their cause, so that they heal: measured again on the
      // next run. Timeouts were never checked for a busy machine: each is
      // measured again once ('unchecked'); reproduced then, it is kept.
      exec("UPDATE measurements SET cause='timing_lock' WHERE status='failed' AND "
           "message LIKE '%machine''s timing lock%'");
      exec("UPDATE measurements SET cause='out_of_memory' WHERE status='failed' AND cause='' AND "
           "message LIKE '%bad_alloc%'");
      exec("UPDATE measurements SET cause='killed' WHERE status='failed' AND cause='' AND "
           "(message LIKE '%(signal Killed)%' OR message LIKE '%(signal Terminated)%' OR "
           "message LIKE '%(signal Interrupt)%' OR message LIKE '%(signal Hangup)%' OR "
           "message LIKE '%(signal Quit)%')");
      exec("UPDATE measurements SET cause='unchecked' WHERE status='timed_out'");
    }
    exec("PRAGMA user_version = " + std::to_string(kSchemaVersion));
    exec("COMMIT");
  } catch (...) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
}

std::optional<Measurement> MeasurementDb::find(const HardwareFingerprint& fp,
                                               const MeasurementKey& key) const {
  Statement s(db_,
              "SELECT status, median_ns, spread, min_ns, samples, measure_seconds, message, origin "
              "FROM measurements WHERE fingerprint_id=? AND backend=? AND backend_version=? AND "
              "signature=? AND cause=''",
              path_);
  s.bind(1, fp.id()).bind(2, key.backend).bind(3, key.backendVersion).bind(4, key.signatureHash);
  if (!s.step()) {
    if (!shared()) return std::nullopt;
    std::optional<MeasurementRecord> hit;
    try {
      hit = shared()->find(fp, key);
    } catch (const Error& e) {
      loseShared(e.what());
      return std::nullopt;
    }
    if (!hit) return std::nullopt;
    // Kept in the file, so that the next run here does not ask the server.
    // (A cache fill, not a change of what this object answers: hence const.)
    const_cast<MeasurementDb*>(this)->storeLocal(*hit, "shared", /*replace=*/false);
    Measurement m = hit->measurement;
    m.fromShared = true;
    return m;
  }
  Measurement m;
  m.status = measurementStatusFromName(s.text(0));
  m.medianNs = s.real(1);
  m.spread = s.real(2);
  m.minNs = s.real(3);
  m.samples = static_cast<int32_t>(s.integer(4));
  m.measureSeconds = s.real(5);
  m.message = s.text(6);
  m.fromShared = s.text(7) == "shared";
  m.fromCache = true;
  return m;
}

void MeasurementDb::store(const MeasurementRecord& r) {
  // A skipped kernel was judged against the other candidates of one model
  // (reference_skips.h), never measured: no fact about the kernel to keep.
  if (r.measurement.status == MeasurementStatus::Skipped) return;
  storeLocal(r, "local", /*replace=*/true);
  // A failure of the machine (its timing lock, its memory, a busy or killed
  // worker) is kept in the file for the record, where find() passes over
  // it, and never shared: it is no verdict on the kernel.
  if (r.measurement.environmental()) return;
  if (!shared()) return;
  try {
    shared()->append(r);
  } catch (const Error& e) {
    loseShared(e.what());  // the row is in the file: push sends it later
  }
}

void MeasurementDb::loseShared(const std::string& why) const {
  if (sharedProblem_.empty())
    sharedProblem_ = why + "; going on with " + path_ +
                     " only (`collage db push` sends what was measured meanwhile)";
}

bool MeasurementDb::storeLocal(const MeasurementRecord& r, const char* origin, bool replace) {
  Statement s(db_,
              std::string(replace ? "INSERT OR REPLACE" : "INSERT OR IGNORE") +
                  " INTO measurements (fingerprint_id, cpu_vendor, cpu_model, "
                  "isa_flags, cores, threads, library_versions, backend, backend_version, "
                  "signature, signature_text, ops, status, median_ns, spread, min_ns, samples, "
                  "measure_seconds, message, measured_at, origin, cause) "
                  "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
              path_);
  const auto& f = r.fingerprint;
  const auto& m = r.measurement;
  s.bind(1, f.id()).bind(2, f.cpuVendor).bind(3, f.cpuModel).bind(4, f.isaFlags);
  s.bind(5, int64_t{f.cores}).bind(6, int64_t{f.threads}).bind(7, f.libraryVersions);
  s.bind(8, r.key.backend).bind(9, r.key.backendVersion).bind(10, r.key.signatureHash);
  s.bind(11, r.signatureText).bind(12, r.ops);
  s.bind(13, std::string(measurementStatusName(m.status))).bind(14, m.medianNs).bind(15, m.spread);
  s.bind(16, m.minNs).bind(17, int64_t{m.samples}).bind(18, m.measureSeconds).bind(19, m.message);
  s.bind(20, r.measuredAt.empty() ? nowIso8601() : r.measuredAt);
  s.bind(21, std::string(origin));
  s.bind(22, std::string(m.status == MeasurementStatus::Ok ? "" : failureCauseName(m.cause)));
  s.step();
  return sqlite3_changes(db_) > 0;
}

namespace {
// The rows of `measurements` that pass `where` (SQL), in the order of an export.
std::vector<MeasurementRecord> readRecords(sqlite3* db, const std::string& path,
                                           const std::string& where) {
  Statement s(db,
              "SELECT cpu_vendor, cpu_model, isa_flags, cores, threads, library_versions, backend, "
              "backend_version, signature, signature_text, ops, status, median_ns, spread, min_ns, "
              "samples, measure_seconds, message, measured_at, cause FROM measurements WHERE " +
                  where + " ORDER BY backend, ops, signature",
              path);
  std::vector<MeasurementRecord> out;
  while (s.step()) {
    MeasurementRecord r;
    r.fingerprint = HardwareFingerprint{s.text(0), s.text(1), s.text(2),
                                        static_cast<int>(s.integer(3)),
                                        static_cast<int>(s.integer(4)), s.text(5)};
    r.key = MeasurementKey{s.text(6), s.text(7), s.text(8)};
    r.signatureText = s.text(9);
    r.ops = s.text(10);
    r.measurement.status = measurementStatusFromName(s.text(11));
    r.measurement.medianNs = s.real(12);
    r.measurement.spread = s.real(13);
    r.measurement.minNs = s.real(14);
    r.measurement.samples = static_cast<int32_t>(s.integer(15));
    r.measurement.measureSeconds = s.real(16);
    r.measurement.message = s.text(17);
    r.measuredAt = s.text(18);
    r.measurement.cause = failureCauseFromName(s.text(19));
    out.push_back(std::move(r));
  }
  return out;
}
}  // namespace

std::vector<MeasurementRecord> MeasurementDb::all() const { return readRecords(db_, path_, "1"); }

MeasurementCopyReport MeasurementDb::push() {
  if (!shared_) throw Error(path_ + ": push and pull need a shared store (--db postgresql://...)");
  MeasurementCopyReport report;
  // One row at a time, each committed: a push cut short is simply run again.
  // Not the machine's failures: they are no verdict to share.
  for (const auto& r : readRecords(db_, path_, "origin = 'local' AND cause = ''"))
    ++(shared_->append(r) ? report.copied : report.present);
  return report;
}

MeasurementCopyReport MeasurementDb::pull() {
  if (!shared_) throw Error(path_ + ": push and pull need a shared store (--db postgresql://...)");
  MeasurementCopyReport report;
  exec("BEGIN");
  try {
    for (const auto& r : shared_->aggregated())
      ++(storeLocal(r, "shared", /*replace=*/false) ? report.copied : report.present);
    exec("COMMIT");
  } catch (...) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
  return report;
}

MeasurementDbStats MeasurementDb::stats(const HardwareFingerprint& current) const {
  MeasurementDbStats st;
  st.path = path_;
  st.schemaVersion = schemaVersion();
  {
    Statement s(db_,
                "SELECT COUNT(*), SUM(status='ok'), COUNT(DISTINCT fingerprint_id), "
                "SUM(fingerprint_id=?) FROM measurements",
                path_);
    s.bind(1, current.id());
    if (s.step()) {
      st.rows = s.integer(0);
      st.okRows = s.integer(1);
      st.fingerprints = s.integer(2);
      st.thisMachineRows = s.integer(3);
    }
  }
  Statement s(db_, "SELECT backend, COUNT(*) FROM measurements GROUP BY backend ORDER BY backend",
              path_);
  while (s.step()) st.perBackend.emplace_back(s.text(0), s.integer(1));
  if (shared_) {
    const SharedMeasurementStore::Stats shared = shared_->stats();
    st.sharedUrl = shared_->url();
    st.sharedRows = shared.rows;
    st.sharedKeys = shared.keys;
    st.sharedMachines = shared.machines;
  }
  return st;
}

std::optional<double> MeasurementDb::findSwitchCost(const HardwareFingerprint& fp,
                                                    const BackendVersion& from,
                                                    const BackendVersion& to) const {
  Statement s(db_,
              "SELECT epsilon_ns FROM switch_costs WHERE fingerprint_id=? AND from_backend=? AND "
              "from_version=? AND to_backend=? AND to_version=?",
              path_);
  s.bind(1, fp.id()).bind(2, from.first).bind(3, from.second).bind(4, to.first).bind(5, to.second);
  if (s.step()) return s.real(0);
  if (!shared()) return std::nullopt;
  std::optional<double> shared;
  try {
    shared = this->shared()->findSwitchCost(fp, from, to);
  } catch (const Error& e) {
    loseShared(e.what());
  }
  if (shared) {  // kept in the file, as find() does
    Measurement m;
    m.medianNs = *shared;
    const_cast<MeasurementDb*>(this)->storeSwitchCostLocal(fp, from, to, m);
  }
  return shared;
}

void MeasurementDb::storeSwitchCost(const HardwareFingerprint& fp, const BackendVersion& from,
                                    const BackendVersion& to, const Measurement& m) {
  storeSwitchCostLocal(fp, from, to, m);
  if (!shared()) return;
  try {
    shared()->appendSwitchCost(fp, from, to, m);
  } catch (const Error& e) {
    loseShared(e.what());
  }
}

void MeasurementDb::storeSwitchCostLocal(const HardwareFingerprint& fp, const BackendVersion& from,
                                         const BackendVersion& to, const Measurement& m) {
  Statement s(db_,
              "INSERT OR REPLACE INTO switch_costs (fingerprint_id, from_backend, from_version, "
              "to_backend, to_version, epsilon_ns, spread, samples, measured_at) "
              "VALUES (?,?,?,?,?,?,?,?,?)",
              path_);
  s.bind(1, fp.id()).bind(2, from.first).bind(3, from.second).bind(4, to.first).bind(5, to.second);
  s.bind(6, m.medianNs).bind(7, m.spread).bind(8, int64_t{m.samples}).bind(9, nowIso8601());
  s.step();
}

std::optional<LinkRecord> MeasurementDb::findLink(const HardwareFingerprint& fp,
                                                  const LinkKey& key) const {
  Statement s(db_,
              "SELECT latency_s, bandwidth_bps, sizes, worst_error, measured_at FROM links WHERE "
              "fingerprint_id=? AND transport=? AND protocol=? AND endpoints=?",
              path_);
  s.bind(1, fp.id()).bind(2, key.transport).bind(3, key.protocol).bind(4, key.endpoints);
  if (!s.step()) return std::nullopt;
  LinkRecord r;
  r.key = key;
  r.latencySeconds = s.real(0);
  r.bandwidthBytesPerSecond = s.real(1);
  r.sizes = static_cast<int>(s.integer(2));
  r.worstError = s.real(3);
  r.measuredAt = s.text(4);
  return r;
}

void MeasurementDb::storeLink(const HardwareFingerprint& fp, const LinkRecord& r) {
  Statement s(db_,
              "INSERT OR REPLACE INTO links (fingerprint_id, transport, protocol, endpoints, "
              "latency_s, bandwidth_bps, sizes, worst_error, measured_at) VALUES (?,?,?,?,?,?,?,?,?)",
              path_);
  s.bind(1, fp.id()).bind(2, r.key.transport).bind(3, r.key.protocol).bind(4, r.key.endpoints);
  s.bind(5, r.latencySeconds).bind(6, r.bandwidthBytesPerSecond).bind(7, int64_t{r.sizes});
  s.bind(8, r.worstError).bind(9, nowIso8601());
  s.step();
}

std::vector<DecodeRunRecord> MeasurementDb::findDecodeRuns(const HardwareFingerprint& fp,
                                                           const std::string& modelKey) const {
  Statement s(db_,
              "SELECT strategy, ranks, threads, context, capacity, steps, step_ms, attention_ms, "
              "exchange_ms, tokens_per_s, detail, measured_at FROM decode_runs WHERE "
              "fingerprint_id=? AND model_key=? ORDER BY strategy, ranks, threads, context",
              path_);
  s.bind(1, fp.id()).bind(2, modelKey);
  std::vector<DecodeRunRecord> out;
  while (s.step()) {
    DecodeRunRecord r;
    r.modelKey = modelKey;
    r.strategy = s.text(0);
    r.ranks = static_cast<int>(s.integer(1));
    r.threadsPerRank = static_cast<int>(s.integer(2));
    r.context = s.integer(3);
    r.capacity = s.integer(4);
    r.steps = s.integer(5);
    r.stepMs = s.real(6);
    r.attentionMs = s.real(7);
    r.exchangeMs = s.real(8);
    r.tokensPerSecond = s.real(9);
    r.detail = s.text(10);
    r.measuredAt = s.text(11);
    out.push_back(std::move(r));
  }
  return out;
}

void MeasurementDb::storeDecodeRun(const HardwareFingerprint& fp, const DecodeRunRecord& r) {
  if (r.modelKey.empty() || r.strategy.empty() || r.ranks < 1 || r.threadsPerRank < 1 ||
      r.context < 0)
    throw Error(path_ + ": a decode run needs a model, a strategy, ranks, threads and a context");
  Statement s(db_,
              "INSERT OR REPLACE INTO decode_runs (fingerprint_id, model_key, strategy, ranks, "
              "threads, context, capacity, steps, step_ms, attention_ms, exchange_ms, "
              "tokens_per_s, detail, measured_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
              path_);
  s.bind(1, fp.id()).bind(2, r.modelKey).bind(3, r.strategy).bind(4, int64_t{r.ranks});
  s.bind(5, int64_t{r.threadsPerRank}).bind(6, r.context).bind(7, r.capacity).bind(8, r.steps);
  s.bind(9, r.stepMs).bind(10, r.attentionMs).bind(11, r.exchangeMs).bind(12, r.tokensPerSecond);
  s.bind(13, r.detail).bind(14, nowIso8601());
  s.step();
}

std::vector<PlanRunRecord> MeasurementDb::findPlanRuns(const HardwareFingerprint& fp,
                                                       const std::string& modelKey,
                                                       const std::string& baseKey) const {
  Statement s(db_,
              "SELECT plan_key, genome, status, relative_cost, median_ms, rounds, message, measured_at "
              "FROM plan_runs WHERE fingerprint_id=? AND model_key=? AND base_key=? "
              "ORDER BY relative_cost",
              path_);
  s.bind(1, fp.id()).bind(2, modelKey).bind(3, baseKey);
  std::vector<PlanRunRecord> records;
  while (s.step()) {
    PlanRunRecord r;
    r.modelKey = modelKey;
    r.baseKey = baseKey;
    r.planKey = s.text(0);
    r.genome = s.text(1);
    r.status = measurementStatusFromName(s.text(2));
    r.relativeCost = s.real(3);
    r.medianMs = s.real(4);
    r.rounds = static_cast<int>(s.integer(5));
    r.message = s.text(6);
    r.measuredAt = s.text(7);
    // A timed-out run was stored by older versions: no verdict, retried.
    if (r.status == MeasurementStatus::TimedOut) continue;
    records.push_back(std::move(r));
  }
  return records;
}

void MeasurementDb::storePlanRun(const HardwareFingerprint& fp, const PlanRunRecord& r) {
  Statement s(db_,
              "INSERT OR REPLACE INTO plan_runs (fingerprint_id, model_key, base_key, plan_key, genome, "
              "status, relative_cost, median_ms, rounds, message, measured_at) "
              "VALUES (?,?,?,?,?,?,?,?,?,?,?)",
              path_);
  s.bind(1, fp.id()).bind(2, r.modelKey).bind(3, r.baseKey).bind(4, r.planKey).bind(5, r.genome);
  s.bind(6, std::string(measurementStatusName(r.status))).bind(7, r.relativeCost).bind(8, r.medianMs);
  s.bind(9, int64_t{r.rounds}).bind(10, r.message).bind(11, nowIso8601());
  s.step();
}

int64_t MeasurementDb::clear(const std::string& backend) {
  if (backend.empty()) {
    exec("DELETE FROM plan_runs");
    exec("DELETE FROM switch_costs");
    exec("DELETE FROM measurements");
  } else {
    Statement s(db_, "DELETE FROM measurements WHERE backend=?", path_);
    s.bind(1, backend);
    s.step();
  }
  return sqlite3_changes(db_);
}

namespace {
std::string csvField(const std::string& v) {
  if (v.find_first_of(",\"\n\r") == std::string::npos) return v;
  std::string out = "\"";
  for (char c : v) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}
}  // namespace

void MeasurementDb::exportCsv(const std::string& path) const {
  std::ofstream out(path, std::ios::trunc);
  if (!out) throw Error(path + ": cannot write");
  out << "backend,backend_version,ops,status,median_ms,spread_percent,min_ms,samples,"
         "measure_seconds,message,measured_at,cpu_model,cores,threads,library_versions,signature,"
         "signature_text\n";
  for (const auto& r : all()) {
    const auto& m = r.measurement;
    out << csvField(r.key.backend) << ',' << csvField(r.key.backendVersion) << ','
        << csvField(r.ops) << ',' << measurementStatusName(m.status) << ',' << m.medianNs / 1e6
        << ',' << m.spread * 100 << ',' << m.minNs / 1e6 << ',' << m.samples << ','
        << m.measureSeconds << ',' << csvField(m.message) << ',' << r.measuredAt << ','
        << csvField(r.fingerprint.cpuModel) << ',' << r.fingerprint.cores << ','
        << r.fingerprint.threads << ',' << csvField(r.fingerprint.libraryVersions) << ','
        << r.key.signatureHash << ',' << csvField(r.signatureText) << '\n';
  }
  if (!out) throw Error(path + ": write failed");
}

}  // namespace collage
