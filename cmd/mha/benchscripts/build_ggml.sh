#!/bin/sh
# build_ggml.sh SRC [BUILD]: builds ggml's test-backend-ops for the CPU backend, the reference
# of mha bench --ggml, from a ggml or llama.cpp source directory you fetched yourself, such as
#
#   git clone --depth 1 https://github.com/ggml-org/ggml
#   sh cmd/mha/benchscripts/build_ggml.sh ggml
#
# It configures SRC with CMake into BUILD (default SRC/build-mha), Release, GGML_NATIVE on (the
# instruction sets of this machine, as mha's kernels use them), no GPU backend, and builds only
# the target test-backend-ops. Its last line is the binary's path, which mha bench --ggml takes
# (as does the build directory). Needs cmake, make or ninja, and a C/C++ compiler
# (apt-get install cmake g++).
set -eu

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
	echo "usage: build_ggml.sh SRC [BUILD]: SRC is a ggml or llama.cpp source directory (git clone https://github.com/ggml-org/ggml)" >&2
	exit 2
fi
src=$1
build=${2:-$src/build-mha}

if [ ! -f "$src/CMakeLists.txt" ] || [ ! -f "$src/tests/test-backend-ops.cpp" ]; then
	echo "build_ggml.sh: $src is not a ggml or llama.cpp source directory: want CMakeLists.txt and tests/test-backend-ops.cpp in it" >&2
	exit 1
fi
if ! command -v cmake >/dev/null 2>&1; then
	echo "build_ggml.sh: cmake not found in PATH; install it with apt-get install cmake g++" >&2
	exit 1
fi

# ggml builds its tests with GGML_BUILD_TESTS, llama.cpp with LLAMA_BUILD_TESTS; each ignores
# the other's. llama.cpp's tools, server and libcurl are not needed.
cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
	-DGGML_BUILD_TESTS=ON -DGGML_BUILD_EXAMPLES=OFF \
	-DLLAMA_BUILD_TESTS=ON -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF \
	-DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF -DGGML_OPENCL=OFF -DGGML_SYCL=OFF -DGGML_HIP=OFF >&2
cmake --build "$build" --config Release --target test-backend-ops -j "$(nproc 2>/dev/null || echo 4)" >&2

for bin in "$build/bin/test-backend-ops" "$build/bin/Release/test-backend-ops"; do
	if [ -x "$bin" ]; then
		(cd "$(dirname "$bin")" && echo "$(pwd)/$(basename "$bin")")
		exit 0
	fi
done
echo "build_ggml.sh: the build finished but test-backend-ops is not in $build/bin" >&2
exit 1
