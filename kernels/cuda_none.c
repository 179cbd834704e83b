/* cuda_none.c — the CUDA backend of a build without CUDA: there is none. */
#include "harness.h"
#include "kernels.h"

const kn_backend *kn_cuda(const char **why) {
  if (why) *why = "built without CUDA";
  return NULL;
}

int kn_cuda_info_get(kn_cuda_info *info) {
  (void)info;
  return -1;
}

const kh_device *kh_cuda_device(void) { return NULL; }
