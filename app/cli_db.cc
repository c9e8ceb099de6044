// `collage db stats|export|clear|push|pull`: housekeeping of the measurement
// database, and copies between a local file and a team's shared store
// (docs/shared-measurements.md).
#include <cstdio>
#include <iostream>

#include "app/cli_common.h"
#include "core/measure/measurement_db.h"

namespace collage::cli {

Action addDbCommand(CLI::App& app) {
  struct Options {
    std::string action;
    std::string db = MeasurementDb::defaultPath();
    std::string localDb;
    std::string output = "measurements.csv";
    std::string backend;
  };
  auto* command = app.add_subcommand("db", "inspect, export or clear the measurement database");
  auto options = std::make_shared<Options>();
  command
      ->add_option("action", options->action,
                   "stats | export | clear | push (local file to shared store) | pull "
                   "(shared store to local file)")
      ->required()
      ->check(CLI::IsMember({"stats", "export", "clear", "push", "pull"}));
  command->add_option("--db", options->db,
                      "the database file, or a shared store (postgresql://user@host/db)");
  command->add_option(
      "--local-db", options->localDb,
      "with a postgresql:// --db, the local file (default: the default database file)");
  command->add_option("-o,--output", options->output, "CSV file for export");
  command->add_option("--backend", options->backend, "clear only this backend's rows");
  return [options]() {
    MeasurementDb db(options->db, options->localDb);
    if (options->action == "push" || options->action == "pull") {
      const bool push = options->action == "push";
      const MeasurementCopyReport r = push ? db.push() : db.pull();
      std::printf("%s: %lld rows copied %s %s, %lld already there\n", options->action.c_str(),
                  static_cast<long long>(r.copied), push ? "from" : "to", db.path().c_str(),
                  static_cast<long long>(r.present));
      std::printf("shared store: %s\n", db.sharedUrl().c_str());
    } else if (options->action == "stats") {
      HardwareFingerprint here = HardwareFingerprint::current();
      MeasurementDbStats st = db.stats(here);
      std::printf("database:  %s (schema v%d)\n", st.path.c_str(), st.schemaVersion);
      std::printf("rows:      %lld (%lld ok), %lld machine fingerprint(s)\n",
                  static_cast<long long>(st.rows), static_cast<long long>(st.okRows),
                  static_cast<long long>(st.fingerprints));
      for (const auto& [backend, n] : st.perBackend)
        std::printf("  %-10s %lld\n", backend.c_str(), static_cast<long long>(n));
      if (!st.sharedUrl.empty())
        std::printf("shared:    %s: %lld rows, %lld kernels, %lld machine(s)\n",
                    st.sharedUrl.c_str(), static_cast<long long>(st.sharedRows),
                    static_cast<long long>(st.sharedKeys),
                    static_cast<long long>(st.sharedMachines));
      std::printf("this CPU:  %s\n", here.toString().c_str());
    } else if (options->action == "export") {
      db.exportCsv(options->output);
      std::printf("wrote %zu rows to %s\n", db.all().size(), options->output.c_str());
    } else {
      std::printf("deleted %lld rows\n", static_cast<long long>(db.clear(options->backend)));
      // The shared store is append-only: its rows stay (an administrator
      // deletes them with SQL, docs/shared-measurements.md).
      if (!db.sharedUrl().empty())
        std::printf("(from %s only; the shared store keeps its rows)\n", db.path().c_str());
    }
    return 0;
  };
}

}  // namespace collage::cli
