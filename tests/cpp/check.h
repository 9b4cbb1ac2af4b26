// A minimal test harness for the C++ unit tests: each tests/cpp/test_*.cpp is one ctest
// executable. TEST(name) registers a case; CHECK(cond) records a failure and goes on;
// REQUIRE(cond) stops the case. main() runs every case and exits non-zero on any failure.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <string>
#include <vector>

namespace check {

struct Case {
    const char* name;
    std::function<void()> body;
};

inline std::vector<Case>& registry() {
    static std::vector<Case> cases;
    return cases;
}

inline int& failures() {
    static int n = 0;
    return n;
}

struct Register {
    Register(const char* name, std::function<void()> body) {
        registry().push_back({name, std::move(body)});
    }
};

struct Abort {};

inline void fail(const char* file, int line, const std::string& what) {
    std::fprintf(stderr, "%s:%d: FAILED %s\n", file, line, what.c_str());
    ++failures();
}

}  // namespace check

#define CHECK_CONCAT_(a, b) a##b
#define CHECK_CONCAT(a, b) CHECK_CONCAT_(a, b)
#define TEST(name)                                                          \
    static void name();                                                     \
    static check::Register CHECK_CONCAT(register_, name)(#name, name);      \
    static void name()

#define CHECK(cond) \
    do { if (!(cond)) check::fail(__FILE__, __LINE__, #cond); } while (0)
#define CHECK_MSG(cond, msg) \
    do { if (!(cond)) check::fail(__FILE__, __LINE__, std::string(#cond) + ": " + (msg)); } while (0)
#define REQUIRE(cond) \
    do { if (!(cond)) { check::fail(__FILE__, __LINE__, #cond); throw check::Abort{}; } } while (0)
// Passes when expr throws an exception of type E (or a subclass).
#define CHECK_THROWS_AS(expr, E)                                              \
    do {                                                                      \
        bool thrown_ = false;                                                 \
        try { (void)(expr); } catch (const E&) { thrown_ = true; }            \
        catch (...) {}                                                        \
        if (!thrown_) check::fail(__FILE__, __LINE__, #expr " throws " #E);  \
    } while (0)

#ifndef CHECK_NO_MAIN
int main() {
    for (const check::Case& c : check::registry()) {
        const int before = check::failures();
        try {
            c.body();
        } catch (const check::Abort&) {
        } catch (const std::exception& e) {
            check::fail(c.name, 0, std::string("unexpected exception: ") + e.what());
        }
        std::printf("%s %s\n", check::failures() == before ? "ok  " : "FAIL", c.name);
    }
    std::printf("%d failure(s)\n", check::failures());
    return check::failures() == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
#endif
