/* cputime.c — libdlsim-cputime.so, preloaded into the SMPI simulation: the per-thread CPU clock
 * answered without a system call.
 *
 * SMPI reads CLOCK_THREAD_CPUTIME_ID when each MPI call starts and ends, to inject the host time
 * spent between calls as simulated computation. dlsim turns that injection off
 * (smpi/simulate-computation:no: kernel times come from the kernel database), so the reads only
 * cost host time, and on virtual machines each is a system call: 10 % of the wall time of a
 * 512-GPU gpt-18b simulation (perf). libsimgrid binds clock_gettime before smpimain opens the
 * executor, so only a preloaded library can answer it: this one answers the thread CPU clock
 * with zero (SMPI then counts no benched time) and hands every other clock to the C library.
 * Built without sanitizers: it is loaded into smpimain, which has none.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <time.h>

typedef int (*clock_fn)(clockid_t, struct timespec *);

int clock_gettime(clockid_t id, struct timespec *tp) {
  static clock_fn libc_clock;
  if (id == CLOCK_THREAD_CPUTIME_ID) {
    tp->tv_sec = 0;
    tp->tv_nsec = 0;
    return 0;
  }
  if (!libc_clock) *(void **)&libc_clock = dlsym(RTLD_NEXT, "clock_gettime");
  return libc_clock(id, tp);
}
