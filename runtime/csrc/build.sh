#!/bin/sh
# Builds libtbtorch.so (and the test-only libtbtorch_testops.so) into OUTDIR.
#   runtime/csrc/build.sh OUTDIR            # compilers from CC/CXX, else cmake's default
#   CC=clang-15 CXX=clang++-15 runtime/csrc/build.sh OUTDIR
# Then build or test the Go side with:
#   CGO_LDFLAGS="-L$OUTDIR -Wl,-rpath,$OUTDIR" go test -tags libtorch ./runtime/torch/...
set -eu
if [ $# -ne 1 ]; then
	echo "usage: $0 OUTDIR" >&2
	exit 2
fi
src=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$1"
out=$(cd "$1" && pwd)
cmake -S "$src" -B "$out" -G Ninja -DCMAKE_BUILD_TYPE=Release ${TBTORCH_CMAKE_ARGS:-}
cmake --build "$out"
echo "built $out/libtbtorch.so"
