// The thread pool: every thread runs each job exactly once, jobs see each other's writes in
// order, exceptions reach the caller, and sleeping workers wake up; posted tasks run in order
// on a worker beside the jobs.
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

// Posted tasks run one at a time in the order posted, on a worker, while jobs go on: a task
// appends its index to a plain vector (only the pool orders the writes), and jobs run between
// posts. A pool of one thread runs each task at once on the caller.
TEST(posted_tasks_run_in_order_beside_jobs) {
    for (int n : {1, 2, 3}) {
        ThreadPool pool(n);
        std::vector<int> order;
        std::atomic<int> on_caller{0};
        const std::thread::id caller = std::this_thread::get_id();
        std::atomic<int64_t> job_sum{0};
        const int tasks = 200;
        for (int k = 0; k < tasks; ++k) {
            pool.post([&, k] {
                if (std::this_thread::get_id() == caller) on_caller.fetch_add(1);
                order.push_back(k);
            });
            for (int j = 0; j < 3; ++j)
                pool.run([&](int thread, int) { job_sum.fetch_add(thread + 1); });
        }
        pool.wait_posted();
        REQUIRE(int(order.size()) == tasks);
        bool in_order = true;
        for (int k = 0; k < tasks; ++k) in_order = in_order && order[size_t(k)] == k;
        CHECK(in_order);
        CHECK(pool.tasks_done() == tasks);
        CHECK(job_sum.load() == int64_t(tasks) * 3 * n * (n + 1) / 2);
        // With workers, no task ran on the caller; without, all did.
        CHECK_MSG(on_caller.load() == (n == 1 ? tasks : 0), std::to_string(on_caller.load()));
    }
}

// A job does not wait for a worker busy with a task: the caller takes its share. The task
// holds the worker until the caller has finished a job, which it can only do on its own.
TEST(jobs_go_on_while_a_task_holds_the_worker) {
    ThreadPool pool(2);
    std::atomic<bool> job_done{false}, task_started{false};
    std::atomic<int> shares_on_caller{0};
    const std::thread::id caller = std::this_thread::get_id();
    pool.post([&] {
        task_started = true;
        const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (!job_done && std::chrono::steady_clock::now() < limit) std::this_thread::yield();
    });
    while (!task_started) std::this_thread::yield();
    pool.run([&](int, int) {
        if (std::this_thread::get_id() == caller) shares_on_caller.fetch_add(1);
    });
    job_done = true;
    pool.wait_posted();
    CHECK_MSG(shares_on_caller.load() == 2, std::to_string(shares_on_caller.load()));
}

// A task's exception reaches the next wait_posted, once; later tasks still run.
TEST(posted_exceptions_reach_the_waiter) {
    for (int n : {1, 2}) {
        ThreadPool pool(n);
        std::atomic<int> ran{0};
        pool.post([] { throw std::runtime_error("task boom"); });
        pool.post([&] { ran.fetch_add(1); });
        bool caught = false;
        try {
            pool.wait_posted();
        } catch (const std::runtime_error& e) {
            caught = std::string(e.what()) == "task boom";
        }
        CHECK(caught);
        CHECK(ran.load() == 1);
        pool.wait_posted();  // the error was reported once
        CHECK(pool.tasks_done() == 2);
    }
}

// A worker asleep (past its spin time) wakes for a posted task.
TEST(sleeping_workers_wake_for_tasks) {
    ThreadPool pool(2);
    std::atomic<int> ran{0};
    for (int round = 0; round < 3; ++round) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        pool.post([&] { ran.fetch_add(1); });
        pool.wait_posted();
    }
    CHECK(ran.load() == 3);
}
