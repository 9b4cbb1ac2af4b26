// A fixed pool of worker threads for data-parallel loops. Workers are made once and wait on a
// cheap barrier between jobs; the calling thread works too, so a pool of n uses n threads.
// Besides jobs, the pool runs posted tasks: work of another stage (a codec behind a frame
// loop) that a worker picks up between jobs while the caller's jobs go on without it.
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

    // Queues `task` to run on a worker, after every task posted before it and never two at
    // once, so tasks see each other's effects in order. A worker between jobs takes the next
    // task before the next job's share; while it runs one, run() goes on without it (the
    // caller claims its shares). A task must not call run() on this pool. A pool of one
    // thread has no worker: the task runs at once on the caller. Posting is not reentrant
    // with run() or wait_posted(): call them from one thread.
    void post(std::function<void()> task);
    // Returns when every posted task has finished; rethrows the first exception a task threw
    // since the last wait (the tasks after it still ran). A destroyed pool drops the tasks
    // that no worker had started.
    void wait_posted();
    // Posted tasks that have finished since the pool was made.
    int64_t tasks_done() const;
    // Jobs run() handed to the workers since the pool was made (none in a pool of one).
    int64_t jobs_run() const;

private:
    struct State;
    State* state_;
};

}  // namespace dasllama
