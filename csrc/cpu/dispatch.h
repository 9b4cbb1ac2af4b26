// The kernel-table pattern every CPU op family follows.
//
// A family (dot, matmul, rope, ...) declares one struct of function pointers whose first
// field is `const char* isa`, the level its kernels were built for (core/cpu_features.h).
// - FAMILY.cpp defines the generic table: plain C++, built with the default flags, always
//   present. It is the reference the variants are tested against.
// - FAMILY_<level>.cpp (avx2, avx512, amx, neon) defines `const Table* FAMILY::kernels_<level>()`:
//   its table, or nullptr when its guard macros say the compiler could not build it. Every
//   entry is filled; a kernel a level does not speed up points at the generic function.
// - FAMILY.cpp lists the tables, best first, generic last, in one Variants<Table> returned by
//   its `variants()`; DASLLAMA_VARIANT_ENTRY_POINTS(Table) then defines the family's
//   available_variants(), variant(isa) and active() over it. The public entry points call
//   through active(), chosen once from cpu_features().
//
// Only the files of this build's architecture exist (CMakeLists.txt drops the others), so
// the list names x86 tables under DASLLAMA_X86 and arm64 tables under DASLLAMA_ARM64.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "core/cpu_features.h"
#include "core/errors.h"

namespace dasllama::cpu {

template <class Table>
class Variants {
public:
    // Best first, generic last; nullptr entries (not built) are dropped.
    Variants(std::initializer_list<const Table*> tables) {
        for (const Table* t : tables)
            if (t) tables_.push_back(t);
        chosen_ = &best();
    }

    // The best table this process may run (generic is always allowed).
    const Table& best() const {
        for (const Table* t : tables_)
            if (cpu_features().allows(t->isa)) return *t;
        return *tables_.back();
    }

    // best(), chosen when the list is made and kept (the entry points' table).
    const Table& active() const { return *chosen_; }

    // The levels this process may run, best first: for tests and reports.
    std::vector<std::string> names() const {
        std::vector<std::string> out;
        for (const Table* t : tables_)
            if (cpu_features().allows(t->isa)) out.emplace_back(t->isa);
        return out;
    }

    // A table by level; throws Error when it was not built or may not run here.
    const Table& get(std::string_view isa) const {
        for (const Table* t : tables_)
            if (t->isa == isa && cpu_features().allows(isa)) return *t;
        throw Error("cpu kernels: variant '" + std::string(isa) +
                    "' is not available on this CPU (level " + cpu_features().isa() + ")");
    }

private:
    std::vector<const Table*> tables_;
    const Table* chosen_ = nullptr;
};

}  // namespace dasllama::cpu

// A family's three public entry points over its list `variants()` (a function returning its
// Variants<Table>, defined before this in the family's namespace): the levels this process may
// run best first, a table by level (Error when not available), and the active table.
#define DASLLAMA_VARIANT_ENTRY_POINTS(Table)                                          \
    std::vector<std::string> available_variants() { return variants().names(); }     \
    const Table& variant(std::string_view isa) { return variants().get(isa); }       \
    const Table& active() { return variants().active(); }
