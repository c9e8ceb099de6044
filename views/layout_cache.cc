#include "views/layout_cache.h"

#include <QDir>
#include <QFile>
#include <QSaveFile>
#include <QStandardPaths>
#include <sstream>

namespace collage {

LayoutCache::LayoutCache(QString directory)
    : dir_(directory.isEmpty() ? defaultDirectory() : std::move(directory)) {}

QString LayoutCache::defaultDirectory() {
  QString base = QStandardPaths::writableLocation(QStandardPaths::CacheLocation);
  if (base.isEmpty()) base = QDir::homePath() + QStringLiteral("/.cache/collage-studio");
  return base + QStringLiteral("/layouts");
}

QString LayoutCache::pathFor(const std::string& key) const {
  return dir_ + '/' + QString::fromStdString(key) + QStringLiteral(".layout");
}

std::optional<GraphLayout> LayoutCache::load(const std::string& key) const {
  QFile file(pathFor(key));
  if (!file.open(QIODevice::ReadOnly)) return std::nullopt;
  QByteArray bytes = file.readAll();
  std::istringstream in(std::string(bytes.constData(), static_cast<size_t>(bytes.size())));
  try {
    GraphLayout layout = readItemLayout(in);
    layout.fromCache = true;
    return layout;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

bool LayoutCache::store(const std::string& key, const GraphLayout& itemLayout) const {
  if (!QDir().mkpath(dir_)) return false;
  std::ostringstream out;
  writeItemLayout(itemLayout, out);
  const std::string text = out.str();
  QSaveFile file(pathFor(key));
  if (!file.open(QIODevice::WriteOnly)) return false;
  file.write(text.data(), static_cast<qint64>(text.size()));
  return file.commit();
}

}  // namespace collage
