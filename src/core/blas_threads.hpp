// OpenBLAS (pthreads build) keeps its own worker threads, which spin for a
// while after each call; interleaved with OpenMP regions the two pools fight
// over the cores. Code that parallelises with OpenMP and calls BLAS from
// inside its regions (the model runtime) runs BLAS single-threaded while a
// SingleThreadedBlas guard is alive.
#pragma once

namespace cortiq {

// Nested and concurrent guards are counted: the first one switches OpenBLAS
// to one thread, the last one to end restores the count it found.
class SingleThreadedBlas {
  public:
    SingleThreadedBlas();
    ~SingleThreadedBlas();
    SingleThreadedBlas(const SingleThreadedBlas&) = delete;
    SingleThreadedBlas& operator=(const SingleThreadedBlas&) = delete;
};

// One OpenBLAS thread for this scope whatever the guards around it (inside a
// ThreadedBlas too), the count it found restored at its end: for code that
// runs single-threaded BLAS calls on fixed panels in parallel, so that every
// element rounds the same way whatever the thread count.
class OneBlasThread {
  public:
    OneBlasThread();
    ~OneBlasThread();
    OneBlasThread(const OneBlasThread&) = delete;
    OneBlasThread& operator=(const OneBlasThread&) = delete;

  private:
    int saved_ = 1;
};

// Inside a SingleThreadedBlas scope: BLAS threaded as before until this guard
// ends (for callbacks that do their own BLAS work, such as Gram accumulation).
class ThreadedBlas {
  public:
    ThreadedBlas();
    ~ThreadedBlas();
    ThreadedBlas(const ThreadedBlas&) = delete;
    ThreadedBlas& operator=(const ThreadedBlas&) = delete;

  private:
    bool active_ = false;
};

}  // namespace cortiq
