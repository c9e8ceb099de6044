// What makes an imported model a decoder with a KV cache, found by structure
// and by the roles of the names, never by the model's name:
//  - a cache pair: a graph input (past_key_values.N.key, past.N.value, any
//    name) whose one consumer is a Concat that appends freshly computed rows
//    on one axis (the sequence), the Concat's output being a graph output
//    (present.N.key, any name). The Concat's other input must be computed
//    in the graph, not another graph input;
//  - the token ids: the integer input whose name says ids (`input_ids`,
//    `ids`, `tokens`), else the only integer input feeding a Gather's indices;
//  - the attention mask: the integer input whose name contains "mask";
//  - the positions (optional): the integer input whose name contains
//    "position";
//  - the logits: the output named `logits`, else the only output that is
//    not a present.
// Anything else is an Error naming the tensor (decoderSignature).
#pragma once

#include <string>
#include <vector>

#include "core/ir/graph.h"

namespace collage {

struct KvCachePair {
  std::string past;      // the graph input: [.., sequence, ..]
  std::string present;   // the Concat's output, a graph output
  int sequenceAxis = 0;  // the Concat's axis, non-negative
};

struct DecoderSignature {
  std::string inputIds;
  std::string attentionMask;
  std::string positionIds;  // empty: the model has none
  std::string logits;
  std::vector<KvCachePair> cache;  // in graph input order
};

// The decoder's inputs, outputs and cache pairs; Error naming `model` and the
// tensor that does not fit (an input the loop cannot feed, a past input not
// appended to, a Concat whose result is not returned, no cache at all).
DecoderSignature decoderSignature(const Graph& graph, const std::string& model);

}  // namespace collage
