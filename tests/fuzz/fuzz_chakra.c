/* fuzz_chakra.c — the Chakra execution-trace reader, then what a run makes of files it accepted:
 * the trace directory opened as a workload (every node mapped to an op, and the ranks' messages
 * and collectives matched, or refused with a message), and a write-read round trip that must
 * keep every node. An input holding the marker RANK is two rank files, the bytes before it
 * rank 0's and after it rank 1's; any other input is one rank's file. */
#include "fuzz.h"

#include <glib/gstdio.h>
#include <string.h>

#include "model/chakra.h"
#include "plan/trace.h"

#define MARK "RANK"

static const char *workdir(void) {
  static char *dir;
  if (!dir && !(dir = g_dir_make_tmp("dlsim-fuzz-chakra-XXXXXX", NULL))) abort();
  return dir;
}

static const uint8_t *find_mark(const uint8_t *data, size_t size) {
  for (size_t i = 0; i + 4 <= size; i++)
    if (memcmp(data + i, MARK, 4) == 0) return data + i;
  return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const uint8_t *cut = find_mark(data, size);
  const int P = cut ? 2 : 1;
  const uint8_t *part[2] = {data, cut ? cut + 4 : NULL};
  const size_t len[2] = {cut ? (size_t)(cut - data) : size, cut ? size - (size_t)(cut - data) - 4 : 0};
  et_file *f[2] = {NULL, NULL};
  char *path[2] = {NULL, NULL};
  GError *e = NULL;
  int r = 0;
  for (; r < P; r++) {
    char name[16];
    g_snprintf(name, sizeof name, "fuzz.%d.et", r);
    f[r] = et_read_bytes(name, (const char *)part[r], len[r], &e);
    if (!f[r]) {
      fuzz_refused(e);
      break;
    }
    path[r] = g_build_filename(workdir(), name, NULL);
    if (!g_file_set_contents(path[r], (const char *)part[r], (gssize)len[r], NULL)) abort();
  }
  if (r == P) {
    plan_trace *t = plan_trace_open(workdir(), TRUE, &e);
    if (!t) {
      fuzz_refused(e);
    } else {
      for (int k = 0; k < P; k++) {
        plan_rank *p = plan_trace_rank(t, k, &e);
        /* opened: every device node of the file as read is an op, host operators are not */
        int device = 0;
        for (int i = 0; i < f[k]->n_nodes; i++) {
          const et_attr *h = et_node_attr(&f[k]->nodes[i], "is_cpu_op");
          device += f[k]->nodes[i].type == ET_METADATA || !h ||
                    !((h->kind == ET_A_INT || h->kind == ET_A_BOOL) && h->i);
        }
        if (!p || p->n_ops != device) abort();
        for (int i = 0; i < p->n_ops; i++) /* a wait names an event some op records */
          if (p->ops[i].wait_event >= p->n_events) abort();
        plan_rank_free(p);
      }
      plan_trace_free(t);
    }
    for (int k = 0; k < P; k++) { /* written and read back: the same nodes */
      g_free(f[k]->path);
      f[k]->path = g_strdup(path[k]);
      if (!et_write(f[k], NULL)) abort();
      et_file *back = et_read(path[k], NULL);
      if (!back || back->n_nodes != f[k]->n_nodes) abort();
      et_free(back);
    }
  }
  for (int k = 0; k < 2; k++) {
    if (path[k]) g_unlink(path[k]);
    g_free(path[k]);
    if (f[k]) et_free(f[k]);
  }
  return 0;
}
