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
    // Runs fn(share, n_shares) once for every share in [0, size()) and returns when all have
    // finished. Shares are claimed: the caller runs share 0 and then any share no worker has
    // picked up yet, so a descheduled worker never holds a job up. Shares may therefore run
    // one after another on one thread: fn must not wait for another share (no barrier inside).
    // Not reentrant: call it from one thread at a time.
    void run(const std::function<void(int thread, int n_threads)>& fn);

private:
    struct State;
    State* state_;
};

}  // namespace dasllama
