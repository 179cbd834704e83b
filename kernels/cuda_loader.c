/* cuda_loader.c — the CUDA backend, loaded on first use from the module libdlsim-cuda.so.
 *
 * The module (kernels/cuda/kernels.cu, built when CMake finds nvcc) links the CUDA runtime and
 * cuBLAS; loading those costs about 0.3 s, so nothing links the module: kn_cuda() opens it only
 * when someone asks for the CUDA backend. It is looked for, in order, at $DLSIM_CUDA_LIB, next to
 * the running executable, and in the build directory it was configured for. Without it the
 * backend is "built without CUDA"; with it but no device, "no CUDA device".
 */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "kernels.h"

#define MODULE_NAME "libdlsim-cuda.so"

typedef const kn_backend *(*backend_fn)(const char **why);
typedef int (*info_fn)(kn_cuda_info *info);
typedef const kh_device *(*device_fn)(void);

static struct {
  int tried;          /* 1 once a load was attempted */
  backend_fn backend; /* the module's entry points, NULL when it is missing */
  info_fn info;
  device_fn device;
  char why[512];      /* why the module is missing or unusable */
} mod;

/* dlopen()s `path`; fills `mod` and returns 1 when it has all three entry points. */
static int try_open(const char *path) {
  if (access(path, R_OK) != 0) return 0;
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    snprintf(mod.why, sizeof mod.why, "%s", dlerror());
    return -1;
  }
  mod.backend = (backend_fn)dlsym(h, "dlsim_cuda_backend");
  mod.info = (info_fn)dlsym(h, "dlsim_cuda_info");
  mod.device = (device_fn)dlsym(h, "dlsim_cuda_device");
  if (mod.backend && mod.info && mod.device) return 1;
  snprintf(mod.why, sizeof mod.why, "%s: not a dlsim CUDA module", path);
  mod.backend = NULL;
  return -1;
}

static void load(void) {
  if (mod.tried) return;
  mod.tried = 1;
  snprintf(mod.why, sizeof mod.why, "built without CUDA");
  const char *env = getenv("DLSIM_CUDA_LIB");
  if (env && *env) {
    if (try_open(env) == 0) snprintf(mod.why, sizeof mod.why, "DLSIM_CUDA_LIB=%s: no such file", env);
    return;
  }
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash && (size_t)(slash - exe) + sizeof MODULE_NAME + 1 < sizeof exe) {
      strcpy(slash + 1, MODULE_NAME);
      if (try_open(exe) != 0) return;
    }
  }
#ifdef DLSIM_CUDA_MODULE
  try_open(DLSIM_CUDA_MODULE);
#endif
}

const kn_backend *kn_cuda(const char **why) {
  load();
  if (!mod.backend) {
    if (why) *why = mod.why;
    return NULL;
  }
  return mod.backend(why);
}

int kn_cuda_info_get(kn_cuda_info *info) {
  load();
  return mod.info ? mod.info(info) : -1;
}

const kh_device *kh_cuda_device(void) {
  load();
  return mod.device ? mod.device() : NULL;
}
