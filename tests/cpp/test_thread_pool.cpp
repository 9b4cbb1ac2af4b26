// The thread pool: every thread runs each job exactly once, jobs see each other's writes in
// order, exceptions reach the caller, and sleeping workers wake up.
#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "check.h"
#include "core/thread_pool.h"

using dasllama::ThreadPool;

TEST(default_size_is_positive) {
    ThreadPool pool;
    CHECK(pool.size() >= 1);
    CHECK(pool.size() <= static_cast<int>(std::thread::hardware_concurrency()) ||
          std::thread::hardware_concurrency() == 0);
}

TEST(every_thread_runs_each_job_once) {
    for (int n : {1, 2, 3, 5}) {
        ThreadPool pool(n);
        REQUIRE(pool.size() == n);
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        for (int job = 0; job < 300; ++job) {
            pool.run([&](int thread, int n_threads) {
                if (n_threads == n && thread >= 0 && thread < n) hits[thread].fetch_add(1);
            });
        }
        for (int t = 0; t < n; ++t) CHECK_MSG(hits[t].load() == 300, std::to_string(hits[t].load()));
    }
}

// A job's writes are visible to the next job on another thread: run() returns only after
// every share has finished, and the next job starts after that. Job k reads buffer k % 2 and
// writes buffer (k + 1) % 2, each thread taking the other thread's slot, with plain ints: only
// the pool orders them. After k jobs every slot holds k.
TEST(jobs_are_ordered) {
    ThreadPool pool(2);
    int64_t buf[2][2] = {{0, 0}, {0, 0}};
    const int jobs = 3000;
    for (int job = 0; job < jobs; ++job) {
        pool.run([&](int thread, int) {
            buf[(job + 1) % 2][thread] = buf[job % 2][1 - thread] + 1;
        });
    }
    const int64_t* last = buf[jobs % 2];
    CHECK_MSG(last[0] == jobs && last[1] == jobs,
              std::to_string(last[0]) + " " + std::to_string(last[1]));
}

TEST(workers_wake_after_sleeping) {
    ThreadPool pool(3);
    std::atomic<int> sum{0};
    for (int round = 0; round < 3; ++round) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));  // past the spin time
        pool.run([&](int thread, int) { sum.fetch_add(thread + 1); });
    }
    CHECK(sum.load() == 3 * (1 + 2 + 3));
}

TEST(exceptions_reach_the_caller) {
    ThreadPool pool(2);
    for (int thrower : {0, 1}) {
        bool caught = false;
        try {
            pool.run([&](int thread, int) {
                if (thread == thrower) throw std::runtime_error("boom");
            });
        } catch (const std::runtime_error& e) {
            caught = std::string(e.what()) == "boom";
        }
        CHECK(caught);
        // The pool still works afterwards.
        std::atomic<int> n{0};
        pool.run([&](int, int) { n.fetch_add(1); });
        CHECK(n.load() == 2);
    }
}

TEST(parallel_sum_matches_serial) {
    ThreadPool pool(2);
    std::vector<int64_t> data(100003);
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<int64_t>(i * 7 % 1001);
    int64_t serial = 0;
    for (int64_t v : data) serial += v;
    std::vector<int64_t> partial(static_cast<size_t>(pool.size()), 0);
    pool.run([&](int thread, int n) {
        const size_t lo = data.size() * thread / n, hi = data.size() * (thread + 1) / n;
        for (size_t i = lo; i < hi; ++i) partial[thread] += data[i];
    });
    int64_t total = 0;
    for (int64_t v : partial) total += v;
    CHECK(total == serial);
}

TEST(destroy_idle_and_busy_pools) {
    for (int i = 0; i < 50; ++i) {
        ThreadPool pool(4);
        if (i % 2) pool.run([](int, int) {});
    }
    CHECK(true);
}
