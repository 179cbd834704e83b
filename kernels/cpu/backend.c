/* backend.c — the CPU backend table (kn_cpu) and what the CPU and CUDA backends share. */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"

static const char *const math_names[] = {
#define KN_MATH_NAME(e, s) s,
    KN_MATHS(KN_MATH_NAME)
#undef KN_MATH_NAME
};

const char *kn_math_name(kn_math m) {
  return (unsigned)m < KN_N_MATHS ? math_names[m] : "?";
}

int kn_math_parse(const char *name, kn_math *out) {
  for (int m = 0; name && m < KN_N_MATHS; m++)
    if (strcmp(name, math_names[m]) == 0) {
      *out = (kn_math)m;
      return 1;
    }
  return 0;
}

/* OpenBLAS's own prototype lives in cblas.h (openblas_set_num_threads). */
void kn_cpu_init(void) { openblas_set_num_threads(1); }

static void *cpu_alloc(size_t bytes) { return calloc(bytes ? bytes : 1, 1); }
static void cpu_release(void *p) { free(p); }
static void cpu_copy(void *dst, const void *src, size_t bytes) {
  if (bytes && dst != src) memcpy(dst, src, bytes);
}
static void cpu_zero(void *p, size_t bytes) {
  if (bytes) memset(p, 0, bytes);
}
static void cpu_sync(void) {}
static void cpu_bind(void) {}

const kn_backend kn_cpu = {
    "cpu", cpu_alloc, cpu_release, cpu_copy, cpu_copy, cpu_zero, cpu_copy, cpu_sync, cpu_bind,
    NULL, NULL,
#define KN_CPU_ENTRY(name, ret, params, args) kn_##name##_cpu,
    KN_FUNCS(KN_CPU_ENTRY)
#undef KN_CPU_ENTRY
};
