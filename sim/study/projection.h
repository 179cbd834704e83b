/* projection.h — the whole training run from one simulated iteration: failures, checkpoints,
 * goodput, energy and cost (`dlsim run ... --tokens T` or `--epochs E`).
 *
 * A study on top of a result: it reads the iteration time, the model-state bytes and each rank's
 * kernel work from the result and never plans again.
 *
 * Useful time U = iterations × iteration time, the iterations being what the token or epoch
 * budget needs (whole iterations).
 *
 * Failures: each kind of unit (GPU, host memory, NIC, network switch or cable, the rest of the
 * node, software) fails at a rate 1/MTBF per unit, independently and without memory
 * (exponential times between failures); the job uses P GPUs, P/G nodes, K NICs per node, and
 * sees the switch and software rates per node and per GPU, as the fleet data they come from was
 * counted. Any failure of any unit interrupts the job (a synchronous job stops as a whole). The
 * job's MTBF is M = 1 / Σ units × rate.
 *
 * Checkpoints hold the model states: weights (the run's precision) and optimizer state (fp32
 * moments and, in mixed precision, fp32 master weights) of every parameter once, however the run
 * shards them; the ranks write their shares in parallel (as Megatron's fully parallel save and
 * PyTorch DCP do), so the write takes max(bytes / (nodes × per-node bandwidth), bytes /
 * file-system bandwidth), and loading the same. Synchronous: training stops for the write (δ).
 * Asynchronous: training stops only for the copy to host memory (δc, each GPU's share at the
 * host-copy bandwidth); the write (δw) runs behind the next interval, and a checkpoint protects
 * the work before it only once written. A restart takes R = relaunch + load + warm-up iterations.
 *
 * The interval (work τ between checkpoints, whole iterations) is given or chosen:
 *   synchronous: Daly's higher-order optimum (Daly 2006, Eq. 37): τ = √(2δM)·[1 + ⅓√(δ/2M) +
 *     (1/9)(δ/2M)] − δ for δ < 2M, else M; the first-order term is Young's (1974);
 *   asynchronous: the τ ≥ δw that minimises its first-order expected time (proj_async_wall_s).
 * Expected wall time in closed form: synchronous, Daly's (2006, Eq. 20) over the run's segments,
 * each τ of work and a checkpoint (the last with the remaining work): a segment of length L
 * takes M·e^{R/M}·(e^{L/M} − 1) on average, with failures also during checkpoints and restarts
 * (exact for exponential failures); asynchronous, first order:
 *   W = U (1 + δc/τ) / (1 − ((τ + δc)/2 + δw + R) / M) + δw (the last write).
 * Beside it, a seeded Monte Carlo of the run's timeline under the same assumptions gives the mean
 * and percentiles of the wall time, the interruptions and the lost work.
 *
 * Energy per iteration: each GPU draws its idle power for the whole iteration and, while its
 * kernels run, the rest of its board power (board − idle) for compute-bound (GEMM-like)
 * kernels, which hold a GPU at its power limit, and for bandwidth-bound kernels the share s_mem
 * of it times the share of attainable bandwidth they use (the roofline's efficiency, gpuspec.h):
 *   E_gpu = idle·T + (board − idle)·(gemm + s_mem·min(busy − gemm, Q/(peak_bw·eff_m))),
 * gemm the time of its compute-bound kernels per iteration, busy that of all its kernels, Q the
 * bytes its bandwidth-bound kernels move. NICs, switch ports and hosts draw constant power; the
 * facility multiplies everything by its PUE. Time lost to checkpoints and restarts draws the
 * idle figures. Cost: GPU-hours × price + kWh × price. */
#ifndef DL_STUDY_PROJECTION_H
#define DL_STUDY_PROJECTION_H

#include <glib.h>
#include <stdio.h>

#include "core/config.h"
#include "core/gpuspec.h"
#include "model/workload.h"
#include "out/result.h"

#define PROJ_UNITS(X)                                                                   \
  X(PROJ_GPU, "gpu", "GPU (the board, its HBM, SRAM, system processor, thermal parts)") \
  X(PROJ_HOST_MEMORY, "host-memory", "host memory, per node")                            \
  X(PROJ_NIC, "nic", "network adapter")                                                  \
  X(PROJ_SWITCH, "switch", "network switches and cables, per node")                      \
  X(PROJ_NODE, "node", "the rest of a node: maintenance, SSD, power supply, CPU, chassis") \
  X(PROJ_SOFTWARE, "software", "software, per GPU: bugs, collective timeouts, dependencies")

typedef enum {
#define X(e, s, d) e,
  PROJ_UNITS(X)
#undef X
  PROJ_N_UNITS
} proj_unit;

const char *proj_unit_name(proj_unit u);

/* Defaults (README.md, "The whole run", lists them with their sources). */
/* Storage: one 400 Gb/s storage port per node (the DGX H100 User Guide's ConnectX-7 storage
 * adapters, up to 400 Gb/s), and Meta's Tectonic file system behind Llama 3, 2 TB/s sustained
 * ("The Llama 3 Herd of Models", Section 3.3.1). */
#define PROJ_CKPT_BW_NODE_BPS 50e9
#define PROJ_CKPT_BW_TOTAL_BPS 2e12
/* Device-to-host copy: PCIe Gen5 x16, 64 GB/s each way (the H100 datasheet's 128 GB/s both
 * ways). */
#define PROJ_HOST_COPY_BPS 64e9
/* A restart's relaunch: 10 minutes, the restart time of Daly's (2006) worked examples; Meta
 * publishes none for Llama 3. Warm-up iterations: none unless given. */
#define PROJ_RELAUNCH_S 600.0
#define PROJ_WARMUP_ITERS 0
/* A kernel saturating memory bandwidth is taken to draw the whole dynamic power, as one
 * saturating the tensor cores does: an upper bound until power is measured per kernel class. */
#define PROJ_MEM_POWER_SHARE 1.0
/* The network counts its optics: a 400 Gb/s OSFP transceiver, 9 W (NVIDIA MMA4Z00-NS400
 * specifications), at each NIC and each switch port in use; the adapters' and switch ASICs' own
 * draw is not included (a lower bound). Switches of 64 ports (NVIDIA Quantum-2 QM9700). */
#define PROJ_NIC_W 9.0
#define PROJ_SWITCH_PORT_W 9.0
#define PROJ_SWITCH_RADIX 64
/* The host (CPUs, memory, NVSwitches, fans, storage): a DGX H100 is rated at 10.2 kW (its user
 * guide) but drew at most 8.4 kW in 8-GPU training (Latif et al., "Single-Node Power Demand
 * During AI Training: Measurements on an 8-GPU NVIDIA H100 System", IEEE Access 13, 2025); with
 * its GPUs at their 700 W board power, the host draws that share of what the rating leaves
 * beside GPUs and NICs. Every reference system's host is taken at the same share. */
#define PROJ_DGX_H100_RATED_W 10200.0
#define PROJ_DGX_H100_MEASURED_W 8400.0
#define PROJ_H100_BOARD_W 700.0
/* Google's fleet-wide PUE for 2023, 1.10 (Google 2024 Environmental Report; the industry's
 * average that year, Uptime Institute: 1.58). */
#define PROJ_PUE 1.10

typedef struct {
  /* the budget: one of them > 0 */
  double tokens;               /* tokens to train on */
  double epochs;               /* passes over the dataset */
  /* failures */
  gboolean failures;           /* FALSE: --failures none (no failures, no checkpoints unless an
                                  interval is given) */
  double mtbf_h[PROJ_N_UNITS]; /* per unit, hours */
  double job_mtbf_h;           /* > 0: the job's MTBF as one fleet figure, replacing the units */
  /* checkpoints */
  gboolean ckpt_async;
  double ckpt_interval_s;      /* work between checkpoints; 0: the optimum */
  double ckpt_bw_node_bps;     /* storage write (and read) bandwidth per node, bytes/s */
  double ckpt_bw_total_bps;    /* the file system's, bytes/s */
  double host_copy_bps;        /* asynchronous: device-to-host copy per GPU, bytes/s */
  double relaunch_s;           /* restart: the job's relaunch before the load */
  int warmup_iters;            /* restart: iterations before full speed (part of the restart) */
  int samples;                 /* Monte Carlo timelines */
  guint64 seed;
  /* energy (a figure < 0: the default) */
  double gpu_idle_w, gpu_board_w; /* per GPU; defaults: the spec sheet's */
  double mem_power_share;      /* s_mem */
  double nic_w;                /* per NIC */
  double switch_port_w;        /* per switch port */
  int switch_radix;            /* ports per switch (decides the tiers of the fabric) */
  double host_w;               /* per node, everything but GPUs and NICs */
  double pue;
  double gpu_hour_price, kwh_price; /* < 0: no cost */
} proj_opts;

/* Defaults: no budget, failures on with the fleet rates of the documentation, synchronous
 * checkpoints at the optimum, the documented storage and power figures. */
void proj_opts_init(proj_opts *o);

/* Parses --failures: "none", "default", or comma-separated KEY=HOURS with KEY a unit name (its
 * MTBF per unit) or "job" (the job's MTBF), or "scale=F" (every rate times F). DL_ERR_INPUT
 * naming the option on failure. */
gboolean proj_parse_failures(proj_opts *o, const char *spec, GError **err);

typedef struct {
  gboolean on;                 /* a budget was given */
  /* budget */
  double iterations, tokens, useful_s, iteration_s;
  /* failures (on or off: opts.failures) */
  double units[PROJ_N_UNITS];  /* units of each kind the job uses */
  double job_mtbf_s;           /* INFINITY without failures */
  /* checkpoints */
  double ckpt_bytes, ckpt_write_s, ckpt_stall_s, restart_s;
  double ckpt_interval_s, ckpt_interval_iterations; /* 0: none */
  /* expectation */
  double wall_s_closed_form;
  const char *closed_form;     /* which formula */
  /* Monte Carlo */
  int samples;
  double wall_s, wall_sd_s, wall_p5_s, wall_p50_s, wall_p95_s;
  double interruptions, interruptions_p95;
  double lost_work_s, ckpt_s, restarting_s; /* means over the samples */
  double goodput;              /* useful_s / wall_s */
  /* energy per iteration, J (facility: PUE overhead) and for the run */
  gboolean energy;             /* FALSE where the device has no power figures (the CPU) */
  double gpu_busy_j, gpu_idle_j, nic_j, switch_j, host_j, facility_j, iteration_j;
  double idle_w;               /* the job's draw while it does not compute, facility included */
  double switch_ports;
  double energy_j, energy_kwh, tokens_per_j;
  double gpu_hours, cost, gpu_cost, energy_cost;
  gboolean costed;
  proj_opts opts;              /* the inputs, resolved */
} proj_result;

/* What `o` asks of model `m` on GPU `g` that the projection cannot give: --tokens on a model
 * without sequences, --epochs on one without a dataset, --kwh-price on a device without power
 * figures. DL_ERR_INPUT naming the option. */
gboolean proj_check(const proj_opts *o, const wl_model *m, const gpu_spec *g, GError **err);

/* The projection of result `r` of configuration `c` (model `m`, GPU `g`, `nics_per_node` NICs
 * and `gpus_per_node` GPUs per node) under `o`. DL_ERR_INPUT when the budget does not apply
 * (tokens on a model without sequences) or the run cannot finish (it fails faster than it
 * checkpoints). */
gboolean proj_run(const proj_opts *o, const res_result *r, const cfg_run *c, const wl_model *m,
                  const gpu_spec *g, int gpus_per_node, int nics_per_node, proj_result *out,
                  GError **err);

/* The energy of one iteration of result `r` (J, facility included) under the default power
 * figures; 0 where the GPU has none (the CPU). What `dlsim search --objective energy` ranks by. */
double proj_iteration_energy_j(const res_result *r, const cfg_run *c, const gpu_spec *g,
                               int gpus_per_node, int nics_per_node);

/* The pieces, for tests. Times in seconds; M the job's MTBF. */
/* Daly's expected time of `work_s` in segments of tau of work plus a checkpoint delta each. */
double proj_daly_wall_s(double work_s, double tau, double delta, double restart_s, double M);
/* Daly's optimum interval (above). */
double proj_daly_interval_s(double delta, double M);
/* The asynchronous first-order expected time (above); INFINITY when it never finishes. */
double proj_async_wall_s(double work_s, double tau, double copy_s, double write_s,
                         double restart_s, double M);
/* A Monte Carlo of `samples` timelines; fills the Monte Carlo fields of `out`. */
void proj_monte_carlo(double work_s, double tau, gboolean async, double stall_s, double write_s,
                      double restart_s, double M, int samples, guint64 seed, proj_result *out);

/* The projection as the result's "projection" object (cJSON *), and as text lines. */
void *proj_to_json(const proj_result *p);
void proj_print(const proj_result *p, FILE *out);

#endif
