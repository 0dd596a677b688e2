// Shared by the kernel sources: WebAssembly SIMD intrinsics and how a kernel is exported.
#pragma once

#include <wasm_simd128.h>

// Exported by name (the Python binding calls these) and kept out of dead-code elimination.
#define EXPORT __attribute__((visibility("default"), used))
