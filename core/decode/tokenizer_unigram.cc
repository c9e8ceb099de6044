#include "core/decode/tokenizer_unigram.h"

#include <algorithm>
#include <cstdio>
#include <limits>

#include "core/ir/error.h"

namespace collage {

namespace {

// The library's penalty below the lowest score for an unknown character.
constexpr double kUnknownPenalty = 10.0;

size_t charLength(unsigned char lead) {
  return lead < 0x80           ? 1
         : (lead >> 5) == 0x6  ? 2
         : (lead >> 4) == 0xE  ? 3
         : (lead >> 3) == 0x1E ? 4
                               : 1;
}

}  // namespace

UnigramModel::UnigramModel(std::vector<std::pair<std::string, double>> pieces, int64_t unk,
                           bool byteFallback, std::string path)
    : pieces_(std::move(pieces)), unk_(unk), byteFallback_(byteFallback), path_(std::move(path)) {
  if (unk_ >= static_cast<int64_t>(pieces_.size()))
    throw Error(path_ + ": model.unk_id " + std::to_string(unk_) +
                " is not an id of model.vocab (0.." + std::to_string(pieces_.size()) + ")");
  double lowest = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < pieces_.size(); ++i) {
    // Of two equal pieces the later id is the piece's, as in the library.
    ids_[pieces_[i].first] = static_cast<int64_t>(i);
    longest_ = std::max(longest_, pieces_[i].first.size());
    lowest = std::min(lowest, pieces_[i].second);
  }
  unkScore_ = (pieces_.empty() ? 0.0 : lowest) - kUnknownPenalty;
}

void UnigramModel::encode(const std::string& text, std::vector<int64_t>& ids) const {
  const size_t n = text.size();
  if (n == 0) return;
  // best[e]: the highest total of a segmentation of text[0, e), the start of
  // its last piece (npos: none reaches e yet) and that piece's id.
  struct Best {
    double score = 0;
    size_t from = std::string::npos;
    int64_t id = -1;
  };
  std::vector<Best> best(n + 1);
  best[0].from = 0;
  for (size_t start = 0; start < n;) {
    const size_t step = std::min(charLength(static_cast<unsigned char>(text[start])), n - start);
    // Every character start is reached: by a piece, else by the unknown.
    const double here = best[start].score;
    bool single = false;  // a piece of exactly this character
    const size_t most = std::min(longest_, n - start);
    for (size_t len = 1; len <= most; ++len) {
      auto it = ids_.find(text.substr(start, len));
      if (it == ids_.end()) continue;
      Best& to = best[start + len];
      const double score = here + pieces_[it->second].second;
      if (to.from == std::string::npos || score > to.score) to = {score, start, it->second};
      if (len == step) single = true;
    }
    if (!single) {
      if (unk_ < 0)
        throw Error(path_ + ": the text's \"" + text.substr(start, step) +
                    "\" has no piece (no model.unk_id)");
      Best& to = best[start + step];
      const double score = here + unkScore_;
      if (to.from == std::string::npos || score > to.score) to = {score, start, unk_};
    }
    start += step;
  }
  // Back from the end; unknowns in a row are one piece of their joint text.
  std::vector<std::pair<std::string, int64_t>> path;  // (text, id), last first
  for (size_t end = n; end > 0;) {
    const Best& b = best[end];
    std::string piece = text.substr(b.from, end - b.from);
    if (b.id == unk_ && !path.empty() && path.back().second == unk_)
      path.back().first = piece + path.back().first;
    else
      path.emplace_back(piece, b.id);
    end = b.from;
  }
  std::reverse(path.begin(), path.end());
  for (const auto& [piece, id] : path) {
    if (id != unk_) {
      ids.push_back(id);
      continue;
    }
    // A fused run may spell a piece of its own (the library looks it up).
    auto whole = ids_.find(piece);
    if (whole != ids_.end()) {
      ids.push_back(whole->second);
      continue;
    }
    if (byteFallback_) {
      std::vector<int64_t> bytes;
      for (unsigned char c : piece) {
        char name[8];
        std::snprintf(name, sizeof name, "<0x%02X>", c);
        auto it = ids_.find(name);
        if (it == ids_.end()) break;
        bytes.push_back(it->second);
      }
      if (bytes.size() == piece.size()) {
        ids.insert(ids.end(), bytes.begin(), bytes.end());
        continue;
      }
    }
    ids.push_back(unk_);
  }
}

}  // namespace collage
