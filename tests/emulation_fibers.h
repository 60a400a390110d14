// The threads of the CPU emulations of generated CUDA (tests/fusion/mma_emulation.py,
// tests/plugins/matmul/simt_emulation.py) as fibers (ucontext) on one OS thread.
//
// A fiber runs until it parks at a barrier (HfBar) or ends; the barrier's last party
// does not park. The scheduler then resumes the first fiber, in the launch's order,
// that can run (one not parked, or parked at a barrier whose generation moved on):
// ascending thread index when `descending` is false, else descending. So a warp runs
// ahead of the others up to a barrier that holds it, and a read that misses a barrier
// meets memory not yet written (the emulations poison it with NaN) in one of the two
// orders, every time; with OS threads that depended on how the kernel scheduled them.
// All fibers parked and none able to run is a deadlock: reported, exit status 4.
// Per-thread state (threadIdx, blockIdx, ...) is plain globals that `enter(i)` sets
// before fiber i is resumed.
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <vector>
#include <ucontext.h>

struct HfBar {
  int n, count = 0;
  unsigned gen = 0;
  explicit HfBar(int parties) : n(parties) {}
  void arrive_and_wait();
};

struct HfFiber { ucontext_t ctx; bool done; HfBar* bar; unsigned gen; };
static ucontext_t hf_main_ctx;
static std::vector<HfFiber> hf_fibers;
static int hf_cur;
static const std::function<void(int)>* hf_body;

void HfBar::arrive_and_wait() {
  if (++count == n) { count = 0; ++gen; return; }
  HfFiber& f = hf_fibers[hf_cur];
  f.bar = this; f.gen = gen;
  swapcontext(&f.ctx, &hf_main_ctx);  // back when the scheduler sees the generation moved on
}

static void hf_fiber_entry() { (*hf_body)(hf_cur); hf_fibers[hf_cur].done = true; }

// Runs body(0) .. body(n - 1) as fibers until all end; enter(i) before each resume of i.
static void hf_run_fibers(int n, bool descending, const std::function<void(int)>& enter,
                          const std::function<void(int)>& body) {
  const size_t stack = 1 << 18;
  std::unique_ptr<char[]> stacks(new char[(size_t)n * stack]);  // not touched: pages come as used
  hf_fibers.assign(n, HfFiber{});
  hf_body = &body;
  for (int i = 0; i < n; ++i) {
    HfFiber& f = hf_fibers[i];
    f.done = false; f.bar = nullptr;
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = stacks.get() + (size_t)i * stack; f.ctx.uc_stack.ss_size = stack;
    f.ctx.uc_link = &hf_main_ctx;
    makecontext(&f.ctx, hf_fiber_entry, 0);
  }
  for (int left = n; left > 0;) {
    int picked = -1;
    for (int k = 0; k < n && picked < 0; ++k) {
      int i = descending ? n - 1 - k : k;
      const HfFiber& f = hf_fibers[i];
      if (!f.done && (f.bar == nullptr || f.bar->gen != f.gen)) picked = i;
    }
    if (picked < 0) { fprintf(stderr, "deadlock: %d threads wait at barriers\n", left); exit(4); }
    HfFiber& f = hf_fibers[picked];
    f.bar = nullptr; hf_cur = picked;
    enter(picked);
    swapcontext(&hf_main_ctx, &f.ctx);
    if (f.done) --left;
  }
}
