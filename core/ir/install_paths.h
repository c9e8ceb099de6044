// Where an installed Collage Studio keeps its files. The tool runs from three
// kinds of place: the build tree, a prefix chosen at `cmake --install` time,
// and a .deb's tree (installed, or extracted anywhere with `dpkg -x`). So no
// installed path is compiled in: files are found relative to the binary this
// code is linked into (the `collage` executable, or libcollage.so inside a
// Python process, whose /proc/self/exe is the interpreter):
//
//   <prefix>/bin/collage                       <prefix>/lib/<arch>/libcollage.so
//        └──── up to the prefix ───▶ <prefix>/share/collage-studio/backends/*.toml
//
// The build tree has no such layout; callers fall back to the source tree.
#pragma once

#include <optional>
#include <string>

namespace collage {

// The file of the executable or shared library that holds this function; ""
// when the loader cannot say.
std::string thisBinaryPath();

// `relative` (e.g. "share/collage-studio/backends") under the nearest of the
// binary's first few ancestor folders that has it; nullopt when none does.
std::optional<std::string> findInstalledPath(const std::string& relative);

}  // namespace collage
