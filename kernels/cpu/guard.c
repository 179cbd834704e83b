/* guard.c — kn_cpu_guarded: the CPU twins behind a device boundary (kernels.h).
 *
 * Memory from this backend's alloc lies in one reserved arena that is mapped PROT_NONE except
 * while one of the backend's functions runs: a kernel, an upload, a download, a zero or a copy.
 * Code written for a device backend (whose buffers the host cannot read) therefore crashes on
 * the first host access it forgot to route through the backend, on a machine without a GPU. The
 * results are the CPU twins' bit for bit. The functions run one at a time (one lock), as on one
 * device stream; each call changes the protection of the arena's used part twice, so this
 * backend is for tests, not for speed. The protection is the process's: a stray access from one
 * thread while another is inside a backend call goes unseen, so a program with two threads is
 * checked well only where its threads take turns. Allocations are never reused until all are
 * released (fresh pages: zeroed); releasing a pointer the arena did not hand out aborts.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "kernels.h"

#define ARENA_BYTES ((size_t)64 << 30) /* address space reserved, not memory */
#define ALIGN 256

static struct {
  pthread_mutex_t lock;
  char *base;   /* the arena, NULL until the first alloc (MAP_FAILED: none) */
  size_t top;   /* bytes handed out */
  void **live;  /* allocations not yet released: when none is left the arena starts over */
  size_t n_live, cap;
} arena = {PTHREAD_MUTEX_INITIALIZER, NULL, 0, NULL, 0, 0};

static size_t used_pages(void) {
  const size_t page = 4096;
  return (arena.top + page - 1) / page * page;
}

/* Opens the arena to the host for one of the backend's functions; guard_close shuts it. */
static void guard_open(void) {
  pthread_mutex_lock(&arena.lock);
  if (arena.top) mprotect(arena.base, used_pages(), PROT_READ | PROT_WRITE);
}

static void guard_close(void) {
  if (arena.top) mprotect(arena.base, used_pages(), PROT_NONE);
  pthread_mutex_unlock(&arena.lock);
}

static void *g_alloc(size_t bytes) {
  void *p = NULL;
  pthread_mutex_lock(&arena.lock);
  if (!arena.base)
    arena.base = mmap(NULL, ARENA_BYTES, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                      -1, 0);
  const size_t need = (bytes + ALIGN - 1) / ALIGN * ALIGN + ALIGN;
  if (arena.n_live == arena.cap) {
    arena.cap = arena.cap ? 2 * arena.cap : 64;
    arena.live = realloc(arena.live, sizeof(void *) * arena.cap);
  }
  if (arena.live && arena.base != MAP_FAILED && need <= ARENA_BYTES - arena.top) {
    p = arena.base + arena.top;
    arena.top += need;
    arena.live[arena.n_live++] = p;
  }
  pthread_mutex_unlock(&arena.lock);
  return p;
}

static void g_release(void *p) {
  if (!p) return;
  pthread_mutex_lock(&arena.lock);
  size_t i = arena.n_live;
  while (i > 0 && arena.live[i - 1] != p) i--;
  if (i == 0) {
    fprintf(stderr, "kn_cpu_guarded: release of %p, which it did not allocate or already "
            "released\n", p);
    abort();
  }
  arena.live[i - 1] = arena.live[--arena.n_live];
  if (arena.n_live == 0) { /* nothing is held: give the pages back, start from the bottom */
    madvise(arena.base, used_pages(), MADV_DONTNEED);
    arena.top = 0;
  }
  pthread_mutex_unlock(&arena.lock);
}

static void g_upload(void *dst, const void *src, size_t bytes) {
  guard_open();
  if (bytes) memcpy(dst, src, bytes);
  guard_close();
}

static void g_zero(void *p, size_t bytes) {
  guard_open();
  if (bytes) memset(p, 0, bytes);
  guard_close();
}

static void g_copy(void *dst, const void *src, size_t bytes) {
  guard_open();
  if (bytes && dst != src) memmove(dst, src, bytes);
  guard_close();
}

static void g_sync(void) {}

/* Each kernel: the CPU twin with the arena open. */
#define GUARD_void(name, params, args) \
  static void g_##name params {        \
    guard_open();                      \
    kn_##name##_cpu args;              \
    guard_close();                     \
  }
#define GUARD_float(name, params, args) \
  static float g_##name params {        \
    guard_open();                       \
    float r = kn_##name##_cpu args;     \
    guard_close();                      \
    return r;                           \
  }
#define GUARD_FN(name, ret, params, args) GUARD_##ret(name, params, args)
KN_FUNCS(GUARD_FN)
#undef GUARD_FN
#undef GUARD_void
#undef GUARD_float

const kn_backend kn_cpu_guarded = {
    "cpu-guarded", g_alloc, g_release, g_upload, g_upload, g_zero, g_copy, g_sync, g_sync, NULL,
    NULL,
#define GUARD_ENTRY(name, ret, params, args) g_##name,
    KN_FUNCS(GUARD_ENTRY)
#undef GUARD_ENTRY
};
