/* gpuspec.c — spec sheets and the roofline estimate. Figures are dense (no 2:4 sparsity). */
#include "core/gpuspec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* sm_ghz: the NVIDIA A100 Tensor Core GPU Architecture whitepaper (2020): 108 SMs, boost clock
 * 1410 MHz; H100 SXM5 and H200: 132 SMs and a 1980 MHz maximum SM clock, as nvidia-smi and
 * PyTorch reported them on the H100 80GB HBM3 and the H200 that measured kernels/db/ (132 SMs
 * for the SXM5 H100 in NVIDIA's H100 whitepaper too). */
/* Power. Board power: the datasheets' maximum (A100 SXM4 400 W; H100 SXM5 and H200 SXM up to
 * 700 W; B200 in HGX B200 up to 1,000 W; the Blackwell GPU of GB200 NVL72 1,200 W, NVIDIA's
 * figure for liquid-cooled Blackwell). Idle: nvidia-smi at 0 % utilisation, A100-SXM4-40GB
 * 52-54 W (a published nvidia-smi log of such a board) and H200 80.3 W (a measured H200 idle in
 * a public GPU energy benchmark); the H100 SXM5 shares the H200's board and is taken at 80 W;
 * no idle figure is published for Blackwell: 80 W scaled by board power. Reference systems: DGX
 * A100 6.5 kW, DGX H100 and DGX H200 10.2 kW, DGX B200 14.3 kW (their user guides, power
 * specifications), 8 GPUs and 8 compute NICs each; GB200 NVL72 about 120 kW per 72 GPUs and 72
 * NICs (NVIDIA's rack figure as reported). The projection takes the host as what that rating
 * leaves beside the GPUs and NICs, at the share a measured DGX H100 draws (study/projection.h). */
#define PW_A100 400, 53, 6500, 8, 8
#define PW_HOPPER 700, 80, 10200, 8, 8
#define PW_B200 1000, 80 * 1000 / 700.0, 14300, 8, 8
#define PW_GB200 1200, 80 * 1200 / 700.0, 120000, 72, 72
static const gpu_spec specs[] = {
    /* NVIDIA A100 Tensor Core GPU datasheet (2020/2021): FP32 19.5 TF, TF32 156 TF, FP16/BF16
     * 312 TF; 40 GB HBM2 at 1,555 GB/s (SXM4 40GB), 80 GB HBM2e at 2,039 GB/s (SXM4 80GB). */
    {"a100-40gb", "NVIDIA A100-SXM4-40GB", {19.5e12, 156e12, 312e12, 312e12}, 1555e9, 40e9,
     "NVIDIA A100 datasheet: FP32 19.5, TF32 156, FP16/BF16 312 TFLOP/s dense; 1555 GB/s", 80,
     108 * 1.41, PW_A100},
    {"a100-80gb", "NVIDIA A100-SXM4-80GB", {19.5e12, 156e12, 312e12, 312e12}, 2039e9, 80e9,
     "NVIDIA A100 datasheet: FP32 19.5, TF32 156, FP16/BF16 312 TFLOP/s dense; 2039 GB/s", 80,
     108 * 1.41, PW_A100},
    /* NVIDIA H100 datasheet (SXM5): FP32 67 TF, TF32 494.7 TF, FP16/BF16 989.4 TF dense;
     * 80 GB HBM3 at 3.35 TB/s. */
    {"h100-sxm", "NVIDIA H100-SXM5-80GB", {67e12, 494.7e12, 989.4e12, 989.4e12}, 3350e9, 80e9,
     "NVIDIA H100 datasheet (SXM5): FP32 67, TF32 495, FP16/BF16 989 TFLOP/s dense; 3.35 TB/s", 90,
     132 * 1.98, PW_HOPPER},
    /* NVIDIA H200 datasheet (SXM): same compute as H100 SXM; 141 GB HBM3e at 4.8 TB/s. */
    {"h200", "NVIDIA H200-SXM-141GB", {67e12, 494.7e12, 989.4e12, 989.4e12}, 4800e9, 141e9,
     "NVIDIA H200 datasheet: FP32 67, TF32 495, FP16/BF16 989 TFLOP/s dense; 4.8 TB/s", 90,
     132 * 1.98, PW_HOPPER},
    /* NVIDIA HGX B200 specifications (nvidia.com/data-center/hgx, 8 GPUs): FP32 600 TF, TF32
     * 18 PF and FP16/BF16 36 PF with 2:4 sparsity, i.e. per GPU 75 TF, 1.125 PF and 2.25 PF
     * dense; NVIDIA DGX B200 User Guide: 1,440 GB of HBM3e in 8 GPUs (180 GB each), 64 TB/s
     * (8 TB/s each); compute capability 10.0 (NVIDIA's CUDA GPUs list). NVIDIA publishes no SM
     * count or clock: 148 SMs at 1.98 GHz as deviceQuery reports them in Chips and Cheese's B200
     * article (2025). */
    {"b200", "NVIDIA B200 (HGX/DGX B200)", {75e12, 1125e12, 2250e12, 2250e12}, 8000e9, 180e9,
     "NVIDIA HGX B200 specifications (sparse figures halved): FP32 75, TF32 1125, FP16/BF16 2250 "
     "TFLOP/s dense per GPU; DGX B200 User Guide: 180 GB, 8 TB/s per GPU",
     100, 148 * 1.98, PW_B200},
    /* NVIDIA GB200 NVL72 specifications (nvidia.com/data-center/gb200-nvl72, per GPU): FP32
     * 80 TF; TF32 2.5 PF and FP16/BF16 5 PF with sparsity (1.25 and 2.5 PF dense); 186 GB of
     * HBM3e at 8 TB/s. SM count and clock as for b200 (the same die; not published). */
    {"gb200", "NVIDIA GB200 (Blackwell GPU of a GB200 NVL72)", {80e12, 1250e12, 2500e12, 2500e12},
     8000e9, 186e9,
     "NVIDIA GB200 NVL72 specifications (sparse figures halved): FP32 80, TF32 1250, FP16/BF16 "
     "2500 TFLOP/s dense per GPU; 186 GB, 8 TB/s per GPU",
     100, 148 * 1.98, PW_GB200},
};

static const gpu_spec *const all[] = {&specs[0], &specs[1], &specs[2], &specs[3],
                                      &specs[4], &specs[5], NULL};

/* The local CPU, read from /proc/cpuinfo and /proc/meminfo at run time. Peak FP32 assumes AVX2
 * with two 256-bit FMA units per core: 2 units x 8 lanes x 2 FLOP = 32 FLOP/cycle/core (Intel
 * optimisation manual, Haswell and later; AMD Zen 2 and later), times the clock cpuinfo reports
 * and the online cores. The CPU has no tensor cores: every precision gets the FP32 peak. Memory
 * bandwidth is an assumption, not a measurement: 10 GB/s per core, capped at 100 GB/s (a
 * virtual machine's share of DDR4; kernels/README.md). */
#define GPU_CPU_FLOP_PER_CYCLE 32.0
#define GPU_CPU_BW_PER_CORE 10e9
static gpu_spec cpu_spec;
static char cpu_full_name[160];
static char cpu_source[400];

static gpointer cpu_spec_init(gpointer unused) {
  (void)unused;
  double mhz = 0;
  long cores = g_get_num_processors();
  char model[128] = "unknown CPU";
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (f) {
    char line[512];
    while (fgets(line, sizeof line, f)) {
      char *colon = strchr(line, ':');
      if (!colon) continue;
      if (g_str_has_prefix(line, "model name") && strcmp(model, "unknown CPU") == 0) {
        g_strlcpy(model, g_strstrip(colon + 1), sizeof model);
      } else if (g_str_has_prefix(line, "cpu MHz") && mhz == 0) {
        mhz = g_ascii_strtod(colon + 1, NULL);
      }
    }
    fclose(f);
  }
  if (mhz <= 0) mhz = 2000; /* cpuinfo without a clock: assume 2 GHz */
  double mem = 0;
  f = fopen("/proc/meminfo", "r");
  if (f) {
    char line[256];
    while (fgets(line, sizeof line, f))
      if (g_str_has_prefix(line, "MemTotal:")) mem = g_ascii_strtod(line + 9, NULL) * 1024;
    fclose(f);
  }
  double peak = GPU_CPU_FLOP_PER_CYCLE * mhz * 1e6 * cores;
  double bw = GPU_CPU_BW_PER_CORE * cores;
  if (bw > 100e9) bw = 100e9;
  g_snprintf(cpu_full_name, sizeof cpu_full_name, "%s (%ld cores)", model, cores);
  g_snprintf(cpu_source, sizeof cpu_source,
             "/proc/cpuinfo: %ld cores at %.0f MHz; assumed AVX2 FMA 32 FP32 FLOP/cycle/core "
             "(= %.1f GFLOP/s), assumed 10 GB/s memory bandwidth per core", cores, mhz,
             peak / 1e9);
  cpu_spec.name = "cpu";
  cpu_spec.full_name = cpu_full_name;
  for (int i = 0; i < GPU_N_PRECISIONS; i++) cpu_spec.peak_flops[i] = peak;
  cpu_spec.mem_bw_bps = bw;
  cpu_spec.mem_bytes = mem > 0 ? mem : 8e9;
  cpu_spec.source = cpu_source;
  cpu_spec.sm_ghz = (double)cores * mhz / 1000.0;
  return NULL;
}

const gpu_spec *gpu_local_cpu(void) {
  static GOnce once = G_ONCE_INIT;
  g_once(&once, cpu_spec_init, NULL);
  return &cpu_spec;
}

const gpu_spec *gpu_find(const char *name) {
  if (!name) return NULL;
  if (g_ascii_strcasecmp(name, "cpu") == 0) return gpu_local_cpu();
  for (size_t i = 0; i < G_N_ELEMENTS(specs); i++)
    if (g_ascii_strcasecmp(name, specs[i].name) == 0) return &specs[i];
  return NULL;
}

const gpu_spec *const *gpu_all(void) { return all; }

char *gpu_known_names(void) {
  GString *g = g_string_new(NULL);
  for (const gpu_spec *const *s = all; *s; s++) g_string_append_printf(g, "%s, ", (*s)->name);
  g_string_append(g, "cpu");
  return g_string_free(g, FALSE);
}

static gboolean has(const char *lower, const char *what) { return strstr(lower, what) != NULL; }

const gpu_spec *gpu_for_device_name(const char *name, double mem_bytes) {
  if (!name) return NULL;
  char *n = g_ascii_strdown(name, -1);
  const char *key = NULL;
  /* other boards of the same chip run at other clocks and power: no sheet here */
  if (has(n, "gb200")) key = "gb200";
  else if (has(n, "pcie") || has(n, "nvl") || has(n, "gh200") || has(n, "gh100")) key = NULL;
  else if (has(n, "b200")) key = "b200";
  else if (has(n, "h200")) key = "h200";
  else if (has(n, "h100") && (has(n, "hbm3") || has(n, "sxm"))) key = "h100-sxm";
  else if (has(n, "a100") && has(n, "sxm4")) {
    gboolean big = mem_bytes > 0 ? mem_bytes > 60e9 : has(n, "80gb");
    key = big ? "a100-80gb" : "a100-40gb";
  }
  g_free(n);
  return key ? gpu_find(key) : NULL;
}

static const struct { const char *name; int bytes; } prec[] = {
#define X(e, s, b) {s, b},
    GPU_PRECISIONS(X)
#undef X
};

const char *gpu_precision_name(gpu_precision p) { return prec[p].name; }
int gpu_precision_bytes(gpu_precision p) { return prec[p].bytes; }

gboolean gpu_precision_parse(const char *text, gpu_precision *out) {
  for (int i = 0; i < GPU_N_PRECISIONS; i++)
    if (text && strcmp(text, prec[i].name) == 0) {
      *out = (gpu_precision)i;
      return TRUE;
    }
  return FALSE;
}

double gpu_roofline_s(const gpu_spec *s, gpu_precision p, gboolean gemm_like, double flops,
                     double bytes) {
  double peak = gemm_like ? s->peak_flops[p] : s->peak_flops[GPU_FP32];
  double tc = flops / (peak * GPU_EFF_COMPUTE);
  double tm = bytes / (s->mem_bw_bps * GPU_EFF_MEMORY);
  return (tc > tm ? tc : tm) + GPU_LAUNCH_S;
}
