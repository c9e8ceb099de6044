// ScratchPostgres: a real PostgreSQL server for one test program, in a
// temporary folder, listening on a Unix socket only (listen_addresses=''),
// stopped and deleted when the object goes (a test that fails included).
//
//   ScratchPostgres pg;                       // initdb + pg_ctl start, or...
//   if (!pg.ok()) GTEST_SKIP() << pg.why();   // ...why not (no server package)
//   MeasurementDb db(pg.url(), local);        // postgresql:///collage?host=...
//
// initdb refuses to run as root, so as root the server runs as the
// `postgres` user (runuser), as /work/shared/services-here.md does it. Logins
// need a password (scram-sha-256), so that a wrong one can be tested.
#pragma once

#include <pwd.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace collage::test_support {

class ScratchPostgres {
 public:
  static constexpr const char* kPassword = "scratch-pw";

  ScratchPostgres() {
    namespace fs = std::filesystem;
    // Debian's layout: /usr/lib/postgresql/<major>/bin; the newest wins.
    // COLLAGE_TEST_PG_ROOT names another root (an empty folder shows the skip).
    const char* root = std::getenv("COLLAGE_TEST_PG_ROOT");
    std::string bin;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(root ? root : "/usr/lib/postgresql", ec))
      if (fs::exists(e.path() / "bin/initdb") && fs::exists(e.path() / "bin/pg_ctl") &&
          e.path().string() > bin)
        bin = e.path().string();
    if (bin.empty()) {
      why_ = std::string("no PostgreSQL server: ") + (root ? root : "/usr/lib/postgresql") +
             "/*/bin/initdb and pg_ctl are missing (the postgresql package; scripts/setup.sh "
             "installs it)";
      return;
    }
    bin_ = bin + "/bin/";
    if (geteuid() == 0) {
      const passwd* pw = getpwnam("postgres");
      if (!pw) {
        why_ = "running as root and there is no 'postgres' user to run the server as";
        return;
      }
      as_ = "runuser -u postgres -- ";
      owner_ = pw->pw_uid;
    }
    char tmpl[] = "/tmp/collage-pg-XXXXXX";  // short: a socket path has ~100 characters
    if (!mkdtemp(tmpl)) {
      why_ = "cannot make a temporary folder";
      return;
    }
    dir_ = tmpl;
    if (owner_ >= 0 &&
        chown(dir_.c_str(), static_cast<uid_t>(owner_), static_cast<gid_t>(-1)) != 0) {
      why_ = "cannot give " + dir_ + " to the postgres user";
      return;
    }
    {
      std::ofstream(dir_ + "/pw") << kPassword << "\n";
      if (owner_ >= 0 &&
          chown((dir_ + "/pw").c_str(), static_cast<uid_t>(owner_), static_cast<gid_t>(-1)) != 0) {
        why_ = "cannot give the password file to the postgres user";
        return;
      }
    }
    const std::string log = dir_ + "/setup.log";
    if (!sh(as_ + bin_ + "initdb -D " + dir_ + "/data -U postgres -A scram-sha-256 --pwfile=" +
            dir_ + "/pw --no-sync > " + log + " 2>&1")) {
      why_ = "initdb failed (" + log + ")";
      return;
    }
    // fsync off: the test's server dies with the test; speed matters more.
    if (!start()) {
      why_ = "the server did not start (" + dir_ + "/server.log)";
      return;
    }
    if (!sh("PGPASSWORD=" + std::string(kPassword) + " " + bin_ + "createdb -h " + dir_ +
            " -U postgres collage >> " + log + " 2>&1")) {
      why_ = "createdb failed (" + log + ")";
      return;
    }
    ok_ = true;
  }

  // Stops the server (a crash, as far as clients can tell); start() again.
  void stop() {
    if (started_)
      sh(as_ + bin_ + "pg_ctl -D " + dir_ + "/data -m immediate -w stop > /dev/null 2>&1");
    started_ = false;
  }
  bool start() {
    started_ = sh(as_ + bin_ + "pg_ctl -D " + dir_ + "/data -w -t 120 -l " + dir_ +
                  "/server.log -o \"-c listen_addresses='' -k " + dir_ +
                  " -c fsync=off -c max_connections=40\" start >> " + dir_ + "/setup.log 2>&1");
    return started_;
  }

  ~ScratchPostgres() {
    stop();
    if (!dir_.empty() && !std::getenv("COLLAGE_KEEP_SCRATCH_PG")) {
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
    }
  }
  ScratchPostgres(const ScratchPostgres&) = delete;
  ScratchPostgres& operator=(const ScratchPostgres&) = delete;

  bool ok() const { return ok_; }
  const std::string& why() const { return why_; }
  const std::string& socketDir() const { return dir_; }

  // The database `collage`, as the postgres user with its password.
  std::string url(const std::string& password = kPassword) const {
    return "postgresql://postgres:" + password + "@/collage?host=" + dir_;
  }

 private:
  static bool sh(const std::string& command) { return std::system(command.c_str()) == 0; }

  std::string bin_, as_, dir_, why_;
  long owner_ = -1;
  bool started_ = false, ok_ = false;
};

}  // namespace collage::test_support
