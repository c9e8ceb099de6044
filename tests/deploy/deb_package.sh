#!/usr/bin/env bash
# The .deb: CPack builds it from the build tree, it declares the Debian
# packages it needs (dpkg-shlibdeps plus the listed ones), and, extracted
# anywhere with dpkg -x, it holds every file and its binaries find their
# spec files and library relative to where they were extracted.
#   deb_package.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$(realpath "$1")
source=$(realpath "$2")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

(cd "$build" && cpack -G DEB -B "$tmp/out" >"$tmp/cpack.log" 2>&1) || { cat "$tmp/cpack.log"; exit 1; }
deb=$(find "$tmp/out" -maxdepth 1 -name 'collage-studio_*.deb' -print -quit)
[[ -f $deb ]] || { echo "FAIL: no .deb made"; cat "$tmp/cpack.log"; exit 1; }

depends=$(dpkg-deb -f "$deb" Depends)
echo "Depends: $depends"
dpkg-deb -I "$deb" >/dev/null
for p in libdnnl libopenblas0-openmp libprotobuf libonnx libsqlite3 libpq5 libqt5widgets5 libgvc \
         libstdc++6 python3 python3-numpy libdlpack-dev; do
  grep -q "\b$p" <<<"$depends" || { echo "FAIL: Depends does not name $p"; exit 1; }
done

root=$tmp/root
dpkg -x "$deb" "$root"
for f in usr/bin/collage usr/bin/collage-studio usr/include/collage/session.h \
         usr/share/collage-studio/backends/native.toml usr/share/collage-studio/backends/onednn.toml \
         usr/share/collage-studio/backends/openblas.toml \
         usr/share/applications/collage-studio.desktop \
         usr/share/icons/hicolor/scalable/apps/collage-studio.svg; do
  [[ -e $root/$f ]] || { echo "FAIL: $f is not in the package"; exit 1; }
done
for pattern in 'libcollage.so.*' 'CollageStudioConfig.cmake' 'CollageStudioTargets.cmake' \
               'collage.cpython-*.so'; do
  [[ -n $(find "$root/usr" -name "$pattern") ]] || { echo "FAIL: no $pattern in the package"; exit 1; }
done

# A fresh Debian 12 machine has the Depends and nothing else: every library
# an ELF file in the package needs must come from a Debian package or from
# the package itself, never from /usr/local (the CUDA toolkit's libraries are
# opened when a CUDA backend needs them, not needed to start).
while read -r elf; do
  for lib in $(readelf -d "$elf" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
    [[ $lib == libcollage.so.* ]] && continue
    dpkg -S "*/$lib" >/dev/null 2>&1 ||
      { echo "FAIL: ${elf#"$root"} needs $lib, which no Debian package provides"; exit 1; }
  done
done < <(find "$root/usr" -type f \( -perm -u+x -o -name '*.so*' \) -exec sh -c \
           '[ "$(head -c 4 "$1")" = "$(printf "\177ELF")" ] && echo "$1"' _ {} \;)

# Relocated: the extracted binaries use the extracted spec files. The output
# is read whole before grep looks at it: grep -q stops at its first match, and
# under pipefail a writer that still had output (more than one pipe buffer
# when the root's path is long) would die of SIGPIPE and fail the pipeline.
spec=$("$root/usr/bin/collage" spec --show --user-file "$tmp/none.toml")
grep -q "from $root/usr/share/collage-studio/backends/onednn.toml" <<<"$spec" ||
  { echo "FAIL: the extracted collage does not read the extracted spec files"; exit 1; }
pythonpath=$(dirname "$(find "$root/usr" -name 'collage.cpython-*.so' -print -quit)")
PYTHONPATH=$pythonpath /usr/bin/python3 -c "
import collage, sys
assert collage.__file__.startswith(sys.argv[1]), collage.__file__
info = collage.inspect(sys.argv[2])
assert info['nodes'] > 0 and info['inputs'], info
print('extracted module:', collage.__file__)" "$root" "$source/resources/models/dcgan_small.onnx"
echo "PASS: .deb declares its dependencies and holds a working tree"
