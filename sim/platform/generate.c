/* generate.c — writes SimGrid platform files for clusters of DGX-like nodes, and the presets.
 *
 * Graph written (one DijkstraCache zone):
 *   host n<n>g<g> --<n><g>_nvl--> router n<n>_nvsw                       (NVLink to NVSwitch)
 *   K = G:  host n<n>g<g> --n<n>g<g>_nic--> leaf                          (a NIC per GPU)
 *           fattree: host n<n>g<g> --n<n>g<g>_nic, n<n>g<g>_port--> leaf (the NIC and its leaf
 *           port as two links: every GPU of a node is on the same leaf, and a path through it
 *           must be longer than NVLink's two links, see below)
 *   K < G:  host n<n>g<g> --n<n>g<g>_pci--> router n<n>_pci<k> --n<n>_nic<k>--> leaf
 *           (G/K GPUs share NIC k behind a PCIe switch)
 *   leaf --<leaf>_up--> router spine   (all uplinks of a leaf as one link of their summed
 *                                       bandwidth: SimGrid routes over one shortest path and has
 *                                       no multipath, so a bundle stands for ideal ECMP spreading)
 *   three tiers (leaves_per_pod): leaf --<leaf>_up--> router p<q>_spine --p<q>_up--> router core
 *                                       (a pod's spines as one router, its uplinks to the core
 *                                       as one bundle: its leaves' uplinks / pod_oversubscription)
 *   rail: NIC k of node n goes to leaf l<n / nodes_per_leaf>r<k>; fattree: all NICs of node n go
 *   to leaf l<n / nodes_per_leaf>; star: every host has one link n<n>g<g>_link to router sw.
 * Switch latency: half of it is on each link that ends at a leaf or spine switch, so a route
 * through s switches adds s × switch latency.
 * Route order matters: DijkstraCache counts links, and breaks ties between equally short paths
 * by the graph index of the predecessor (first appearance in <route>), so each node's NVLink
 * routes come first and GPU-to-GPU traffic inside a node takes NVLink where a PCIe switch offers
 * a path of the same length. A leaf shared by all GPUs of a node appears before later nodes'
 * NVSwitches, so on a fat tree the leaf path is made longer instead (the port link).
 */
#include "platform/platform.h"

#include "core/dl_common.h"
#include "core/gpuspec.h"

#include <math.h>
#include <string.h>

static const char *const topo_names[] = {
#define PLAT_X(e, name, desc) name,
    PLAT_TOPOLOGY_LIST(PLAT_X)
#undef PLAT_X
};

const char *plat_topology_name(plat_topology t) {
  return (t >= 0 && t < PLAT_TOPO_COUNT) ? topo_names[t] : "?";
}

gboolean plat_topology_parse(const char *name, plat_topology *out) {
  for (int i = 0; i < PLAT_TOPO_COUNT; i++)
    if (strcmp(name, topo_names[i]) == 0) {
      *out = (plat_topology)i;
      return TRUE;
    }
  return FALSE;
}

/* ---- units ------------------------------------------------------------------------------------
 */

typedef struct {
  const char *suffix; /* unit as SimGrid spells it */
  double mult;        /* its value in base units */
} unit;

/* SimGrid's unit tables (XML reference: bandwidth, latency, speed); longest suffixes first. */
static const unit bw_units[] = {
    {"KiBps", 1024.0}, {"MiBps", 1048576.0}, {"GiBps", 1073741824.0}, {"TiBps", 1099511627776.0},
    {"Kibps", 128.0},  {"Mibps", 131072.0},  {"Gibps", 134217728.0},  {"Tibps", 137438953472.0},
    {"KBps", 1e3},     {"MBps", 1e6},        {"GBps", 1e9},           {"TBps", 1e12},
    {"kbps", 125.0},   {"Kbps", 125.0},      {"Mbps", 1.25e5},        {"Gbps", 1.25e8},
    {"Tbps", 1.25e11}, {"Bps", 1.0},         {"bps", 0.125},
};
static const unit time_units[] = {
    {"ps", 1e-12}, {"ns", 1e-9}, {"us", 1e-6}, {"ms", 1e-3}, {"s", 1.0},
    {"m", 60.0},   {"h", 3600.0}, {"d", 86400.0}, {"w", 604800.0},
};
static const unit speed_units[] = {
    {"yottaflops", 1e24}, {"zettaflops", 1e21}, {"exaflops", 1e18}, {"petaflops", 1e15},
    {"teraflops", 1e12},  {"gigaflops", 1e9},   {"megaflops", 1e6}, {"kiloflops", 1e3},
    {"flops", 1.0},       {"Yf", 1e24},         {"Zf", 1e21},       {"Ef", 1e18},
    {"Pf", 1e15},         {"Tf", 1e12},         {"Gf", 1e9},        {"Mf", 1e6},
    {"kf", 1e3},          {"f", 1.0},
};

static gboolean parse_with_units(const char *text, const unit *units, size_t n, double *out) {
  if (!text) return FALSE;
  while (g_ascii_isspace(*text)) text++;
  char *end = NULL;
  double v = g_ascii_strtod(text, &end);
  if (end == text || !isfinite(v) || v < 0) return FALSE;
  if (*end == '\0') {
    *out = v;
    return TRUE;
  }
  for (size_t i = 0; i < n; i++)
    if (strcmp(end, units[i].suffix) == 0) {
      *out = v * units[i].mult;
      return isfinite(*out);
    }
  return FALSE;
}

gboolean plat_parse_bandwidth(const char *text, double *bps) {
  return parse_with_units(text, bw_units, G_N_ELEMENTS(bw_units), bps);
}
gboolean plat_parse_time(const char *text, double *s) {
  return parse_with_units(text, time_units, G_N_ELEMENTS(time_units), s);
}
gboolean plat_parse_speed(const char *text, double *flops) {
  return parse_with_units(text, speed_units, G_N_ELEMENTS(speed_units), flops);
}

/* Appends `v` with the largest of `units` (ascending multipliers) that keeps it >= 1, printed
 * with 15 significant digits: 3e11 -> "300GBps", 6.5e-8 -> "65ns". */
static void put_unit(GString *s, double v, const unit *units, size_t n) {
  size_t best = 0;
  for (size_t i = 0; i < n; i++)
    if (v >= units[i].mult * (1 - 1e-12)) best = i;
  char num[G_ASCII_DTOSTR_BUF_SIZE];
  g_ascii_formatd(num, sizeof num, "%.15g", v / units[best].mult);
  g_string_append_printf(s, "%s%s", num, units[best].suffix);
}

static const unit out_bw[] = {{"Bps", 1.0}, {"KBps", 1e3}, {"MBps", 1e6}, {"GBps", 1e9},
                              {"TBps", 1e12}};
static const unit out_time[] = {{"ns", 1e-9}, {"us", 1e-6}, {"ms", 1e-3}, {"s", 1.0}};
static const unit out_speed[] = {{"f", 1.0},   {"kf", 1e3},  {"Mf", 1e6},
                                 {"Gf", 1e9},  {"Tf", 1e12}, {"Pf", 1e15}};

/* ---- GPU models and presets ------------------------------------------------------------------ */

/* Memory and speed of known GPU models come from their spec sheets (gpuspec.c): the host speed
 * is the dense FP16 tensor peak. */
gboolean plat_gpu_spec(const char *model, double *mem_bytes, double *speed_flops) {
  const gpu_spec *gs = gpu_find(model);
  if (!gs) return FALSE;
  if (mem_bytes) *mem_bytes = gs->mem_bytes;
  if (speed_flops) *speed_flops = gs->peak_flops[GPU_FP16];
  return TRUE;
}

static const char thetagpu_comment[] =
    "ThetaGPU (Argonne Leadership Computing Facility): 24 NVIDIA DGX A100 nodes.\n"
    "Sources:\n"
    "  ALCF ThetaGPU machine overview (docs.alcf.anl.gov, ThetaGPU hardware overview): 24 DGX "
    "A100\n"
    "    nodes, 8 NVIDIA A100-40GB GPUs each, 8 HDR200 InfiniBand compute NICs per node.\n"
    "  NVIDIA DGX A100 datasheet: 8x A100 40GB, 6 NVSwitches, 600 GB/s bidirectional GPU-to-GPU\n"
    "    NVLink bandwidth (300 GB/s per direction per GPU), 8x single-port ConnectX-6 VPI\n"
    "    200 Gb/s HDR InfiniBand (25 GB/s per direction each) for the compute fabric.\n"
    "  NVIDIA A100 datasheet: 312 TFLOPS dense FP16/BF16 tensor peak (host speed), 40 GB memory.\n"
    "  DGX A100 CPUs: 2x AMD EPYC 7742 (host property cpu_vendor amd: NCCL's AMD figures).\n"
    "Latencies:\n"
    "  switch 130 ns: NVIDIA Quantum HDR (QM8700) switch datasheet, port-to-port latency.\n"
    "  NIC end 1 us: NVIDIA ConnectX-6 product brief gives sub-0.6 us adapter latency; 1 us adds\n"
    "    PCIe and GPUDirect RDMA overhead (an assumption, to be calibrated).\n"
    "  NVLink 1 us per GPU-NVSwitch link, 2 us GPU to GPU: an assumption in the range CUDA's\n"
    "    p2pBandwidthLatencyTest reports on DGX A100 (to be calibrated).\n"
    "Fabric: rail-optimised non-blocking fat tree (oversubscription 1) as in NVIDIA's DGX\n"
    "  SuperPOD reference architecture; ALCF does not publish ThetaGPU's leaf wiring.";

static const char dgx_comment[] =
    "DGX A100 nodes (NVIDIA DGX A100 datasheet): 8x A100-40GB on NVSwitch (300 GB/s per direction\n"
    "per GPU), 8x ConnectX-6 HDR200 NICs (25 GB/s), rail-optimised non-blocking fat tree. Latency\n"
    "figures as in platforms/thetagpu.xml (see platforms/README.md).";

static const char workstation_comment[] =
    "A workstation: one machine with 2 A100-40GB GPUs on PCIe 4.0 x16 (31.5 GB/s per direction\n"
    "theoretical, 25 GB/s used here as achievable; 1 us per GPU link, an assumption). The\n"
    "intra-node links stand for the PCIe path through the root complex. Calibrate against\n"
    "ping-pong measurements on the actual machine.";

static const char star_comment[] =
    "Star: 2 nodes x 4 GPUs, each GPU on one switch by its own 25 GB/s, 1 us link. Every route is\n"
    "two links and pairwise exchanges never share a link: a contention-free platform for tests.";

static const char dgx_h100_comment[] =
    "DGX H100 nodes (NVIDIA DGX H100/H200 User Guide and DGX BasePOD reference architecture):\n"
    "8x H100 SXM5 80GB on 4 NVSwitches, NVLink 4 at 900 GB/s bidirectional per GPU (450 GB/s per\n"
    "direction), 8x single-port ConnectX-7 400 Gb/s NDR InfiniBand compute NICs (50 GB/s), 2x\n"
    "Intel Xeon Platinum 8480C. Fabric: the DGX SuperPOD H100 reference architecture's rail-\n"
    "optimised non-blocking fat tree, 32 nodes under each rail's leaf (one scalable unit).\n"
    "Latencies: NVIDIA publishes none for Quantum-2 NDR switches or ConnectX-7; the HDR figures\n"
    "of platforms/thetagpu.xml (130 ns switch, 1 us NIC end, 1 us NVLink link) stand in for them.";

static const char dgx_h200_comment[] =
    "DGX H200 nodes (NVIDIA DGX H100/H200 User Guide, DGX BasePOD reference architecture): as\n"
    "DGX H100 (4 NVSwitches, NVLink 4 at 450 GB/s per direction per GPU, 8x ConnectX-7 400 Gb/s,\n"
    "2x Xeon Platinum 8480C) with 8x H200 141GB (HBM3e, 4.8 TB/s). Fabric and latencies as the\n"
    "dgx-h100 preset.";

static const char dgx_b200_comment[] =
    "DGX B200 nodes (NVIDIA DGX B200 User Guide): 8x B200 (180 GB HBM3e each) on 2 NVSwitch\n"
    "chips, NVLink 5 at 1.8 TB/s bidirectional per GPU (900 GB/s per direction), 8x single-port\n"
    "ConnectX-7 400 Gb/s InfiniBand compute NICs, 2x Intel Xeon Platinum 8570. Fabric: the DGX\n"
    "SuperPOD B200 reference architecture's rail-optimised non-blocking fat tree, 32 nodes under\n"
    "each rail's leaf. Latencies as the dgx-h100 preset (not published).";

static const char gb200_comment[] =
    "GB200 NVL72 racks (NVIDIA GB200 NVL72 specifications; DGX GB200 User Guide and DGX SuperPOD\n"
    "GB200 reference architecture): 72 Blackwell GPUs (186 GB HBM3e each) in one NVLink 5 domain\n"
    "(18 NVLinks per GPU, 1.8 TB/s bidirectional: 900 GB/s per direction, through 9 switch\n"
    "trays), 36 Grace CPUs (Arm: NCCL's non-AMD network figures), one ConnectX-7 400 Gb/s NDR\n"
    "InfiniBand NIC per GPU (4 per compute tray of 4 GPUs). Each rack is one node here; racks\n"
    "join in a rail-optimised non-blocking fat tree. Latencies as the dgx-h100 preset.";

static const char *const preset_names[] = {"thetagpu",    "dgx-a100",    "dgx-h100", "dgx-h200",
                                           "dgx-b200",    "gb200-nvl72", "workstation", "star",
                                           NULL};

gboolean plat_gen_preset_scalable(const char *name) {
  return name && (g_str_has_prefix(name, "dgx-") || strcmp(name, "gb200-nvl72") == 0);
}

const char *const *plat_gen_preset_names(void) { return preset_names; }

void plat_gen_defaults(plat_gen_params *p) {
  memset(p, 0, sizeof *p);
  p->nodes = 1;
  p->gpus_per_node = 8;
  p->gpu_model = "a100-40gb";
  p->cpu_vendor = "amd"; /* DGX A100 datasheet: two AMD EPYC 7742 */
  plat_gpu_spec(p->gpu_model, &p->gpu_mem_bytes, &p->speed_flops);
  p->nvlink_bps = 300e9; /* DGX A100 datasheet: 600 GB/s bidirectional per GPU */
  p->nvlink_lat_s = 1e-6;
  p->nics_per_node = 8;
  p->nic_bps = 25e9; /* HDR InfiniBand: 200 Gb/s */
  p->nic_lat_s = 1e-6;
  p->pcie_bps = 25e9;
  p->pcie_lat_s = 0.5e-6;
  p->switch_lat_s = 130e-9; /* NVIDIA Quantum HDR switch datasheet */
  p->topology = PLAT_TOPO_RAIL;
  p->oversubscription = 1.0;
  p->nodes_per_leaf = 0;
  p->leaves_per_pod = 0;
  p->pod_oversubscription = 1.0;
  p->comment = dgx_comment;
}

/* A DGX-like node of today: 8 GPUs of `gpu` on NVLink at `nvlink_bps` per direction, 8 NICs of
 * 400 Gb/s (ConnectX-7 NDR: 50 GB/s), two Intel CPUs, 32 nodes under each rail's leaf (a DGX
 * SuperPOD scalable unit of 32 nodes). */
static void modern_node(plat_gen_params *p, const char *gpu, double nvlink_bps,
                        const char *comment) {
  p->gpu_model = gpu;
  plat_gpu_spec(gpu, &p->gpu_mem_bytes, &p->speed_flops);
  p->cpu_vendor = "intel";
  p->nvlink_bps = nvlink_bps;
  p->nic_bps = 50e9;
  p->nodes_per_leaf = 32;
  p->comment = comment;
}

gboolean plat_gen_preset(const char *name, plat_gen_params *p, GError **err) {
  plat_gen_defaults(p);
  if (strcmp(name, "thetagpu") == 0) {
    p->nodes = 24;
    p->comment = thetagpu_comment;
  } else if (strcmp(name, "dgx-a100") == 0) {
    /* the defaults */
  } else if (strcmp(name, "dgx-h100") == 0) {
    modern_node(p, "h100-sxm", 450e9, dgx_h100_comment);
  } else if (strcmp(name, "dgx-h200") == 0) {
    modern_node(p, "h200", 450e9, dgx_h200_comment);
  } else if (strcmp(name, "dgx-b200") == 0) {
    modern_node(p, "b200", 900e9, dgx_b200_comment);
  } else if (strcmp(name, "gb200-nvl72") == 0) {
    modern_node(p, "gb200", 900e9, gb200_comment);
    p->gpus_per_node = 72;
    p->nics_per_node = 72;
    p->cpu_vendor = "arm";
    p->nodes_per_leaf = 0;
  } else if (strcmp(name, "workstation") == 0) {
    p->cpu_vendor = NULL;
    p->gpus_per_node = 2;
    p->nvlink_bps = 25e9;
    p->nvlink_lat_s = 1e-6;
    p->nics_per_node = 0;
    p->comment = workstation_comment;
  } else if (strcmp(name, "star") == 0) {
    p->nodes = 2;
    p->gpus_per_node = 4;
    p->topology = PLAT_TOPO_STAR;
    p->cpu_vendor = NULL;
    p->switch_lat_s = 0;
    p->comment = star_comment;
  } else {
    char *known = g_strjoinv(", ", (char **)preset_names);
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--preset: unknown preset '%s' (known: %s)", name,
                known);
    g_free(known);
    return FALSE;
  }
  return TRUE;
}

static const char *const smpi_cfg[] = {
    "network/TCP-gamma:0",  "network/crosstraffic:0", "network/weight-S:0",
    "smpi/bw-factor:0:1",   "smpi/lat-factor:0:1",    NULL,
};

const char *const *plat_smpi_cfg(void) { return smpi_cfg; }

/* ---- writer ---------------------------------------------------------------------------------- */

/* A SimGrid factor list "size:factor;..." (SimGrid's smpi/bw-factor): non-negative numbers in pairs;
 * NULL stands for the default and is fine. */
static gboolean factor_ok(const char *text) {
  if (!text) return TRUE;
  plat_factor f;
  gboolean ok = plat_factor_parse(text, &f);
  plat_factor_clear(&f);
  return ok;
}

/* The first bandwidth or latency option outside what a platform may hold, or NULL. */
static const char *out_of_range(const plat_gen_params *p) {
  const struct { const char *opt; double v; } bw[] = {
      {"--nvlink-bw", p->nvlink_bps}, {"--nic-bw", p->nic_bps}, {"--pcie-bw", p->pcie_bps}};
  const struct { const char *opt; double v; } lat[] = {
      {"--nvlink-lat", p->nvlink_lat_s}, {"--nic-lat", p->nic_lat_s},
      {"--pcie-lat", p->pcie_lat_s}, {"--switch-lat", p->switch_lat_s}};
  for (size_t i = 0; i < G_N_ELEMENTS(bw); i++)
    if (!(bw[i].v >= PLAT_MIN_BPS && bw[i].v <= PLAT_MAX_BPS)) return bw[i].opt;
  for (size_t i = 0; i < G_N_ELEMENTS(lat); i++)
    if (!(lat[i].v >= 0 && lat[i].v <= PLAT_MAX_LAT_S)) return lat[i].opt;
  return NULL;
}

static gboolean check_params(const plat_gen_params *p, GError **err) {
  const char *bad = NULL;
  char *msg = NULL;
  if (p->nodes < 1 || p->nodes > 1000000)
    msg = g_strdup_printf("--nodes: expected 1..1000000, got %d", p->nodes);
  else if (p->gpus_per_node < 1 || p->gpus_per_node > 1024)
    msg = g_strdup_printf("--gpus-per-node: expected 1..1024, got %d", p->gpus_per_node);
  else if (p->topology != PLAT_TOPO_STAR &&
           (p->nics_per_node < 0 || p->nics_per_node > p->gpus_per_node ||
            (p->nics_per_node > 0 && p->gpus_per_node % p->nics_per_node != 0)))
    msg = g_strdup_printf("--nics-per-node: expected a divisor of %d (the GPUs per node), got %d",
                          p->gpus_per_node, p->nics_per_node);
  else if (p->topology != PLAT_TOPO_STAR && p->nics_per_node == 0 && p->nodes > 1)
    msg = g_strdup_printf("--nics-per-node: 0 leaves %d nodes unconnected (give 1 or more)",
                          p->nodes);
  else if (!p->gpu_model || !*p->gpu_model || strpbrk(p->gpu_model, "<>&\"'"))
    msg = g_strdup("--gpu: expected a model name such as a100-40gb");
  else if (!(p->oversubscription >= 1.0) || !isfinite(p->oversubscription))
    msg = g_strdup_printf("--oversubscription: expected a ratio >= 1, got %g", p->oversubscription);
  else if (p->nodes_per_leaf < 0)
    msg = g_strdup_printf("--nodes-per-leaf: expected >= 0, got %d", p->nodes_per_leaf);
  else if (p->leaves_per_pod < 0)
    msg = g_strdup_printf("--leaves-per-pod: expected >= 1 on a rail or fattree topology, got %d",
                          p->leaves_per_pod);
  else if (p->leaves_per_pod > 0 && p->topology == PLAT_TOPO_STAR)
    msg = g_strdup("--leaves-per-pod: a star has no leaf switches (pods are for the rail and "
                   "fattree topologies)");
  else if (p->leaves_per_pod > 0 && p->topology == PLAT_TOPO_RAIL && p->nics_per_node > 0 &&
           p->leaves_per_pod % p->nics_per_node)
    msg = g_strdup_printf("--leaves-per-pod: a pod holds whole rail groups: expected a multiple "
                          "of the %d rails, got %d", p->nics_per_node, p->leaves_per_pod);
  else if (!(p->pod_oversubscription >= 1.0) || !isfinite(p->pod_oversubscription))
    msg = g_strdup_printf("--pod-oversubscription: expected a ratio >= 1, got %g",
                          p->pod_oversubscription);
  /* the ranges the loader takes (platform.h), so that every file written here loads */
  else if (!(p->speed_flops >= 1 && p->speed_flops <= PLAT_MAX_FLOPS))
    msg = g_strdup_printf("--gpu-speed: expected 1 to 1e24 flop/s, got %g", p->speed_flops);
  else if (!(p->gpu_mem_bytes >= 1 && p->gpu_mem_bytes <= PLAT_MAX_MEM_BYTES))
    msg = g_strdup_printf("--gpu-mem: expected 1 to 1e18 bytes, got %g", p->gpu_mem_bytes);
  else if ((bad = out_of_range(p)) != NULL)
    msg = g_strdup_printf("%s: expected %s", bad, g_str_has_suffix(bad, "-lat")
                          ? "0 to 3600 s" : "1 to 1e18 bytes/s");
  else if (!factor_ok(p->bw_factor) || !factor_ok(p->lat_factor))
    msg = g_strdup_printf("%s: expected \"size:factor;...\" (e.g. 65536:0.9;0:1), got '%s'",
                          factor_ok(p->bw_factor) ? "smpi/lat-factor" : "smpi/bw-factor",
                          factor_ok(p->bw_factor) ? p->lat_factor : p->bw_factor);
  if (msg) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s", msg);
    g_free(msg);
    return FALSE;
  }
  return TRUE;
}

/* The first link written outside what a platform may hold (platform.h), as a message, or NULL:
 * a link derived from the options (a leaf's uplinks: its NICs over the oversubscription; a
 * NIC's latency plus half a switch's) may leave the range the options each keep to. */
typedef struct {
  char *bad;
} link_check;

static void put_link(GString *s, link_check *lc, const char *id, double bps, double lat_s) {
  if (!lc->bad && !(bps >= PLAT_MIN_BPS && bps <= PLAT_MAX_BPS && lat_s >= 0 &&
                    lat_s <= PLAT_MAX_LAT_S))
    lc->bad = g_strdup_printf("link %s would have %g bytes/s and %g s, outside 1 to 1e18 bytes/s "
                              "and 0 to 3600 s (from --nvlink-bw, --nic-bw, --pcie-bw, the "
                              "latencies and the oversubscription ratios)", id, bps, lat_s);
  g_string_append_printf(s, "    <link id=\"%s\" bandwidth=\"", id);
  put_unit(s, bps, out_bw, G_N_ELEMENTS(out_bw));
  g_string_append(s, "\" latency=\"");
  put_unit(s, lat_s, out_time, G_N_ELEMENTS(out_time));
  g_string_append(s, "\" sharing_policy=\"SPLITDUPLEX\"/>\n");
}

static void put_route(GString *s, const char *src, const char *dst, const char *link) {
  g_string_append_printf(s,
                         "    <route src=\"%s\" dst=\"%s\"><link_ctn id=\"%s\" direction=\"UP\"/>"
                         "</route>\n",
                         src, dst, link);
}

/* Name of the leaf that NIC `k` of node `n` is cabled to (rail and fattree topologies). */
static char *leaf_name(const plat_gen_params *p, int npl, int n, int k) {
  if (p->topology == PLAT_TOPO_RAIL) return g_strdup_printf("l%dr%d", n / npl, k);
  return g_strdup_printf("l%d", n / npl);
}

/* The shape of the cluster a parameter set describes. */
typedef struct {
  const plat_gen_params *p;
  int N, G;               /* nodes, GPUs per node */
  gboolean star;          /* every GPU on one switch */
  int K;                  /* NICs per node (0 for a star) */
  int npl, groups;        /* nodes per leaf, and groups of nodes under one set of leaves */
  int leaves_per_group;   /* rail: K; fat tree: 1 */
  gboolean spine;         /* more than one leaf: leaves join at a spine */
  int groups_per_pod;     /* three tiers: node groups under one pod's spine (all when 1 pod) */
  int pods;               /* pods; more than one: their spines join at a core switch */
} layout;

static layout layout_of(const plat_gen_params *p) {
  layout y = {.p = p, .N = p->nodes, .G = p->gpus_per_node,
              .star = p->topology == PLAT_TOPO_STAR};
  y.K = y.star ? 0 : p->nics_per_node;
  y.npl = (p->nodes_per_leaf == 0 || p->nodes_per_leaf > y.N) ? y.N : p->nodes_per_leaf;
  y.groups = (y.N + y.npl - 1) / y.npl;
  y.leaves_per_group = y.K == 0 ? 0 : (p->topology == PLAT_TOPO_RAIL ? y.K : 1);
  y.spine = y.groups * y.leaves_per_group > 1;
  y.groups_per_pod = y.groups;
  if (p->leaves_per_pod > 0 && y.leaves_per_group > 0)
    y.groups_per_pod = MAX(1, p->leaves_per_pod / y.leaves_per_group);
  y.pods = (y.groups + y.groups_per_pod - 1) / y.groups_per_pod;
  return y;
}

/* The XML head, a comment with the parameters, and the network settings. */
static void put_head(GString *s, const layout *y) {
  const plat_gen_params *p = y->p;
  g_string_append(s, "<?xml version='1.0'?>\n"
                     "<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n");
  if (p->comment) g_string_append_printf(s, "<!--\n%s\n-->\n", p->comment);
  g_string_append(s, "<platform version=\"4.1\">\n");
  g_string_append_printf(s,
                         "  <!-- written by dlsim platform: topology=%s nodes=%d gpus-per-node=%d"
                         " gpu=%s",
                         plat_topology_name(p->topology), y->N, y->G, p->gpu_model);
  if (!y->star) {
    g_string_append_printf(s, " nics-per-node=%d", y->K);
    g_string_append(s, " nvlink=");
    put_unit(s, p->nvlink_bps, out_bw, G_N_ELEMENTS(out_bw));
    g_string_append_c(s, '/');
    put_unit(s, p->nvlink_lat_s, out_time, G_N_ELEMENTS(out_time));
  }
  g_string_append(s, " nic=");
  put_unit(s, p->nic_bps, out_bw, G_N_ELEMENTS(out_bw));
  g_string_append_c(s, '/');
  put_unit(s, p->nic_lat_s, out_time, G_N_ELEMENTS(out_time));
  g_string_append(s, " switch=");
  put_unit(s, p->switch_lat_s, out_time, G_N_ELEMENTS(out_time));
  if (y->K > 0 && y->K < y->G) {
    g_string_append(s, " pcie=");
    put_unit(s, p->pcie_bps, out_bw, G_N_ELEMENTS(out_bw));
    g_string_append_c(s, '/');
    put_unit(s, p->pcie_lat_s, out_time, G_N_ELEMENTS(out_time));
  }
  if (y->spine)
    g_string_append_printf(s, " nodes-per-leaf=%d oversubscription=%g", y->npl,
                           p->oversubscription);
  if (y->pods > 1)
    g_string_append_printf(s, " leaves-per-pod=%d pods=%d pod-oversubscription=%g",
                           y->groups_per_pod * y->leaves_per_group, y->pods,
                           p->pod_oversubscription);
  g_string_append(s, " -->\n");
  /* Network settings for NVLink/InfiniBand instead of SMPI's TCP/Stampede defaults; SimGrid
   * 3.32 applies them from here. */
  g_string_append(s, "  <config>\n");
  for (int i = 0; smpi_cfg[i]; i++) {
    const char *colon = strchr(smpi_cfg[i], ':');
    const char *value = colon + 1;
    if (g_str_has_prefix(smpi_cfg[i], "smpi/bw-factor:") && p->bw_factor) value = p->bw_factor;
    if (g_str_has_prefix(smpi_cfg[i], "smpi/lat-factor:") && p->lat_factor) value = p->lat_factor;
    g_string_append_printf(s, "    <prop id=\"%.*s\" value=\"%s\"/>\n",
                           (int)(colon - smpi_cfg[i]), smpi_cfg[i], value);
  }
  g_string_append(s, "  </config>\n");
}

/* Hosts in rank order, then the switches. */
static void put_nodes(GString *s, const layout *y) {
  const plat_gen_params *p = y->p;
  char mem[64];
  g_snprintf(mem, sizeof mem, "%.0f", p->gpu_mem_bytes);
  for (int n = 0; n < y->N; n++)
    for (int g = 0; g < y->G; g++) {
      g_string_append_printf(s, "    <host id=\"n%dg%d\" speed=\"", n, g);
      put_unit(s, p->speed_flops, out_speed, G_N_ELEMENTS(out_speed));
      g_string_append_printf(s,
                             "\">"
                             "<prop id=\"gpu_model\" value=\"%s\"/>"
                             "<prop id=\"gpu_mem_bytes\" value=\"%s\"/>"
                             "<prop id=\"node\" value=\"%d\"/><prop id=\"gpu\" value=\"%d\"/>",
                             p->gpu_model, mem, n, g);
      if (p->cpu_vendor)
        g_string_append_printf(s, "<prop id=\"cpu_vendor\" value=\"%s\"/>", p->cpu_vendor);
      g_string_append(s, "</host>\n");
    }
  if (y->star) {
    g_string_append(s, "    <router id=\"sw\"/>\n");
    return;
  }
  for (int n = 0; n < y->N; n++) {
    g_string_append_printf(s, "    <router id=\"n%d_nvsw\"/>\n", n);
    if (y->K > 0 && y->K < y->G)
      for (int k = 0; k < y->K; k++)
        g_string_append_printf(s, "    <router id=\"n%d_pci%d\"/>\n", n, k);
  }
  for (int gr = 0; gr < y->groups; gr++)
    for (int k = 0; k < y->leaves_per_group; k++) {
      char *l = leaf_name(p, y->npl, gr * y->npl, k);
      g_string_append_printf(s, "    <router id=\"%s\"/>\n", l);
      g_free(l);
    }
  if (y->pods > 1) {
    for (int q = 0; q < y->pods; q++)
      g_string_append_printf(s, "    <router id=\"p%d_spine\"/>\n", q);
    g_string_append(s, "    <router id=\"core\"/>\n");
  } else if (y->spine) {
    g_string_append(s, "    <router id=\"spine\"/>\n");
  }
}

/* The spine switch above node group `gr`: its pod's, or the one spine of two tiers. */
static char *spine_of(const layout *y, int gr) {
  return y->pods > 1 ? g_strdup_printf("p%d_spine", gr / y->groups_per_pod) : g_strdup("spine");
}

/* A link named by `fmt` (one or two integer fields). */
static void put_link_f(GString *s, link_check *lc, double bps, double lat_s, const char *fmt,
                       int a, int b) {
  char *name = g_strdup_printf(fmt, a, b);
  put_link(s, lc, name, bps, lat_s);
  g_free(name);
}

static void put_links(GString *s, link_check *lc, const layout *y) {
  const plat_gen_params *p = y->p;
  const double half_sw = p->switch_lat_s / 2;
  for (int n = 0; n < y->N; n++) {
    if (y->star) {
      for (int g = 0; g < y->G; g++)
        put_link_f(s, lc, p->nic_bps, p->nic_lat_s + half_sw, "n%dg%d_link", n, g);
      continue;
    }
    for (int g = 0; g < y->G; g++)
      put_link_f(s, lc, p->nvlink_bps, p->nvlink_lat_s, "n%dg%d_nvl", n, g);
    if (y->K == y->G && p->topology == PLAT_TOPO_FATTREE) {
      for (int g = 0; g < y->G; g++) {
        put_link_f(s, lc, p->nic_bps, p->nic_lat_s, "n%dg%d_nic", n, g);
        put_link_f(s, lc, p->nic_bps, half_sw, "n%dg%d_port", n, g);
      }
    } else if (y->K == y->G) {
      for (int g = 0; g < y->G; g++)
        put_link_f(s, lc, p->nic_bps, p->nic_lat_s + half_sw, "n%dg%d_nic", n, g);
    } else if (y->K > 0) {
      for (int g = 0; g < y->G; g++)
        put_link_f(s, lc, p->pcie_bps, p->pcie_lat_s, "n%dg%d_pci", n, g);
      for (int k = 0; k < y->K; k++)
        put_link_f(s, lc, p->nic_bps, p->nic_lat_s + half_sw, "n%d_nic%d", n, k);
    }
  }
  /* A leaf's downlinks carry nodes × (NICs it serves per node) × NIC bandwidth; its uplink
   * bundle carries that total divided by the oversubscription ratio. */
  const int nics_per_leaf_per_node = p->topology == PLAT_TOPO_RAIL ? 1 : y->K;
  if (!y->spine) return;
  double pod_bps = 0;
  for (int gr = 0; gr < y->groups; gr++) {
    int nodes_here = MIN(y->npl, y->N - gr * y->npl);
    double up_bps = nodes_here * nics_per_leaf_per_node * p->nic_bps / p->oversubscription;
    for (int k = 0; k < y->leaves_per_group; k++) {
      char *l = leaf_name(p, y->npl, gr * y->npl, k);
      char *a = g_strdup_printf("%s_up", l);
      put_link(s, lc, a, up_bps, p->switch_lat_s);
      g_free(a);
      g_free(l);
    }
    /* a pod's uplink bundle to the core: its leaves' uplinks over the pod's ratio */
    pod_bps += up_bps * y->leaves_per_group;
    if (y->pods > 1 && (gr % y->groups_per_pod == y->groups_per_pod - 1 || gr == y->groups - 1)) {
      put_link_f(s, lc, pod_bps / p->pod_oversubscription, p->switch_lat_s, "p%d_up",
                 gr / y->groups_per_pod, 0);
      pod_bps = 0;
    }
  }
}

/* Routes: per node, NVLink first (see the file comment), then the NIC side, then the leaves'
 * uplinks. `src` and `link` are formats of (node, index). */
static void put_route_f(GString *s, const char *src, const char *dst, const char *link, int n,
                        int i) {
  char *a = g_strdup_printf(src, n, i), *b = g_strdup_printf(link, n, i);
  put_route(s, a, dst, b);
  g_free(a);
  g_free(b);
}

static void put_routes(GString *s, const layout *y) {
  const plat_gen_params *p = y->p;
  for (int n = 0; n < y->N; n++) {
    if (y->star) {
      for (int g = 0; g < y->G; g++) put_route_f(s, "n%dg%d", "sw", "n%dg%d_link", n, g);
      continue;
    }
    char *nvsw = g_strdup_printf("n%d_nvsw", n);
    for (int g = 0; g < y->G; g++) put_route_f(s, "n%dg%d", nvsw, "n%dg%d_nvl", n, g);
    g_free(nvsw);
    if (y->K == y->G) {
      const gboolean port = p->topology == PLAT_TOPO_FATTREE;
      for (int g = 0; g < y->G; g++) {
        char *l = leaf_name(p, y->npl, n, g);
        char *a = g_strdup_printf("n%dg%d", n, g), *nic = g_strdup_printf("n%dg%d_nic", n, g),
             *pt = g_strdup_printf("n%dg%d_port", n, g);
        g_string_append_printf(s,
                               "    <route src=\"%s\" dst=\"%s\"><link_ctn id=\"%s\" "
                               "direction=\"UP\"/>",
                               a, l, nic);
        if (port) g_string_append_printf(s, "<link_ctn id=\"%s\" direction=\"UP\"/>", pt);
        g_string_append(s, "</route>\n");
        g_free(a);
        g_free(nic);
        g_free(pt);
        g_free(l);
      }
    } else if (y->K > 0) {
      for (int g = 0; g < y->G; g++) {
        char *l = g_strdup_printf("n%d_pci%d", n, g / (y->G / y->K));
        put_route_f(s, "n%dg%d", l, "n%dg%d_pci", n, g);
        g_free(l);
      }
      for (int k = 0; k < y->K; k++) {
        char *l = leaf_name(p, y->npl, n, k);
        put_route_f(s, "n%d_pci%d", l, "n%d_nic%d", n, k);
        g_free(l);
      }
    }
  }
  if (!y->spine) return;
  for (int gr = 0; gr < y->groups; gr++)
    for (int k = 0; k < y->leaves_per_group; k++) {
      char *l = leaf_name(p, y->npl, gr * y->npl, k);
      char *a = g_strdup_printf("%s_up", l), *sp = spine_of(y, gr);
      put_route(s, l, sp, a);
      g_free(sp);
      g_free(a);
      g_free(l);
    }
  for (int q = 0; y->pods > 1 && q < y->pods; q++) {
    char *sp = g_strdup_printf("p%d_spine", q), *a = g_strdup_printf("p%d_up", q);
    put_route(s, sp, "core", a);
    g_free(sp);
    g_free(a);
  }
}

char *plat_generate_xml(const plat_gen_params *p, GError **err) {
  if (!check_params(p, err)) return NULL;
  const layout y = layout_of(p);
  GString *s = g_string_sized_new(4096 + (gsize)y.N * y.G * 600);
  put_head(s, &y);
  g_string_append(s, "  <zone id=\"dlsim\" routing=\"DijkstraCache\">\n");
  put_nodes(s, &y);
  link_check lc = {NULL};
  put_links(s, &lc, &y);
  if (lc.bad) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s", lc.bad);
    g_free(lc.bad);
    g_string_free(s, TRUE);
    return NULL;
  }
  put_routes(s, &y);
  g_string_append(s, "  </zone>\n</platform>\n");
  return g_string_free(s, FALSE);
}
