/* test_platform.c — generator, reader and routes of the platform module.
 * Expected routes are worked out by hand from the preset figures: NVLink link 300 GB/s, 1 us;
 * NIC link 25 GB/s, 1 us + 130 ns / 2; the same values the SMPI ping-pong tests check SimGrid
 * against (tests/smpi/smpi_tests.cmake). */
#include "cu_main.h"
#include "core/child.h"
#include "core/dl_common.h"
#include "platform/platform.h"

#include <glib/gstdio.h>
#include <math.h>
#include <string.h>

#define NIC_LAT (1e-6 + 65e-9)

static plat *load_generated(const plat_gen_params *p) {
  GError *err = NULL;
  char *xml = plat_generate_xml(p, &err);
  CU_ASSERT_PTR_NOT_NULL_FATAL(xml);
  plat *pl = plat_load_xml("gen.xml", xml, strlen(xml), &err);
  if (!pl) fprintf(stderr, "%s\n", err->message);
  CU_ASSERT_PTR_NOT_NULL_FATAL(pl);
  g_free(xml);
  return pl;
}

static void check_route(const plat *pl, const char *a, const char *b, int n_links, double lat_s,
                        double bps) {
  plat_route_info r;
  GError *err = NULL;
  int i = plat_host_index(pl, a), j = plat_host_index(pl, b);
  CU_ASSERT_FATAL(i >= 0 && j >= 0);
  CU_ASSERT_FATAL(plat_route(pl, i, j, &r, &err));
  if (r.n_links != n_links || fabs(r.bottleneck_bps - bps) > 1)
    fprintf(stderr, "\n  %s -> %s: %d links, %g s, %g B/s\n", a, b, r.n_links, r.latency_s,
            r.bottleneck_bps);
  CU_ASSERT_EQUAL(r.n_links, n_links);
  CU_ASSERT_DOUBLE_EQUAL(r.latency_s, lat_s, 1e-12);
  CU_ASSERT_DOUBLE_EQUAL(r.bottleneck_bps, bps, 1.0);
  /* symmetric: same figures on the way back */
  CU_ASSERT_FATAL(plat_route(pl, j, i, &r, &err));
  CU_ASSERT_EQUAL(r.n_links, n_links);
  CU_ASSERT_DOUBLE_EQUAL(r.latency_s, lat_s, 1e-12);
}

static void test_generated_hosts(void) {
  plat_gen_params p;
  CU_ASSERT_FATAL(plat_gen_preset("dgx-a100", &p, NULL));
  p.nodes = 3;
  plat *pl = load_generated(&p);
  CU_ASSERT_EQUAL(plat_n_hosts(pl), 24);
  CU_ASSERT_EQUAL(plat_gpus_per_node(pl), 8);
  const plat_host *h = plat_host_at(pl, 13); /* rank 13 = node 1, GPU 5 */
  CU_ASSERT_STRING_EQUAL(h->id, "n1g5");
  CU_ASSERT_EQUAL(h->node, 1);
  CU_ASSERT_EQUAL(h->gpu, 5);
  CU_ASSERT_STRING_EQUAL(h->gpu_model, "a100-40gb");
  CU_ASSERT_DOUBLE_EQUAL(h->gpu_mem_bytes, 40e9, 0.5);
  CU_ASSERT_DOUBLE_EQUAL(h->speed_flops, 312e12, 1.0);
  CU_ASSERT_PTR_NULL(plat_host_at(pl, 24));
  plat_free(pl);
}

static void test_thetagpu_routes(void) {
  GError *err = NULL;
  plat *pl = plat_load("thetagpu", &err);
  CU_ASSERT_PTR_NOT_NULL_FATAL(pl);
  CU_ASSERT_EQUAL(plat_n_hosts(pl), 192); /* 24 DGX A100 x 8 GPUs */
  CU_ASSERT_EQUAL(plat_gpus_per_node(pl), 8);
  /* intra-node: up one NVLink link, down another */
  check_route(pl, "n0g0", "n0g1", 2, 2e-6, 300e9);
  check_route(pl, "n5g3", "n5g6", 2, 2e-6, 300e9);
  /* same rail, two nodes: NIC up to leaf l0r0, NIC down */
  check_route(pl, "n0g0", "n1g0", 2, 2 * NIC_LAT, 25e9);
  check_route(pl, "n2g7", "n23g7", 2, 2 * NIC_LAT, 25e9);
  /* cross rail: NVLink to the GPU on the destination's rail, then that rail (4 links; as long as
   * through the spine, and DijkstraCache's tie-break takes the NVLink hop) */
  check_route(pl, "n0g0", "n1g1", 4, 2e-6 + 2 * NIC_LAT, 25e9);
  plat_route_info r;
  CU_ASSERT_TRUE(plat_route(pl, 7, 7, &r, &err));
  CU_ASSERT_EQUAL(r.n_links, 0);
  CU_ASSERT_FALSE(plat_route(pl, 0, 192, &r, &err));
  CU_ASSERT_PTR_NOT_NULL(err);
  g_clear_error(&err);
  plat_free(pl);
}

static void test_fattree_oversubscribed(void) {
  plat_gen_params p;
  plat_gen_defaults(&p);
  p.nodes = 4;
  p.topology = PLAT_TOPO_FATTREE;
  p.nodes_per_leaf = 2;
  p.oversubscription = 4;
  plat *pl = load_generated(&p);
  /* same leaf: NIC and leaf port on each side */
  check_route(pl, "n0g3", "n1g5", 4, 2 * NIC_LAT, 25e9);
  /* other leaf: NIC, port, leaf uplink (2 nodes x 8 NICs x 25 GB/s / 4 = 100 GB/s, 130 ns) */
  check_route(pl, "n0g3", "n3g3", 6, 2 * NIC_LAT + 2 * 130e-9, 25e9);
  /* every node's GPUs talk over NVLink, not through the leaf they all share */
  check_route(pl, "n0g0", "n0g1", 2, 2e-6, 300e9);
  check_route(pl, "n3g0", "n3g1", 2, 2e-6, 300e9);
  plat_free(pl);
  /* one NIC per GPU pair: GPU, PCIe switch, NIC, leaf, NIC, PCIe switch, GPU */
  plat_gen_defaults(&p);
  p.nodes = 2;
  p.nics_per_node = 4;
  p.pcie_bps = 20e9;
  pl = load_generated(&p);
  check_route(pl, "n0g2", "n1g3", 4, 2 * 0.5e-6 + 2 * NIC_LAT, 20e9);
  check_route(pl, "n0g2", "n0g3", 2, 2e-6, 300e9); /* NVLink wins the tie with the PCIe switch */
  plat_free(pl);
}

/* Three tiers on DGX H100 nodes (NVLink 450 GB/s, NICs 50 GB/s): 8 nodes, 2 per leaf, rails of
 * 8 leaves per node group, 16 leaves per pod (2 groups), so 2 pods joined at the core. A leaf's
 * uplink carries 2 nodes x 50 GB/s = 100 GB/s; a pod's uplink its 16 leaves' 1.6 TB/s / 64. */
static void test_three_tier(void) {
  plat_gen_params p;
  GError *err = NULL;
  CU_ASSERT_FATAL(plat_gen_preset("dgx-h100", &p, &err));
  p.nodes = 8;
  p.nodes_per_leaf = 2;
  p.leaves_per_pod = 16;
  p.pod_oversubscription = 64;
  plat *pl = load_generated(&p);
  CU_ASSERT_EQUAL(plat_n_hosts(pl), 64);
  check_route(pl, "n0g0", "n0g5", 2, 2e-6, 450e9);                         /* NVLink */
  check_route(pl, "n0g0", "n1g0", 2, 2 * NIC_LAT, 50e9);                   /* one leaf */
  check_route(pl, "n0g3", "n3g3", 4, 2 * NIC_LAT + 2 * 130e-9, 50e9);      /* pod 0's spine */
  check_route(pl, "n5g3", "n6g3", 4, 2 * NIC_LAT + 2 * 130e-9, 50e9);      /* pod 1's spine */
  check_route(pl, "n0g3", "n4g3", 6, 2 * NIC_LAT + 4 * 130e-9, 1.6e12 / 64); /* the core */
  check_route(pl, "n3g7", "n7g7", 6, 2 * NIC_LAT + 4 * 130e-9, 1.6e12 / 64);
  plat_free(pl);
  /* a pod must hold whole rail groups; the ratio is at least 1 */
  p.leaves_per_pod = 12;
  CU_ASSERT_PTR_NULL(plat_generate_xml(&p, &err));
  CU_ASSERT(err && strstr(err->message, "--leaves-per-pod: a pod holds whole rail groups"));
  g_clear_error(&err);
  p.leaves_per_pod = 8;
  p.pod_oversubscription = 0.5;
  CU_ASSERT_PTR_NULL(plat_generate_xml(&p, &err));
  CU_ASSERT(err && strstr(err->message, "--pod-oversubscription"));
  g_clear_error(&err);
  /* the presets of today's machines load, with their spec sheets */
  static const struct { const char *preset, *gpu; int gpus; double nvl; } pre[] = {
      {"dgx-h100", "h100-sxm", 8, 450e9}, {"dgx-h200", "h200", 8, 450e9},
      {"dgx-b200", "b200", 8, 900e9},     {"gb200-nvl72", "gb200", 72, 900e9}};
  for (size_t i = 0; i < G_N_ELEMENTS(pre); i++) {
    CU_ASSERT_FATAL(plat_gen_preset(pre[i].preset, &p, &err));
    p.nodes = 2;
    pl = load_generated(&p);
    CU_ASSERT_EQUAL(plat_n_hosts(pl), 2 * pre[i].gpus);
    CU_ASSERT_STRING_EQUAL(plat_host_at(pl, 0)->gpu_model, pre[i].gpu);
    check_route(pl, "n0g0", "n0g1", 2, 2e-6, pre[i].nvl);
    check_route(pl, "n0g1", "n1g1", 2, 2 * NIC_LAT, 50e9);
    plat_free(pl);
  }
}

static void test_star(void) {
  plat_gen_params p;
  CU_ASSERT_FATAL(plat_gen_preset("star", &p, NULL));
  plat *pl = load_generated(&p);
  CU_ASSERT_EQUAL(plat_n_hosts(pl), 8);
  CU_ASSERT_EQUAL(plat_gpus_per_node(pl), 4);
  check_route(pl, "n0g0", "n0g1", 2, 2e-6, 25e9);
  check_route(pl, "n0g0", "n1g3", 2, 2e-6, 25e9);
  plat_free(pl);
}

static void test_generator_errors(void) {
  plat_gen_params p;
  GError *err = NULL;
  plat_gen_defaults(&p);
  p.nics_per_node = 3;
  CU_ASSERT_PTR_NULL(plat_generate_xml(&p, &err));
  CU_ASSERT_PTR_NOT_NULL_FATAL(err);
  CU_ASSERT_TRUE(g_str_has_prefix(err->message, "--nics-per-node:"));
  g_clear_error(&err);
  CU_ASSERT_FALSE(plat_gen_preset("nope", &p, &err));
  CU_ASSERT_TRUE(err && strstr(err->message, "thetagpu") != NULL);
  g_clear_error(&err);
  double v = 0;
  CU_ASSERT_TRUE(plat_parse_bandwidth("200Gbps", &v));
  CU_ASSERT_DOUBLE_EQUAL(v, 25e9, 1);
  CU_ASSERT_TRUE(plat_parse_time("130ns", &v));
  CU_ASSERT_DOUBLE_EQUAL(v, 130e-9, 1e-18);
  CU_ASSERT_FALSE(plat_parse_time("3 parsecs", &v));
}

#define DT "<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n"

static void expect_load_error(const char *xml, const char *needle) {
  GError *err = NULL;
  plat *pl = plat_load_xml("bad.xml", xml, strlen(xml), &err);
  CU_ASSERT_PTR_NULL(pl);
  CU_ASSERT_PTR_NOT_NULL_FATAL(err);
  if (!strstr(err->message, needle)) fprintf(stderr, "message: %s\n", err->message);
  CU_ASSERT_PTR_NOT_NULL(strstr(err->message, needle));
  CU_ASSERT_PTR_NULL(strchr(err->message, '\n'));
  CU_ASSERT_EQUAL(err->code, DL_ERR_INPUT);
  g_error_free(err);
  plat_free(pl);
}

static void test_reader_errors(void) {
  /* SimGrid's own loader reads the file: its messages, located, naming the file as given */
  expect_load_error("<?xml version='1.0'?>\n" DT "<platform version=\"4.1\">\n"
                    "<zone id=\"z\" routing=\"DijkstraCache\">\n<host id=\"a\" speed=\"1Gf\">\n"
                    "</zone></platform>\n",
                    "bad.xml:6: SimGrid cannot read the platform: Invalid XML");
  expect_load_error(DT "<platform version=\"4.1\"><zone id=\"z\" routing=\"Full\"></zone></platform>",
                    "bad.xml: no <host> found");
  expect_load_error(DT "<platform version=\"4.1\"><zone id=\"z\" routing=\"Dijkstra\">\n"
                    "<host id=\"a\" speed=\"fast\"/></zone></platform>",
                    "bad.xml:3: SimGrid cannot read the platform: cannot parse number:fast");
  expect_load_error(DT "<platform version=\"4.1\"><zone id=\"z\" routing=\"Bogus\">\n"
                    "<host id=\"a\" speed=\"1Gf\"/></zone></platform>",
                    "bad.xml: SimGrid cannot load the platform: Not a valid model!");
  expect_load_error(DT "<platform version=\"4.1\"><zone id=\"z\" routing=\"Full\">\n"
                    "<host id=\"a\" speed=\"1Gf\"/><host id=\"a\" speed=\"1Gf\"/></zone></platform>",
                    "bad.xml: SimGrid cannot load the platform: Refusing to create a second host "
                    "named 'a'");
  expect_load_error(DT "<platform version=\"4.1\"><zone id=\"z\" routing=\"Dijkstra\">\n"
                    "<host id=\"a\" speed=\"1Gf\"/><host id=\"b\" speed=\"1Gf\"/>\n"
                    "<link id=\"l\" bandwidth=\"1GBps\" latency=\"1e308w\"/></zone></platform>",
                    "bad.xml: link l: latency: expected 0 to 3600 s");
  expect_load_error(DT "<platform version=\"4.1\"><zone id=\"z\" routing=\"Dijkstra\">\n"
                    "<host id=\"a\" speed=\"1Gf\"/><link id=\"l\" bandwidth=\"1e999Bps\"/></zone>"
                    "</platform>",
                    "bad.xml:3: SimGrid cannot read the platform: value out of range: 1e999Bps");
  expect_load_error(DT "<platform version=\"4.1\"><zone id=\"z\" routing=\"Dijkstra\">\n"
                    "<host id=\"a\" speed=\"1Gf\"/><link id=\"l\" bandwidth=\"1GBps\" latency=\"0\" "
                    "sharing_policy=\"BOGUS\"/></zone></platform>",
                    "bad.xml:3: SimGrid cannot read the platform:");
  expect_load_error(DT "<platform version=\"4.1\"><config><prop id=\"smpi/bw-factor\" "
                    "value=\"0:0\"/></config><zone id=\"z\" routing=\"Full\">\n"
                    "<host id=\"a\" speed=\"1Gf\"/></zone></platform>",
                    "bad.xml: <config> smpi/bw-factor '0:0': expected SIZE:FACTOR;");
  /* factors past 1,000 either way, and a window or weight that is negative or not a number */
  expect_load_error(DT "<platform version=\"4.1\"><config><prop id=\"smpi/bw-factor\" "
                    "value=\"0:1e-300\"/></config><zone id=\"z\" routing=\"Full\">\n"
                    "<host id=\"a\" speed=\"1Gf\"/></zone></platform>",
                    "bad.xml: <config> smpi/bw-factor '0:1e-300': expected SIZE:FACTOR;... "
                    "with sizes >= 0 and factors in [0.001, 1000]");
  expect_load_error(DT "<platform version=\"4.1\"><config><prop id=\"smpi/lat-factor\" "
                    "value=\"0:1e300\"/></config><zone id=\"z\" routing=\"Full\">\n"
                    "<host id=\"a\" speed=\"1Gf\"/></zone></platform>",
                    "bad.xml: <config> smpi/lat-factor '0:1e300': expected SIZE:FACTOR;");
  expect_load_error(DT "<platform version=\"4.1\"><config><prop id=\"network/TCP-gamma\" "
                    "value=\"nan\"/></config><zone id=\"z\" routing=\"Full\">\n"
                    "<host id=\"a\" speed=\"1Gf\"/></zone></platform>",
                    "bad.xml: <config> network/TCP-gamma 'nan': expected a number in [0, 1e18]");
  expect_load_error(DT "<platform version=\"4.1\"><config><prop id=\"network/weight-S\" "
                    "value=\"-5\"/></config><zone id=\"z\" routing=\"Full\">\n"
                    "<host id=\"a\" speed=\"1Gf\"/></zone></platform>",
                    "bad.xml: <config> network/weight-S '-5': expected a number in [0, 1e18]");
  /* a host no route reaches: the question names both ends */
  const char *xml = DT "<platform version=\"4.1\"><zone id=\"z\" routing=\"Dijkstra\">\n"
                    "<host id=\"a\" speed=\"1Gf\"/><host id=\"b\" speed=\"1Gf\"/>\n"
                    "<host id=\"c\" speed=\"1Gf\"/><link id=\"l\" bandwidth=\"1GBps\" latency=\"0\"/>\n"
                    "<route src=\"a\" dst=\"b\"><link_ctn id=\"l\"/></route></zone></platform>";
  GError *err = NULL;
  plat *pl = plat_load_xml("bad.xml", xml, strlen(xml), &err);
  CU_ASSERT_PTR_NOT_NULL_FATAL(pl);
  plat_route_info r;
  CU_ASSERT_TRUE(plat_route(pl, 0, 1, &r, NULL));
  CU_ASSERT_TRUE(plat_route(pl, 1, 0, &r, NULL)); /* routes are symmetrical by default */
  CU_ASSERT_FALSE(plat_route(pl, 0, 2, &r, &err));
  CU_ASSERT_TRUE(err && strstr(err->message, "bad.xml: no route from a to c"));
  g_clear_error(&err);
  plat_free(pl);
  CU_ASSERT_PTR_NULL(plat_load("/nonexistent/p.xml", &err));
  CU_ASSERT_TRUE(err && strstr(err->message, "/nonexistent/p.xml"));
  g_clear_error(&err);
}

/* A generated cluster of the given shape (gpus_per_node 0: the generator's default), loaded as
 * written (*gen, its structure known) and without the generator's comment (*raw, searched route
 * by route); both non-NULL or the test stops. */
typedef struct { plat_topology t; int nodes, npl, nics; double oversub; } gen_case;

/* The generator's XML for case c (gpus_per_node 0: the generator's default). */
static char *gen_xml(const gen_case *c, int gpus_per_node) {
  plat_gen_params p;
  plat_gen_defaults(&p);
  p.topology = c->t;
  p.nodes = c->nodes;
  p.nodes_per_leaf = c->npl;
  p.nics_per_node = c->nics;
  p.oversubscription = c->oversub;
  if (gpus_per_node > 0) p.gpus_per_node = gpus_per_node;
  char *xml = plat_generate_xml(&p, NULL);
  CU_ASSERT_PTR_NOT_NULL_FATAL(xml);
  return xml;
}

/* The same file without the generator's comment: read route by route, with its own links. */
static void drop_structure(char *xml) {
  char *mark = strstr(xml, "<!-- written by dlsim platform:");
  CU_ASSERT_PTR_NOT_NULL_FATAL(mark);
  memcpy(mark, "<!-- written by someone else:  ", 31);
}

static void load_with_and_without_structure(const gen_case *c, int gpus_per_node, plat **gen, plat **raw) {
  GError *err = NULL;
  char *xml = gen_xml(c, gpus_per_node);
  *gen = plat_load_xml("gen.xml", xml, strlen(xml), &err);
  drop_structure(xml);
  *raw = plat_load_xml("gen.xml", xml, strlen(xml), &err);
  g_free(xml);
  CU_ASSERT_PTR_NOT_NULL_FATAL(*gen);
  CU_ASSERT_PTR_NOT_NULL_FATAL(*raw);
}

/* Whether routes_alike's definition holds pair by pair: every class among A's hosts is the one
 * among B's. */
static gboolean alike_pairwise(const plat *pl, const int *A, const int *B, int n) {
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++) {
      gint64 ka, kb;
      if (!plat_route_class(pl, A[i], A[j], &ka) || !plat_route_class(pl, B[i], B[j], &kb) ||
          ka != kb)
        return FALSE;
    }
  return TRUE;
}

/* plat_routes_alike against its definition, for host lists that are alike and that are not:
 * every host turned by a node, by a leaf group, by one GPU within its node, each list reversed,
 * and lists drawn at random (seeded). How many disagree. */
static int alike_wrong(const plat *pl) {
  const int n = plat_n_hosts(pl), g = plat_gpus_per_node(pl);
  int *A = g_new(int, n), *B = g_new(int, n), wrong = 0, seen[2] = {0, 0};
  GRand *rnd = g_rand_new_with_seed(7);
  for (int t = 0; t < 64; t++) {
    const int m = 1 + t % n, shift[] = {g, 2 * g, 4 * g}; /* a node, two, four */
    for (int i = 0; i < m; i++) {
      A[i] = t < 8 ? i : g_rand_int_range(rnd, 0, n);
      if (t % 8 < 4) B[i] = t % 8 == 3 ? (A[i] / g) * g + (A[i] % g + 1) % g
                                       : (A[i] + shift[t % 8]) % n;
      else if (t % 8 == 4) B[i] = n - 1 - A[i];
      else B[i] = g_rand_int_range(rnd, 0, n);
    }
    const gboolean want = alike_pairwise(pl, A, B, m);
    seen[want]++;
    wrong += plat_routes_alike(pl, A, B, m) != want;
  }
  CU_ASSERT(seen[0] > 0 && seen[1] > 0); /* both answers asked for */
  g_rand_free(rnd);
  g_free(A);
  g_free(B);
  return wrong;
}

/* A generated cluster's route depends only on the route class of its ends (same node, same
 * leaf group, GPU indices): plat_route answers per class; the same file without the generator's
 * comment is searched pair by pair, and every pair must agree. */
static void test_route_classes(void) {
  static const gen_case cases[] = {
      {PLAT_TOPO_RAIL, 12, 4, 8, 1},    {PLAT_TOPO_RAIL, 6, 0, 8, 1},
      {PLAT_TOPO_RAIL, 12, 3, 4, 1},    {PLAT_TOPO_RAIL, 9, 4, 2, 2},
      {PLAT_TOPO_FATTREE, 12, 4, 8, 2}, {PLAT_TOPO_FATTREE, 8, 2, 4, 4},
      {PLAT_TOPO_FATTREE, 5, 0, 8, 1},  {PLAT_TOPO_STAR, 6, 0, 8, 1},
      {PLAT_TOPO_RAIL, 7, 3, 8, 1},     {PLAT_TOPO_FATTREE, 7, 3, 8, 2},
      {PLAT_TOPO_RAIL, 5, 4, 8, 1},     {PLAT_TOPO_FATTREE, 5, 4, 2, 1},
  };
  for (size_t k = 0; k < G_N_ELEMENTS(cases); k++) {
    plat *by_class, *by_pair;
    load_with_and_without_structure(&cases[k], 0, &by_class, &by_pair);
    GError *err = NULL;
    int n = plat_n_hosts(by_pair), bad = 0;
    for (int a = 0; a < n; a++)
      for (int b = 0; b < n; b++) {
        plat_route_info x, y;
        CU_ASSERT_FATAL(plat_route(by_class, a, b, &x, &err) && plat_route(by_pair, a, b, &y, &err));
        if (x.latency_s != y.latency_s || x.bottleneck_bps != y.bottleneck_bps ||
            x.n_links != y.n_links) {
          if (!bad++)
            fprintf(stderr, "case %zu: %d -> %d: class %g s %g B/s, pair %g s %g B/s\n", k, a, b,
                    x.latency_s, x.bottleneck_bps, y.latency_s, y.bottleneck_bps);
        }
      }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(alike_wrong(by_class), 0);
    CU_ASSERT_FALSE(plat_routes_alike(by_pair, (int[]){0, 1}, (int[]){0, 1}, 2)); /* no classes */
    plat_free(by_class);
    plat_free(by_pair);
  }
}

/* Whether route x (n links) and route y share a link. */
static gboolean share(const plat_route_info *x, const plat_route_info *y) {
  for (int i = 0; i < x->n_links; i++)
    for (int j = 0; j < y->n_links; j++)
      if (x->links[i] == y->links[j]) return TRUE;
  return FALSE;
}

/* plat_node_links_private, which asks node 0 and two others of a generated cluster, against every
 * node and every route of the same file read without its structure: flows between unrelated
 * GPUs of a node apart, and no route but a cross-rail one into or out of the node on its links. */
static void test_node_links_private(void) {
  static const gen_case cases[] = {
      {PLAT_TOPO_RAIL, 6, 2, 4, 1},    {PLAT_TOPO_RAIL, 5, 0, 2, 1},
      {PLAT_TOPO_FATTREE, 6, 2, 4, 4}, {PLAT_TOPO_FATTREE, 4, 0, 2, 1},
      {PLAT_TOPO_STAR, 3, 0, 4, 1},    {PLAT_TOPO_RAIL, 1, 0, 4, 1},
  };
  for (size_t k = 0; k < G_N_ELEMENTS(cases); k++) {
    plat *gen, *raw;
    load_with_and_without_structure(&cases[k], 4, &gen, &raw);
    GError *err = NULL;
    const int n = plat_n_hosts(raw), g = plat_gpus_per_node(raw);
    plat_route_info *r = g_new(plat_route_info, (size_t)n * n);
    for (int a = 0; a < n; a++)
      for (int b = 0; b < n; b++) CU_ASSERT_FATAL(plat_route(raw, a, b, &r[a * n + b], &err));
    gboolean expect = cases[k].t != PLAT_TOPO_STAR;
    for (int a = 0; a < n; a++)
      for (int b = 0; b < n; b++) {
        if (a == b || a / g != b / g) continue;
        for (int c = 0; c < n; c++)
          for (int d = 0; d < n; d++) {
            if (c == d || (c == a && d == b)) continue;
            const int inside = c / g == d / g, node = c / g == a / g || d / g == a / g;
            /* a flow of unrelated ends in the node; any flow inside another node; a flow
             * between nodes, but for a cross-rail one into or out of this node */
            if (inside ? !node || (c != a && d != b) : !(node && c % g != d % g))
              expect &= !share(&r[a * n + b], &r[c * n + d]);
          }
      }
    GError *e = NULL;
    CU_ASSERT_EQUAL(plat_node_links_private(gen, &e), expect);
    CU_ASSERT_PTR_NULL(e);
    if (plat_node_links_private(gen, NULL) != expect) fprintf(stderr, "case %zu\n", k);
    CU_ASSERT_FALSE(plat_node_links_private(raw, NULL)); /* no structure: not asked */
    g_free(r);
    plat_free(gen);
    plat_free(raw);
  }
  /* acknowledgements on the reverse route share links */
  GError *err = NULL;
  static const char *const cross[] = {"network/crosstraffic:1", NULL};
  plat *pl = plat_load_cfg("thetagpu", cross, &err);
  CU_ASSERT_PTR_NOT_NULL_FATAL(pl);
  CU_ASSERT_FALSE(plat_node_links_private(pl, NULL));
  plat_free(pl);
  pl = plat_load("thetagpu", &err);
  CU_ASSERT_PTR_NOT_NULL_FATAL(pl);
  CU_ASSERT_TRUE(plat_node_links_private(pl, NULL));
  plat_free(pl);
}

/* plat_fold_xml: a generated cluster with a NIC per GPU (rail or fat tree) written to a file, and
 * its folded copy. Every route keeps its links' count and latency; the bandwidth of each link on
 * it is kept, but for a fat tree's leaf uplinks, which keep 1/G; every route inside node x takes
 * the NVLink link of GPU 0 of the node each way. Other platforms are not folded. */
static void test_fold(void) {
  static const gen_case cases[] = {
      {PLAT_TOPO_RAIL, 4, 2, 4, 1},    {PLAT_TOPO_FATTREE, 4, 2, 4, 4},
      {PLAT_TOPO_FATTREE, 3, 0, 4, 1}, {PLAT_TOPO_RAIL, 3, 0, 2, 1}, /* a NIC per 2 GPUs */
      {PLAT_TOPO_STAR, 2, 0, 4, 1},
  };
  GError *err = NULL;
  char *dir = dl_tmpdir_new("test-fold", &err);
  CU_ASSERT_PTR_NOT_NULL_FATAL(dir);
  char *file = g_build_filename(dir, "gen.xml", NULL);
  for (size_t k = 0; k < G_N_ELEMENTS(cases); k++) {
    char *xml = gen_xml(&cases[k], 4);
    CU_ASSERT_FATAL(g_file_set_contents(file, xml, -1, NULL));
    plat *pl = plat_load(file, &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(pl);
    char *folded = plat_fold_xml(pl, &err);
    CU_ASSERT_PTR_NULL(err);
    const gboolean foldable = cases[k].t != PLAT_TOPO_STAR && cases[k].nics == 4;
    CU_ASSERT_EQUAL(folded != NULL, foldable);
    /* loaded from text, the same platform is not folded */
    plat *text = plat_load_xml("gen.xml", xml, strlen(xml), &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(text);
    CU_ASSERT_PTR_NULL(plat_fold_xml(text, &err));
    plat_free(text);
    plat_free(pl);
    if (!folded) {
      g_free(xml);
      continue;
    }
    /* both read without the generator's comment: routed pair by pair, with their own links */
    drop_structure(xml);
    drop_structure(folded);
    pl = plat_load_xml("gen.xml", xml, strlen(xml), &err);
    plat *f = plat_load_xml("folded.xml", folded, strlen(folded), &err);
    g_free(xml);
    CU_ASSERT_FATAL(pl && f);
    const int n = plat_n_hosts(pl), g = 4;
    CU_ASSERT_EQUAL_FATAL(plat_n_hosts(f), n);
    GRegex *nvl = g_regex_new("^(n[0-9]+g)[0-9]+(_nvl_)", 0, 0, NULL);
    int bad = 0;
    for (int a = 0; a < n; a++)
      for (int b = 0; b < n; b++) {
        plat_route_info x, y;
        CU_ASSERT_FATAL(plat_route(pl, a, b, &x, &err) && plat_route(f, a, b, &y, &err));
        gboolean ok = x.n_links == y.n_links && x.latency_s == y.latency_s;
        for (int i = 0; ok && i < x.n_links; i++) {
          const plat_link *lx = plat_link_at(pl, x.links[i]), *ly = plat_link_at(f, y.links[i]);
          const gboolean uplink = g_regex_match_simple("^l[0-9]+_up_", lx->name, 0, 0);
          ok = lx->lat_s == ly->lat_s &&
               fabs(ly->bps - (uplink && cases[k].t == PLAT_TOPO_FATTREE ? lx->bps / g : lx->bps)) <=
                   1e-9 * lx->bps;
          /* NVLink links become GPU 0's of their node; every other link stays itself */
          char *want = g_regex_replace(nvl, lx->name, -1, 0, "\\g<1>0\\g<2>", 0, NULL);
          ok = ok && strcmp(ly->name, want) == 0;
          g_free(want);
        }
        if (!ok && !bad++) fprintf(stderr, "case %zu: route %d -> %d differs\n", k, a, b);
      }
    CU_ASSERT_EQUAL(bad, 0);
    g_regex_unref(nvl);
    g_free(folded);
    plat_free(f);
    plat_free(pl);
  }
  g_remove(file);
  g_free(file);
  dl_tmpdir_remove(dir);
}

/* --degrade: the copy's routes through the scaled link (both directions) have its new bandwidth as
 * their bottleneck where it is the narrowest, every other route and every latency is the
 * original's; the text rewrite touches only the named <link>'s bandwidth, in either quote. */
static void test_degrade(void) {
  GError *err = NULL;
  plat *pl = plat_load("thetagpu", &err);
  CU_ASSERT_PTR_NOT_NULL_FATAL(pl);
  const char *names[] = {"n0g3_nic", NULL};
  const double f[] = {0.5};
  plat *cp = plat_degrade(pl, NULL, names, f, 1, &err);
  CU_ASSERT_PTR_NOT_NULL_FATAL(cp);
  CU_ASSERT_STRING_EQUAL(plat_path(cp), plat_path(pl));
  CU_ASSERT_STRING_NOT_EQUAL(plat_file(cp), plat_file(pl));
  CU_ASSERT_EQUAL(plat_nics_per_node(cp), plat_nics_per_node(pl));
  gint64 key;
  CU_ASSERT_FALSE(plat_route_class(cp, 0, 9, &key)); /* routed pair by pair */
  double nic = 0;
  for (int i = 0; i < plat_n_links(cp); i++)
    if (strcmp(plat_link_at(pl, i)->name, "n0g3_nic_UP") == 0) nic = plat_link_at(pl, i)->bps;
  CU_ASSERT_FATAL(nic > 0);
  int crossing = 0, bad = 0;
  for (int a = 0; a < 24; a++) /* nodes 0 to 2 */
    for (int b = 0; b < 24; b++) {
      plat_route_info x, y;
      CU_ASSERT_FATAL(plat_route(pl, a, b, &x, &err) && plat_route(cp, a, b, &y, &err));
      gboolean cross = FALSE;
      for (int i = 0; i < y.n_links; i++)
        cross |= g_str_has_prefix(plat_link_at(cp, y.links[i])->name, "n0g3_nic_");
      crossing += cross;
      const double want = cross ? MIN(x.bottleneck_bps, 0.5 * nic) : x.bottleneck_bps;
      bad += y.bottleneck_bps != want || y.latency_s != x.latency_s || y.n_links != x.n_links;
    }
  CU_ASSERT_EQUAL(crossing, 2 * 16); /* GPU 3 of node 0 to and from the 16 GPUs of nodes 1, 2 */
  CU_ASSERT_EQUAL(bad, 0);
  plat_free(cp);
  /* the text */
  const char *xml = "<link id='a' bandwidth='10GBps' latency='1us'/>\n"
                    "<link xid=\"b\" id=\"b\" latency=\"1us\" bandwidth=\"8Gbps\"/><link id=\"c\" "
                    "bandwidth=\"5GBps\"/>";
  const char *ab[] = {"a", "b"};
  const double fa[] = {0.5, 2};
  char *t = plat_xml_scale_links("p.xml", xml, ab, fa, 2, &err);
  CU_ASSERT_STRING_EQUAL(t, "<link id='a' bandwidth='5000000000Bps' latency='1us'/>\n"
                            "<link xid=\"b\" id=\"b\" latency=\"1us\" bandwidth=\"2000000000Bps\"/>"
                            "<link id=\"c\" bandwidth=\"5GBps\"/>");
  g_free(t);
  const char *d[] = {"d"};
  CU_ASSERT_PTR_NULL(plat_xml_scale_links("p.xml", xml, d, fa, 1, &err));
  CU_ASSERT(err && strstr(err->message, "--degrade d: p.xml has no <link id=\"d\">"));
  g_clear_error(&err);
  plat_free(pl);
}

static const dl_cu_test gen_tests[] = {
    DL_CU_TEST(test_generated_hosts), DL_CU_TEST(test_star), DL_CU_TEST(test_generator_errors),
    DL_CU_END};
static const dl_cu_test route_tests[] = {DL_CU_TEST(test_thetagpu_routes),
                                         DL_CU_TEST(test_route_classes),
                                         DL_CU_TEST(test_fattree_oversubscribed),
                                         DL_CU_TEST(test_three_tier),
                                         DL_CU_TEST(test_node_links_private),
                                         DL_CU_TEST(test_fold), DL_CU_TEST(test_degrade),
                                         DL_CU_END};
static const dl_cu_test reader_tests[] = {DL_CU_TEST(test_reader_errors), DL_CU_END};

const dl_cu_suite dl_cu_suites[] = {
    {"platform_gen", gen_tests}, {"platform_route", route_tests}, {"platform_reader", reader_tests},
    {NULL, NULL}};
