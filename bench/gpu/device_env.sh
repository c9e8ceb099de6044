# Sourced by the device scripts: a deadline clock, the checkout linked at the
# path the binaries were built at, the pack unpacked (pack.sh), and CUDA's
# libraries found on the machine and handed over in one folder.
set -u
DEADLINE=${DEADLINE:-400}
T0=$(date +%s)
el() { echo "[t=$(($(date +%s) - T0))s] $*"; }
left() { echo $((DEADLINE - ($(date +%s) - T0))); }
R=$(pwd); mkdir -p /work; [ -e /work/main ] || ln -s "$R" /work/main
cd /work/main
tar -xJf .devcarry/pack.tar.xz
L=/work/main/.devcarry/cs
mkdir -p /tmp/cudalibs /tmp/home /tmp/zoo
for n in libcudart.so.13 libcublasLt.so.13 libcublas.so.13 libnvrtc.so.13 libcudnn.so.9; do
  f=$(find /usr/local/cuda*/ /opt /usr/lib /usr/local/lib -name "$n" 2>/dev/null | head -1); echo "$n: $f"
  [ -n "$f" ] && for g in "$(dirname "$f")"/lib*.so*; do ln -sf "$g" /tmp/cudalibs/; done
done
export LD_LIBRARY_PATH=$L/lib:/tmp/cudalibs COLLAGE_CUDA_LIBRARY_DIR=/tmp/cudalibs HOME=/tmp/home
nvidia-smi -L
C=build/app/collage
