/* fuzz_chakra.c — the Chakra execution-trace reader, then what a run makes of a file it accepted:
 * a one-rank trace directory opened as a workload (every node mapped to an op, or refused with a
 * message), and a write-read round trip that must keep every node. */
#include "fuzz.h"

#include <glib/gstdio.h>

#include "model/chakra.h"
#include "plan/trace.h"

static const char *workdir(void) {
  static char *dir;
  if (!dir && !(dir = g_dir_make_tmp("dlsim-fuzz-chakra-XXXXXX", NULL))) abort();
  return dir;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  GError *e = NULL;
  et_file *f = et_read_bytes("fuzz.0.et", (const char *)data, size, &e);
  if (!f) {
    fuzz_refused(e);
    return 0;
  }
  char *path = g_build_filename(workdir(), "fuzz.0.et", NULL);
  if (!g_file_set_contents(path, (const char *)data, (gssize)size, NULL)) abort();
  plan_trace *t = plan_trace_open(workdir(), TRUE, &e);
  if (!t) {
    fuzz_refused(e);
  } else {
    plan_rank *p = plan_trace_rank(t, 0, &e);
    if (!p || p->n_ops != f->n_nodes) abort(); /* opened: every node is an op */
    for (int i = 0; i < p->n_ops; i++) /* a wait names an event some op records */
      if (p->ops[i].wait_event >= p->n_events) abort();
    plan_rank_free(p);
    plan_trace_free(t);
  }
  g_free(f->path);
  f->path = g_strdup(path);
  if (!et_write(f, NULL)) abort();
  et_file *back = et_read(path, NULL);
  if (!back || back->n_nodes != f->n_nodes) abort();
  et_free(back);
  g_unlink(path);
  g_free(path);
  et_free(f);
  return 0;
}
