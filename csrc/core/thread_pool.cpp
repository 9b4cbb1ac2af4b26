// The thread pool: persistent workers released by a generation counter.
//
// A decode step runs a few hundred parallel loops of a few microseconds each, so a job must
// cost far less than a mutex handoff per worker. run() publishes the job and bumps an atomic
// generation; workers spin on it for a while (the next job usually follows within
// microseconds) and only then sleep on a condition variable.
//
// Each share of a job (a thread index) is claimed by compare-and-swap on its slot, from the
// previous generation to the current one. The caller runs share 0, then claims every share no
// worker has claimed yet and runs it itself: a worker that is asleep, slow to wake or
// descheduled (more runnable threads than cores) never holds the job up. The caller then waits
// only for the shares workers did claim. A worker that wakes late finds its slot taken, or
// already claimed for a later generation, and goes back to waiting. The jobs that run here
// hand out their work dynamically, so a share run late finds little or nothing left to do.
//
// Posted tasks (post) wait in a queue under the mutex. A worker that is between jobs takes
// the next one, unless another task is running, and runs it outside the lock; jobs published
// meanwhile find its share unclaimed, so the caller runs it. `tasks_ready` mirrors "a task is
// queued and none runs" for the workers' spin loop; a worker asleep is woken by post().
//
// Lost wake-ups are ruled out by a Dekker pair of sequentially consistent operations: a worker
// about to sleep increments `sleepers` and then rereads the generation under the mutex; run()
// stores the generation and then reads `sleepers`. At least one of them sees the other's
// write, and a notifier takes the mutex first, so it cannot slip between a worker's check
// and its wait.
#include "core/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <fstream>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <sched.h>
#endif
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace dasllama {

namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#elif defined(__aarch64__)
    asm volatile("yield" ::: "memory");
#endif
}

// How long an idle worker spins before it sleeps: longer than the single-threaded gaps
// between the matmuls of one decode step (norms, attention of one token), much shorter than
// a human-visible pause.
constexpr auto kSpinTime = std::chrono::microseconds(200);

// CPUs this process may run on (its affinity mask), or 0 when unknown.
int allowed_cpus() {
#if defined(__linux__)
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
#endif
    return 0;
}

// Physical cores: distinct thread-sibling sets in the Linux topology, capped by the affinity
// mask; elsewhere the hardware thread count (SMT cannot be told apart portably).
int physical_cores() {
    int logical = static_cast<int>(std::thread::hardware_concurrency());
    int physical = 0;
#if defined(__linux__)
    std::set<std::string> cores;
    for (int cpu = 0; cpu < 4096; ++cpu) {
        std::ifstream f("/sys/devices/system/cpu/cpu" + std::to_string(cpu) +
                        "/topology/thread_siblings_list");
        if (!f) break;
        std::string siblings;
        std::getline(f, siblings);
        cores.insert(siblings);
    }
    physical = static_cast<int>(cores.size());
#endif
    int n = physical > 0 ? physical : logical;
    const int allowed = allowed_cpus();
    if (allowed > 0) n = std::min(n, allowed);
    return std::max(1, n);
}

}  // namespace

struct ThreadPool::State {
    int n_threads = 1;
    std::vector<std::thread> workers;

    // One slot per share: the generation that last claimed it and the one that last finished
    // it. Own cache lines, so the caller's polling does not bounce the workers' lines.
    struct alignas(64) Slot {
        std::atomic<uint64_t> claimed{0};
        std::atomic<uint64_t> finished{0};
    };
    std::vector<Slot> slots;

    std::atomic<const std::function<void(int, int)>*> job{nullptr};
    std::atomic<uint64_t> generation{0};  // bumped once per job; workers wait for a change
                                          // (so it also counts the jobs)
    std::atomic<int> sleepers{0};         // workers blocked (or about to block) on `wake`
    std::atomic<bool> stop{false};

    std::mutex mutex;
    std::condition_variable wake;

    std::mutex error_mutex;
    std::exception_ptr error;  // the first exception a share threw in the current job

    // Posted tasks; all but the atomics guarded by `mutex`.
    std::deque<std::function<void()>> tasks;
    bool task_running = false;
    std::atomic<bool> tasks_ready{false};  // tasks non-empty and none running
    std::atomic<int64_t> tasks_posted{0}, tasks_finished{0};
    std::condition_variable tasks_idle;   // signalled when the last queued task finishes
    std::exception_ptr task_error;        // the first exception a task threw since a wait

    // Takes the next task and runs it; false when there is none or one is running already.
    bool run_task() {
        std::function<void()> task;
        {
            std::lock_guard<std::mutex> lock(mutex);
            if (tasks.empty() || task_running) return false;
            task = std::move(tasks.front());
            tasks.pop_front();
            task_running = true;
            tasks_ready.store(false, std::memory_order_relaxed);
        }
        std::exception_ptr failed;
        try {
            task();
        } catch (...) {
            failed = std::current_exception();
        }
        std::lock_guard<std::mutex> lock(mutex);
        if (failed && !task_error) task_error = failed;
        task_running = false;
        tasks_finished.fetch_add(1, std::memory_order_release);
        tasks_ready.store(!tasks.empty(), std::memory_order_relaxed);
        if (tasks.empty()) tasks_idle.notify_all();
        return true;
    }

    void run_share(const std::function<void(int, int)>& fn, int share) {
        try {
            fn(share, n_threads);
        } catch (...) {
            std::lock_guard<std::mutex> lock(error_mutex);
            if (!error) error = std::current_exception();
        }
    }

    // Claims share `share` of job generation `gen`; false when someone else holds it (or the
    // slot has moved on to a later generation).
    bool claim(int share, uint64_t gen) {
        uint64_t expected = gen - 1;
        return slots[size_t(share)].claimed.compare_exchange_strong(
            expected, gen, std::memory_order_acq_rel, std::memory_order_relaxed);
    }

    // Returns the current generation once it differs from `seen`, a task is ready, or the
    // pool is told to stop.
    uint64_t wait_for_work(uint64_t seen) {
        const auto spin_until = std::chrono::steady_clock::now() + kSpinTime;
        for (int i = 0;; ++i) {
            const uint64_t g = generation.load(std::memory_order_acquire);
            if (g != seen || stop.load(std::memory_order_acquire) ||
                tasks_ready.load(std::memory_order_relaxed))
                return g;
            cpu_relax();
            if ((i & 255) == 255 && std::chrono::steady_clock::now() > spin_until) break;
        }
        std::unique_lock<std::mutex> lock(mutex);
        sleepers.fetch_add(1, std::memory_order_seq_cst);
        while (generation.load(std::memory_order_seq_cst) == seen &&
               !stop.load(std::memory_order_seq_cst) && (tasks.empty() || task_running))
            wake.wait(lock);
        sleepers.fetch_sub(1, std::memory_order_relaxed);
        return generation.load(std::memory_order_acquire);
    }

    void worker_loop(int share) {
        uint64_t seen = 0;
        for (;;) {
            const uint64_t g = wait_for_work(seen);
            if (stop.load(std::memory_order_acquire)) return;
            // A task first: the job it passes over goes on without this worker.
            if (run_task() || g == seen) continue;
            seen = g;
            // The job pointer stays valid while our claim on this generation is unfinished:
            // run() waits for it before it returns.
            if (!claim(share, seen)) continue;
            run_share(*job.load(std::memory_order_acquire), share);
            slots[size_t(share)].finished.store(seen, std::memory_order_release);
        }
    }

    // Stops and joins the workers started so far.
    void shutdown() {
        stop.store(true, std::memory_order_seq_cst);
        { std::lock_guard<std::mutex> lock(mutex); }
        wake.notify_all();
        for (std::thread& w : workers) w.join();
        workers.clear();
    }

    void notify_sleepers() {
        if (sleepers.load(std::memory_order_seq_cst) > 0) {
            { std::lock_guard<std::mutex> lock(mutex); }
            wake.notify_all();
        }
    }
};

ThreadPool::ThreadPool(int n_threads) : state_(new State) {
    state_->n_threads = n_threads > 0 ? n_threads : physical_cores();
    state_->slots = std::vector<State::Slot>(size_t(state_->n_threads));
    try {
        for (int t = 1; t < state_->n_threads; ++t)
            state_->workers.emplace_back([this, t] { state_->worker_loop(t); });
    } catch (...) {  // could not start a thread: join those that did start
        state_->shutdown();
        delete state_;
        throw;
    }
}

ThreadPool::~ThreadPool() {
    state_->shutdown();
    delete state_;
}

int ThreadPool::size() const { return state_->n_threads; }

void ThreadPool::post(std::function<void()> task) {
    State& s = *state_;
    s.tasks_posted.fetch_add(1, std::memory_order_relaxed);
    if (s.n_threads == 1) {  // no worker: the caller runs it now
        try {
            task();
        } catch (...) {
            if (!s.task_error) s.task_error = std::current_exception();
        }
        s.tasks_finished.fetch_add(1, std::memory_order_relaxed);
        return;
    }
    {
        std::lock_guard<std::mutex> lock(s.mutex);
        s.tasks.push_back(std::move(task));
        s.tasks_ready.store(!s.task_running, std::memory_order_relaxed);
    }
    s.wake.notify_all();
}

void ThreadPool::wait_posted() {
    State& s = *state_;
    // The last task usually ends within microseconds of the call: spin a little first.
    const auto spin_until = std::chrono::steady_clock::now() + kSpinTime;
    for (int i = 0; s.tasks_finished.load(std::memory_order_acquire) !=
                    s.tasks_posted.load(std::memory_order_relaxed);
         ++i) {
        cpu_relax();
        if ((i & 255) == 255 && std::chrono::steady_clock::now() > spin_until) break;
    }
    std::unique_lock<std::mutex> lock(s.mutex);
    s.tasks_idle.wait(lock, [&] { return s.tasks.empty() && !s.task_running; });
    std::exception_ptr failed = s.task_error;
    s.task_error = nullptr;
    lock.unlock();
    if (failed) std::rethrow_exception(failed);
}

int64_t ThreadPool::jobs_run() const {
    return int64_t(state_->generation.load(std::memory_order_relaxed));
}

int64_t ThreadPool::tasks_done() const {
    return state_->tasks_finished.load(std::memory_order_acquire);
}

void ThreadPool::run(const std::function<void(int thread, int n_threads)>& fn) {
    State& s = *state_;
    if (s.n_threads == 1) {
        fn(0, 1);
        return;
    }
    s.job.store(&fn, std::memory_order_relaxed);
    s.error = nullptr;
    // Publishes job and error; share 0 is never claimed by a worker.
    const uint64_t gen = s.generation.fetch_add(1, std::memory_order_seq_cst) + 1;
    s.slots[0].claimed.store(gen, std::memory_order_relaxed);
    s.notify_sleepers();

    s.run_share(fn, 0);
    for (int share = 1; share < s.n_threads; ++share)
        if (s.claim(share, gen)) {
            s.run_share(fn, share);
            s.slots[size_t(share)].finished.store(gen, std::memory_order_relaxed);
        }
    for (int share = 1; share < s.n_threads; ++share) {
        const std::atomic<uint64_t>& finished = s.slots[size_t(share)].finished;
        for (int i = 0; finished.load(std::memory_order_acquire) != gen; ++i) {
            cpu_relax();
            // The worker lost its core mid-share (more threads than free CPUs): stop
            // burning ours.
            if (i > 4096) std::this_thread::yield();
        }
    }
    s.job.store(nullptr, std::memory_order_relaxed);
    if (s.error) std::rethrow_exception(s.error);
}

}  // namespace dasllama
