#!/usr/bin/env bash
# The installed package as a user gets it: `cmake --install` into a temporary
# prefix, examples/cpp built against it with find_package(CollageStudio), and
# examples/python run with the installed module. Both examples run one plan
# and must print the same outputs; the installed `collage` must read the
# installed spec files, not the source tree's.
#   install_example.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$(realpath "$1")
source=$(realpath "$2")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
model=$source/resources/models/dcgan_small.onnx

cmake --install "$build" --prefix "$prefix" >"$tmp/install.log"
for f in bin/collage include/collage/collage.h include/collage/version.h \
         share/collage-studio/backends/onednn.toml lib/cmake/CollageStudio/CollageStudioConfig.cmake; do
  [[ -e $prefix/$f ]] || { echo "FAIL: $f is not installed"; exit 1; }
done
pythonpath=$(dirname "$(find "$prefix" -name 'collage.cpython-*.so' -print -quit)")
[[ -d $pythonpath ]] || { echo "FAIL: the Python module is not installed"; exit 1; }

# Spec files relative to the prefix (the build tree's would be the source tree's).
"$prefix/bin/collage" spec --show --user-file "$tmp/none.toml" >"$tmp/specs.txt"
grep -q "from $prefix/share/collage-studio/backends/native.toml" "$tmp/specs.txt" ||
  { echo "FAIL: the installed collage does not read the installed spec files:"; head -3 "$tmp/specs.txt"; exit 1; }

# A plan for the model (every node on the native backend: nothing to measure).
PYTHONPATH=$pythonpath /usr/bin/python3 -c "
import collage, sys
collage.Plan.single_backend(sys.argv[1], 'native').save(sys.argv[2])" "$model" "$tmp/plan.json"

cmake -S "$source/examples/cpp" -B "$tmp/example" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$prefix" >"$tmp/configure.log"
cmake --build "$tmp/example" >"$tmp/build.log" || { cat "$tmp/build.log"; exit 1; }
"$tmp/example/run_plan" "$model" "$tmp/plan.json" | tee "$tmp/cpp.txt"
PYTHONPATH=$pythonpath /usr/bin/python3 "$source/examples/python/run_plan.py" "$model" \
  "$tmp/plan.json" | tee "$tmp/python.txt"

grep '^output' "$tmp/cpp.txt" >"$tmp/cpp_outputs.txt"
grep '^output' "$tmp/python.txt" >"$tmp/python_outputs.txt"
[[ -s $tmp/cpp_outputs.txt ]] || { echo "FAIL: the C++ example printed no output"; exit 1; }
diff "$tmp/cpp_outputs.txt" "$tmp/python_outputs.txt" ||
  { echo "FAIL: the C++ and Python examples disagree"; exit 1; }
echo "PASS: installed package, C++ and Python examples agree"
