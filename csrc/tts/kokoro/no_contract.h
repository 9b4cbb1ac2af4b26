// Included by the files whose float32 arithmetic must round as written (the reference's
// roundings): no multiply-add may be fused behind the code's back.
//
// clang fuses within an expression by default where the target has FMA; the pragma below
// stops it for this file. GCC fuses wherever the target has FMA (-ffp-contract=fast): on
// x86-64 these files build with the generic flags, which have no FMA, so nothing is fused; on
// arm64 (FMA always present) they need -ffp-contract=off from the build, as the exact
// sources of the core get (CMakeLists.txt). GCC's per-function optimize pragma is not used:
// it stops inlining of everything defined outside it (std::min, vector indexing).
#pragma once

#if defined(__clang__)
#pragma clang fp contract(off)
#endif
