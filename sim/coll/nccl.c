/* nccl.c — NCCL's protocol model (see nccl.h). Every constant below is NCCL 2.30's, from
 * src/graph/tuning.cc (ncclTunerConstantsDefaults, ncclTopoTuneModel, getNetOverhead,
 * treeCorrectionFactor, ncclTopoGetAlgoTime), src/graph/topo.h (SMxx_NVLINK_BW) and
 * src/graph/search.cc (channels duplicated after the search). Latencies in microseconds,
 * bandwidths in GB/s, as NCCL writes them. */
#include "coll/nccl.h"

#include <glib.h>
#include <math.h>
#include <string.h>

enum { HW_NVLINK, HW_PCI, HW_NET };
enum { A_TREE, A_RING };

/* baseLatencies [Tree, Ring][LL, LL128, Simple], us */
static const double base_lat[2][NCCL_N_PROTOS] = {{6.8, 14.0, 8.4}, {6.6, 14.0, 8.4}};
/* hwLatencies [NVLink, PCI, NET][Tree, Ring][LL, LL128, Simple], us per step */
static const double hw_lat[3][2][NCCL_N_PROTOS] = {
    {{0.6, 1.25, 4.0}, {0.6, 1.9, 3.4}},
    {{1.0, 1.9, 4.0}, {1.0, 2.5, 5.7}},
    {{5.0, 8.5, 14.0}, {2.7, 4.0, 14.0}},
};
/* llMaxBws [one node: arch; several nodes: 0 Intel, 1 AMD][1 node, 2 nodes, more], GB/s */
static const double ll_max_bw[4][3] = {
    {39.0, 39.0, 20.4}, {87.7, 22.5, 19.0}, {141.0, 45.0, 35.0}, {282.0, 90.0, 70.0}};
/* perChMaxRingLL128Bws, perChMaxTreeLL128Bws, perChMaxTreeBws [arch][1, 2, more nodes], GB/s */
static const double ring_ll128_ch[4][3] = {
    {20.0, 20.0, 20.0}, {20.0, 20.0, 20.0}, {36.7, 36.7, 36.7}, {40.0, 40.0, 40.0}};
static const double tree_ll128_ch[4][3] = {
    {20.0, 20.0, 20.0}, {20.0, 20.0, 20.0}, {36.7, 36.7, 29.0}, {55.6, 31.67, 20.0}};
static const double tree_ch[4][3] = {
    {26.5, 18.5, 10.0}, {24.0, 23.6, 17.8}, {38.7, 41.4, 36.0}, {70.0, 42.8, 24.0}};
/* treeCorrectionFactor [LL, LL128, Simple][log2(bytes / 64)] */
static const double tree_corr[NCCL_N_PROTOS][23] = {
    {1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0,
     1.0},
    {1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0,
     1.0},
    {.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9}};
/* NCCL's bandwidth per NVLink (SM70/SM80_NVLINK_BW 20.0, SM90 20.6, SM100 40.1 GB/s) and the
 * link's own rate per direction (NVLink 2, 3, 4: 25 GB/s; NVLink 5: 50 GB/s) */
static const double nvlink_nccl[4] = {20.0, 20.0, 20.6, 40.1};
static const double nvlink_raw[4] = {25.0, 25.0, 25.0, 50.0};
/* getNetOverhead: x86 Intel 1 us, x86 AMD 2 us per network post */
#define NET_OVERHEAD_INTEL_US 1.0
#define NET_OVERHEAD_AMD_US 2.0

int nccl_arch_of_cc(int cc) {
  if (cc <= 0) return -1;
  return cc >= 100 ? 3 : cc >= 90 ? 2 : cc >= 80 ? 1 : 0;
}

char *nccl_env_to_string(const nccl_env *e) {
  return g_strdup_printf("%d,%d,%.17g,%.17g,%d,%d,%d", e->arch, e->nvlink, e->intra_bps,
                         e->nic_bps, e->nics, e->proto, e->cpu_amd);
}

gboolean nccl_env_parse(const char *text, nccl_env *out) {
  if (!text) return FALSE;
  char **f = g_strsplit(text, ",", -1);
  gboolean ok = g_strv_length(f) == 7;
  double v[7] = {0};
  for (int i = 0; ok && i < 7; i++) {
    char *end = NULL;
    v[i] = g_ascii_strtod(f[i], &end);
    ok = end != f[i] && *end == '\0' && isfinite(v[i]);
  }
  g_strfreev(f);
  if (!ok || v[0] < -1 || v[0] > 3 || v[2] < 0 || v[3] < 0 || v[4] < 0 || v[5] < NCCL_PROTO_OFF ||
      v[5] >= NCCL_N_PROTOS)
    return FALSE;
  *out = (nccl_env){(int)v[0], v[1] != 0, v[2], v[3], (int)v[4], (int)v[5], v[6] != 0};
  return TRUE;
}

static int log2i(double x) {
  int l = -1;
  while (x >= 1) x /= 2, l++;
  return l;
}

/* NCCL's bus bandwidth (GB/s) and latency (us) of one algorithm and protocol for the call, whose
 * ring has nsteps steps. */
static void tune(const nccl_env *e, coll_op op, int a, int p, double bytes, int P, int nodes,
                 int nsteps, double B, int nch, double *bus, double *lat) {
  const int i2 = nodes <= 2 ? nodes - 1 : 2, i1 = nodes == 1 ? e->arch : e->cpu_amd ? 1 : 0;
  const double llmax = ll_max_bw[i1][i2];
  const int intra_hw = e->nvlink ? HW_NVLINK : HW_PCI;
  const double ppn = (double)P / nodes;
  double bw = B;
  if (a == A_RING && p == NCCL_LL) bw = MIN(llmax, bw * .5);
  if (a == A_RING && p == NCCL_LL128) bw = MIN(bw * 0.92, nch * ring_ll128_ch[e->arch][i2]);
  if (a == A_TREE) bw = MIN(bw * .92, nch * tree_ch[e->arch][i2]);
  if (a == A_TREE && p == NCCL_LL) bw = MIN(bw / 3.8, llmax);
  if (a == A_TREE && p == NCCL_LL128)
    bw = MIN(bw * (nodes == 1 ? 7.0 / 9.0 : 120.0 / 128.0), nch * tree_ll128_ch[e->arch][i2]);
  if (a == A_TREE) {
    const int ls = log2i(floor(bytes / 64));
    if (ls >= 0 && ls < 23) bw *= tree_corr[p][ls];
  }
  *bus = bw;
  double l = base_lat[a][p], intra = hw_lat[intra_hw][a][p];
  const double inter = ppn == 1 ? hw_lat[HW_NET][A_TREE][p] : hw_lat[HW_NET][a][p];
  if (a == A_RING) {
    const double over =
        nodes > 1 ? (e->cpu_amd ? NET_OVERHEAD_AMD_US : NET_OVERHEAD_INTEL_US) * (p == NCCL_SIMPLE ? 3 : 1)
                  : 0;
    intra = MAX(intra, over);
    const int ninter = nodes == 1 ? 0 : op == COLL_ALLREDUCE ? 2 * (nodes - 1) : nodes - 1;
    l += (nsteps - ninter) * intra + ninter * inter;
    /* the ring's plateau (ncclTopoGetAlgoTime) */
    if (p == NCCL_SIMPLE && nodes > 1 && op == COLL_ALLREDUCE && bytes / ((double)nch * P) >= 64)
      l *= e->arch < 1 ? 1.9 : 1.4;
  } else {
    l += 2 * ((ppn - 1) * intra + log2i(nodes) * inter);
  }
  *lat = l;
}

void nccl_plan(nccl_call *out, const nccl_env *e, coll_op op, const char *algo, double bytes,
               int P, int nodes) {
  *out = (nccl_call){NCCL_PROTO_OFF, 0, 1, 1, 1, 0, 0};
  if (!e || e->arch < 0 || e->proto == NCCL_PROTO_OFF || !algo || P < 2 || nodes < 1 ||
      bytes <= 0)
    return;
  int a;
  /* the operations whose ring and tree dlsim runs as NCCL does (the broadcast's chain is
   * pipelined in fixed chunks: plain alpha-beta) */
  if (strcmp(algo, "ring") == 0 &&
      (op == COLL_ALLREDUCE || op == COLL_ALLGATHER || op == COLL_REDUCESCATTER))
    a = A_RING;
  else if (strcmp(algo, "tree") == 0 && op == COLL_ALLREDUCE) a = A_TREE;
  else return;
  if (nodes > P) nodes = P;
  const int per_node = (P + nodes - 1) / nodes;
  const double nvl = e->nvlink ? nvlink_nccl[e->arch] / nvlink_raw[e->arch] : 1.0;
  /* NCCL's view of the Simple ring's bus bandwidth: the NVLinks of a GPU inside a node; across
   * nodes, the NICs the group's GPUs use, one channel pair per NIC */
  const double intra = e->intra_bps * nvl / 1e9;
  double B;
  int nch;
  if (nodes == 1) {
    B = intra;
    nch = e->nvlink ? MAX(1, (int)lround(e->intra_bps / (nvlink_raw[e->arch] * 1e9))) : 2;
  } else {
    const int rails = MAX(1, MIN(per_node, e->nics > 0 ? e->nics : per_node));
    B = rails * e->nic_bps / 1e9;
    if (per_node > 1 && intra > 0) B = MIN(B, intra);
    nch = 2 * rails;
  }
  if (!(B > 0)) return;
  const int nsteps = a == A_TREE ? 0 : op == COLL_ALLREDUCE ? 2 * (P - 1) : P - 1;
  /* NCCL's algorithm bandwidth: the ring moves nsteps / P of the buffer per byte of bus */
  const double ratio = a == A_RING ? (double)P / nsteps : 0.5;
  int best = e->proto;
  double best_t = INFINITY, bus[NCCL_N_PROTOS], lat[NCCL_N_PROTOS], t[NCCL_N_PROTOS];
  for (int p = 0; p < NCCL_N_PROTOS; p++) {
    tune(e, op, a, p, bytes, P, nodes, nsteps, B, nch, &bus[p], &lat[p]);
    t[p] = lat[p] + bytes / (1000.0 * bus[p] * ratio);
    if (e->proto == NCCL_PROTO_AUTO && t[p] < best_t) best_t = t[p], best = p;
  }
  if (best < 0) return; /* no protocol's time is finite: no NCCL model for this call */
  out->predicted_s = t[best] * 1e-6;
  out->proto = best;
  out->lat_s = lat[best] * 1e-6;
  out->eff = bus[best] / B;
  out->nvl_eff = nvl;
  out->channels = nch;
  out->nvlink = e->nvlink;
}

double nccl_wire_bytes(const nccl_call *c, int intra, double bytes) {
  if (c->proto < 0) return bytes;
  const double f = c->eff * (intra && c->nvlink ? c->nvl_eff : 1.0);
  return bytes / f;
}
