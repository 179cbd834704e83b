/* test_kdb.c — the kernel database lookup: exact hit, interpolation in achieved FLOP/s between
 * two measured shapes (hand-computed), clamping, roofline fallback, derived database, and a
 * write/load round trip. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cu_main.h"
#include "core/dl_common.h"
#include "kdb/kdb.h"
#include "kdb/ktime.h"
#include "model/workload.h"

static wl_model *model(void) {
  GError *e = NULL;
  wl_model *m = wl_load("mlp-small", &e);
  CU_ASSERT_PTR_NOT_NULL_FATAL(m);
  return m;
}

/* The forward kernel of layer fc2 (linear 512->512) at `samples`, with the planner's FLOP count. */
static kdb_kernel fc2_op(const wl_model *m, int64_t samples) {
  kdb_kernel k = {"linear.fwd", &m->layers[2], samples, 1, 0, TRUE,
                  m->layers[2].fwd_flops * samples, 4.0 * (512 * samples * 2 + 262656), 0};
  return k;
}

static void add(kdb *db, const kdb_kernel *k, double t) {
  char *key = kdb_key(k, GPU_FP32);
  kdb_entry e = {key, (char *)k->kname, GPU_FP32, k->gemm_like, k->flops, k->bytes,
                 t, t, 0, 10, NULL, FALSE};
  kdb_add(db, &e);
  g_free(key);
}

static void test_key(void) {
  wl_model *m = model();
  kdb_kernel op = fc2_op(m, 64);
  char *k = kdb_key(&op, GPU_FP32);
  CU_ASSERT_STRING_EQUAL(k, "linear.fwd in=512x1x1 out=512x1x1 bias=1 dx=1 n=64 split=1 fp32");
  g_free(k);
  kdb_kernel st = {"sgd.step", NULL, 0, 1, 669706, FALSE, 3.0 * 669706, 20.0 * 669706, 0};
  k = kdb_key(&st, GPU_FP16);
  CU_ASSERT_STRING_EQUAL(k, "sgd.step params=669706 fp16");
  g_free(k);
  wl_free(m);
}

static void test_lookup(void) {
  wl_model *m = model();
  kdb *db = kdb_new("test");
  kdb_kernel a = fc2_op(m, 16), b = fc2_op(m, 256), mid = fc2_op(m, 64), big = fc2_op(m, 1024);
  /* fc2 fwd FLOP per sample: 2·512·512 + 512 = 524,800 */
  CU_ASSERT_DOUBLE_EQUAL(a.flops, 524800.0 * 16, 1e-6);
  add(db, &a, 1e-3); /* 8.3968 GFLOP/s */
  add(db, &b, 4e-3); /* 33.5872 GFLOP/s */
  kdb_origin o;
  CU_ASSERT_DOUBLE_EQUAL(kdb_kernel_s(db, gpu_find("a100-40gb"), &a, GPU_FP32, &o), 1e-3, 0);
  CU_ASSERT_EQUAL(o, KDB_MEASURED);
  /* 64 samples: log position (ln 64 − ln 16)/(ln 256 − ln 16) = 0.5, rate = 20.992 GFLOP/s,
   * time = 33,587,200 FLOP / 20.992e9 = 1.6 ms */
  double t = kdb_kernel_s(db, gpu_find("a100-40gb"), &mid, GPU_FP32, &o);
  CU_ASSERT_EQUAL(o, KDB_INTERPOLATED);
  CU_ASSERT_DOUBLE_EQUAL(t, 1.6e-3, 1e-12);
  /* above the range, the same shape: the largest's time scaled by the A100's roofline at the
   * two sizes (fp32 GEMM at 60 % of 19.5 TFLOP/s, 80 % of 1555 GB/s, plus 4 us):
   * 256: 134,348,800 FLOP / 11.7e12 + 4 us = 15.4828 us;
   * 1024: 537,395,200 FLOP / 11.7e12 + 4 us = 49.9312 us; 4 ms x 49.9312 / 15.4828 = 12.8998 ms,
   * not the 16 ms of the largest's rate: the launch does not grow with the batch */
  t = kdb_kernel_s(db, gpu_find("a100-40gb"), &big, GPU_FP32, &o);
  CU_ASSERT_EQUAL(o, KDB_INTERPOLATED);
  CU_ASSERT_DOUBLE_EQUAL(t, 4e-3 * (537395200.0 / 11.7e12 + 4e-6) / (134348800.0 / 11.7e12 + 4e-6),
                         1e-12);
  CU_ASSERT_DOUBLE_EQUAL(t, 12.8998e-3, 1e-7);
  /* below the range: 4 samples from 16, both bandwidth-bound on the roofline (the weights):
   * 1 ms x (1,067,008 B / 1.244e12 + 4 us) / (1,116,160 B / 1.244e12 + 4 us)
   * = 1 ms x 4.857723 / 4.897235 = 0.991932 ms */
  kdb_kernel small = fc2_op(m, 4);
  t = kdb_kernel_s(db, gpu_find("a100-40gb"), &small, GPU_FP32, &o);
  CU_ASSERT_EQUAL(o, KDB_INTERPOLATED);
  CU_ASSERT_DOUBLE_EQUAL(t, 0.991932e-3, 1e-9);
  /* another shape of the same kernel (fc3, 512 -> 10, 656,000 FLOP at 64 samples): the class,
   * by size: under the smallest entry, its rate, 8.3968 GFLOP/s: 78.125 us */
  kdb_kernel fc3 = {"linear.fwd", &m->layers[4], 64, 1, 0, TRUE, m->layers[4].fwd_flops * 64,
                    4.0 * (512 * 64 + 10 * 64 + 5130), 0};
  CU_ASSERT_DOUBLE_EQUAL(fc3.flops, 656000.0, 1e-6);
  t = kdb_kernel_s(db, gpu_find("a100-40gb"), &fc3, GPU_FP32, &o);
  CU_ASSERT_EQUAL(o, KDB_INTERPOLATED);
  CU_ASSERT_DOUBLE_EQUAL(t, 78.125e-6, 1e-12);
  /* other precision or other kernel: roofline of the spec sheet */
  const gpu_spec *g = gpu_find("a100-40gb");
  t = kdb_kernel_s(db, g, &mid, GPU_TF32, &o);
  CU_ASSERT_EQUAL(o, KDB_ESTIMATED);
  CU_ASSERT_DOUBLE_EQUAL(t, gpu_roofline_s(g, GPU_TF32, TRUE, mid.flops, mid.bytes), 1e-15);
  t = kdb_kernel_s(NULL, g, &mid, GPU_FP32, &o);
  CU_ASSERT_EQUAL(o, KDB_ESTIMATED);
  kdb_free(db);
  wl_free(m);
}

/* kdb_derive_ratio by hand, H200 to H100 (same 132 multiprocessors at 1.98 GHz; 4.8 against
 * 3.35 TB/s, 80 % of either for the roofline, plus 4 us of launch): a bandwidth-bound entry of
 * 3.84 GB has the roofline 3.84e9 / (4.8e12 x 0.8) + 4e-6 = 1.004 ms on the H200 and
 * 3.84e9 / (3.35e12 x 0.8) + 4e-6 = 1.436836 ms on the H100. */
static void test_derive_ratio(void) {
  const gpu_spec *h200 = gpu_find("h200"), *h100 = gpu_find("h100-sxm");
  kdb_entry e = {0};
  e.prec = GPU_FP32;
  e.gemm_like = FALSE;
  e.flops = 1e6;
  e.bytes = 3.84e9;
  double rf = 3.84e9 / (4.8e12 * 0.8) + 4e-6, rt = 3.84e9 / (3.35e12 * 0.8) + 4e-6;
  CU_ASSERT_DOUBLE_EQUAL(gpu_roofline_s(h200, GPU_FP32, FALSE, e.flops, e.bytes), rf, 1e-15);
  /* 2 ms on the H200, twice its roofline: 1.436836 + (2 - 1.004) = 2.432836 ms on the H100,
   * not 2 x 1.4311 = 2.862 ms as the bandwidth ratio alone would say */
  e.median_s = 2e-3;
  CU_ASSERT_DOUBLE_EQUAL(kdb_derive_ratio(&e, h200, h100) * 2e-3, 2.432836e-3, 1e-9);
  CU_ASSERT_DOUBLE_EQUAL(kdb_derive_ratio(&e, h200, h100) * 2e-3, rt + (2e-3 - rf), 1e-15);
  /* under the roofline (0.5 ms < 1.004 ms): the roofline ratio */
  e.median_s = 0.5e-3;
  CU_ASSERT_DOUBLE_EQUAL(kdb_derive_ratio(&e, h200, h100), rt / rf, 1e-12);
  /* and back: the H100's 2.432836 ms is 2 ms on the H200 */
  e.median_s = rt + (2e-3 - rf);
  CU_ASSERT_DOUBLE_EQUAL(kdb_derive_ratio(&e, h100, h200) * e.median_s, 2e-3, 1e-15);
  /* to an A100 (108 SMs at 1.41 GHz, 1555 GB/s): the rest of a non-GEMM kernel scales with
   * multiprocessors x clock, 132 x 1.98 / (108 x 1.41) = 1.7163 */
  const gpu_spec *a100 = gpu_find("a100-40gb");
  e.median_s = 2e-3;
  double ra = 3.84e9 / (1555e9 * 0.8) + 4e-6;
  CU_ASSERT_DOUBLE_EQUAL(kdb_derive_ratio(&e, h200, a100) * 2e-3,
                         ra + (2e-3 - rf) * (132 * 1.98) / (108 * 1.41), 1e-15);
}

/* A GEMM-like kernel with no time in a database that carries an efficiency curve, by hand: the
 * curve [[1e9 FLOP, 0.2], [1e12, 0.8]] in bf16 gives, at 10^10.5 FLOP (half way in log), 0.5
 * of the H100's 989.4 TFLOP/s: 3.16228e10 / 494.7e12 = 63.9232 us (its 1 MB read in 0.37 us
 * plus 4 us of launch is less); without a curve, 60 %: 53.2693 us + 4 us. */
static void test_gemm_efficiency(void) {
  const char *txt = "{\"format\": \"dlsim-kdb-1\", \"provenance\": {\"device\": \"h100-sxm\"}, "
                    "\"gemm_efficiency\": {\"source\": \"by hand\", "
                    "\"bf16\": [[1e9, 0.2], [1e12, 0.8]]}, \"entries\": []}";
  GError *e = NULL;
  kdb *db = kdb_load_text("eff.json", txt, strlen(txt), &e);
  CU_ASSERT_PTR_NOT_NULL_FATAL(db);
  const double f = pow(10, 10.5);
  CU_ASSERT_DOUBLE_EQUAL(kdb_gemm_efficiency(db, GPU_BF16, f), 0.5, 1e-12);
  CU_ASSERT_DOUBLE_EQUAL(kdb_gemm_efficiency(db, GPU_BF16, 1e6), 0.2, 0);  /* clamped */
  CU_ASSERT_DOUBLE_EQUAL(kdb_gemm_efficiency(db, GPU_BF16, 1e15), 0.8, 0);
  CU_ASSERT(kdb_gemm_efficiency(db, GPU_FP32, f) < 0);                    /* no curve */
  kdb_kernel k = {"linear.fwd", NULL, 0, 1, 0, TRUE, f, 1e6, 0};
  kdb_origin o;
  const gpu_spec *g = gpu_find("h100-sxm");
  CU_ASSERT_DOUBLE_EQUAL(kdb_kernel_s(db, g, &k, GPU_BF16, &o), f / (989.4e12 * 0.5), 1e-15);
  CU_ASSERT_DOUBLE_EQUAL(kdb_kernel_s(db, g, &k, GPU_BF16, &o), 63.9232e-6, 1e-10);
  CU_ASSERT_EQUAL(o, KDB_ESTIMATED);
  CU_ASSERT_DOUBLE_EQUAL(kdb_kernel_s(db, g, &k, GPU_FP32, &o),
                         gpu_roofline_s(g, GPU_FP32, TRUE, f, 1e6), 1e-15);
  /* written and read back, the curve stays */
  char *json = kdb_to_json(db);
  kdb *back = kdb_load_text("eff2.json", json, strlen(json), &e);
  CU_ASSERT_PTR_NOT_NULL_FATAL(back);
  CU_ASSERT_DOUBLE_EQUAL(kdb_gemm_efficiency(back, GPU_BF16, f), 0.5, 1e-12);
  g_free(json);
  kdb_free(back);
  kdb_free(db);
  /* a curve whose FLOP do not rise, or an efficiency over 1: refused, naming the point */
  const char *bad[] = {"[[1e9, 0.2], [1e9, 0.3]]", "[[1e9, 1.5]]"};
  for (int i = 0; i < 2; i++) {
    char *t = g_strdup_printf("{\"format\": \"dlsim-kdb-1\", \"provenance\": {}, "
                              "\"gemm_efficiency\": {\"bf16\": %s}, \"entries\": []}", bad[i]);
    GError *err = NULL;
    CU_ASSERT_PTR_NULL(kdb_load_text("bad.json", t, strlen(t), &err));
    CU_ASSERT_PTR_NOT_NULL_FATAL(err);
    CU_ASSERT(strstr(err->message, "gemm_efficiency.bf16[") != NULL);
    g_error_free(err);
    g_free(t);
  }
}

static void test_roundtrip_and_derive(void) {
  wl_model *m = model();
  kdb *db = kdb_new("a100-40gb");
  kdb_kernel a = fc2_op(m, 16);
  add(db, &a, 1e-3);
  kdb_set_prov_str(db, "device", "a100-40gb");
  char *json = kdb_to_json(db);
  char path[] = "/tmp/test_kdb_XXXXXX.json";
  int fd = mkstemps(path, 5);
  CU_ASSERT_FATAL(fd >= 0);
  close(fd);
  GError *e = NULL;
  CU_ASSERT(dl_write_file_atomic(path, json, strlen(json), &e));
  kdb *back = kdb_load(path, &e);
  CU_ASSERT_PTR_NOT_NULL_FATAL(back);
  CU_ASSERT_EQUAL(kdb_n_entries(back), 1);
  CU_ASSERT_STRING_EQUAL(kdb_name(back), "a100-40gb");
  CU_ASSERT_FALSE(kdb_is_derived(back));
  const gpu_spec *from = gpu_find("a100-40gb"), *to = gpu_find("h100-sxm");
  kdb *d = kdb_derive(back, from, to);
  CU_ASSERT(kdb_is_derived(d));
  /* derived_from names the file it came from (its stem), not only the device */
  char *stem = g_path_get_basename(path);
  stem[strlen(stem) - 5] = '\0';
  CU_ASSERT_STRING_EQUAL(kdb_prov_str(d, "derived_from"), stem);
  g_free(stem);
  kdb_origin o;
  /* a GEMM-like kernel keeps its efficiency: scaled by the ratio of its roofline times */
  double r = gpu_roofline_s(to, GPU_FP32, TRUE, a.flops, a.bytes) /
             gpu_roofline_s(from, GPU_FP32, TRUE, a.flops, a.bytes);
  CU_ASSERT_DOUBLE_EQUAL(kdb_kernel_s(d, to, &a, GPU_FP32, &o), 1e-3 * r, 1e-15);
  CU_ASSERT_EQUAL(o, KDB_DERIVED); /* scaled, not measured on `to` */
  CU_ASSERT_STRING_EQUAL(kdb_device(d), "h100-sxm");
  /* written and read back, the derived file still counts as derived, entry by entry */
  char *djson = kdb_to_json(d);
  CU_ASSERT(dl_write_file_atomic(path, djson, strlen(djson), &e));
  g_free(djson);
  kdb *dback = kdb_load(path, &e);
  CU_ASSERT_PTR_NOT_NULL_FATAL(dback);
  CU_ASSERT(kdb_is_derived(dback));
  CU_ASSERT(kdb_entry_at(dback, 0)->derived);
  kdb_kernel_s(dback, to, &a, GPU_FP32, &o);
  CU_ASSERT_EQUAL(o, KDB_DERIVED);
  /* between a derived and a measured entry the time is interpolated */
  kdb_kernel big = fc2_op(m, 256), mid = fc2_op(m, 64);
  add(dback, &big, 4e-3);
  kdb_kernel_s(dback, to, &mid, GPU_FP32, &o);
  CU_ASSERT_EQUAL(o, KDB_INTERPOLATED);
  kdb_kernel_s(dback, to, &big, GPU_FP32, &o);
  CU_ASSERT_EQUAL(o, KDB_MEASURED);
  kdb_free(dback);
  /* bad file: one-line error naming it */
  FILE *f = fopen(path, "w");
  fputs("{\"format\": \"dlsim-kdb-1\", \"provenance\": {}, \"entries\": [{\"key\": 3}]}", f);
  fclose(f);
  kdb *bad = kdb_load(path, &e);
  CU_ASSERT_PTR_NULL(bad);
  CU_ASSERT_PTR_NOT_NULL_FATAL(e);
  CU_ASSERT(strstr(e->message, "entries[0].key") != NULL);
  CU_ASSERT(strchr(e->message, '\n') == NULL);
  g_error_free(e);
  unlink(path);
  kdb_free(d);
  kdb_free(back);
  kdb_free(db);
  g_free(json);
  wl_free(m);
}

/* The device a database is for, and a run refusing one for another device. */
static void test_device(void) {
  kdb *db = kdb_new("cpu-some-model");
  kdb_set_prov_str(db, "device", "cpu-some-model");
  kdb_set_prov_str(db, "backend", "cpu");
  CU_ASSERT_STRING_EQUAL(kdb_device(db), "cpu"); /* CPU twins: the cpu sheet */
  kdb_set_prov_str(db, "spec_key", "h100-sxm");
  CU_ASSERT_STRING_EQUAL(kdb_device(db), "h100-sxm"); /* spec_key wins */
  kdb_free(db);
  db = kdb_new("x");
  kdb_set_prov_str(db, "device", "a100-80gb");
  CU_ASSERT_STRING_EQUAL(kdb_device(db), "a100-80gb"); /* else the device */
  char *json = kdb_to_json(db);
  char path[] = "/tmp/test_kdb_dev_XXXXXX.json";
  int fd = mkstemps(path, 5);
  CU_ASSERT_FATAL(fd >= 0);
  close(fd);
  GError *e = NULL;
  CU_ASSERT(dl_write_file_atomic(path, json, strlen(json), &e));
  kdb *got = NULL;
  CU_ASSERT_FALSE(ktime_open_db(path, "a100-40gb", FALSE, &got, &e));
  CU_ASSERT_PTR_NULL(got);
  CU_ASSERT_PTR_NOT_NULL_FATAL(e);
  CU_ASSERT_EQUAL(e->code, DL_ERR_INPUT);
  CU_ASSERT(strstr(e->message, "--kernels") != NULL && strstr(e->message, "a100-80gb") != NULL &&
            strstr(e->message, "a100-40gb") != NULL && strstr(e->message, path) != NULL);
  g_clear_error(&e);
  CU_ASSERT(ktime_open_db(path, "a100-40gb", TRUE, &got, &e)); /* asked for explicitly */
  CU_ASSERT_PTR_NOT_NULL(got);
  kdb_free(got);
  CU_ASSERT(ktime_open_db(path, "A100-80GB", FALSE, &got, &e)); /* keys are case-blind */
  kdb_free(got);
  unlink(path);
  kdb_free(db);
  g_free(json);
}

/* CUDA device names as the driver reports them, to spec-sheet keys. */
static void test_device_names(void) {
  static const struct { const char *name; double mem; const char *key; } cases[] = {
      {"NVIDIA A100-SXM4-40GB", 42.4e9, "a100-40gb"}, {"NVIDIA A100-SXM4-80GB", 85.1e9, "a100-80gb"},
      {"NVIDIA A100-SXM4-80GB", 0, "a100-80gb"},      {"NVIDIA H100 80GB HBM3", 85.0e9, "h100-sxm"},
      {"NVIDIA H100 SXM5 80GB", 0, "h100-sxm"},       {"NVIDIA H200", 150.0e9, "h200"},
      {"NVIDIA H100 PCIe", 85.0e9, NULL},             {"NVIDIA H100 NVL", 100e9, NULL},
      {"NVIDIA H200 NVL", 150e9, NULL},               {"NVIDIA GH200 480GB", 100e9, NULL},
      {"NVIDIA A100-PCIE-40GB", 42e9, NULL},          {"NVIDIA A100 80GB PCIe", 85e9, NULL},
      {"NVIDIA GeForce RTX 4090", 25e9, NULL},        {"NVIDIA B200", 191e9, "b200"},
      {"NVIDIA GB200", 199e9, "gb200"},
  };
  for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
    const gpu_spec *s = gpu_for_device_name(cases[i].name, cases[i].mem);
    if (cases[i].key) {
      CU_ASSERT_PTR_NOT_NULL_FATAL(s);
      CU_ASSERT_STRING_EQUAL(s->name, cases[i].key);
    } else {
      CU_ASSERT_PTR_NULL(s);
    }
  }
  char *known = gpu_known_names();
  CU_ASSERT_STRING_EQUAL(known, "a100-40gb, a100-80gb, h100-sxm, h200, b200, gb200, cpu");
  g_free(known);
}

/* Twins (kdb_layer_twins): a layer's twin is the first layer of its kind whose kernels have the
 * same keys, so a lookup may take the twin in its place. Llama 3 8B's 32 blocks are alike: layer j
 * of every block has the twin of layer j of block 0, itself the first of its kind and shape in
 * that block (the second norm takes the first). */
static void test_twins(void) {
  GError *e = NULL;
  wl_model *m = wl_load("llama3-8b", &e);
  CU_ASSERT_PTR_NOT_NULL_FATAL(m);
  int *twin = kdb_layer_twins(m);
  /* the 32 transformer blocks h0..h31 (the embedding is a block of its own) */
  int first_block = 0, per_block = 0;
  while (first_block < m->n_layers && strcmp(m->layers[first_block].name, "h0.norm1") != 0)
    first_block++;
  CU_ASSERT_FATAL(first_block < m->n_layers);
  for (int i = 0; i < m->n_layers; i++)
    per_block += m->layers[i].block == m->layers[first_block].block;
  CU_ASSERT_EQUAL(per_block, 11);
  const int end_blocks = first_block + 32 * per_block;
  CU_ASSERT_FATAL(end_blocks <= m->n_layers);
  CU_ASSERT_STRING_EQUAL(m->layers[end_blocks - 1].name, "h31.add2");
  for (int i = 0; i < m->n_layers; i++) {
    const wl_layer *l = &m->layers[i];
    /* twins within block 0 too (its two norms, its two adds): a layer of a later block has the
     * twin of its counterpart in block 0 */
    const int in0 =
        i < first_block || i >= end_blocks ? i : first_block + (i - first_block) % per_block;
    CU_ASSERT(twin[i] <= in0 && twin[twin[i]] == twin[i]);
    if (i != in0) CU_ASSERT_EQUAL(twin[i], twin[in0]);
    CU_ASSERT_EQUAL(m->layers[twin[i]].kind, l->kind);
    /* the same keys whatever the rest of the kernel */
    for (int pass = 0; pass < 2; pass++) {
      char kn[40];
      wl_kernel_name(kn, sizeof kn, l->kind, pass ? "bwd" : "fwd");
      kdb_kernel a = {kn, l, 3, 2, 0, TRUE, 1e9, 1e6, 2}, b = a;
      b.layer = &m->layers[twin[i]];
      char *ka = kdb_key(&a, GPU_BF16), *kb = kdb_key(&b, GPU_BF16);
      CU_ASSERT_STRING_EQUAL(ka, kb);
      g_free(ka);
      g_free(kb);
    }
  }
  /* what the memo is asked for: one block's 9 kinds and shapes for 352 layers */
  int own = 0;
  for (int i = first_block; i < end_blocks; i++) own += twin[i] == i;
  CU_ASSERT_EQUAL(own, 9);
  g_free(twin);
  wl_free(m);
}

static void test_cpu_spec(void) {
  const gpu_spec *c = gpu_find("cpu");
  CU_ASSERT_PTR_NOT_NULL_FATAL(c);
  /* 32 FLOP/cycle/core: the peak is a multiple of 32 MHz·cores */
  CU_ASSERT(c->peak_flops[GPU_FP32] > 1e9);
  CU_ASSERT(strstr(c->source, "/proc/cpuinfo") != NULL);
}

static const dl_cu_test kdb_tests[] = {DL_CU_TEST(test_key), DL_CU_TEST(test_lookup),
                                       DL_CU_TEST(test_roundtrip_and_derive), DL_CU_TEST(test_derive_ratio),
                                       DL_CU_TEST(test_gemm_efficiency),
                                       DL_CU_TEST(test_device), DL_CU_TEST(test_device_names),
                                       DL_CU_TEST(test_cpu_spec), DL_CU_TEST(test_twins),
                                       DL_CU_END};
const dl_cu_suite dl_cu_suites[] = {{"kdb", kdb_tests}, {NULL, NULL}};
