// The graph-level search's genome: which runs of a plan's groups are handed,
// as one region, to which graph library.
//
// The paper gives each node one bit (1 = hand it to the graph library) and
// takes the connected components of the 1s as regions. Here a gene belongs
// to each *group* of the starting plan (the op-level plan or the baseline
// the end-to-end check kept), in the order the groups run, and says which
// graph library takes it (0 = none, 1..L = the libraries). A maximal run of
// consecutive genes with the same library becomes one region. Why:
//  - the op-level groups are already the best kernels the DP found, so the
//    search starts from them and only decides what runs together;
//  - a run of groups consecutive in an execution order is always convex, and
//    contracting it keeps the plan acyclic, so every genome decodes to a plan
//    that can run (no repair by trial and error);
//  - with several libraries, the gene also chooses which one takes a region.
// A run that the library refuses (Backend::regionRefusal, asked without
// compiling) is split greedily into the longest prefixes it accepts; groups
// it accepts in no region keep their op-level placement. The decoded plan's
// placement identifies the genome: two genomes that decode to one plan are
// one individual (and one measurement).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/ir/graph.h"
#include "core/ir/node_set.h"
#include "core/plan/plan.h"

namespace collage {

// A backend that takes regions, as the search sees it.
struct GraphLibrary {
  std::string backend;
  // Why `nodes` cannot be one region kernel; empty when they can.
  std::function<std::string(const NodeSet& nodes)> refusal;
};

using Genome = std::vector<uint8_t>;

class RegionEncoding {
 public:
  // `base` must be a valid plan of `graph` (resolvePlanGroups).
  RegionEncoding(const Graph& graph, const Plan& base, std::vector<GraphLibrary> libraries);

  size_t length() const { return order_.size(); }
  int alleles() const { return static_cast<int>(libraries_.size()) + 1; }
  const std::vector<GraphLibrary>& libraries() const { return libraries_; }
  const Plan& base() const { return base_; }
  // The base plan's group index of gene i.
  size_t groupOfGene(size_t gene) const { return order_.at(gene); }

  struct Decoded {
    Plan plan;          // the base plan with the regions in place (origin graph-level)
    Genome canonical;   // genes that made no region (or no change) set to 0
    std::string key;    // placementKey(plan)
    int regions = 0;    // groups of the plan that a graph library runs
  };
  Decoded decode(const Genome& genome) const;

  Genome zeros() const { return Genome(length(), 0); }
  Genome uniform(uint8_t allele) const { return Genome(length(), allele); }
  // "0012..." (one character per gene) and back; nullopt if it does not fit.
  std::string toString(const Genome& genome) const;
  std::optional<Genome> fromString(const std::string& text) const;

 private:
  bool accepts(size_t library, size_t first, size_t last) const;  // genes first..last as one region

  const Graph& graph_;
  Plan base_;
  std::vector<GraphLibrary> libraries_;
  std::vector<NodeSet> groups_;  // the base plan's, by group index
  std::vector<size_t> order_;    // the base plan's execution order
  mutable std::map<std::tuple<size_t, size_t, size_t>, bool> accepted_;  // (library, first, last)
};

// Lines that say what `plan` changed against `base`: each graph-level group
// with the base groups it merged and their backends ("onednn region of 7
// nodes (conv1 .. relu3): merged 3 groups (onednn 2, openblas 1)").
std::vector<std::string> describeRegionChanges(const Plan& base, const Plan& plan);

}  // namespace collage
