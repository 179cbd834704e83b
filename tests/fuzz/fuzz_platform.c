/* fuzz_platform.c — the platform reader, then what the closed form asks of a platform it
 * accepted: the route between every pair of its first 16 hosts and the GPUs per node. */
#include "fuzz.h"

#include <math.h>

#include "platform/platform.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = fuzz_text(data, size);
  GError *e = NULL;
  plat *pl = plat_load_xml("fuzz.xml", text, size, &e);
  if (!pl) {
    fuzz_refused(e);
  } else {
    const int n = MIN(plat_n_hosts(pl), 16);
    (void)plat_gpus_per_node(pl);
    for (int a = 0; a < n; a++)
      for (int b = 0; b < n; b++) {
        plat_route_info r;
        if (plat_route(pl, a, b, &r, &e)) {
          if (!(r.latency_s >= 0) || !isfinite(r.latency_s) || !(r.bottleneck_bps > 0)) abort();
        } else {
          fuzz_refused(e);
          e = NULL;
        }
      }
    plat_free(pl);
  }
  g_free(text);
  return 0;
}
