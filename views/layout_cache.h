// Graphviz layouts on disk, keyed by graph structure (layoutKey(): a hash of
// the boxes, ops, edges and settings, never a file name), so reopening a
// model, or a model with the same structure, shows it without Graphviz.
// Stores the item layout (views/graph_layout.h), which planLayout() of the
// same structure maps back.
#pragma once

#include <QString>
#include <optional>
#include <string>

#include "views/graph_layout.h"

namespace collage {

class LayoutCache {
 public:
  // `directory` empty = defaultDirectory().
  explicit LayoutCache(QString directory = {});

  // QStandardPaths::CacheLocation/layouts, or ~/.cache/collage-studio/layouts.
  static QString defaultDirectory();
  const QString& directory() const { return dir_; }

  // The item layout stored under `key`, with fromCache set; nothing if there
  // is none or it cannot be read (a damaged file is a miss, not an error).
  std::optional<GraphLayout> load(const std::string& key) const;
  // Writes atomically (a reader never sees half a file); false on failure,
  // which only costs the next open a layout.
  bool store(const std::string& key, const GraphLayout& itemLayout) const;

 private:
  QString pathFor(const std::string& key) const;

  QString dir_;
};

}  // namespace collage
