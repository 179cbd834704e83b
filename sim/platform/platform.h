/* platform.h — cluster platforms: writing SimGrid platform files and reading them back.
 *
 * A dlsim platform is a SimGrid XML file (DTD 4.1) with one zone routed by `DijkstraCache`
 * (an explicit graph: a <cluster> cannot express NVSwitch plus a NIC per GPU): one host per GPU named `n<node>g<gpu>`, an NVSwitch
 * router per node, NIC links to leaf switches, leaf-to-spine links. Hosts appear in rank order.
 * The generator (platform_gen.c) writes such files; the reader (platform.c) loads them with GLib's
 * GMarkup and answers route questions for the closed-form model without running SimGrid: the
 * route between two hosts is the one SimGrid's DijkstraCache zone picks (fewest links; ties go to
 * the predecessor with the lowest graph index, where graph indices follow the first appearance of
 * each host or router in the <route> elements), so latency and bottleneck agree with SMPI.
 *
 * Units: seconds (_s), bytes per second (_bps), FLOP per second (_flops), bytes (_bytes).
 * Generated files carry the network settings in their <config> section (TCP-gamma 0, no
 * cross-traffic, weight-S 0, SMPI bandwidth and latency factors 1), so `smpirun -platform F` needs
 * no --cfg for the network; SimGrid 3.32 honours these items there (measured with a ping-pong).
 */
#ifndef DL_PLATFORM_H
#define DL_PLATFORM_H

#include <glib.h>

/* ---- topologies ------------------------------------------------------------------------------ */

/* X(enum, printable name, description) */
#define PLAT_TOPOLOGY_LIST(X)                                                                    \
  X(PLAT_TOPO_RAIL, "rail", "rail-optimised: NIC k of every node on leaf k, leaves to spines")   \
  X(PLAT_TOPO_FATTREE, "fattree", "two-level fat tree: all NICs of a node on its group's leaf")  \
  X(PLAT_TOPO_STAR, "star", "every GPU on one switch by its own link (contention-free)")

typedef enum {
#define PLAT_X(e, name, desc) e,
  PLAT_TOPOLOGY_LIST(PLAT_X)
#undef PLAT_X
  PLAT_TOPO_COUNT
} plat_topology;

/* Printable name of a topology ("rail"...); "?" when out of range. */
const char *plat_topology_name(plat_topology t);
/* Parses a printable name; FALSE when unknown. */
gboolean plat_topology_parse(const char *name, plat_topology *out);

/* ---- generator ------------------------------------------------------------------------------- */

typedef struct {
  int nodes;               /* number of nodes (>= 1) */
  int gpus_per_node;       /* G: GPUs per node, one SimGrid host each (>= 1) */
  const char *gpu_model;   /* host property gpu_model, e.g. "a100-40gb" (borrowed) */
  double gpu_mem_bytes;    /* host property gpu_mem_bytes: device memory per GPU, bytes */
  double speed_flops;      /* host speed, FLOP/s (peak dense half-precision tensor rate) */
  double nvlink_bps;       /* bandwidth of one GPU-NVSwitch link, per direction, bytes/s */
  double nvlink_lat_s;     /* latency of one GPU-NVSwitch link, s (GPU to GPU = 2 links) */
  int nics_per_node;       /* K: G (a NIC per GPU), G/2 (per GPU pair) or another divisor of G;
                              0 only for a single node */
  double nic_bps;          /* bandwidth of one NIC link, per direction, bytes/s */
  double nic_lat_s;        /* latency of one NIC end (NIC + cable), s */
  double pcie_bps;         /* GPU-PCIe-switch link bandwidth when K < G (GPUs share a NIC), B/s */
  double pcie_lat_s;       /* latency of that link, s */
  double switch_lat_s;     /* latency through one leaf or spine switch, s: half of it is put on
                              each link that ends at a switch */
  plat_topology topology;  /* how NICs, leaves and spines connect */
  double oversubscription; /* R >= 1: a leaf's uplink bandwidth = its downlink total / R */
  int nodes_per_leaf;      /* nodes under one leaf (rail: one leaf per rail per group); 0 = all */
  int spines;              /* spine switches; 0 = as many as leaves in one group (rails or 1) */
  const char *comment;     /* text for an XML comment at the top of the file, or NULL */
  const char *bw_factor;   /* SMPI's smpi/bw-factor for <config> ("size:factor;...", as
                              SimGrid parses it; borrowed), or NULL for "0:1" (no correction) */
  const char *lat_factor;  /* smpi/lat-factor likewise, or NULL for "0:1" */
} plat_gen_params;

/* Fills `p` with the dgx-a100 preset for `p->nodes = 1` (every field set). */
void plat_gen_defaults(plat_gen_params *p);

/* Sets every field of `p` from a named preset: "thetagpu" (24 DGX A100, 8 A100-40GB each),
 * "dgx-a100" (one DGX A100 node; change nodes), "workstation" (one machine, 2 GPUs on PCIe),
 * "star" (8 GPUs on one switch). FALSE with DL_ERR_INPUT listing the presets when unknown. */
gboolean plat_gen_preset(const char *name, plat_gen_params *p, GError **err);

/* Names of the presets, NULL-terminated, static. */
const char *const *plat_gen_preset_names(void);

/* Known GPU models: sets memory (bytes) and peak speed (FLOP/s) for `model`; FALSE if unknown. */
gboolean plat_gpu_spec(const char *model, double *mem_bytes, double *speed_flops);

/* Writes the platform described by `p` as SimGrid XML. Returns newly allocated text (g_free) or
 * NULL with DL_ERR_INPUT naming the bad parameter (e.g. "--nics-per-node: expected a divisor of
 * 8, got 3"). The output depends on `p` only: same parameters, same bytes. */
char *plat_generate_xml(const plat_gen_params *p, GError **err);

/* The network settings that generated files carry in <config>, as "key:value" strings for
 * `--cfg=`, NULL-terminated, static. Needed only for platforms written by hand. */
const char *const *plat_smpi_cfg(void);

/* Unit parsers shared by the generator's options and the reader (SimGrid's spelling):
 * bandwidth "25GBps", "200Gbps", "1.5TBps", "10KiBps", a bare number = bytes/s;
 * time "1us", "130ns", "0.5ms", "2s", a bare number = seconds;
 * speed "312Tf", "19.5Gf", a bare number = FLOP/s. FALSE (no error) when not parsable. */
gboolean plat_parse_bandwidth(const char *text, double *bps);
gboolean plat_parse_time(const char *text, double *s);
gboolean plat_parse_speed(const char *text, double *flops);

/* ---- reader ---------------------------------------------------------------------------------- */

typedef struct {
  const char *id;       /* host name, e.g. "n3g5" (owned by the plat) */
  int node;             /* node index (property "node"; the host's index if absent) */
  int gpu;              /* GPU index within its node (property "gpu"; 0 if absent) */
  double speed_flops;   /* host speed, FLOP/s (first pstate) */
  const char *gpu_model;/* property "gpu_model", or "" (owned by the plat) */
  double gpu_mem_bytes; /* property "gpu_mem_bytes", or 0 */
} plat_host;

typedef struct {
  double latency_s;      /* sum of the latencies of the route's links, s */
  double bottleneck_bps; /* smallest link bandwidth on the route, bytes/s (INFINITY for 0 links) */
  int n_links;           /* links on the route (0 from a host to itself) */
} plat_route_info;

/* A piecewise factor of SimGrid's network model (smpi/bw-factor, smpi/lat-factor; factor.c). */
typedef struct {
  int n;          /* pairs */
  double *pairs;  /* threshold (bytes), value; ascending thresholds (owned) */
} plat_factor;

/* Parses "SIZE:VALUE;..." as SimGrid does; FALSE (f cleared) when it is not such a list. */
gboolean plat_factor_parse(const char *spec, plat_factor *f);
/* The factor a message of `size` bytes gets: the value of the largest threshold below `size`,
 * 1 below every threshold and for f == NULL. */
double plat_factor_at(const plat_factor *f, double size);
/* One message of `bytes` on a route of `latency_s` and `bps` as SimGrid times it: *lat_s =
 * latency × lat(bytes), *xfer_s = bytes / (bandwidth × bw(bytes)). NULL factors are 1. */
void plat_msg_times(const plat_factor *lat, const plat_factor *bw, double latency_s, double bps,
                    double bytes, double *lat_s, double *xfer_s);
void plat_factor_clear(plat_factor *f);

typedef struct plat plat;

/* Loads a platform by name (under <datadir>/platforms/, ".xml" added), by path, or as
 * "PRESET:NODES" (a preset of plat_gen_preset with that many nodes, e.g. "thetagpu:128", written
 * to <user cache dir>/dlsim/platforms/ so that smpirun reads the same file). Returns a new plat
 * (plat_free) or NULL with DL_ERR_INPUT: unreadable file, malformed XML ("FILE: Error on line
 * N ..."), constructs the closed form cannot route ("FILE:N: <cluster> ..."), a host without
 * any route. */
plat *plat_load(const char *name_or_path, GError **err);

/* Same, from XML text; `path` names the text in messages. */
plat *plat_load_xml(const char *path, const char *xml, gsize len, GError **err);

void plat_free(plat *pl);
/* Those of plat_smpi_cfg() that platform `pl`'s <config> leaves unset: dlsim's defaults where
 * the file is silent, never over it (the file's settings, e.g. fitted by `dlsim platform
 * --calibrate`, win). Appended to `out` as newly allocated strings. */
void plat_smpi_cfg_defaults(const plat *pl, GPtrArray *out);
/* The value of SimGrid setting `key` in the file's <config> section, or NULL (borrowed). */
const char *plat_config(const plat *pl, const char *key);
/* The file's smpi/bw-factor and smpi/lat-factor (SimGrid multiplies a message's bandwidth and
 * latency by them), or NULL where the file sets none or a constant 1 (borrowed). */
const plat_factor *plat_bw_factor(const plat *pl);
const plat_factor *plat_lat_factor(const plat *pl);

/* Path the platform was loaded from (borrowed). */
const char *plat_path(const plat *pl);

/* Hosts in document order, which is rank order under smpirun without a hostfile. */
int plat_n_hosts(const plat *pl);
/* Host `i` (0 <= i < plat_n_hosts), borrowed; NULL when out of range. */
const plat_host *plat_host_at(const plat *pl, int i);
/* Index of the host named `id`, or -1. */
int plat_host_index(const plat *pl, const char *id);
/* GPUs per node: the largest number of hosts sharing a node index. */
int plat_gpus_per_node(const plat *pl);

/* The route SimGrid takes from host `src_host` to host `dst_host` (indices as plat_host_at).
 * FALSE with DL_ERR_INPUT if an index is out of range or no route joins them. Results of the
 * shortest-path search are cached per source inside `pl`: not safe to call from two threads.
 * On a cluster written by `dlsim platform` (its comment says so and its hosts are its
 * n<node>g<gpu> in order), a route depends only on whether the ends share a node or a leaf
 * group and on their GPU indices (tests/unit/test_platform.c holds the generator to that), so
 * each such class is searched once, from node 0. */
gboolean plat_route(const plat *pl, int src_host, int dst_host, plat_route_info *out,
                    GError **err);

/* On a generated cluster (see plat_route): the route class of hosts a and b, two pairs of one
 * class having the same route figures; FALSE on any other platform. */
gboolean plat_route_class(const plat *pl, int a, int b, gint64 *key);

#endif
