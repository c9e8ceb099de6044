#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "core/patterns/candidate_signature.h"
#include "core/ir/error.h"
#include "core/measure/measurement_db.h"

namespace collage {
namespace {

std::string tempPath(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("collage_db_test_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  auto p = dir / name;
  std::filesystem::remove(p);
  return p.string();
}

MeasurementRecord record(const std::string& signature, double median) {
  MeasurementRecord r;
  r.fingerprint = HardwareFingerprint{"Vendor", "Model X", "avx2 fma", 2, 2, "lib=1"};
  r.key = MeasurementKey{"onednn", "2.6.3", signature};
  r.ops = "Conv+Relu";
  r.signatureText = "Conv {} (in0 float32[1x3x8x8])";
  r.measurement.status = MeasurementStatus::Ok;
  r.measurement.medianNs = median;
  r.measurement.spread = 0.02;
  r.measurement.samples = 9;
  return r;
}

TEST(MeasurementDb, RoundTripIsKeyedByFingerprintBackendVersionAndSignature) {
  std::string path = tempPath("roundtrip.sqlite");
  MeasurementDb db(path);
  EXPECT_EQ(db.schemaVersion(), MeasurementDb::kSchemaVersion);
  MeasurementRecord r = record("abc", 1234.5);
  db.store(r);
  auto hit = db.find(r.fingerprint, r.key);
  ASSERT_TRUE(hit);
  EXPECT_TRUE(hit->fromCache);
  EXPECT_DOUBLE_EQ(hit->medianNs, 1234.5);
  EXPECT_EQ(hit->samples, 9);
  // Another machine, another library version, another signature: misses.
  HardwareFingerprint other = r.fingerprint;
  other.threads = 1;
  EXPECT_FALSE(db.find(other, r.key));
  EXPECT_FALSE(db.find(r.fingerprint, MeasurementKey{"onednn", "3.0", "abc"}));
  EXPECT_FALSE(db.find(r.fingerprint, MeasurementKey{"onednn", "2.6.3", "abd"}));
  // Reopened from disk, still there; stats and CSV agree.
  MeasurementDb again(path);
  EXPECT_TRUE(again.find(r.fingerprint, r.key));
  auto st = again.stats(r.fingerprint);
  EXPECT_EQ(st.rows, 1);
  EXPECT_EQ(st.thisMachineRows, 1);
  std::string csv = tempPath("export.csv");
  again.exportCsv(csv);
  std::ifstream in(csv);
  std::string header, row;
  std::getline(in, header);
  std::getline(in, row);
  EXPECT_EQ(header.rfind("backend,backend_version,ops,status,median_ms", 0), 0u);
  EXPECT_EQ(row.rfind("onednn,2.6.3,Conv+Relu,ok,0.0012345", 0), 0u) << row;
  EXPECT_EQ(again.clear(), 1);
  EXPECT_FALSE(again.find(r.fingerprint, r.key));
}

// A reference kernel skipped by the optimizer (core/measure/reference_skips.h)
// was never measured: the database keeps nothing for it, so that another
// model, where it may be the only candidate, measures it.
TEST(MeasurementDb, ASkippedKernelIsNeverStored) {
  MeasurementDb db(tempPath("skipped.sqlite"));
  MeasurementRecord r = record("ref", 0);
  r.measurement.status = MeasurementStatus::Skipped;
  r.measurement.message = "reference kernel estimated at 61.0 s per run";
  db.store(r);
  EXPECT_FALSE(db.find(r.fingerprint, r.key));
  EXPECT_EQ(db.stats(r.fingerprint).rows, 0);
}

// The graph-level search's plan runs: keyed by machine, model, starting
// plan and plan; read back cheapest first, failures with their reason.
TEST(MeasurementDb, PlanRunsAreKeyedByMachineModelAndStartingPlan) {
  MeasurementDb db(tempPath("plan_runs.sqlite"));
  const HardwareFingerprint here = record("s", 1).fingerprint;
  HardwareFingerprint other = here;
  other.threads = 4;
  auto run = [](const std::string& plan, double cost, MeasurementStatus status = MeasurementStatus::Ok) {
    PlanRunRecord r;
    r.modelKey = "sha256:abc;x=1x3";
    r.baseKey = "base";
    r.planKey = plan;
    r.genome = "0110";
    r.status = status;
    r.relativeCost = cost;
    r.medianMs = cost * 2;
    r.rounds = 9;
    r.message = status == MeasurementStatus::Ok ? "" : "onednn refused it";
    return r;
  };
  db.storePlanRun(here, run("p1", 0.95));
  db.storePlanRun(here, run("p2", 0.90));
  db.storePlanRun(here, run("p3", 0, MeasurementStatus::Invalid));
  db.storePlanRun(here, run("p1", 0.97));  // measured again: replaces
  db.storePlanRun(other, run("p4", 0.5));
  PlanRunRecord elsewhere = run("p5", 0.5);
  elsewhere.baseKey = "another start";
  db.storePlanRun(here, elsewhere);
  // Stored by older versions: a timed-out run is no verdict (one busy minute
  // must not rule a plan out on this machine for good), so it is not found.
  db.storePlanRun(here, run("p6", 0, MeasurementStatus::TimedOut));

  const std::vector<PlanRunRecord> found = db.findPlanRuns(here, "sha256:abc;x=1x3", "base");
  ASSERT_EQ(found.size(), 3u);
  EXPECT_EQ(found[0].planKey, "p3");  // cost 0, but not Ok: the reader checks the status
  EXPECT_EQ(found[0].status, MeasurementStatus::Invalid);
  EXPECT_EQ(found[0].message, "onednn refused it");
  EXPECT_EQ(found[1].planKey, "p2");
  EXPECT_EQ(found[2].planKey, "p1");
  EXPECT_DOUBLE_EQ(found[2].relativeCost, 0.97);
  EXPECT_EQ(found[2].genome, "0110");
  EXPECT_EQ(found[2].rounds, 9);
  EXPECT_FALSE(found[2].measuredAt.empty());
  EXPECT_TRUE(db.findPlanRuns(here, "sha256:other", "base").empty());
  db.clear();
  EXPECT_TRUE(db.findPlanRuns(here, "sha256:abc;x=1x3", "base").empty());
}

// Runs on N ranks (generate --cache-parallel | --data-parallel): one row per
// machine, model, strategy, ranks, threads and context; measured again, it
// replaces the row; another model or machine sees none.
TEST(MeasurementDb, DecodeRunsAreKeyedByModelStrategyRanksThreadsAndContext) {
  MeasurementDb db(tempPath("decode_runs.sqlite"));
  const HardwareFingerprint here = record("s", 1).fingerprint;
  HardwareFingerprint elsewhere = here;
  elsewhere.cpuModel = "Model Y";
  auto run = [](const std::string& strategy, int ranks, int threads, int64_t context, double ms) {
    DecodeRunRecord r;
    r.modelKey = "sha256:abc";
    r.strategy = strategy;
    r.ranks = ranks;
    r.threadsPerRank = threads;
    r.context = context;
    r.capacity = context + 32;
    r.steps = 31;
    r.stepMs = ms;
    r.attentionMs = ms / 2;
    r.exchangeMs = ms / 10;
    r.tokensPerSecond = 1e3 / ms;
    r.detail = "rank 0 " + std::to_string(ms);
    return r;
  };
  db.storeDecodeRun(here, run("CP", 2, 1, 4096, 0.3));
  db.storeDecodeRun(here, run("CP", 2, 1, 4096, 0.28));  // measured again: replaces
  db.storeDecodeRun(here, run("CP", 2, 1, 1024, 0.1));
  db.storeDecodeRun(here, run("CP", 2, 2, 4096, 0.2));
  db.storeDecodeRun(here, run("CP", 1, 1, 4096, 0.4));
  db.storeDecodeRun(here, run("DP", 2, 1, 4096, 0.4));
  db.storeDecodeRun(here, run("TP", 2, 1, 4096, 0.35));
  DecodeRunRecord other = run("CP", 2, 1, 4096, 9);
  other.modelKey = "sha256:other";
  db.storeDecodeRun(here, other);
  db.storeDecodeRun(elsewhere, run("CP", 2, 1, 4096, 7));

  const std::vector<DecodeRunRecord> found = db.findDecodeRuns(here, "sha256:abc");
  ASSERT_EQ(found.size(), 6u);
  // By strategy, ranks, threads, context.
  EXPECT_EQ(found[0].strategy, "CP");
  EXPECT_EQ(found[0].ranks, 1);
  EXPECT_EQ(found[1].context, 1024);
  const DecodeRunRecord& r = found[2];
  EXPECT_EQ(r.strategy, "CP");
  EXPECT_EQ(r.ranks, 2);
  EXPECT_EQ(r.threadsPerRank, 1);
  EXPECT_EQ(r.context, 4096);
  EXPECT_EQ(r.capacity, 4096 + 32);
  EXPECT_EQ(r.steps, 31);
  EXPECT_DOUBLE_EQ(r.stepMs, 0.28);
  EXPECT_DOUBLE_EQ(r.attentionMs, 0.14);
  EXPECT_DOUBLE_EQ(r.exchangeMs, 0.028);
  EXPECT_DOUBLE_EQ(r.tokensPerSecond, 1e3 / 0.28);
  EXPECT_EQ(r.detail, "rank 0 " + std::to_string(0.28));
  EXPECT_EQ(r.modelKey, "sha256:abc");
  EXPECT_FALSE(r.measuredAt.empty());
  EXPECT_EQ(found[3].threadsPerRank, 2);
  EXPECT_EQ(found[4].strategy, "DP");
  EXPECT_EQ(found[5].strategy, "TP");
  ASSERT_EQ(db.findDecodeRuns(here, "sha256:other").size(), 1u);
  EXPECT_DOUBLE_EQ(db.findDecodeRuns(here, "sha256:other")[0].stepMs, 9);
  ASSERT_EQ(db.findDecodeRuns(elsewhere, "sha256:abc").size(), 1u);
  EXPECT_TRUE(db.findDecodeRuns(here, "sha256:none").empty());
  // A run without its key is refused, naming the file.
  DecodeRunRecord keyless = run("", 2, 1, 4096, 1);
  EXPECT_THROW(db.storeDecodeRun(here, keyless), Error);
}

TEST(MeasurementDb, MigratesTheVersion1Schema) {
  std::string path = tempPath("v1.sqlite");
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    const char* sql =
        "CREATE TABLE measurements (fingerprint TEXT, backend TEXT, signature TEXT, "
        "median_ns REAL, status TEXT, PRIMARY KEY (fingerprint, backend, signature));"
        "PRAGMA user_version = 1;";
    ASSERT_EQ(sqlite3_exec(db, sql, nullptr, nullptr, nullptr), SQLITE_OK);
    std::string fp = record("x", 1).fingerprint.id();
    std::string insert = "INSERT INTO measurements VALUES ('" + fp + "', 'openblas', 'sig1', 777, 'ok')";
    ASSERT_EQ(sqlite3_exec(db, insert.c_str(), nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(db);
  }
  MeasurementDb db(path);
  EXPECT_EQ(db.schemaVersion(), MeasurementDb::kSchemaVersion);
  auto rows = db.all();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].key.backend, "openblas");
  EXPECT_DOUBLE_EQ(rows[0].measurement.medianNs, 777);
  // The migrated row has no backend version: found under an empty one.
  auto hit = db.find(record("x", 1).fingerprint, MeasurementKey{"openblas", "", "sig1"});
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->status, MeasurementStatus::Ok);
}

TEST(MeasurementDb, AnEarlyVersion2FileGetsTheLaterTables) {
  // Version 2 as first released: the measurements table only.
  std::string path = tempPath("v2.sqlite");
  {
    MeasurementDb current(path);
  }
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, "DROP TABLE switch_costs; DROP TABLE plan_runs; PRAGMA user_version = 2;",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(db);
  }
  MeasurementDb db(path);
  EXPECT_EQ(db.schemaVersion(), MeasurementDb::kSchemaVersion);
  HardwareFingerprint fp = record("x", 1).fingerprint;
  EXPECT_FALSE(db.findSwitchCost(fp, {"onednn", "1"}, {"native", "1"}));
  EXPECT_TRUE(db.findPlanRuns(fp, "model", "base").empty());  // version 4's table was added
}

TEST(MeasurementDb, AVersion4FileGetsTheOriginColumnAndItsRowsCountAsLocal) {
  std::string path = tempPath("v4.sqlite");
  {
    MeasurementDb current(path);
    current.store(record("x", 5));
  }
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(
        sqlite3_exec(db, "ALTER TABLE measurements DROP COLUMN origin; PRAGMA user_version = 4;",
                     nullptr, nullptr, nullptr),
        SQLITE_OK);
    sqlite3_close(db);
  }
  MeasurementDb db(path);
  EXPECT_EQ(db.schemaVersion(), MeasurementDb::kSchemaVersion);
  ASSERT_EQ(db.all().size(), 1u);
  db.store(record("y", 6));
  EXPECT_TRUE(db.find(record("y", 6).fingerprint, record("y", 6).key));
  EXPECT_EQ(db.sharedUrl(), "");
  EXPECT_THROW(db.push(), Error);  // no shared store to push to
}

TEST(MeasurementDb, NotADatabaseIsAClearError) {
  std::string path = tempPath("garbage.sqlite");
  std::ofstream(path) << "this is not sqlite, just text that is long enough to look like a header";
  try {
    MeasurementDb db(path);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

TEST(MeasurementDb, TwoProcessesWriteAtOnce) {
  std::string path = tempPath("concurrent.sqlite");
  { MeasurementDb init(path); }
  const int perProcess = 150;
  pid_t children[2];
  for (int c = 0; c < 2; ++c) {
    children[c] = fork();
    if (children[c] == 0) {
      try {
        MeasurementDb db(path);
        for (int i = 0; i < perProcess; ++i)
          db.store(record("p" + std::to_string(c) + "_" + std::to_string(i), i));
        _exit(0);
      } catch (...) {
        _exit(1);
      }
    }
  }
  for (pid_t pid : children) {
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  MeasurementDb db(path);
  EXPECT_EQ(db.all().size(), static_cast<size_t>(2 * perProcess));
}

TEST(CandidateSignature, IgnoresNamesAndSeesShapesAndAttributes) {
  auto build = [](const std::string& prefix, int64_t width, int64_t alpha) {
    Graph g;
    ValueId x = g.addInput(prefix + "x", {ElementType::Float32, {1, width}});
    ValueId y = g.addValue(prefix + "y", {ElementType::Float32, {1, width}});
    ValueId z = g.addValue(prefix + "z", {ElementType::Float32, {1, width}});
    Node a{prefix + "neg", "Neg", {}, {x}, {y}};
    Node b{prefix + "lrelu", "LeakyRelu", {}, {y}, {z}};
    b.attrs.set("alpha", static_cast<float>(alpha) / 10);
    g.addNode(a);
    g.addNode(b);
    g.markOutput(z);
    g.finalize();
    return g;
  };
  Graph g1 = build("a_", 8, 1), g2 = build("other_", 8, 1), g3 = build("a_", 9, 1), g4 = build("a_", 8, 2);
  NodeSet all = NodeSet::all(2);
  auto h = [&](const Graph& g) { return candidateSignature(g, all).hash; };
  EXPECT_EQ(h(g1), h(g2));
  EXPECT_NE(h(g1), h(g3));
  EXPECT_NE(h(g1), h(g4));
  EXPECT_NE(candidateSignature(g1, NodeSet::of(2, {0})).hash, h(g1));
}

// Failures a version-5 file kept as the kernels' verdicts although the
// machine was at fault (its timing lock, a kill from outside, its memory),
// and timeouts never checked for a busy machine, heal: after the migration
// they are passed over and measured again. The kernel's own failure stays.
TEST(MeasurementDb, AVersion5FilesFailuresOfTheMachineAreMeasuredAgain) {
  std::string path = tempPath("v5.sqlite");
  auto failed = [](const std::string& sig, MeasurementStatus status, const std::string& message) {
    MeasurementRecord r = record(sig, 0);
    r.measurement.status = status;
    r.measurement.message = message;
    return r;
  };
  const MeasurementRecord lock = failed(
      "lock", MeasurementStatus::Failed,
      "cannot open the machine's timing lock /tmp/collage-timing.lock: Permission denied");
  const MeasurementRecord killed = failed(
      "killed", MeasurementStatus::Failed, "the kernel crashed the measurement worker (signal Killed)");
  const MeasurementRecord oom = failed("oom", MeasurementStatus::Failed, "run threw: std::bad_alloc");
  const MeasurementRecord timeout =
      failed("timeout", MeasurementStatus::TimedOut, "no result within 60 s: the worker was killed");
  const MeasurementRecord crash = failed(
      "crash", MeasurementStatus::Failed,
      "the kernel crashed the measurement worker (signal Segmentation fault)");
  {
    MeasurementDb current(path);
    for (const auto* r : {&lock, &killed, &oom, &timeout, &crash}) current.store(*r);
    current.store(record("good", 5));
  }
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, "ALTER TABLE measurements DROP COLUMN cause; PRAGMA user_version = 5;",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(db);
  }
  MeasurementDb db(path);
  EXPECT_EQ(db.schemaVersion(), MeasurementDb::kSchemaVersion);
  const HardwareFingerprint fp = lock.fingerprint;
  for (const auto* r : {&lock, &killed, &oom, &timeout})
    EXPECT_FALSE(db.find(fp, r->key)) << r->measurement.message;
  const auto kept = db.find(fp, crash.key);
  ASSERT_TRUE(kept);
  EXPECT_EQ(kept->status, MeasurementStatus::Failed);
  EXPECT_TRUE(db.find(fp, record("good", 5).key));
  // Kept for the record, with the cause the migration read from the message.
  std::map<std::string, FailureCause> causes;
  for (const auto& r : db.all()) causes[r.key.signatureHash] = r.measurement.cause;
  EXPECT_EQ(causes["lock"], FailureCause::TimingLock);
  EXPECT_EQ(causes["killed"], FailureCause::Killed);
  EXPECT_EQ(causes["oom"], FailureCause::OutOfMemory);
  EXPECT_EQ(causes["timeout"], FailureCause::Unchecked);
  EXPECT_EQ(causes["crash"], FailureCause::None);
  // A measurement taken again replaces the row: found from then on.
  db.store(record("lock", 42));
  ASSERT_TRUE(db.find(fp, lock.key));
  EXPECT_DOUBLE_EQ(db.find(fp, lock.key)->medianNs, 42);
}

// Stored now: a failure of the machine is kept in the file but never found
// (nor pushed); a failure of the kernel's own is found.
TEST(MeasurementDb, AFailureOfTheMachineIsNotFound) {
  MeasurementDb db(tempPath("causes.sqlite"));
  MeasurementRecord r = record("busy", 0);
  r.measurement.status = MeasurementStatus::TimedOut;
  r.measurement.cause = FailureCause::Busy;
  db.store(r);
  EXPECT_FALSE(db.find(r.fingerprint, r.key));
  ASSERT_EQ(db.all().size(), 1u);
  EXPECT_EQ(db.all()[0].measurement.cause, FailureCause::Busy);
  r.measurement.cause = FailureCause::None;  // reproduced on a quiet machine
  db.store(r);
  ASSERT_TRUE(db.find(r.fingerprint, r.key));
  EXPECT_EQ(db.find(r.fingerprint, r.key)->status, MeasurementStatus::TimedOut);
}

}  // namespace
}  // namespace collage
