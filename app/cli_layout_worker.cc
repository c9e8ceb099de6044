// `collage layout-worker`: the Graphviz layout in a process of its own
// (views/layout_job.h), so the app can cancel a long layout by killing it.
// Not for people: it reads a layout input (views/graph_layout.h) on stdin and
// writes the layout on stdout.
#include <iostream>

#include "app/cli_common.h"
#include "views/graph_layout.h"

namespace collage::cli {

Action addLayoutWorkerCommand(CLI::App& app) {
  auto* command = app.add_subcommand("layout-worker", "");  // hidden: empty description
  command->group("");
  return []() {
    std::ios::sync_with_stdio(false);
    return runLayoutWorker(std::cin, std::cout, std::cerr);
  };
}

}  // namespace collage::cli
