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
//
// The merged form (Hugging Face Optimum's decoder_model_merged.onnx): one
// graph whose KV path an If chooses on a boolean one-element graph input
// (`use_cache_branch`, any name): the then-branch reads the past, the else-
// branch is the no-cache pass over the prompt, both returning the same
// outputs. mergedDecoderFlag finds that input by structure; with it bound
// to a constant the importer inlines the branch taken (the constant If,
// core/onnx/import_subgraphs), and the graph is the separate form: the
// decode loop imports the then-branch for its steps and the else-branch for
// the prompt's pass (core/decode/decoder.h).
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
  // The merged form's boolean input (true: the branch with the past); empty
  // for the separate form.
  std::string useCacheFlag;
};

// The decoder's inputs, outputs and cache pairs; Error naming `model` and the
// tensor that does not fit (an input the loop cannot feed, a past input not
// appended to, a Concat whose result is not returned, no cache at all).
DecoderSignature decoderSignature(const Graph& graph, const std::string& model);

// The merged form's flag: the boolean one-element graph input that is the
// condition of the graph's If nodes, or "" when the graph has no If. Error
// naming `model` and the If for an If whose condition the graph computes
// (neither a graph input nor a constant, which the importer folds), for
// branches whose outputs differ in number, element type or rank, and for
// Ifs on two different inputs.
std::string mergedDecoderFlag(const Graph& graph, const std::string& model);

// The --input-value binding that imports a merged decoder as the decode
// loop does ("use_cache_branch=true": the steps, the branch with the past;
// "=false": the prompt's pass, the no-cache branch), what a plan for that
// graph is optimized with beside the --input-shape bindings; "" for the
// separate form.
std::string useCacheBinding(const DecoderSignature& signature, bool withPast);

}  // namespace collage
