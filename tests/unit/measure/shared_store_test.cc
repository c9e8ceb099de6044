// The shared measurement store against a real PostgreSQL server
// (tests/unit/scratch_postgres.h), with real processes: concurrent writers,
// the read-through cache, a writer killed with SIGKILL, schema refusal, and
// the messages for an unreachable server and a wrong password. Skipped, with
// the reason, where the PostgreSQL server package is missing.
#include "core/measure/shared_store.h"

#include <gtest/gtest.h>
#include <libpq-fe.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <thread>

#include "core/ir/error.h"
#include "core/measure/candidate_costs.h"
#include "core/measure/measurement_db.h"
#include "tests/unit/scratch_postgres.h"

namespace collage {
namespace {

namespace fs = std::filesystem;

// relu -> sigmoid -> tanh; every convex group on three backends: 18 kernels.
struct Workload {
  Graph g;
  CandidateSet set{3};
  Workload() {
    const TensorType t{ElementType::Float32, {16, 16}};
    ValueId x = g.addInput("x", t);
    ValueId a = g.addValue("a", t), b = g.addValue("b", t), c = g.addValue("c", t);
    g.addNode(Node{"relu", "Relu", {}, {x}, {a}});
    g.addNode(Node{"sig", "Sigmoid", {}, {a}, {b}});
    g.addNode(Node{"tanh", "Tanh", {}, {b}, {c}});
    g.markOutput(c);
    g.finalize();
    for (const char* backend : {"a", "b", "c"})
      for (auto nodes : {std::vector<int32_t>{0}, {1}, {2}, {0, 1}, {1, 2}, {0, 1, 2}})
        set.add(Candidate{NodeSet::of(3, nodes), backend, "rule:op", {}});
  }
  static constexpr int kKernels = 18;
};

const HardwareFingerprint kMachine{"Vendor", "Model X", "avx2 fma", 2, 2, "a=1;measure=test"};

// A stand-in for the isolated measurer: a made-up time per kernel (its size
// and backend), after `delayMs`, and a count of the calls.
MeasureFn fakeMeasure(std::atomic<int>* calls, int delayMs) {
  return [calls, delayMs](const Candidate& c) {
    if (calls) ++*calls;
    if (delayMs) std::this_thread::sleep_for(std::chrono::milliseconds(delayMs));
    Measurement m;
    m.status = c.backend == "c" && c.nodes.count() == 3 ? MeasurementStatus::Invalid
                                                        : MeasurementStatus::Ok;
    m.medianNs = 1000.0 * c.nodes.count() + c.backend[0];
    m.samples = 10;
    if (m.status != MeasurementStatus::Ok) m.message = "refused";
    return m;
  };
}

// What one `collage optimize` does with the database: cost every candidate,
// measuring what it misses. Returns how many kernels it measured.
int costEverything(const std::string& location, const std::string& local, int delayMs) {
  Workload w;
  MeasurementDb db(location, local);
  std::atomic<int> calls{0};
  CandidateCoster coster(
      w.g, &db, kMachine, [](const std::string&) { return "1.0"; }, fakeMeasure(&calls, delayMs));
  CostingReport report;
  coster.costAll(w.set, {}, nullptr, nullptr, &report);
  if (report.measured + report.cached != Workload::kKernels) return -1;
  return calls.load();
}

// costEverything in a child process; its exit status is the count (or 255).
pid_t spawnCosting(const std::string& location, const std::string& local, int delayMs) {
  pid_t pid = fork();
  if (pid == 0) {
    int measured = 255;
    try {
      measured = costEverything(location, local, delayMs);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child: %s\n", e.what());
    }
    _exit(measured < 0 ? 254 : measured);
  }
  return pid;
}

int waitFor(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

// A plain libpq connection, for what the test checks behind the store's back.
class Sql {
 public:
  explicit Sql(const std::string& url) : conn_(PQconnectdb(url.c_str())) {
    if (PQstatus(conn_) != CONNECTION_OK) throw Error(PQerrorMessage(conn_));
  }
  ~Sql() { PQfinish(conn_); }
  std::string value(const std::string& sql) {
    PGresult* r = PQexec(conn_, sql.c_str());
    std::string v;
    if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) > 0)
      v = PQgetvalue(r, 0, 0);
    else if (PQresultStatus(r) != PGRES_COMMAND_OK)
      v = "error: " + std::string(PQerrorMessage(conn_));
    PQclear(r);
    return v;
  }
  long count(const std::string& sql) { return std::stol(value(sql)); }

 private:
  PGconn* conn_;
};

class SharedStore : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { pg_ = new test_support::ScratchPostgres(); }
  static void TearDownTestSuite() {
    delete pg_;  // stops the server, whatever the tests did
    pg_ = nullptr;
  }
  void SetUp() override {
    if (!pg_->ok()) GTEST_SKIP() << "PostgreSQL not available: " << pg_->why();
    dir_ = fs::temp_directory_path() /
           ("collage_shared_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    // Each test starts from an empty store.
    Sql(pg_->url())
        .value(
            "SET client_min_messages = warning; DROP TABLE IF EXISTS collage_measurements, "
            "collage_switch_costs, collage_plan_runs, collage_schema CASCADE; "
            "DROP FUNCTION IF EXISTS collage_append_only()");
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string local(const std::string& name) const { return (dir_ / name).string(); }

  static test_support::ScratchPostgres* pg_;
  fs::path dir_;
};
test_support::ScratchPostgres* SharedStore::pg_ = nullptr;

MeasurementRecord record(const std::string& signature, double medianNs,
                         MeasurementStatus status = MeasurementStatus::Ok,
                         const std::string& version = "1.0") {
  MeasurementRecord r;
  r.fingerprint = kMachine;
  r.key = MeasurementKey{"onednn", version, signature};
  r.ops = "Conv+Relu";
  r.signatureText = "Conv {}";
  r.measurement.status = status;
  r.measurement.medianNs = medianNs;
  r.measurement.samples = 9;
  return r;
}

TEST_F(SharedStore, ReadersTakeTheMedianOfPerMachineMediansAndFailuresArePerBackendVersion) {
  SharedMeasurementStore a(pg_->url(), "machine-a"), b(pg_->url(), "machine-b"),
      c(pg_->url(), "machine-c");
  EXPECT_EQ(a.schemaVersion(), SharedMeasurementStore::kSchemaVersion);
  EXPECT_TRUE(a.append(record("k", 100)));
  EXPECT_FALSE(a.append(record("k", 999)));  // append-only: machine a's first answer stays
  EXPECT_TRUE(b.append(record("k", 300)));
  EXPECT_TRUE(c.append(record("k", 200)));
  auto hit = b.find(kMachine, record("k", 0).key);
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->measurement.status, MeasurementStatus::Ok);
  EXPECT_DOUBLE_EQ(hit->measurement.medianNs, 200);
  EXPECT_EQ(hit->measurement.machines, 3);
  EXPECT_TRUE(hit->measurement.fromCache);
  EXPECT_NE(hit->measurement.toString().find("[shared: 3 machines]"), std::string::npos)
      << hit->measurement.toString();
  EXPECT_EQ(hit->fingerprint, kMachine);
  EXPECT_EQ(hit->ops, "Conv+Relu");
  // Exact keys: another fingerprint, version or signature misses.
  HardwareFingerprint other = kMachine;
  other.libraryVersions = "a=1;measure=other";
  EXPECT_FALSE(a.find(other, record("k", 0).key));
  EXPECT_FALSE(a.find(kMachine, record("k", 0, MeasurementStatus::Ok, "2.0").key));
  EXPECT_FALSE(a.find(kMachine, record("j", 0).key));
  // A failure is an answer for its backend version only; one Ok beats it.
  EXPECT_TRUE(a.append(record("f", 0, MeasurementStatus::Invalid, "1.0")));
  auto failed = b.find(kMachine, record("f", 0, MeasurementStatus::Ok, "1.0").key);
  ASSERT_TRUE(failed);
  EXPECT_EQ(failed->measurement.status, MeasurementStatus::Invalid);
  EXPECT_FALSE(b.find(kMachine, record("f", 0, MeasurementStatus::Ok, "2.0").key));
  EXPECT_TRUE(b.append(record("f", 500, MeasurementStatus::Ok, "1.0")));
  EXPECT_EQ(c.find(kMachine, record("f", 0).key)->measurement.status, MeasurementStatus::Ok);
  // Every client's rows are safe from an UPDATE, too.
  EXPECT_NE(
      Sql(pg_->url()).value("UPDATE collage_measurements SET median_ns = 1").find("append-only"),
      std::string::npos);
  // Switching costs follow the same rules.
  const MeasurementDb::BackendVersion onednn{"onednn", "1.0"}, native{"native", "0.1"};
  Measurement eps;
  eps.medianNs = 10;
  EXPECT_TRUE(a.appendSwitchCost(kMachine, onednn, native, eps));
  EXPECT_FALSE(a.appendSwitchCost(kMachine, onednn, native, eps));
  eps.medianNs = 30;
  EXPECT_TRUE(b.appendSwitchCost(kMachine, onednn, native, eps));
  eps.medianNs = 20;
  EXPECT_TRUE(c.appendSwitchCost(kMachine, onednn, native, eps));
  EXPECT_EQ(a.findSwitchCost(kMachine, onednn, native), 20.0);
  EXPECT_FALSE(a.findSwitchCost(kMachine, native, onednn));
  EXPECT_EQ(MeasurementDb(pg_->url(), local("s.sqlite")).findSwitchCost(kMachine, onednn, native),
            20.0);
  EXPECT_EQ(MeasurementDb(local("s.sqlite")).findSwitchCost(kMachine, onednn, native),
            20.0);  // cached
  auto all = a.aggregated();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].fingerprint.id(), kMachine.id());
  EXPECT_EQ(c.stats().machines, 3);
}

TEST_F(SharedStore, ConcurrentWritersFromSeveralProcessesStoreEachKernelOnce) {
  constexpr int kWriters = 4;
  std::vector<pid_t> pids;
  for (int i = 0; i < kWriters; ++i)
    pids.push_back(spawnCosting(pg_->url(), local("w" + std::to_string(i) + ".sqlite"), 5));
  int measured = 0;
  for (pid_t pid : pids) {
    const int n = waitFor(pid);
    ASSERT_GE(n, 0) << "a writer failed (" << n << ")";
    ASSERT_LE(n, Workload::kKernels) << "a writer failed (" << n << ")";
    measured += n;
  }
  // Each kernel measured once between them (claimed while measured)...
  EXPECT_EQ(measured, Workload::kKernels);
  Sql sql(pg_->url());
  // ...and stored once.
  EXPECT_EQ(sql.count("SELECT count(*) FROM collage_measurements"), Workload::kKernels);
  EXPECT_EQ(
      sql.count("SELECT count(DISTINCT (fingerprint_id, backend, backend_version, signature)) "
                "FROM collage_measurements"),
      Workload::kKernels);
  EXPECT_EQ(sql.count("SELECT count(*) FROM collage_measurements WHERE status = 'invalid'"), 1);
}

// The claims alone: even writers that append whatever they measure (no claim
// taken, as a buggy or older client might) leave one row per kernel.
TEST_F(SharedStore, WritersThatDoNotClaimStillStoreEachKernelOnce) {
  std::vector<pid_t> pids;
  for (int i = 0; i < 4; ++i) {
    pid_t pid = fork();
    if (pid == 0) {
      try {
        MeasurementDb db(pg_->url(), local("u" + std::to_string(i) + ".sqlite"));
        for (int k = 0; k < Workload::kKernels; ++k)
          db.store(record("k" + std::to_string(k), 100 + i));
      } catch (const std::exception& e) {
        std::fprintf(stderr, "child: %s\n", e.what());
        _exit(1);
      }
      _exit(0);
    }
    pids.push_back(pid);
  }
  for (pid_t pid : pids) ASSERT_EQ(waitFor(pid), 0);
  EXPECT_EQ(Sql(pg_->url()).count("SELECT count(*) FROM collage_measurements"), Workload::kKernels);
}

TEST_F(SharedStore, AClaimIsReleasedWhenItsProcessDies) {
  const MeasurementKey key = record("k", 0).key;
  pid_t holder = fork();
  if (holder == 0) {
    MeasurementDb db(pg_->url(), local("holder.sqlite"));
    auto claim = db.tryClaim(kMachine, key);
    if (!claim) _exit(1);
    pause();  // until killed
    _exit(2);
  }
  MeasurementDb db(pg_->url(), local("waiter.sqlite"));
  bool busy = false;
  for (int i = 0; i < 600 && !busy; ++i) {  // until the holder has claimed it
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    busy = !db.tryClaim(kMachine, key);
  }
  ASSERT_TRUE(busy);
  kill(holder, SIGKILL);
  waitFor(holder);
  bool claimed = false;
  for (int i = 0; i < 100 && !claimed; ++i) {  // the server notices the closed connection
    claimed = db.tryClaim(kMachine, key).has_value();
    if (!claimed) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(claimed);
}

TEST_F(SharedStore, ASecondProcessWithAnotherLocalFileReadsTheSharedStoreAndMeasuresNothing) {
  ASSERT_EQ(waitFor(spawnCosting(pg_->url(), local("first.sqlite"), 0)), Workload::kKernels);
  ASSERT_EQ(waitFor(spawnCosting(pg_->url(), local("second.sqlite"), 0)), 0);
  // The second file now caches what it read: offline, it answers alone.
  ASSERT_EQ(waitFor(spawnCosting(local("second.sqlite"), "", 0)), 0);
  // Cached whole: what a person reads in an export is there too.
  const auto cached = MeasurementDb(local("second.sqlite")).all();
  ASSERT_EQ(cached.size(), static_cast<size_t>(Workload::kKernels));
  EXPECT_EQ(cached.front().fingerprint, kMachine);
  EXPECT_FALSE(cached.front().ops.empty());
  EXPECT_FALSE(cached.front().signatureText.empty());
  // A lookup says the row came from the shared store (what the app's Source
  // column shows), read from the file's copy as from the server; the first
  // file's own rows do not.
  std::optional<Measurement> copy = MeasurementDb(local("second.sqlite")).find(kMachine, cached.front().key);
  ASSERT_TRUE(copy.has_value());
  EXPECT_TRUE(copy->fromShared && copy->fromCache);
  std::optional<Measurement> own = MeasurementDb(local("first.sqlite")).find(kMachine, cached.front().key);
  ASSERT_TRUE(own.has_value());
  EXPECT_FALSE(own->fromShared);
  // The cached rows came from the store, so a push does not send them back
  // as this machine's; the first file's own rows are already there.
  MeasurementCopyReport pushed = MeasurementDb(pg_->url(), local("second.sqlite")).push();
  EXPECT_EQ(pushed.copied + pushed.present, 0);
  pushed = MeasurementDb(pg_->url(), local("first.sqlite")).push();
  EXPECT_EQ(pushed.copied, 0);
  EXPECT_EQ(pushed.present, Workload::kKernels);
}

TEST_F(SharedStore, PushAndPullCopyBetweenALocalFileAndTheStore) {
  {
    MeasurementDb offline(local("laptop.sqlite"));
    offline.store(record("k1", 100));
    offline.store(record("k2", 200));
  }
  MeasurementCopyReport pushed = MeasurementDb(pg_->url(), local("laptop.sqlite")).push();
  EXPECT_EQ(pushed.copied, 2);
  pushed = MeasurementDb(pg_->url(), local("laptop.sqlite")).push();  // again: nothing new
  EXPECT_EQ(pushed.copied, 0);
  EXPECT_EQ(pushed.present, 2);
  MeasurementCopyReport pulled = MeasurementDb(pg_->url(), local("desk.sqlite")).pull();
  EXPECT_EQ(pulled.copied, 2);
  MeasurementDb desk(local("desk.sqlite"));
  auto hit = desk.find(kMachine, record("k2", 0).key);
  ASSERT_TRUE(hit);
  EXPECT_DOUBLE_EQ(hit->medianNs, 200);
  EXPECT_EQ(desk.all().front().ops, "Conv+Relu");
  EXPECT_THROW(desk.push(), Error);  // no shared store named
}

TEST_F(SharedStore, AWriterKilledMidBatchLosesNothingCommittedAndTheRestIsMeasuredLater) {
  pid_t writer = spawnCosting(pg_->url(), local("killed.sqlite"), 250);
  Sql sql(pg_->url());
  long before = 0;
  for (int i = 0; i < 600 && before < 5; ++i) {  // up to a minute on a loaded machine
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const std::string v = sql.value("SELECT count(*) FROM collage_measurements");
    if (!v.empty() && v.rfind("error", 0) != 0) before = std::stol(v);
  }
  kill(writer, SIGKILL);
  ASSERT_EQ(waitFor(writer), -SIGKILL);
  const long committed = sql.count("SELECT count(*) FROM collage_measurements");
  ASSERT_GE(committed, 5);
  ASSERT_LT(committed, Workload::kKernels) << "the writer finished before it was killed";
  const std::string ids = sql.value(
      "SELECT string_agg(id::text || ':' || median_ns, ',' ORDER BY id) "
      "FROM collage_measurements");
  // The next writer measures exactly what was not committed.
  EXPECT_EQ(waitFor(spawnCosting(pg_->url(), local("next.sqlite"), 0)),
            Workload::kKernels - committed);
  EXPECT_EQ(sql.count("SELECT count(*) FROM collage_measurements"), Workload::kKernels);
  EXPECT_EQ(sql.value("SELECT string_agg(id::text || ':' || median_ns, ',' ORDER BY id) "
                      "FROM collage_measurements WHERE id IN (SELECT id FROM collage_measurements "
                      "ORDER BY id LIMIT " +
                      std::to_string(committed) + ")"),
            ids);
}

TEST_F(SharedStore, AClientOlderThanTheStoreSchemaIsRefusedWithAMessage) {
  { MeasurementDb first(pg_->url(), local("a.sqlite")); }
  Sql(pg_->url()).value("UPDATE collage_schema SET version = 99");
  try {
    MeasurementDb db(pg_->url(), local("a.sqlite"));
    FAIL() << "opened a store with a newer schema";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("schema version 99"), std::string::npos) << m;
    EXPECT_NE(m.find("upgrade collage"), std::string::npos) << m;
    EXPECT_NE(m.find("postgres:***@"), std::string::npos) << m;
    EXPECT_EQ(m.find(test_support::ScratchPostgres::kPassword), std::string::npos) << m;
  }
}

TEST_F(SharedStore, AWrongPasswordIsALoginMessageThatDoesNotShowThePassword) {
  try {
    MeasurementDb db(pg_->url("not-the-password"), local("a.sqlite"));
    FAIL() << "logged in with a wrong password";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("refused the login"), std::string::npos) << m;
    EXPECT_NE(m.find("postgresql://postgres:***@/collage"), std::string::npos) << m;
    EXPECT_EQ(m.find("not-the-password"), std::string::npos) << m;
  }
}

// A password holding '@', '/' and '?' in every spelling libpq accepts, and in
// the key=value form: neither the login refusal nor an error of a statement
// (permission denied, from the server, through run()) shows it.
TEST_F(SharedStore, APasswordWithAtSlashAndQuestionMarkIsInNoMessage) {
  { MeasurementDb owner(pg_->url(), local("owner.sqlite")); }  // the owner creates the schema
  static int serial = 0;
  const std::string role = "nosy_" + std::to_string(getpid()) + "_" + std::to_string(serial++);
  Sql admin(pg_->url());
  // May log in, and read nothing: the store's first statement on its tables fails.
  ASSERT_EQ(admin.value("CREATE ROLE " + role + " LOGIN PASSWORD 'p@ss/w?rd'"), "");
  const std::string dir = pg_->socketDir();
  // The ways to spell the password `raw` (percent-encoded as `encoded`).
  const auto urls = [&](const std::string& raw, const std::string& encoded) {
    return std::vector<std::string>{
        "postgresql://" + role + ":" + encoded + "@/collage?host=" + dir,
        "postgresql://" + role + "@/collage?host=" + dir + "&password=" + raw,
        "host=" + dir + " dbname=collage user=" + role + " password='" + raw + "'",
    };
  };
  for (const std::string& url : urls("p@ss/w?rd", "p%40ss%2Fw%3Frd")) {
    SCOPED_TRACE(url);
    try {
      SharedMeasurementStore store(url);
      FAIL() << "read a table it may not";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("permission denied"), std::string::npos) << m;
      EXPECT_EQ(m.find("p@ss/w?rd"), std::string::npos) << m;
      EXPECT_EQ(m.find("p%40ss%2Fw%3Frd"), std::string::npos) << m;
    }
  }
  // A wrong password, spelt the same ways: the login refused, not shown.
  for (const std::string& url : urls("p@sS/w?rd", "p%40sS%2Fw%3Frd")) {
    SCOPED_TRACE(url);
    try {
      SharedMeasurementStore store(url);
      FAIL() << "logged in with a wrong password";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("refused the login"), std::string::npos) << m;
      EXPECT_NE(m.find("~/.pgpass"), std::string::npos) << m;
      EXPECT_EQ(m.find("sS/w?rd"), std::string::npos) << m;
      EXPECT_EQ(m.find("sS%2Fw%3Frd"), std::string::npos) << m;
    }
  }
}

// The role docs/shared-measurements.md gives a measuring machine: it may
// read and append, claim kernels, and nothing else.
TEST_F(SharedStore, AnInsertOnlyRoleCanMeasureButNotChangeOrDelete) {
  { MeasurementDb owner(pg_->url(), local("owner.sqlite")); }  // the owner creates the schema
  static int serial = 0;
  const std::string role = "worker_" + std::to_string(getpid()) + "_" + std::to_string(serial++);
  Sql admin(pg_->url());
  ASSERT_EQ(admin.value("CREATE ROLE " + role +
                        " LOGIN PASSWORD 'w'; "
                        "GRANT CONNECT ON DATABASE collage TO " +
                        role +
                        "; "
                        "GRANT SELECT, INSERT ON collage_measurements, collage_switch_costs, "
                        "collage_schema TO " +
                        role +
                        "; "
                        "GRANT USAGE ON SEQUENCE collage_measurements_id_seq, "
                        "collage_switch_costs_id_seq TO " +
                        role),
            "");
  const std::string url = "postgresql://" + role + ":w@/collage?host=" + pg_->socketDir();
  MeasurementDb worker(url, local("worker.sqlite"));
  worker.store(record("k", 100));
  EXPECT_TRUE(MeasurementDb(url, local("other.sqlite")).find(kMachine, record("k", 0).key));
  EXPECT_TRUE(worker.tryClaim(kMachine, record("j", 0).key));
  Measurement eps;
  eps.medianNs = 5;
  worker.storeSwitchCost(kMachine, {"a", "1"}, {"b", "1"}, eps);
  EXPECT_EQ(worker.sharedProblem(), "");
  Sql asWorker(url);
  EXPECT_NE(asWorker.value("DELETE FROM collage_measurements").find("permission denied"),
            std::string::npos);
  EXPECT_NE(asWorker.value("UPDATE collage_schema SET version = 0").find("permission denied"),
            std::string::npos);
  EXPECT_NE(asWorker.value("DROP TABLE collage_measurements").find("must be owner"),
            std::string::npos);
  EXPECT_EQ(admin.count("SELECT count(*) FROM collage_measurements"), 1);
}

TEST_F(SharedStore, AServerThatGoesAwayMidRunLeavesTheFileAndTheRunGoesOn) {
  test_support::ScratchPostgres own;  // this test stops its server
  ASSERT_TRUE(own.ok()) << own.why();
  MeasurementDb db(own.url(), local("a.sqlite"));
  db.store(record("before", 100));
  // A restart: the connection breaks, and is opened again once.
  own.stop();
  ASSERT_TRUE(own.start());
  db.store(record("restart", 150));
  EXPECT_EQ(db.sharedProblem(), "");
  EXPECT_TRUE(db.find(kMachine, record("restart", 0).key));
  // Gone for good: nothing throws, the file keeps what is measured, the
  // problem is kept for the run's report, and a push later sends it.
  own.stop();
  db.store(record("during", 200));
  EXPECT_FALSE(db.find(kMachine, record("missing", 0).key));
  EXPECT_TRUE(db.tryClaim(kMachine, record("missing", 0).key));
  EXPECT_NE(db.sharedProblem().find("collage db push"), std::string::npos) << db.sharedProblem();
  EXPECT_NE(db.sharedProblem().find("postgres:***@"), std::string::npos) << db.sharedProblem();
  EXPECT_TRUE(MeasurementDb(local("a.sqlite")).find(kMachine, record("during", 0).key));
  ASSERT_TRUE(own.start());
  const MeasurementCopyReport pushed = MeasurementDb(own.url(), local("a.sqlite")).push();
  EXPECT_EQ(pushed.copied, 1);  // "during"
  EXPECT_EQ(pushed.present, 2);
}

// Needs no server: there is none to reach.
TEST(SharedStoreOffline, AnUnreachableServerIsNamedWithoutItsPassword) {
  const std::string dir = fs::temp_directory_path() / ("collage_no_pg_" + std::to_string(getpid()));
  try {
    MeasurementDb db("postgresql://bob:hunter2@/team?host=/nonexistent-socket-dir",
                     dir + "/local.sqlite");
    FAIL() << "connected to nothing";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("cannot reach the server"), std::string::npos) << m;
    EXPECT_NE(m.find("postgresql://bob:***@/team?host=/nonexistent-socket-dir"), std::string::npos)
        << m;
    EXPECT_EQ(m.find("hunter2"), std::string::npos) << m;
  }
  fs::remove_all(dir);
}

// Needs no server: libpq's message for a URL it cannot read, or cannot reach,
// and a URL libpq would read otherwise (refused before libpq sees it).
TEST(SharedStoreOffline, NoMessageShowsAPasswordWithAtSlashOrQuestionMark) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      // libpq accepts a '?' in the password as is.
      {"postgresql://bob:hun?ter2@/team?host=/nonexistent-socket-dir", "hun?ter2"},
      {"postgresql://bob:hun%40ter%2F2%3F@/team?host=/nonexistent-socket-dir", "hun%40ter%2F2%3F"},
      {"postgresql://bob@/team?host=/nonexistent-socket-dir&password=hun@ter/2?", "hun@ter/2?"},
      {"host=/nonexistent-socket-dir user=bob password='hun@ter/2?' dbname=team", "hun@ter/2?"},
      // Not percent-encoding: libpq's error would quote the part it read wrong.
      {"postgresql://bob:hun%zzter2@/team?host=/nonexistent-socket-dir", "hun%zzter2"},
      {"postgresql://bob:hun/ter2@db.invalid/team", "hun"},
      {"postgresql://bob:hun@ter2@/team?host=/nonexistent-socket-dir", "ter2"},
  };
  for (const auto& [url, secret] : cases) {
    SCOPED_TRACE(url);
    try {
      SharedMeasurementStore store(url);
      FAIL() << "connected to nothing";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("shared measurement store"), std::string::npos) << m;
      EXPECT_EQ(m.find(secret), std::string::npos) << m;
      EXPECT_EQ(m.find("hunter2"), std::string::npos) << m;
    }
  }
}

TEST(SharedStoreOffline, UrlsAreRecognisedAndRedacted) {
  EXPECT_TRUE(SharedMeasurementStore::isUrl("postgresql://h/db"));
  EXPECT_TRUE(SharedMeasurementStore::isUrl("postgres://h/db"));
  EXPECT_FALSE(SharedMeasurementStore::isUrl("/home/me/postgresql://x.sqlite"));
  EXPECT_EQ(SharedMeasurementStore::redacted("postgresql://u:p@h:5432/db"),
            "postgresql://u:***@h:5432/db");
  EXPECT_EQ(SharedMeasurementStore::redacted("postgresql://u@h/db?password=p&sslmode=require"),
            "postgresql://u@h/db?password=***&sslmode=require");
  EXPECT_EQ(SharedMeasurementStore::redacted("postgresql://h/db"), "postgresql://h/db");
}

// The fanned-out graph-level search's rows: a plan paired with an incumbent
// on a node, appended once per machine, found by the target's fingerprint,
// the model, the plan and the incumbent.
TEST_F(SharedStore, PlanRunsAreAppendedOncePerMachineAndFoundByTheirPair) {
  SharedMeasurementStore a(pg_->url(), "node-1"), b(pg_->url(), "node-2");
  SharedMeasurementStore::PlanRunRow row;
  row.modelKey = "sha256:abc;x=1x3x8x8";
  row.planKey = "plan-1";
  row.incumbentKey = "start";
  row.genome = "0110";
  row.status = "ok";
  row.medianRatio = 0.8;
  row.runsJson = R"({"status":"ok"})";
  EXPECT_TRUE(a.appendPlanRun(kMachine, row));
  EXPECT_FALSE(a.appendPlanRun(kMachine, row));  // the same machine again: kept as it was
  row.medianRatio = 0.9;
  EXPECT_TRUE(b.appendPlanRun(kMachine, row));
  const auto found = b.findPlanRun(kMachine.id(), row.modelKey, "plan-1", "start");
  ASSERT_TRUE(found);
  EXPECT_EQ(found->machine, "node-1");  // the first answer
  EXPECT_DOUBLE_EQ(found->medianRatio, 0.8);
  EXPECT_EQ(found->genome, "0110");
  EXPECT_EQ(found->runsJson, row.runsJson);
  EXPECT_FALSE(a.findPlanRun(kMachine.id(), row.modelKey, "plan-1", "other-incumbent"));
  EXPECT_FALSE(a.findPlanRun("another-fingerprint", row.modelKey, "plan-1", "start"));
  // A re-timing of the same pair on the same machine is a run of its own
  // (schema 3), read back by its run id: not the first run's row.
  row.runId = "run-2";
  row.medianRatio = 0.7;
  EXPECT_TRUE(a.appendPlanRun(kMachine, row));
  const auto again = b.findPlanRun(kMachine.id(), row.modelKey, "plan-1", "start", "run-2");
  ASSERT_TRUE(again);
  EXPECT_DOUBLE_EQ(again->medianRatio, 0.7);
  EXPECT_EQ(again->runId, "run-2");
  EXPECT_FALSE(b.findPlanRun(kMachine.id(), row.modelKey, "plan-1", "start", "run-3"));
  EXPECT_NE(Sql(pg_->url()).value("UPDATE collage_plan_runs SET median_ratio = 0").find("append-only"),
            std::string::npos);
}

// A version-2 store (one row per pair and machine, for ever) gains the run
// id when a version-3 client opens it: its rows stay, and the pair timed
// again on the same machine is appended as a run of its own.
TEST_F(SharedStore, AVersionTwoStoreGainsRunIds) {
  { SharedMeasurementStore first(pg_->url(), "m"); }
  Sql(pg_->url()).value(
      "ALTER TABLE collage_plan_runs DROP CONSTRAINT collage_plan_runs_run_key; "
      "ALTER TABLE collage_plan_runs DROP COLUMN run_id; "
      "ALTER TABLE collage_plan_runs ADD UNIQUE (fingerprint_id, model_key, plan_key, incumbent_key, machine); "
      "DELETE FROM collage_schema; INSERT INTO collage_schema (version) VALUES (2); "
      "INSERT INTO collage_plan_runs (fingerprint_id, model_key, plan_key, incumbent_key, machine, status, runs) "
      "VALUES ('" + kMachine.id() + "', 'm', 'p', 'i', 'm', 'ok', '{\"old\": 1}')");
  SharedMeasurementStore upgraded(pg_->url(), "m");
  EXPECT_EQ(upgraded.schemaVersion(), SharedMeasurementStore::kSchemaVersion);
  const auto old = upgraded.findPlanRun(kMachine.id(), "m", "p", "i");
  ASSERT_TRUE(old);
  EXPECT_EQ(old->runId, "");
  SharedMeasurementStore::PlanRunRow row;
  row.modelKey = "m";
  row.planKey = "p";
  row.incumbentKey = "i";
  row.status = "ok";
  row.runsJson = "{}";
  row.runId = "later";
  EXPECT_TRUE(upgraded.appendPlanRun(kMachine, row));
  const auto fresh = upgraded.findPlanRun(kMachine.id(), "m", "p", "i", "later");
  ASSERT_TRUE(fresh);
  EXPECT_EQ(fresh->runsJson, "{}");
}

// A store made by a version-1 client gains the plan runs table when a
// version-2 client opens it, and says version 2 from then on.
TEST_F(SharedStore, AVersionOneStoreIsUpgradedWithThePlanRunsTable) {
  { SharedMeasurementStore first(pg_->url(), "m"); }
  Sql(pg_->url()).value("DROP TABLE collage_plan_runs; DELETE FROM collage_schema; "
                        "INSERT INTO collage_schema (version) VALUES (1)");
  SharedMeasurementStore upgraded(pg_->url(), "m");
  EXPECT_EQ(upgraded.schemaVersion(), SharedMeasurementStore::kSchemaVersion);
  SharedMeasurementStore::PlanRunRow row;
  row.modelKey = "m";
  row.planKey = "p";
  row.incumbentKey = "i";
  row.status = "ok";
  row.runsJson = "{}";
  EXPECT_TRUE(upgraded.appendPlanRun(kMachine, row));
}

}  // namespace
}  // namespace collage
