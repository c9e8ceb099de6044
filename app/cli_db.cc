// `collage db stats|export|clear`: housekeeping of the measurement database.
#include <cstdio>
#include <iostream>

#include "app/cli_common.h"
#include "core/measure/measurement_db.h"

namespace collage::cli {

Action addDbCommand(CLI::App& app) {
  struct Options {
    std::string action;
    std::string db = MeasurementDb::defaultPath();
    std::string output = "measurements.csv";
    std::string backend;
  };
  auto* command = app.add_subcommand("db", "inspect, export or clear the measurement database");
  auto options = std::make_shared<Options>();
  command->add_option("action", options->action, "stats | export | clear")
      ->required()
      ->check(CLI::IsMember({"stats", "export", "clear"}));
  command->add_option("--db", options->db, "the database file");
  command->add_option("-o,--output", options->output, "CSV file for export");
  command->add_option("--backend", options->backend, "clear only this backend's rows");
  return [options]() {
    MeasurementDb db(options->db);
    if (options->action == "stats") {
      HardwareFingerprint here = HardwareFingerprint::current();
      MeasurementDbStats st = db.stats(here);
      std::printf("database:  %s (schema v%d)\n", st.path.c_str(), st.schemaVersion);
      std::printf("rows:      %lld (%lld ok), %lld machine fingerprint(s)\n",
                  static_cast<long long>(st.rows), static_cast<long long>(st.okRows),
                  static_cast<long long>(st.fingerprints));
      for (const auto& [backend, n] : st.perBackend)
        std::printf("  %-10s %lld\n", backend.c_str(), static_cast<long long>(n));
      std::printf("this CPU:  %s\n", here.toString().c_str());
    } else if (options->action == "export") {
      db.exportCsv(options->output);
      std::printf("wrote %zu rows to %s\n", db.all().size(), options->output.c_str());
    } else {
      std::printf("deleted %lld rows\n", static_cast<long long>(db.clear(options->backend)));
    }
    return 0;
  };
}

}  // namespace collage::cli
