#!/usr/bin/env bash
# Installs what Collage Studio needs from Debian's packages (idempotent: quick
# when everything is present), then configures and builds into build/.
#   scripts/setup.sh            runtime + build + test dependencies, then build
#   scripts/setup.sh --bench    also the benchmark peers (PyTorch, matplotlib)
# Environment: BUILD_DIR (default build), COLLAGE_JOBS (default: all cores).
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake ninja-build pkg-config ccache git
  libonnx-dev libprotobuf-dev protobuf-compiler libonnx-testdata
  libdnnl-dev libopenblas-openmp-dev
  libtomlplusplus-dev nlohmann-json3-dev libdlpack-dev libsqlite3-dev libcli11-dev libssl-dev
  # Tokenizers (`collage generate --prompt`, docs/decoding.md): SentencePiece's
  # library and its tools (spm_encode: the tests' expected ids), ICU.
  libsentencepiece-dev sentencepiece libicu-dev
  # The team's services, both optional (docs/team-setup.md): a shared store,
  # and measurement on target machines through Slurm. Their tests start the
  # daemons themselves and are skipped where they cannot.
  libpq-dev postgresql slurm-wlm munge
  # MPI, optional too: `collage run --pipeline P --mpi` under mpirun
  # (docs/pipeline.md); the build leaves it out where CMake finds no MPI.
  openmpi-bin libopenmpi-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  qtbase5-dev libqt5charts5-dev libqt5svg5-dev libgraphviz-dev
  pybind11-dev python3-dev python3-numpy python3-onnx
  xvfb xauth
)
if [[ "${1:-}" == "--bench" ]]; then
  packages+=(python3-torch python3-torchvision python3-matplotlib)
  # Node.js and npm: only from Debian when the commands are missing (a Node.js
  # installed from elsewhere ships its own npm, which Debian's npm conflicts with).
  command -v node >/dev/null 2>&1 || packages+=(nodejs)
  command -v npm >/dev/null 2>&1 || packages+=(npm)
fi

missing=()
for p in "${packages[@]}"; do
  if [[ $(dpkg-query -W -f='${Status}' "$p" 2>/dev/null) != "install ok installed" ]]; then
    missing+=("$p")
  fi
done
if ((${#missing[@]})); then
  echo "== installing ${#missing[@]} Debian packages: ${missing[*]}"
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

BUILD_DIR=${BUILD_DIR:-build}
JOBS=${COLLAGE_JOBS:-$(nproc)}
# ccache keys on absolute paths; relative to the checkout, a clone in another
# folder (CI's) reuses what an earlier build compiled.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release
fi
echo "== building in $BUILD_DIR"
cmake --build "$BUILD_DIR" -j "$JOBS"
