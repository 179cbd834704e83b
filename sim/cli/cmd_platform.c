/* cmd_platform.c — `dlsim platform`: write a SimGrid platform file for DGX-like clusters. */
#include "platform/calibrate.h"
#include "cli/cmds.h"
#include "cli/options.h"
#include "core/dl_common.h"
#include "core/gpuspec.h"
#include "platform/platform.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Parses option `opt`'s text with `parse` into *out when given; FALSE with a message if bad. */
static gboolean opt_value(const char *opt, const char *text,
                          gboolean (*parse)(const char *, double *), const char *example,
                          double *out, GError **err) {
  if (!text) return TRUE;
  if (!parse(text, out)) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: expected e.g. %s, got '%s'", opt, example, text);
    return FALSE;
  }
  return TRUE;
}

static gboolean parse_ratio(const char *text, double *out) {
  char *end = NULL;
  *out = g_ascii_strtod(text, &end);
  return end != text && *end == '\0';
}

/* `--calibrate`: measure (or read `pingpong_file`), fit, print the table, write the platform.
 * The table goes to stdout when the XML goes to a file, else to stderr. */
static gboolean calibrate_platform(int ranks, gboolean quick, const char *pingpong_file,
                                   const char *out, GError **err) {
  char *text = NULL, *bwf = NULL, *latf = NULL, *comment = NULL, *xml = NULL;
  GArray *pts = g_array_new(FALSE, FALSE, sizeof(calib_point));
  gboolean ok = FALSE;
  calib_fit f;
  if (ranks < 2 || ranks > 1024) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--ranks: expected 2..1024, got %d", ranks);
    goto out;
  }
  if (pingpong_file) {
    text = dl_read_file(pingpong_file, NULL, err);
  } else {
    fprintf(stderr, "dlsim: calibrating: MPI ping-pong between 2 ranks%s...\n",
            quick ? " (quick)" : "");
    text = calib_run_pingpong(quick, err);
  }
  if (!text) goto out;
  if (!calib_parse_pingpong(pingpong_file ? pingpong_file : "dlsim-pingpong", text, pts, err) ||
      !calib_fit_points((calib_point *)pts->data, (int)pts->len, 0, &f, err))
    goto out;
  bwf = calib_factor_string(&f, TRUE);
  latf = calib_factor_string(&f, FALSE);
  char host[256] = "this machine";
  gethostname(host, sizeof host - 1);
  GString *c = g_string_new(NULL);
  g_string_append_printf(c,
      "Calibrated by dlsim platform (calibrate%s) on %s (%s, %d cores online):\n"
      "MPI ping-pong between 2 ranks (kernels/calib_pingpong.c), median of the repeats per size.\n"
      "Fit of SMPI's model t(s) = lat_factor(s) L + s / (bw_factor(s) B) (sim/calibrate.h):\n"
      "  L = %.4g us, B = %.4g GB/s; each of the 2 links of a host-to-host route has L/2, B.\n"
      "  smpi/bw-factor %s\n  smpi/lat-factor %s\n"
      "Each host is one rank whose \"GPU\" is the local CPU (gpu_model cpu, sim/gpuspec.c).\n"
      "Measured one-way times (size bytes: us):",
      quick ? ", quick" : "", host, gpu_local_cpu()->full_name, (int)g_get_num_processors(),
      f.latency_s * 1e6, f.bandwidth_bps / 1e9, bwf, latf);
  for (guint i = 0; i < pts->len; i++) {
    const calib_point *p = &g_array_index(pts, calib_point, i);
    g_string_append_printf(c, "%s%.0f: %.3f", i % 6 ? ", " : "\n  ", p->size_bytes,
                           p->time_s * 1e6);
  }
  comment = g_string_free(c, FALSE);
  /* "--" may not appear inside an XML comment */
  for (char *q = strstr(comment, "--"); q; q = strstr(q, "--")) q[1] = ' ';
  plat_gen_params p;
  calib_platform_params(&f, ranks, bwf, latf, comment, &p);
  xml = plat_generate_xml(&p, err);
  if (!xml) goto out;
  FILE *tab = out ? stdout : stderr;
  calib_print_table(&f, (calib_point *)pts->data, (int)pts->len, tab);
  fprintf(tab, "smpi/bw-factor %s\nsmpi/lat-factor %s\n", bwf, latf);
  if (out) {
    if (!dl_write_file_atomic(out, xml, strlen(xml), err)) goto out;
    fprintf(tab, "platform with %d hosts written to %s\n", ranks, out);
  } else {
    fputs(xml, stdout);
  }
  fflush(stdout);
  ok = TRUE;
out:
  g_array_free(pts, TRUE);
  g_free(text);
  g_free(bwf);
  g_free(latf);
  g_free(comment);
  g_free(xml);
  return ok;
}

int cmd_platform(int argc, char **argv) {
  char *preset = NULL, *gpu = NULL, *gpu_mem = NULL, *gpu_speed = NULL, *nvlink_bw = NULL,
       *nvlink_lat = NULL, *nic_bw = NULL, *nic_lat = NULL, *switch_lat = NULL, *pcie_bw = NULL,
       *pcie_lat = NULL, *topology = NULL, *oversub = NULL, *pod_oversub = NULL, *out = NULL;
  /* INT_MIN: not given (a negative count given is refused, not taken for the default) */
  int nodes = INT_MIN, gpus = INT_MIN, nics = INT_MIN, npl = INT_MIN, lpp = INT_MIN, ranks = 2;
  gboolean calibrate = FALSE, quick = FALSE;
  char *pingpong = NULL;
  int status = 2;
  char *xml = NULL;
  GError *err = NULL;
  GOptionEntry entries[] = {
      {"preset", 0, 0, G_OPTION_ARG_STRING, &preset,
       "Start from a preset: thetagpu, dgx-a100 (default), dgx-h100, dgx-h200, dgx-b200, "
       "gb200-nvl72 (a node is one 72-GPU rack), workstation, star", "NAME"},
      {"nodes", 0, 0, G_OPTION_ARG_INT, &nodes, "Number of nodes", "N"},
      {"gpus-per-node", 0, 0, G_OPTION_ARG_INT, &gpus, "GPUs per node (one host each)", "G"},
      {"gpu", 0, 0, G_OPTION_ARG_STRING, &gpu,
       "GPU model with a spec sheet (e.g. a100-40gb), or another name with --gpu-mem and "
       "--gpu-speed (a SimGrid platform that dlsim's runs refuse: they need a spec sheet)",
       "MODEL"},
      {"gpu-mem", 0, 0, G_OPTION_ARG_STRING, &gpu_mem, "GPU memory (e.g. 40GiB)", "BYTES"},
      {"gpu-speed", 0, 0, G_OPTION_ARG_STRING, &gpu_speed, "Host speed (e.g. 312Tf)", "FLOPS"},
      {"nvlink-bw", 0, 0, G_OPTION_ARG_STRING, &nvlink_bw,
       "GPU-NVSwitch bandwidth per direction (default 300GBps)", "BW"},
      {"nvlink-lat", 0, 0, G_OPTION_ARG_STRING, &nvlink_lat,
       "GPU-NVSwitch link latency (default 1us; GPU to GPU is twice this)", "TIME"},
      {"nics-per-node", 0, 0, G_OPTION_ARG_INT, &nics,
       "NICs per node: G (one per GPU), G/2 (one per GPU pair) or another divisor of G", "K"},
      {"nic-bw", 0, 0, G_OPTION_ARG_STRING, &nic_bw, "NIC bandwidth per direction (default 25GBps)",
       "BW"},
      {"nic-lat", 0, 0, G_OPTION_ARG_STRING, &nic_lat, "Latency of one NIC end (default 1us)",
       "TIME"},
      {"pcie-bw", 0, 0, G_OPTION_ARG_STRING, &pcie_bw,
       "GPU-PCIe switch bandwidth when GPUs share a NIC (default 25GBps)", "BW"},
      {"pcie-lat", 0, 0, G_OPTION_ARG_STRING, &pcie_lat, "Its latency (default 0.5us)", "TIME"},
      {"switch-lat", 0, 0, G_OPTION_ARG_STRING, &switch_lat,
       "Latency through one leaf or spine switch (default 130ns)", "TIME"},
      {"topology", 0, 0, G_OPTION_ARG_STRING, &topology, "rail (default), fattree or star", "T"},
      {"oversubscription", 0, 0, G_OPTION_ARG_STRING, &oversub,
       "Leaf downlink / uplink bandwidth ratio (default 1: non-blocking)", "R"},
      {"nodes-per-leaf", 0, 0, G_OPTION_ARG_INT, &npl, "Nodes under one leaf switch (default: all)",
       "N"},
      {"leaves-per-pod", 0, 0, G_OPTION_ARG_INT, &lpp,
       "Three-tier Clos: leaf switches per pod, whose spines join at a core tier (a multiple of "
       "the rails on a rail topology; default: two tiers)", "L"},
      {"pod-oversubscription", 0, 0, G_OPTION_ARG_STRING, &pod_oversub,
       "A pod's leaf-uplink / core-uplink bandwidth ratio (default 1: non-blocking)", "R"},
      {"out", 'o', 0, G_OPTION_ARG_FILENAME, &out, "Write the XML there (default: stdout)", "FILE"},
      {"calibrate", 0, 0, G_OPTION_ARG_NONE, &calibrate,
       "Measure MPI ping-pongs on this machine, fit SMPI's latency, bandwidth and per-size "
       "factors, and write a platform for it (one node, --ranks hosts, gpu_model cpu)",
       NULL},
      {"ranks", 0, 0, G_OPTION_ARG_INT, &ranks,
       "With --calibrate: hosts in the platform (default 2)", "N"},
      {"quick", 0, 0, G_OPTION_ARG_NONE, &quick,
       "With --calibrate: 8 sizes, 5 repeats (a second or two)", NULL},
      {"pingpong", 0, 0, G_OPTION_ARG_FILENAME, &pingpong,
       "With --calibrate: fit this dlsim-pingpong output instead of measuring", "FILE"},
      {NULL, 0, 0, 0, NULL, NULL, NULL},
  };
  GOptionContext *ctx = g_option_context_new("- write a SimGrid platform file for a cluster");
  g_option_context_set_summary(ctx,
      "Writes a SimGrid platform (explicit graph, DijkstraCache routing): one host per GPU named\n"
      "n<node>g<gpu>, an NVSwitch router per node, NIC links to leaf switches, leaves to a spine\n"
      "(or, with --leaves-per-pod, to their pod's spine, and the pods' spines to a core).\n"
      "Bandwidths take SimGrid units (GBps = 10^9 bytes/s, Gbps = 10^9 bits/s), latencies\n"
      "s, ms, us, ns. See platforms/README.md.");
  g_option_context_add_main_entries(ctx, entries, NULL);

  plat_gen_params p;
  gboolean help = FALSE;
  if (!cli_parse(ctx, "platform", &argc, &argv, &help, &err)) goto out;
  if (help) {
    status = 0;
    goto out;
  }
  if (!dl_check_writable("--out", out, &err)) goto out;
  if (argc > 1) {
    g_set_error(&err, DL_ERROR, DL_ERR_INPUT, "platform: unexpected argument '%s'", argv[1]);
    goto out;
  }
  if (!calibrate && (quick || pingpong || ranks != 2)) {
    g_set_error(&err, DL_ERROR, DL_ERR_INPUT, "platform: %s goes with --calibrate",
                quick ? "--quick" : pingpong ? "--pingpong" : "--ranks");
    goto out;
  }
  if (calibrate) {
    if (calibrate_platform(ranks, quick, pingpong, out, &err)) status = 0;
    goto out;
  }
  if (!plat_gen_preset(preset ? preset : "dgx-a100", &p, &err)) goto out;
  /* The preset's comment names its sources; once a figure changes it no longer describes the
   * file (the node count aside for dgx-a100, whose comment gives no count). */
  if (npl != INT_MIN && npl < 1) {
    g_set_error(&err, DL_ERROR, DL_ERR_INPUT, "--nodes-per-leaf: expected 1 or more, got %d",
                npl);
    goto out;
  }
  if (lpp != INT_MIN && lpp < 1) {
    g_set_error(&err, DL_ERROR, DL_ERR_INPUT, "--leaves-per-pod: expected 1 or more, got %d",
                lpp);
    goto out;
  }
  if (gpus != INT_MIN || gpu || gpu_mem || gpu_speed || nvlink_bw || nvlink_lat ||
      nics != INT_MIN || nic_bw || nic_lat || pcie_bw || pcie_lat || switch_lat || topology ||
      oversub || npl != INT_MIN || lpp != INT_MIN || pod_oversub ||
      (nodes != INT_MIN && preset && !plat_gen_preset_scalable(preset)))
    p.comment = "Derived from a dlsim preset with changed options; see platforms/README.md.";
  if (nodes != INT_MIN) p.nodes = nodes;
  if (gpus != INT_MIN) {
    /* a NIC per GPU stays a NIC per GPU unless --nics-per-node says otherwise */
    if (p.nics_per_node == p.gpus_per_node) p.nics_per_node = gpus;
    p.gpus_per_node = gpus;
  }
  if (nics != INT_MIN) p.nics_per_node = nics;
  if (npl != INT_MIN) p.nodes_per_leaf = npl;
  if (lpp != INT_MIN) p.leaves_per_pod = lpp;
  if (gpu) {
    p.gpu_model = gpu;
    if (!plat_gpu_spec(gpu, &p.gpu_mem_bytes, &p.speed_flops) && (!gpu_mem || !gpu_speed)) {
      char *known = gpu_known_names();
      g_set_error(&err, DL_ERROR, DL_ERR_INPUT,
                  "--gpu: unknown model '%s' (known: %s; or give --gpu-mem and --gpu-speed)", gpu,
                  known);
      g_free(known);
      goto out;
    }
  }
  if (gpu_mem && !dl_parse_bytes(gpu_mem, &p.gpu_mem_bytes)) {
    g_set_error(&err, DL_ERROR, DL_ERR_INPUT, "--gpu-mem: expected bytes such as 40GiB, got '%s'",
                gpu_mem);
    goto out;
  }
  if (topology && !plat_topology_parse(topology, &p.topology)) {
    g_set_error(&err, DL_ERROR, DL_ERR_INPUT,
                "--topology: expected rail, fattree or star, got '%s'", topology);
    goto out;
  }
  if (!opt_value("--gpu-speed", gpu_speed, plat_parse_speed, "312Tf", &p.speed_flops, &err) ||
      !opt_value("--nvlink-bw", nvlink_bw, plat_parse_bandwidth, "300GBps", &p.nvlink_bps, &err) ||
      !opt_value("--nvlink-lat", nvlink_lat, plat_parse_time, "1us", &p.nvlink_lat_s, &err) ||
      !opt_value("--nic-bw", nic_bw, plat_parse_bandwidth, "25GBps", &p.nic_bps, &err) ||
      !opt_value("--nic-lat", nic_lat, plat_parse_time, "1us", &p.nic_lat_s, &err) ||
      !opt_value("--pcie-bw", pcie_bw, plat_parse_bandwidth, "25GBps", &p.pcie_bps, &err) ||
      !opt_value("--pcie-lat", pcie_lat, plat_parse_time, "0.5us", &p.pcie_lat_s, &err) ||
      !opt_value("--switch-lat", switch_lat, plat_parse_time, "130ns", &p.switch_lat_s, &err) ||
      !opt_value("--oversubscription", oversub, parse_ratio, "2", &p.oversubscription, &err) ||
      !opt_value("--pod-oversubscription", pod_oversub, parse_ratio, "2",
                 &p.pod_oversubscription, &err))
    goto out;

  xml = plat_generate_xml(&p, &err);
  if (!xml) goto out;
  if (out) {
    if (!dl_write_file_atomic(out, xml, strlen(xml), &err)) goto out;
  } else {
    fputs(xml, stdout);
    fflush(stdout);
  }
  status = 0;
out:
  if (err) {
    cli_error(err->message);
    if (err->domain == DL_ERROR && err->code != DL_ERR_INPUT) status = 1;
    g_error_free(err);
  }
  g_free(xml);
  g_option_context_free(ctx);
  g_free(preset);
  g_free(gpu);
  g_free(gpu_mem);
  g_free(gpu_speed);
  g_free(nvlink_bw);
  g_free(nvlink_lat);
  g_free(nic_bw);
  g_free(nic_lat);
  g_free(switch_lat);
  g_free(pcie_bw);
  g_free(pcie_lat);
  g_free(topology);
  g_free(oversub);
  g_free(pod_oversub);
  g_free(out);
  g_free(pingpong);
  return status;
}
