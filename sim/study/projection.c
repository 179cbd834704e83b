/* projection.c — the whole training run from one iteration (see projection.h). */
#include "study/projection.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>

#include "core/dl_common.h"
#include "plan/plan.h"

static const char *unit_names[] = {
#define X(e, s, d) s,
    PROJ_UNITS(X)
#undef X
};

const char *proj_unit_name(proj_unit u) { return unit_names[u]; }

/* Failure rates: Meta's Llama 3 405B pre-training, 419 unexpected interruptions in a 54-day
 * snapshot on 16,384 H100 GPUs in 2,048 nodes of 8 (Llama Team, "The Llama 3 Herd of Models",
 * arXiv:2407.21783, 2024, Section 3.3.4 and Table 5), grouped by the unit that failed and turned
 * into an MTBF per unit: units × 54 × 24 h / interruptions.
 *   GPU: faulty GPU 148, GPU HBM3 memory 72, GPU SRAM memory 19, GPU system processor 17,
 *        silent data corruption 6, GPU thermal interface and sensor 6: 268 over 16,384 GPUs;
 *   host memory: system memory 2 over 2,048 nodes;
 *   NIC: network interface card 7 over 16,384 NICs (one per GPU);
 *   switch: network switch and cable 35 over 2,048 nodes;
 *   node: host maintenance 32, SSD 3, power supply 3, server chassis 2, IO expansion board 2,
 *         CPU 2: 44 over 2,048 nodes;
 *   software: software bug 54, NCCL watchdog timeouts 7, dependency 2: 63 over 16,384 GPUs. */
#define LLAMA3_HOURS (54.0 * 24.0)
static const double fleet_mtbf_h[PROJ_N_UNITS] = {
    16384 * LLAMA3_HOURS / 268, 2048 * LLAMA3_HOURS / 2, 16384 * LLAMA3_HOURS / 7,
    2048 * LLAMA3_HOURS / 35,   2048 * LLAMA3_HOURS / 44, 16384 * LLAMA3_HOURS / 63};

void proj_opts_init(proj_opts *o) {
  memset(o, 0, sizeof *o);
  o->failures = TRUE;
  memcpy(o->mtbf_h, fleet_mtbf_h, sizeof o->mtbf_h);
  o->ckpt_bw_node_bps = PROJ_CKPT_BW_NODE_BPS;
  o->ckpt_bw_total_bps = PROJ_CKPT_BW_TOTAL_BPS;
  o->host_copy_bps = PROJ_HOST_COPY_BPS;
  o->relaunch_s = PROJ_RELAUNCH_S;
  o->warmup_iters = PROJ_WARMUP_ITERS;
  o->samples = 1000;
  o->seed = 1;
  o->gpu_idle_w = o->gpu_board_w = o->mem_power_share = o->nic_w = o->switch_port_w = -1;
  o->host_w = o->pue = -1;
  o->switch_radix = 0;
  o->gpu_hour_price = o->kwh_price = -1;
}

gboolean proj_parse_failures(proj_opts *o, const char *spec, GError **err) {
  if (g_strcmp0(spec, "none") == 0) {
    o->failures = FALSE;
    return TRUE;
  }
  o->failures = TRUE;
  if (g_strcmp0(spec, "default") == 0) return TRUE;
  gchar **parts = g_strsplit(spec, ",", -1);
  gboolean ok = parts[0] != NULL;
  double scale = 1;
  guint given = 0; /* the keys seen, a bit each */
  for (int i = 0; ok && parts[i]; i++) {
    const char *eq = strchr(parts[i], '=');
    char *end = NULL;
    double v = eq ? g_ascii_strtod(eq + 1, &end) : NAN;
    if (!eq || end == eq + 1 || *end || !isfinite(v) || v <= 0 || v > 1e12) {
      ok = FALSE;
      break;
    }
    const size_t n = (size_t)(eq - parts[i]);
    int key = -1; /* a unit, then job (PROJ_N_UNITS), then scale */
    for (int u = 0; u < PROJ_N_UNITS; u++)
      if (strlen(unit_names[u]) == n && strncmp(parts[i], unit_names[u], n) == 0)
        o->mtbf_h[u] = v, key = u;
    if (n == 3 && strncmp(parts[i], "job", 3) == 0) o->job_mtbf_h = v, key = PROJ_N_UNITS;
    if (n == 5 && strncmp(parts[i], "scale", 5) == 0) scale = v, key = PROJ_N_UNITS + 1;
    if (!(ok = key >= 0)) break;
    if (given >> key & 1) { /* its first value would go unused without a word */
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--failures %s: %.*s given twice", spec, (int)n,
                  parts[i]);
      g_strfreev(parts);
      return FALSE;
    }
    given |= 1u << key;
  }
  g_strfreev(parts);
  if (!ok) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                "--failures %s: expected none, default, or KEY=HOURS,... with KEY one of gpu, "
                "host-memory, nic, switch, node, software (MTBF per unit) or job (the job's MTBF), "
                "or scale=F (every rate times F); values > 0",
                spec);
    return FALSE;
  }
  for (int u = 0; u < PROJ_N_UNITS; u++) o->mtbf_h[u] /= scale;
  if (o->job_mtbf_h > 0) o->job_mtbf_h /= scale;
  return TRUE;
}

/* ---- the closed forms ------------------------------------------------------------------------ */

/* A segment of length L (work and checkpoint) under failures of MTBF M and restarts of R, both
 * of which failures may also strike: M e^{R/M} (e^{L/M} − 1) (Daly 2006, Eq. 13). */
static double segment_s(double L, double R, double M) {
  if (!isfinite(M)) return L;
  return M * exp(R / M) * expm1(L / M);
}

/* The segments of `work_s` in pieces of `tau`: *n of them, the last *last long (0 < *last <=
 * tau); a remainder below 1e-9 of a piece is rounding, not a segment. The closed form and the
 * Monte Carlo both cut the work here. */
static void segments(double work_s, double tau, double *n, double *last) {
  *n = ceil(work_s / tau - 1e-9);
  if (*n < 1) *n = 1;
  *last = work_s - (*n - 1) * tau;
}

double proj_daly_wall_s(double work_s, double tau, double delta, double restart_s, double M) {
  if (work_s <= 0) return 0;
  double n, last;
  segments(work_s, tau, &n, &last);
  return (n - 1) * segment_s(tau + delta, restart_s, M) + segment_s(last + delta, restart_s, M);
}

double proj_daly_interval_s(double delta, double M) {
  if (!isfinite(M)) return INFINITY;
  if (delta >= 2 * M) return M;
  const double x = delta / (2 * M);
  return sqrt(2 * delta * M) * (1 + sqrt(x) / 3 + x / 9) - delta;
}

double proj_async_wall_s(double work_s, double tau, double copy_s, double write_s,
                         double restart_s, double M) {
  const double slow = 1 + copy_s / tau;
  if (!isfinite(M)) return work_s * slow + write_s;
  const double lose = ((tau + copy_s) / 2 + write_s + restart_s) / M;
  return lose < 1 ? work_s * slow / (1 - lose) + write_s : INFINITY;
}

/* The asynchronous optimum: golden-section search of proj_async_wall_s over τ ≥ max(δw, a
 * microsecond) (it is convex there while finite); the upper end where the loss term reaches 1. */
static double async_interval_s(double copy_s, double write_s, double restart_s, double M) {
  double lo = MAX(write_s, 1e-6);
  if (!isfinite(M)) return INFINITY;
  double hi = 2 * (M - write_s - restart_s) - copy_s;
  if (hi <= lo) return lo;
  const double phi = (sqrt(5.0) - 1) / 2;
  double a = lo, b = hi;
  for (int i = 0; i < 200 && b - a > 1e-9 * b; i++) {
    const double x1 = b - phi * (b - a), x2 = a + phi * (b - a);
    if (proj_async_wall_s(1, x1, copy_s, write_s, restart_s, M) <=
        proj_async_wall_s(1, x2, copy_s, write_s, restart_s, M))
      b = x2;
    else
      a = x1;
  }
  return (a + b) / 2;
}

/* ---- the Monte Carlo ------------------------------------------------------------------------- */

/* xoshiro256** (Blackman and Vigna 2018), seeded by splitmix64: the same draws on every
 * platform. */
typedef struct {
  guint64 s[4];
} rng;

static guint64 rotl(guint64 x, int k) { return (x << k) | (x >> (64 - k)); }

static void rng_seed(rng *r, guint64 seed) {
  for (int i = 0; i < 4; i++) r->s[i] = cfg_splitmix64(&seed);
}

static guint64 rng_next(rng *r) {
  const guint64 out = rotl(r->s[1] * 5, 7) * 9, t = r->s[1] << 17;
  r->s[2] ^= r->s[0];
  r->s[3] ^= r->s[1];
  r->s[1] ^= r->s[2];
  r->s[0] ^= r->s[3];
  r->s[2] ^= t;
  r->s[3] = rotl(r->s[3], 45);
  return out;
}

/* The time to the next failure: exponential of mean M (INFINITY without failures). */
static double next_failure(rng *r, double M) {
  if (!isfinite(M)) return INFINITY;
  const double u = ((double)(rng_next(r) >> 11) + 0.5) * 0x1.0p-53; /* (0, 1) */
  return -M * log(u);
}

typedef struct {
  double wall, interruptions, lost, ckpt, restarting;
} timeline;

/* A restart of R that failures may strike (each starts it again); adds to t->wall and
 * t->restarting. */
static void restart(rng *r, double R, double M, timeline *t) {
  for (;;) {
    const double f = next_failure(r, M);
    if (f >= R) {
      t->wall += R, t->restarting += R;
      return;
    }
    t->wall += f, t->restarting += f, t->interruptions++;
  }
}

/* One synchronous timeline: segments of tau of work and a checkpoint of delta, as Daly's. */
static void run_sync(rng *r, double U, double tau, double delta, double R, double M, timeline *t) {
  double n, last;
  segments(U, tau, &n, &last);
  for (double k = 0; k < n; k++) {
    const double w = k + 1 < n ? tau : last, L = w + delta;
    for (;;) {
      const double f = next_failure(r, M);
      if (f >= L) {
        t->wall += L, t->ckpt += delta;
        break;
      }
      t->wall += f, t->interruptions++;
      t->lost += MIN(f, w), t->ckpt += MAX(0, f - w);
      restart(r, R, M, t);
    }
  }
}

/* One asynchronous timeline: tau of work, a stall of copy_s, the write done write_s later; one
 * write at a time (a copy waits for the write before it: tau >= write_s makes that rare, the
 * last short segment aside); a failure goes back to the last checkpoint written. The run ends
 * when its last checkpoint is written. */
static void run_async(rng *r, double U, double tau, double copy_s, double write_s, double R,
                      double M, timeline *t) {
  double nseg, last;
  segments(U, tau, &nseg, &last);
  double safe = 0, p = 0;          /* segments written, segments done */
  double pend = -1, pend_at = 0;   /* the segments of the checkpoint being written, and when */
  double now = 0, f = now + next_failure(r, M);
  for (;;) {
    double w, end, busy;           /* work, when the step ends, and its work-and-copy part */
    if (p < nseg) { /* work, then (after the write before it) the copy */
      w = p + 1 < nseg ? tau : last;
      end = MAX(now + w, pend >= 0 ? pend_at : 0) + copy_s;
      busy = w;
    } else { /* everything done: wait for the last write */
      w = busy = 0;
      end = pend >= 0 ? pend_at : now;
      if (pend < 0 || end <= now) break;
    }
    if (f < end) { /* interrupted: back to what was written by then */
      if (pend >= 0 && pend_at <= f) safe = pend;
      const double ran = f - now;
      for (double k = safe; k < p; k++) t->lost += k + 1 < nseg ? tau : last;
      t->lost += MIN(ran, busy);
      t->ckpt += MAX(0, ran - busy); /* the copy, or the wait for a write */
      t->wall += ran, t->interruptions++;
      restart(r, R, M, t);
      now = t->wall;
      p = safe, pend = -1;
      f = now + next_failure(r, M);
      continue;
    }
    t->wall += end - now;
    t->ckpt += end - now - busy;
    now = end;
    if (pend >= 0 && pend_at <= now) safe = pend, pend = -1;
    if (w > 0) p += 1, pend = p, pend_at = now + write_s;
    if (p >= nseg && pend < 0) break;
  }
  t->wall = now;
}

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The q-quantile of sorted v[0..n-1] (linear between order statistics). */
static double quantile(const double *v, int n, double q) {
  const double k = q * (n - 1);
  const int i = (int)floor(k);
  return i + 1 < n ? v[i] + (k - i) * (v[i + 1] - v[i]) : v[n - 1];
}

void proj_monte_carlo(double work_s, double tau, gboolean async, double stall_s, double write_s,
                      double restart_s, double M, int samples, guint64 seed, proj_result *out) {
  rng r;
  rng_seed(&r, seed);
  double *walls = g_new(double, samples), *ints = g_new(double, samples);
  timeline sum = {0};
  for (int s = 0; s < samples; s++) {
    timeline t = {0};
    if (async)
      run_async(&r, work_s, tau, stall_s, write_s, restart_s, M, &t);
    else
      run_sync(&r, work_s, tau, stall_s, restart_s, M, &t);
    walls[s] = t.wall, ints[s] = t.interruptions;
    sum.wall += t.wall, sum.interruptions += t.interruptions, sum.lost += t.lost;
    sum.ckpt += t.ckpt, sum.restarting += t.restarting;
  }
  qsort(walls, (size_t)samples, sizeof *walls, cmp_double);
  qsort(ints, (size_t)samples, sizeof *ints, cmp_double);
  out->samples = samples;
  out->wall_s = sum.wall / samples;
  double var = 0; /* two passes: the timelines can all be alike */
  for (int k = 0; k < samples; k++) var += (walls[k] - out->wall_s) * (walls[k] - out->wall_s);
  out->wall_sd_s = samples > 1 ? sqrt(var / (samples - 1)) : 0;
  out->wall_p5_s = quantile(walls, samples, 0.05);
  out->wall_p50_s = quantile(walls, samples, 0.50);
  out->wall_p95_s = quantile(walls, samples, 0.95);
  out->interruptions = sum.interruptions / samples;
  out->interruptions_p95 = quantile(ints, samples, 0.95);
  out->lost_work_s = sum.lost / samples;
  out->ckpt_s = sum.ckpt / samples;
  out->restarting_s = sum.restarting / samples;
  g_free(walls);
  g_free(ints);
}

/* ---- the projection -------------------------------------------------------------------------- */

/* Switch ports per NIC in a non-blocking folded Clos of radix-k switches: one tier joins k end
 * points, two k²/2, three k³/4; a NIC's traffic takes a down-port at every tier it climbs and an
 * up-port below the top: 2 × tiers − 1. */
static double ports_per_nic(double nics, int k) {
  if (nics <= k) return 1;
  if (nics <= (double)k * k / 2) return 3;
  return 5;
}

/* Energy per iteration (projection.h). */
static void energy(proj_result *p, const proj_opts *o, const res_result *r, const cfg_run *c,
                   const gpu_spec *g, double nodes, double nics, int G) {
  const double idle = o->gpu_idle_w >= 0 ? o->gpu_idle_w : g->idle_w;
  const double board = o->gpu_board_w >= 0 ? o->gpu_board_w : g->board_w;
  p->energy = board > 0;
  if (!p->energy) return;
  const double T = r->iteration_time_s, dyn = MAX(board - idle, 0);
  const double s_mem = o->mem_power_share >= 0 ? o->mem_power_share : PROJ_MEM_POWER_SHARE;
  /* compute-bound kernels at board power; bandwidth-bound ones by the share of what a well-tuned
   * kernel reaches (the roofline's efficiency, gpuspec.h) that they use */
  const double peak_b = g->mem_bw_bps * GPU_EFF_MEMORY;
  double busy = 0;
  const guint n = r->rank_rows->len;
  for (guint i = 0; i < n; i++) {
    const res_rank *k = &g_array_index(r->rank_rows, res_rank, i);
    const double gemm = MIN(k->gemm_kernel_s, k->compute_s), rest = k->compute_s - gemm;
    busy += dyn * (gemm + s_mem * MIN(rest, k->elementwise_mem_bytes / peak_b));
  }
  const double ranks = c->gpus;
  p->gpu_busy_j = n ? busy * ranks / n : 0; /* rows of every rank; fewer rows stand for all */
  p->gpu_idle_j = idle * ranks * T;
  const double nic_w = o->nic_w >= 0 ? o->nic_w : PROJ_NIC_W;
  const double port_w = o->switch_port_w >= 0 ? o->switch_port_w : PROJ_SWITCH_PORT_W;
  const int radix = o->switch_radix > 0 ? o->switch_radix : PROJ_SWITCH_RADIX;
  p->switch_ports = nics * ports_per_nic(nics, radix);
  p->nic_j = nic_w * nics * T;
  p->switch_j = port_w * p->switch_ports * T;
  /* the host: the reference system's rated power less its GPUs and NICs, at the share of it that
   * a DGX H100 measured at full training load draws (projection.h), per GPU, times the GPUs of a
   * node here */
  double host_w = o->host_w;
  if (host_w < 0) {
    const double h100_rest = PROJ_DGX_H100_RATED_W - 8 * PROJ_H100_BOARD_W - 8 * PROJ_NIC_W;
    const double h100_host = PROJ_DGX_H100_MEASURED_W - 8 * PROJ_H100_BOARD_W - 8 * PROJ_NIC_W;
    host_w = g->node_gpus > 0 ? MAX(0, g->node_w - g->node_gpus * g->board_w -
                                           g->node_nics * PROJ_NIC_W) *
                                    (h100_host / h100_rest) / g->node_gpus * G
                              : 0;
  }
  p->host_j = host_w * nodes * T;
  const double pue = o->pue >= 0 ? o->pue : PROJ_PUE;
  const double it = p->gpu_busy_j + p->gpu_idle_j + p->nic_j + p->switch_j + p->host_j;
  p->facility_j = it * (pue - 1);
  p->iteration_j = it * pue;
  p->idle_w = (idle * ranks + nic_w * nics + port_w * p->switch_ports + host_w * nodes) * pue;
  p->opts.gpu_idle_w = idle, p->opts.gpu_board_w = board, p->opts.mem_power_share = s_mem;
  p->opts.nic_w = nic_w, p->opts.switch_port_w = port_w, p->opts.switch_radix = radix;
  p->opts.host_w = host_w, p->opts.pue = pue;
}

/* The job's nodes and NICs. */
static void job_units(const cfg_run *c, int gpus_per_node, int nics_per_node, int *G,
                      double *nodes, double *nics) {
  *G = gpus_per_node > 0 ? gpus_per_node : 1;
  *nodes = ceil((double)c->gpus / *G);
  *nics = *nodes * (nics_per_node > 0 ? nics_per_node : *G);
}

double proj_iteration_energy_j(const res_result *r, const cfg_run *c, const gpu_spec *g,
                               int gpus_per_node, int nics_per_node) {
  proj_opts o;
  proj_opts_init(&o);
  proj_result p;
  memset(&p, 0, sizeof p);
  int G;
  double nodes, nics;
  job_units(c, gpus_per_node, nics_per_node, &G, &nodes, &nics);
  energy(&p, &o, r, c, g, nodes, nics, G);
  return p.energy ? p.iteration_j : 0;
}

gboolean proj_check(const proj_opts *o, const wl_model *m, const gpu_spec *g, GError **err) {
  if (o->tokens > 0 && m->seq_len <= 0) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                "--tokens: %s reads no token sequences; give the budget with --epochs", m->name);
    return FALSE;
  }
  if (o->epochs > 0 && m->dataset_samples <= 0) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                "--epochs: %s names no dataset; give the budget with --tokens", m->name);
    return FALSE;
  }
  if (o->kwh_price >= 0 && (!g || g->board_w <= 0) && o->gpu_board_w < 0) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--kwh-price: %s has no power figures; give "
                "--gpu-board-w", g ? g->name : "the device");
    return FALSE;
  }
  return TRUE;
}

gboolean proj_run(const proj_opts *o, const res_result *r, const cfg_run *c, const wl_model *m,
                  const gpu_spec *g, int gpus_per_node, int nics_per_node, proj_result *p,
                  GError **err) {
  memset(p, 0, sizeof *p);
  p->opts = *o;
  if (o->tokens <= 0 && o->epochs <= 0) return TRUE;
  p->on = TRUE;
  const double T = r->iteration_time_s;
  p->iteration_s = T;
  if (!(T > 0) || !isfinite(T)) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--tokens/--epochs: the iteration takes %g s: "
                "nothing to project", T);
    return FALSE;
  }
  if (!proj_check(o, m, g, err)) return FALSE;
  if (o->tokens > 0) {
    const double per_it = (double)c->batch * (double)m->seq_len;
    p->iterations = ceil(o->tokens / per_it);
    p->tokens = p->iterations * per_it;
  } else {
    p->iterations = ceil(o->epochs * (double)res_epoch_iterations(c, m));
    p->tokens = m->seq_len > 0 ? p->iterations * (double)c->batch * (double)m->seq_len : 0;
  }
  p->useful_s = p->iterations * T;

  /* the units the job uses, and its MTBF */
  int G;
  double nodes, nics;
  job_units(c, gpus_per_node, nics_per_node, &G, &nodes, &nics);
  p->units[PROJ_GPU] = c->gpus, p->units[PROJ_SOFTWARE] = c->gpus;
  p->units[PROJ_NIC] = nics;
  p->units[PROJ_HOST_MEMORY] = p->units[PROJ_SWITCH] = p->units[PROJ_NODE] = nodes;
  double rate_per_h = 0;
  if (o->job_mtbf_h > 0)
    rate_per_h = 1 / o->job_mtbf_h;
  else
    for (int u = 0; u < PROJ_N_UNITS; u++) rate_per_h += p->units[u] / o->mtbf_h[u];
  const double M = o->failures ? 3600 / rate_per_h : INFINITY;
  p->job_mtbf_s = M;

  /* checkpoints */
  p->ckpt_bytes = (double)m->params *
                  (gpu_precision_bytes(c->precision) + plan_optimizer_bytes(m, c));
  p->ckpt_write_s = MAX(p->ckpt_bytes / (nodes * o->ckpt_bw_node_bps),
                        p->ckpt_bytes / o->ckpt_bw_total_bps);
  p->ckpt_stall_s = o->ckpt_async ? p->ckpt_bytes / c->gpus / o->host_copy_bps : p->ckpt_write_s;
  p->restart_s = o->relaunch_s + p->ckpt_write_s + o->warmup_iters * T;
  double tau = o->ckpt_interval_s;
  if (tau <= 0)
    tau = o->ckpt_async ? async_interval_s(p->ckpt_stall_s, p->ckpt_write_s, p->restart_s, M)
                        : proj_daly_interval_s(p->ckpt_stall_s, M);
  if (o->ckpt_async) tau = MAX(tau, p->ckpt_write_s); /* one write at a time */
  const gboolean ckpts = isfinite(tau) && tau < p->useful_s;
  if (ckpts) { /* whole iterations */
    p->ckpt_interval_iterations = MAX(1, ceil(tau / T - 1e-9));
    tau = p->ckpt_interval_iterations * T;
    p->ckpt_interval_s = tau;
  } else { /* no checkpoint before the end: one at the end */
    tau = p->useful_s;
  }
  const double stall = (ckpts || o->failures) ? p->ckpt_stall_s : 0;
  if (p->useful_s > 1e15) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                "%s: %.3g s of training is more than a projection can hold (1e15 s)",
                o->tokens > 0 ? "--tokens" : "--epochs", p->useful_s);
    return FALSE;
  }
  /* Daly's expectation, with an asynchronous write taken as a stall: exact for synchronous
   * checkpoints, a bound for asynchronous ones; it decides whether the run can finish */
  const double daly = proj_daly_wall_s(p->useful_s, tau, stall + (o->ckpt_async ? p->ckpt_write_s
                                                                                : 0),
                                       p->restart_s, M);
  if (!isfinite(daly) || daly > 1e15) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                "--failures: the job is interrupted every %.3g s on average, too often to finish "
                "with checkpoints of %.3g s and restarts of %.3g s",
                M, p->ckpt_stall_s, p->restart_s);
    return FALSE;
  }
  const double first = o->ckpt_async ? proj_async_wall_s(p->useful_s, tau, stall, p->ckpt_write_s,
                                                         p->restart_s, M)
                                     : INFINITY;
  if (!o->failures && !ckpts) { /* the iterations and nothing else */
    p->wall_s_closed_form = p->useful_s;
    p->closed_form = "iterations x iteration time";
  } else if (!o->ckpt_async) {
    p->wall_s_closed_form = daly;
    p->closed_form = "Daly 2006";
  } else if (isfinite(first)) {
    p->wall_s_closed_form = first;
    p->closed_form = "first order, asynchronous checkpoints";
  } else { /* failures too frequent for the first order */
    p->wall_s_closed_form = daly;
    p->closed_form = "Daly 2006 with the write as a stall (a bound)";
  }
  /* The Monte Carlo: its draws grow with the segments and the failures, held to about 5·10⁷ */
  const double events = p->useful_s / tau + (isfinite(M) ? daly / M : 0) + 1;
  int samples = o->samples;
  if (events * samples > 5e7) samples = MIN(samples, MAX(10, (int)(5e7 / events)));
  if (!o->failures && !ckpts) { /* nothing random: one timeline is every timeline */
    p->samples = 1;
    p->wall_s = p->wall_p5_s = p->wall_p50_s = p->wall_p95_s = p->useful_s;
  } else if (events * samples > 5e8) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                "%s: %.3g checkpoints and interruptions per timeline are too many to sample; %s",
                o->ckpt_interval_s > 0 ? "--ckpt-interval" : o->tokens > 0 ? "--tokens" : "--epochs",
                events, o->ckpt_interval_s > 0 ? "choose a longer interval" : "project less");
    return FALSE;
  } else {
    proj_monte_carlo(p->useful_s, tau, o->ckpt_async, stall, p->ckpt_write_s, p->restart_s, M,
                     samples, o->seed, p);
  }
  p->goodput = p->useful_s / p->wall_s;

  energy(p, o, r, c, g, nodes, nics, G);
  if (p->energy) {
    /* computing (useful and lost work, warm-ups included in the restarts) at the iteration's
     * power; checkpoint stalls and restarts at the idle draw */
    const double busy_s = p->useful_s + p->lost_work_s;
    p->energy_j = p->iteration_j / T * busy_s + p->idle_w * (p->wall_s - busy_s);
    p->energy_kwh = p->energy_j / 3.6e6;
    p->tokens_per_j = p->tokens > 0 ? p->tokens / p->energy_j : 0;
  }
  p->gpu_hours = c->gpus * p->wall_s / 3600;
  p->costed = o->gpu_hour_price >= 0 || (o->kwh_price >= 0 && p->energy);
  p->gpu_cost = o->gpu_hour_price >= 0 ? p->gpu_hours * o->gpu_hour_price : 0;
  p->energy_cost = o->kwh_price >= 0 && p->energy ? p->energy_kwh * o->kwh_price : 0;
  p->cost = p->gpu_cost + p->energy_cost;
  return TRUE;
}

/* ---- output ---------------------------------------------------------------------------------- */

void *proj_to_json(const proj_result *p) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "iterations", p->iterations);
  if (p->tokens > 0) cJSON_AddNumberToObject(o, "tokens", p->tokens);
  cJSON_AddNumberToObject(o, "useful_s", p->useful_s);
  cJSON_AddNumberToObject(o, "wall_s", p->wall_s);
  cJSON_AddNumberToObject(o, "wall_s_stddev", p->wall_sd_s);
  cJSON_AddNumberToObject(o, "wall_s_closed_form", p->wall_s_closed_form);
  cJSON_AddStringToObject(o, "closed_form", p->closed_form);
  cJSON *pc = cJSON_AddObjectToObject(o, "wall_s_percentiles");
  cJSON_AddNumberToObject(pc, "p5", p->wall_p5_s);
  cJSON_AddNumberToObject(pc, "p50", p->wall_p50_s);
  cJSON_AddNumberToObject(pc, "p95", p->wall_p95_s);
  cJSON_AddNumberToObject(o, "monte_carlo_samples", p->samples);
  cJSON_AddNumberToObject(o, "goodput", p->goodput);
  cJSON_AddNumberToObject(o, "interruptions", p->interruptions);
  cJSON_AddNumberToObject(o, "interruptions_p95", p->interruptions_p95);
  cJSON_AddNumberToObject(o, "lost_work_s", p->lost_work_s);
  cJSON_AddNumberToObject(o, "checkpointing_s", p->ckpt_s);
  cJSON_AddNumberToObject(o, "restarting_s", p->restarting_s);
  cJSON_AddNumberToObject(o, "ckpt_interval_s", p->ckpt_interval_s);
  cJSON_AddNumberToObject(o, "ckpt_interval_iterations", p->ckpt_interval_iterations);

  cJSON *f = cJSON_AddObjectToObject(o, "failures");
  cJSON_AddBoolToObject(f, "on", p->opts.failures);
  if (isfinite(p->job_mtbf_s)) cJSON_AddNumberToObject(f, "job_mtbf_s", p->job_mtbf_s);
  cJSON *u = cJSON_AddObjectToObject(f, "units");
  cJSON *mt = cJSON_AddObjectToObject(f, "mtbf_per_unit_h");
  for (int i = 0; i < PROJ_N_UNITS; i++) {
    cJSON_AddNumberToObject(u, unit_names[i], p->units[i]);
    cJSON_AddNumberToObject(mt, unit_names[i], p->opts.mtbf_h[i]);
  }
  if (p->opts.job_mtbf_h > 0) cJSON_AddNumberToObject(f, "job_mtbf_given_h", p->opts.job_mtbf_h);

  cJSON *k = cJSON_AddObjectToObject(o, "checkpoint");
  cJSON_AddStringToObject(k, "kind", p->opts.ckpt_async ? "async" : "sync");
  cJSON_AddNumberToObject(k, "bytes", p->ckpt_bytes);
  cJSON_AddNumberToObject(k, "write_s", p->ckpt_write_s);
  cJSON_AddNumberToObject(k, "stall_s", p->ckpt_stall_s);
  cJSON_AddNumberToObject(k, "restart_s", p->restart_s);
  cJSON_AddNumberToObject(k, "bw_node_bps", p->opts.ckpt_bw_node_bps);
  cJSON_AddNumberToObject(k, "bw_total_bps", p->opts.ckpt_bw_total_bps);
  if (p->opts.ckpt_async) cJSON_AddNumberToObject(k, "host_copy_bps", p->opts.host_copy_bps);
  cJSON_AddNumberToObject(k, "relaunch_s", p->opts.relaunch_s);
  cJSON_AddNumberToObject(k, "warmup_iterations", p->opts.warmup_iters);

  if (p->energy) {
    cJSON *e = cJSON_AddObjectToObject(o, "energy_per_iteration_j");
    cJSON_AddNumberToObject(e, "gpu_busy", p->gpu_busy_j);
    cJSON_AddNumberToObject(e, "gpu_idle", p->gpu_idle_j);
    cJSON_AddNumberToObject(e, "nic", p->nic_j);
    cJSON_AddNumberToObject(e, "switch", p->switch_j);
    cJSON_AddNumberToObject(e, "host", p->host_j);
    cJSON_AddNumberToObject(e, "facility", p->facility_j);
    cJSON_AddNumberToObject(e, "total", p->iteration_j);
    cJSON *w = cJSON_AddObjectToObject(o, "power_model");
    cJSON_AddNumberToObject(w, "gpu_idle_w", p->opts.gpu_idle_w);
    cJSON_AddNumberToObject(w, "gpu_board_w", p->opts.gpu_board_w);
    cJSON_AddNumberToObject(w, "mem_power_share", p->opts.mem_power_share);
    cJSON_AddNumberToObject(w, "nic_w", p->opts.nic_w);
    cJSON_AddNumberToObject(w, "switch_port_w", p->opts.switch_port_w);
    cJSON_AddNumberToObject(w, "switch_ports", p->switch_ports);
    cJSON_AddNumberToObject(w, "host_w", p->opts.host_w);
    cJSON_AddNumberToObject(w, "pue", p->opts.pue);
    cJSON_AddStringToObject(w, "source", "modelled from spec sheets (not measured)");
    cJSON_AddNumberToObject(o, "energy_j", p->energy_j);
    cJSON_AddNumberToObject(o, "energy_kwh", p->energy_kwh);
    if (p->tokens_per_j > 0) cJSON_AddNumberToObject(o, "tokens_per_j", p->tokens_per_j);
  }
  cJSON_AddNumberToObject(o, "gpu_hours", p->gpu_hours);
  if (p->costed) {
    cJSON_AddNumberToObject(o, "cost", p->cost);
    cJSON *c = cJSON_AddObjectToObject(o, "cost_breakdown");
    cJSON_AddNumberToObject(c, "gpu_hours", p->gpu_cost);
    cJSON_AddNumberToObject(c, "energy", p->energy_cost);
    if (p->opts.gpu_hour_price >= 0)
      cJSON_AddNumberToObject(c, "gpu_hour_price", p->opts.gpu_hour_price);
    if (p->opts.kwh_price >= 0) cJSON_AddNumberToObject(c, "kwh_price", p->opts.kwh_price);
  }
  return o;
}

static void human(char *b, size_t n, double s) {
  if (s < 120)
    g_snprintf(b, n, "%.1f s", s);
  else if (s < 2 * 3600)
    g_snprintf(b, n, "%.1f min", s / 60);
  else if (s < 3 * 86400)
    g_snprintf(b, n, "%.1f h", s / 3600);
  else
    g_snprintf(b, n, "%.1f days", s / 86400);
}

void proj_print(const proj_result *p, FILE *out) {
  if (!p->on) return;
  char a[32], b[32], c[32], d[32];
  human(a, sizeof a, p->useful_s);
  human(b, sizeof b, p->wall_s);
  human(c, sizeof c, p->wall_p5_s);
  human(d, sizeof d, p->wall_p95_s);
  fprintf(out, "  whole run       %.0f iterations", p->iterations);
  if (p->tokens > 0) fprintf(out, " (%.3g tokens)", p->tokens);
  fprintf(out, ": useful %s, wall %s (90 %% of runs %s-%s), goodput %.1f%%\n", a, b, c, d,
          100 * p->goodput);
  human(a, sizeof a, p->wall_s_closed_form);
  if (p->opts.failures) {
    human(b, sizeof b, p->job_mtbf_s);
    human(c, sizeof c, p->lost_work_s);
    fprintf(out, "  failures        job MTBF %s, %.1f interruptions, %s of work lost; closed form "
                 "%s (%s)\n", b, p->interruptions, c, a, p->closed_form);
  }
  if (p->ckpt_interval_s > 0) {
    human(b, sizeof b, p->ckpt_interval_s);
    fprintf(out, "  checkpoints     %.1f GB %s every %s (%.0f iterations): stall %.1f s, write "
                 "%.1f s, restart %.1f s\n", p->ckpt_bytes / 1e9, p->opts.ckpt_async ? "async" : "sync",
            b, p->ckpt_interval_iterations, p->ckpt_stall_s, p->ckpt_write_s, p->restart_s);
  }
  if (p->energy) {
    fprintf(out, "  energy          %.1f kJ per iteration (GPU %.0f%%, host %.0f%%, network %.0f%%, "
                 "facility %.0f%%), %.4g MWh for the run",
            p->iteration_j / 1e3, 100 * (p->gpu_busy_j + p->gpu_idle_j) / p->iteration_j,
            100 * p->host_j / p->iteration_j, 100 * (p->nic_j + p->switch_j) / p->iteration_j,
            100 * p->facility_j / p->iteration_j, p->energy_kwh / 1e3);
    if (p->tokens_per_j > 0) fprintf(out, ", %.3g tokens/J", p->tokens_per_j);
    fputc('\n', out);
  }
  if (p->costed) fprintf(out, "  cost            %.4g (%.4g GPU-hours)\n", p->cost, p->gpu_hours);
}
