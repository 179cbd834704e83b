/* table.c — the MPI side of the algorithm table (COLL_ALGO_LIST): each row's implementation. The
 * algorithms live one family per file: ring.c, tree.c, rhd.c, hier.c, pairwise.c, smpi.c. */
#include "coll/coll_mpi.h"

#include <glib.h>
#include <string.h>

static const coll_algo algos[] = {
#define COLL_X(op, name, fn, wire, cost, desc) {op, name, desc, fn},
    COLL_ALGO_LIST(COLL_X)
#undef COLL_X
};

const coll_algo *coll_find(coll_op op, const char *name) {
  const coll_algo_info *info = coll_info_find(op, name);
  if (!info) return NULL;
  for (size_t i = 0; i < sizeof algos / sizeof algos[0]; i++)
    if (algos[i].op == op && strcmp(algos[i].name, info->name) == 0) return &algos[i];
  return NULL;
}
