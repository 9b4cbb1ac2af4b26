// A fixed pool of worker threads for data-parallel loops. Workers are made once and wait on a
// cheap barrier between jobs; the calling thread works too, so a pool of n uses n threads.
#pragma once

#include <cstdint>
#include <functional>

namespace dasllama {

class ThreadPool {
public:
    // n_threads <= 0 picks the number of physical cores (at least 1).
    explicit ThreadPool(int n_threads = 0);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int size() const;
    // Runs fn(thread_index, n_threads) on every thread of the pool (the caller is thread 0)
    // and returns when all have finished. Not reentrant: call it from one thread at a time.
    void run(const std::function<void(int thread, int n_threads)>& fn);

private:
    struct State;
    State* state_;
};

}  // namespace dasllama
