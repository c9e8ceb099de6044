#!/usr/bin/env bash
# Packs what a GPU machine without this project's Debian packages needs to
# run the checks in this folder: the binaries built here, the shared
# libraries they link (oneDNN, OpenBLAS, ONNX, protobuf, ...; not glibc or
# libstdc++, which the machine has), and ONNX's conformance data.
# Usage: bench/gpu/pack.sh BUILD_DIR OUT_DIR   (writes OUT_DIR/pack.tar.xz)
# On the GPU machine, from the repository root (linked to the path it was
# built at, which the tests compile in): tar -xJf OUT_DIR/pack.tar.xz, then
# device_check.sh / device_models.sh. CUDA's libraries are found there.
set -euo pipefail
build=$1 out=$2
root=$(mktemp -d); trap 'rm -rf "$root"' EXIT
mkdir -p "$root/build/app" "$root/build/tests" "$root/.devcarry/cs/lib" "$root/.devcarry/cs/testdata"
cp "$build/app/collage" "$root/build/app/"
cp "$build/tests/unit_tests" "$build/tests/conformance_runner" "$root/build/tests/"
strip --strip-unneeded "$root"/build/app/* "$root"/build/tests/*
for lib in $(ldd "$build/app/collage" "$build/tests/unit_tests" "$build/tests/conformance_runner" |
             awk '$3 ~ /^\// {print $3}' | sort -u); do
  case $(basename "$lib") in libc.so.*|libm.so.*|ld-linux*|libstdc++*|libgcc_s*) continue ;; esac
  cp -L "$lib" "$root/.devcarry/cs/lib/"
done
cp -r /usr/share/libonnx-testdata/data/{node,pytorch-converted,pytorch-operator,simple} "$root/.devcarry/cs/testdata/"
mkdir -p "$out"
tar -C "$root" -cf - build .devcarry | xz -6 -T0 > "$out/pack.tar.xz"
ls -la "$out/pack.tar.xz"
