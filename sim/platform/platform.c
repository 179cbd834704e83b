/* platform.c — a platform as SimGrid loads it: dlsim-sgplat (sgplat.cpp) runs SimGrid's own
 * loader on the file and answers route questions through pipes, so the closed form and `dlsim
 * coll` see the hosts, links, routes and network settings SMPI sees, for any SimGrid 3.32 file
 * (<cluster> of every topology, Full, Floyd, Dijkstra zones, nested zones).
 *
 * Routes are asked once per pair and kept. On a two-tier cluster written by `dlsim platform` (its
 * comment says so, its hosts are n<node>g<gpu> in order and the GPUs' links alike) a route's
 * figures depend only on its class (plat_route_class), so one pair per class is asked; a
 * three-tier one is asked pair by pair.
 */
#include "platform/platform.h"

#include "core/child.h"
#include "core/config.h"
#include "core/dl_common.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef DLSIM_BINARY_DIR
#define DLSIM_BINARY_DIR "."
#endif

typedef struct {
  double latency_s; /* SimGrid's route latency */
  double bottleneck_bps;
  int n;            /* links */
  int links[];      /* link indices in route order */
} plat_route_rec;

struct plat {
  char *path;            /* file it came from (its name in messages) */
  char *file;            /* the file SimGrid loaded: path, or a degraded copy in tmpdir */
  char *tmpdir;          /* plat_degrade's directory (owned: dl_tmpdir_remove removes and frees
                            it in plat_free), or NULL */
  int nics;              /* plat_nics_per_node */
  GArray *hosts;         /* plat_host, document order */
  GArray *links;         /* plat_link, SimGrid's order (by name) */
  GStringChunk *strings; /* names and property values */
  GHashTable *config;    /* settings SimGrid holds off their default: key -> value */
  plat_factor bw_factor, lat_factor; /* smpi/bw-factor and lat-factor (n = 0: none) */
  double tcp_gamma_bytes; /* network/TCP-gamma (0: no window bound) */
  gboolean crosstraffic;  /* network/crosstraffic */
  double weight_s;        /* network/weight-S (0: a flow's sharing penalty is its route latency) */
  dl_child_talk sg;      /* dlsim-sgplat, answering routes */
  GHashTable *routes;    /* src * n_hosts + dst -> plat_route_rec */
  /* a cluster written by `dlsim platform` (see the top of this file) */
  gboolean structured;
  int s_nodes, s_gpn, s_npl; /* nodes, GPUs per node, nodes per leaf group */
  int s_nics;                /* NICs per node (0: a star) */
  int s_topo;                /* plat_topology of the comment, -1 when it names none */
};

/* ---- loading --------------------------------------------------------------------------------- */

/* dlsim-sgplat: $DLSIM_SGPLAT, else the one built beside the driver. */
static char *sgplat_path(void) {
  const char *env = g_getenv("DLSIM_SGPLAT");
  if (env && *env) return g_strdup(env);
  return g_build_filename(DLSIM_BINARY_DIR, "dlsim-sgplat", NULL);
}

/* "KEY=INT" in the generator's comment `text`, or -1. */
static int comment_int(const char *text, const char *key) {
  char *pat = g_strdup_printf(" %s=", key);
  const char *at = strstr(text, pat);
  int v = -1;
  if (at) {
    char *end = NULL;
    gint64 x = g_ascii_strtoll(at + strlen(pat), &end, 10);
    if (end != at + strlen(pat) && x > 0 && x <= G_MAXINT) v = (int)x;
  }
  g_free(pat);
  return v;
}

/* The generator's comment, if the file starts with one (its first 4 KiB). */
static void read_generator_comment(plat *pl, const char *file) {
  FILE *f = fopen(file, "r");
  if (!f) return;
  char head[4097];
  size_t n = fread(head, 1, sizeof head - 1, f);
  fclose(f);
  head[n] = '\0';
  const char *at = strstr(head, "<!-- written by dlsim platform:");
  const char *end = at ? strstr(at, "-->") : NULL;
  if (!end) return;
  char *t = g_strndup(at, (gsize)(end - at));
  pl->s_nodes = comment_int(t, "nodes");
  pl->s_gpn = comment_int(t, "gpus-per-node");
  pl->s_npl = comment_int(t, "nodes-per-leaf");
  pl->s_nics = comment_int(t, "nics-per-node");
  pl->s_topo = -1;
  const char *tp = strstr(t, " topology=");
  if (tp) {
    tp += strlen(" topology=");
    char *name = g_strndup(tp, strcspn(tp, " "));
    plat_topology topo;
    if (plat_topology_parse(name, &topo)) pl->s_topo = (int)topo;
    g_free(name);
  }
  if (pl->s_nics < 0 || (pl->s_gpn > 0 && pl->s_gpn % pl->s_nics)) pl->s_nics = 0;
  if (pl->s_npl < 0) pl->s_npl = pl->s_nodes;
  /* route classes, node links and folding know two tiers; a three-tier Clos (pods joined at a
   * core) is routed pair by pair */
  pl->structured = pl->s_nodes > 0 && pl->s_gpn > 0 && pl->s_npl > 0 && comment_int(t, "pods") < 2;
  g_free(t);
}

/* The generator's comment holds only if the hosts are its n<node>g<gpu> in order and the GPUs'
 * links are alike: those whose names differ only in their numbers (n5g0_nic_UP, n0g0_nic_UP)
 * have one bandwidth, latency and policy, so a route's class says what it costs; a file whose GPU
 * links were edited since is routed pair by pair. (Leaf and spine uplinks differ by design: a
 * partial leaf group has fewer.) */
static void check_structure(plat *pl) {
  if (!pl->structured) return;
  const guint n = pl->hosts->len;
  pl->structured = n == (guint)pl->s_nodes * (guint)pl->s_gpn;
  char id[48];
  for (guint i = 0; i < n && pl->structured; i++) {
    const plat_host *h = &g_array_index(pl->hosts, plat_host, i);
    g_snprintf(id, sizeof id, "n%ug%u", i / (guint)pl->s_gpn, i % (guint)pl->s_gpn);
    pl->structured = strcmp(h->id, id) == 0 && h->node == (int)(i / (guint)pl->s_gpn) &&
                     h->gpu == (int)(i % (guint)pl->s_gpn);
  }
  GHashTable *alike = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
  for (guint i = 0; i < pl->links->len && pl->structured; i++) {
    const plat_link *l = &g_array_index(pl->links, plat_link, i);
    if (l->name[0] != 'n' || !g_ascii_isdigit(l->name[1])) continue; /* not a GPU's or node's */
    char *shape = g_strdup(l->name);
    for (char *c = shape; *c; c++)
      if (g_ascii_isdigit(*c)) *c = '#';
    const plat_link *first = g_hash_table_lookup(alike, shape);
    if (!first) g_hash_table_insert(alike, shape, (gpointer)l);
    else {
      pl->structured = first->bps == l->bps && first->lat_s == l->lat_s &&
                       first->policy == l->policy;
      g_free(shape);
    }
  }
  g_hash_table_destroy(alike);
}


static gboolean number(const char *text, double *v) {
  char *end = NULL;
  *v = g_ascii_strtod(text, &end);
  return end != text && *end == '\0' && isfinite(*v);
}

/* One record of dlsim-sgplat's header (fields split at tabs). */
static gboolean header_record(plat *pl, char **f, int nf, GError **err) {
  const char *what = f[0];
  double a = 0, b = 0;
  if (strcmp(what, "cfg") == 0 && nf == 3) {
    g_hash_table_replace(pl->config, g_string_chunk_insert(pl->strings, f[1]),
                         g_string_chunk_insert(pl->strings, f[2]));
  } else if (strcmp(what, "host") == 0 && nf == 3) {
    plat_host h = {0};
    h.id = g_string_chunk_insert_const(pl->strings, f[1]);
    h.node = (int)pl->hosts->len;
    h.gpu_model = "";
    h.cpu_vendor = "";
    /* a kernel runs in simulation as (seconds x speed) flop of work: on a host below 1 flop/s
     * that work falls under SimGrid's precision and the kernel takes less than its time */
    if (!number(f[2], &h.speed_flops) || !(h.speed_flops >= 1 && h.speed_flops <= PLAT_MAX_FLOPS)) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: host %s: speed: expected 1 to %g flop/s, "
                  "such as \"312Tf\", got %s", pl->path, h.id, PLAT_MAX_FLOPS, f[2]);
      return FALSE;
    }
    g_array_append_val(pl->hosts, h);
  } else if (strcmp(what, "prop") == 0 && nf == 3 && pl->hosts->len) {
    plat_host *h = &g_array_index(pl->hosts, plat_host, pl->hosts->len - 1);
    const char *id = f[1], *v = f[2];
    char *end = NULL;
    if (strcmp(id, "gpu_model") == 0) {
      h->gpu_model = g_string_chunk_insert_const(pl->strings, v);
    } else if (strcmp(id, "cpu_vendor") == 0) {
      h->cpu_vendor = g_string_chunk_insert_const(pl->strings, v);
    } else if (strcmp(id, "gpu_mem_bytes") == 0) {
      /* 0 is no size: it would fall back to the spec sheet's silently */
      if (!number(v, &h->gpu_mem_bytes) ||
          !(h->gpu_mem_bytes > 0 && h->gpu_mem_bytes <= PLAT_MAX_MEM_BYTES)) {
        g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: host %s: gpu_mem_bytes: expected bytes > 0, "
                    "got \"%s\"", pl->path, h->id, v);
        return FALSE;
      }
    } else {
      gint64 x = g_ascii_strtoll(v, &end, 10);
      if (end == v || *end || x < 0 || x > G_MAXINT) {
        g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: host %s: %s: expected an index >= 0, got "
                    "\"%s\"", pl->path, h->id, id, v);
        return FALSE;
      }
      if (strcmp(id, "node") == 0) h->node = (int)x;
      else if (strcmp(id, "gpu") == 0) h->gpu = (int)x;
    }
  } else if (strcmp(what, "link") == 0 && nf == 5) {
    plat_link l = {0};
    l.name = g_string_chunk_insert_const(pl->strings, f[1]);
    if (!number(f[2], &a) || !(a >= PLAT_MIN_BPS && a <= PLAT_MAX_BPS)) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: link %s: bandwidth: expected %g to %g "
                  "bytes/s, such as \"25GBps\", got %s", pl->path, l.name, PLAT_MIN_BPS,
                  PLAT_MAX_BPS, f[2]);
      return FALSE;
    }
    if (!number(f[3], &b) || !(b >= 0 && b <= PLAT_MAX_LAT_S)) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: link %s: latency: expected 0 to %g s, such as "
                  "\"1us\", got %s", pl->path, l.name, PLAT_MAX_LAT_S, f[3]);
      return FALSE;
    }
    l.bps = a;
    l.lat_s = b;
    if (strcmp(f[4], "WIFI") == 0) { /* SMPI crashes on it; a GPU cluster has none */
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: link %s: sharing_policy WIFI is not supported; "
                  "use SHARED, SPLITDUPLEX or FATPIPE", pl->path, l.name);
      return FALSE;
    }
    l.policy = strcmp(f[4], "FATPIPE") == 0 ? PLAT_FATPIPE
               : strcmp(f[4], "NONLINEAR") == 0 ? PLAT_NONLINEAR
                                                : PLAT_SHARED;
    g_array_append_val(pl->links, l);
  } else {
    g_set_error(err, DL_ERROR, DL_ERR_INTERNAL, "%s: dlsim-sgplat said \"%s\" (%d fields)",
                pl->path, what, nf);
    return FALSE;
  }
  return TRUE;
}

/* A line from dlsim-sgplat without its newline (newly allocated), or NULL at its end. */
static char *sg_line(plat *pl) {
  char *line = NULL;
  size_t cap = 0;
  ssize_t n = pl->sg.out ? getline(&line, &cap, pl->sg.out) : -1;
  if (n < 0) {
    free(line);
    return NULL;
  }
  if (n > 0 && line[n - 1] == '\n') line[n - 1] = '\0';
  char *out = g_strdup(line);
  free(line);
  return out;
}

/* dlsim-sgplat stopped: its reason as the error, the file named `shown` instead of `file`. */
static void sg_failed(plat *pl, const char *file, const char *const *cfg, GError **err) {
  char *errtext = NULL;
  int ws = 0;
  dl_child_talk_close(&pl->sg, &errtext, &ws);
  GError *e = NULL;
  char *why = dl_simgrid_reason(errtext);
  const int sig = WIFSIGNALED(ws) ? WTERMSIG(ws) : 0;
  if (!why && (sig == SIGKILL || sig == SIGTERM || sig == SIGINT || sig == SIGHUP)) {
    /* stopped from outside (the OOM killer, a user): dlsim's failure, not the file's */
    g_set_error(&e, DL_ERROR, DL_ERR_INTERNAL, "%s: dlsim-sgplat was killed by signal %d while "
                "loading the platform", pl->path, sig);
  } else if (!why && WIFEXITED(ws) && WEXITSTATUS(ws) == 127) {
    char *exe = sgplat_path();
    g_set_error(&e, DL_ERROR, DL_ERR_IO, "%s: cannot run %s (is dlsim built?)", pl->path, exe);
    g_free(exe);
  } else {
    dl_simgrid_failure(file, cfg, errtext, ws, &e);
    if (e->code == DL_ERR_INTERNAL) {
      /* SimGrid stopped on the file without a parse error: the file's fault, or that of a
       * setting given beside it, which the message then names too */
      char *last = why ? NULL : dl_last_line(errtext);
      char *given = cfg && cfg[0] ? g_strjoinv(" ", (char **)cfg) : NULL;
      g_clear_error(&e);
      g_set_error(&e, DL_ERROR, DL_ERR_INPUT, "%s%s%s: SimGrid cannot load the platform: %s",
                  pl->path, given ? " with --simgrid-cfg " : "", given ? given : "",
                  why ? why : last && *last ? last : "no reason given");
      g_free(given);
      g_free(last);
    }
  }
  g_free(why);
  if (strcmp(file, pl->path) != 0 && strstr(e->message, file)) {
    char **parts = g_strsplit(e->message, file, -1);
    char *m = g_strjoinv(pl->path, parts);
    g_strfreev(parts);
    g_free(e->message);
    e->message = m;
  }
  g_propagate_error(err, e);
  g_free(errtext);
}

/* Where setting `key` came from, for a message: --simgrid-cfg when an item of `cfg` sets it (those
 * override the file), else the file's <config>. */
static char *setting_source(const plat *pl, const char *const *cfg, const char *key) {
  for (int i = 0; cfg && cfg[i]; i++)
    if (g_str_has_prefix(cfg[i], key) && cfg[i][strlen(key)] == ':')
      return g_strdup_printf("--simgrid-cfg %s", key);
  return g_strdup_printf("%s: <config> %s", pl->path, key);
}

/* The network settings of the closed form: the file's (or --simgrid-cfg's), dlsim's defaults
 * where both are silent. Each within what a network can be: factors that scale a message's time
 * by more than 1,000 either way, a negative or non-finite window or weight, give times that mean
 * nothing (SimGrid's own SMPI factors lie between 0.3 and 12). */
static gboolean read_netcfg(plat *pl, const char *const *cfg, GError **err) {
  const char *keys[] = {"smpi/bw-factor", "smpi/lat-factor"};
  plat_factor *fs[] = {&pl->bw_factor, &pl->lat_factor};
  for (int k = 0; k < 2; k++) {
    const char *v = plat_config(pl, keys[k]);
    if (!v) continue;
    gboolean ok = plat_factor_parse(v, fs[k]), one = TRUE;
    for (int i = 0; ok && i < fs[k]->n; i++) {
      const double f = fs[k]->pairs[2 * i + 1];
      one &= f == 1.0;
      /* a bandwidth factor of 0 stops every flow; a latency factor of 0 is no latency */
      ok = (k == 1 ? f >= 0 : f >= 1e-3) && f <= 1e3;
    }
    if (!ok) {
      char *src = setting_source(pl, cfg, keys[k]);
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s '%s': expected SIZE:FACTOR;... with sizes >= 0 "
                  "and factors in %s", src, v, k == 0 ? "[0.001, 1000]" : "[0, 1000]");
      g_free(src);
      return FALSE;
    }
    if (one) plat_factor_clear(fs[k]);
  }
  /* as dlsim-sgplat prints them: a number, and a boolean as 0 or 1 */
  const char *nums[] = {"network/TCP-gamma", "network/weight-S"};
  double *into[] = {&pl->tcp_gamma_bytes, &pl->weight_s};
  for (int k = 0; k < 2; k++) {
    const char *v = plat_config(pl, nums[k]);
    char *end = NULL;
    *into[k] = v ? g_ascii_strtod(v, &end) : 0;
    if (v && (end == v || *end || !(*into[k] >= 0 && *into[k] <= 1e18))) {
      char *src = setting_source(pl, cfg, nums[k]);
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s '%s': expected a number in [0, 1e18]", src, v);
      g_free(src);
      return FALSE;
    }
  }
  const char *v = plat_config(pl, "network/crosstraffic");
  pl->crosstraffic = v && strcmp(v, "1") == 0;
  return TRUE;
}

/* The attributes of an element's text `tag` (`<name a="x" b='y'>`), in file order: names at even
 * places, values (either quote) after them (newly allocated; g_ptr_array_unref). The checks
 * below read the file's text with it before SimGrid does. */
static GPtrArray *tag_attrs(const char *tag) {
  static GRegex *at;
  if (g_once_init_enter(&at))
    g_once_init_leave(&at, g_regex_new("\\b(\\w+)\\s*=\\s*(\"([^\"]*)\"|'([^']*)')",
                                       G_REGEX_RAW, 0, NULL));
  GPtrArray *kv = g_ptr_array_new_with_free_func(g_free);
  GMatchInfo *a = NULL;
  g_regex_match(at, tag, 0, &a);
  for (; g_match_info_matches(a); g_match_info_next(a, NULL)) {
    char *v = g_match_info_fetch(a, 3);
    if (!*v) {
      g_free(v);
      v = g_match_info_fetch(a, 4);
    }
    g_ptr_array_add(kv, g_match_info_fetch(a, 1));
    g_ptr_array_add(kv, v);
  }
  g_match_info_free(a);
  return kv;
}

/* The first value of attribute `name` in tag_attrs' `kv` (borrowed), or NULL. */
static const char *attr_get(const GPtrArray *kv, const char *name) {
  for (guint i = 0; i + 1 < kv->len; i += 2)
    if (strcmp(kv->pdata[i], name) == 0) return kv->pdata[i + 1];
  return NULL;
}

/* Every <cluster radical="..."> of the platform text holds indices SimGrid can read (it stops
 * with "stoi" on one past an int): FALSE with a line naming the cluster otherwise. */
static gboolean check_radicals(plat *pl, const char *text, GError **err) {
  GRegex *cl = g_regex_new("<cluster\\b[^>]*>", G_REGEX_DOTALL | G_REGEX_RAW, 0, NULL);
  GMatchInfo *m = NULL;
  gboolean ok = TRUE;
  g_regex_match(cl, text, 0, &m);
  for (; ok && g_match_info_matches(m); g_match_info_next(m, NULL)) {
    char *tag = g_match_info_fetch(m, 0);
    GPtrArray *kv = tag_attrs(tag);
    const char *id = attr_get(kv, "id"), *rad = attr_get(kv, "radical");
    /* "a-b,c,...": every number an int, and no more hosts than dlsim has ranks for (SimGrid
     * would make them all: 40 million hosts take minutes and gigabytes before any check). A
     * part that does not start with a number is left to SimGrid's own message. */
    gint64 hosts = 0;
    char **parts = rad ? g_strsplit(rad, ",", -1) : NULL;
    char *shown = rad ? g_strescape(rad, NULL) : NULL; /* the file's bytes, printable */
    for (char **q = parts; ok && q && *q; q++) {
      char **ends = g_strsplit(g_strstrip(*q), "-", 2);
      gint64 v[2];
      int n = 0;
      for (; ends[n] && ok; n++) { /* each as SimGrid's std::stoi reads it: leading digits */
        char *end = NULL;
        errno = 0;
        v[n] = g_ascii_strtoll(ends[n], &end, 10);
        if (end == ends[n]) {
          n = -1;
          break;
        }
        if (errno == ERANGE || v[n] > G_MAXINT || v[n] < G_MININT) {
          g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: cluster %s: radical %s: number out of "
                      "range", pl->path, id ? id : "(no id)", shown);
          ok = FALSE;
        }
      }
      g_strfreev(ends);
      if (n > 0) hosts += n == 2 ? MAX(0, v[1] - v[0] + 1) : 1;
      if (ok && hosts > CFG_MAX_GPUS) {
        g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: cluster %s: radical %s: more than %d hosts "
                    "(the most ranks dlsim runs)", pl->path, id ? id : "(no id)", shown,
                    CFG_MAX_GPUS);
        ok = FALSE;
      }
    }
    g_strfreev(parts);
    g_free(shown);
    g_ptr_array_unref(kv);
    g_free(tag);
  }
  g_match_info_free(m);
  g_regex_unref(cl);
  return ok;
}

/* What dlsim does not model, refused in every mode before SimGrid reads the file: hosts and links
 * whose speed, bandwidth, latency or state change over time (the *_file attributes of
 * SimGrid's profiles, and <trace>/<trace_connect> elements), and Vivaldi zones (latencies from
 * coordinates, no links to carry bandwidth). The closed form would take them as static links
 * and the simulation would fail inside SimGrid; one line names the element and the file. */
static gboolean check_static(plat *pl, const char *text, GError **err) {
  if (!strstr(text, "_file") && !strstr(text, "<trace") && !strstr(text, "ivaldi"))
    return TRUE; /* nothing of the kind: the common case, without a parse */
  GRegex *el = g_regex_new("<(\\w+)\\b[^>]*>", G_REGEX_DOTALL | G_REGEX_RAW, 0, NULL);
  GMatchInfo *m = NULL;
  gboolean ok = TRUE;
  g_regex_match(el, text, 0, &m);
  for (; ok && g_match_info_matches(m); g_match_info_next(m, NULL)) {
    char *tag = g_match_info_fetch(m, 0), *name = g_match_info_fetch(m, 1), *id = NULL;
    char *what = NULL;
    if (strcmp(name, "trace") == 0 || strcmp(name, "trace_connect") == 0)
      what = g_strdup_printf("a time-varying profile (<%s>)", name);
    GPtrArray *kv = tag_attrs(tag);
    for (guint i = 0; i + 1 < kv->len; i += 2) {
      const char *k = kv->pdata[i], *v = kv->pdata[i + 1];
      if (strcmp(k, "id") == 0 && !id) {
        id = g_strescape(v, NULL);
      } else if (!what && g_str_has_suffix(k, "_file") &&
                 (g_str_has_prefix(k, "speed") || g_str_has_prefix(k, "state") ||
                  g_str_has_prefix(k, "bandwidth") || g_str_has_prefix(k, "latency") ||
                  g_str_has_prefix(k, "availability"))) {
        what = g_strdup_printf("%s (a time-varying profile)", k);
      } else if (!what && strcmp(k, "routing") == 0 && g_ascii_strcasecmp(v, "Vivaldi") == 0) {
        what = g_strdup("routing Vivaldi (latencies from coordinates, no links)");
      }
    }
    g_ptr_array_unref(kv);
    if (what) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT,
                  "%s: <%s%s%s%s>: %s: dlsim models hosts and links that do not change, joined by "
                  "links; remove it", pl->path, name, id ? " id=\"" : "", id ? id : "",
                  id ? "\"" : "", what);
      ok = FALSE;
    }
    g_free(what);
    g_free(id);
    g_free(name);
    g_free(tag);
  }
  g_match_info_free(m);
  g_regex_unref(el);
  return ok;
}

/* The routes of the file as SimGrid would stop on them (an assertion, or a crash in its Dijkstra
 * routing): a route (or zoneRoute) between two points given twice in one zone, counting the
 * reverse a symmetrical one implies, and a route from a host to itself in a Dijkstra zone (a
 * Full zone takes it as the host's loopback). One line names the file, its line and the ends. */
static gboolean check_routes(plat *pl, const char *file_text, GError **err) {
  if (!strstr(file_text, "oute")) return TRUE; /* no <route> or <zoneRoute> */
  /* comments blanked (their line breaks kept, for the line numbers): SimGrid skips them */
  char *text = g_strdup(file_text);
  for (char *c = strstr(text, "<!--"); c; c = strstr(c, "<!--")) {
    char *e = strstr(c + 4, "-->");
    const char *stop = e ? e + 3 : c + strlen(c);
    for (; c < stop; c++)
      if (*c != '\n') *c = ' ';
  }
  GRegex *tag = g_regex_new("<(/?)(zoneRoute|zone|route)\\b([^>]*)>", G_REGEX_RAW, 0, NULL);
  GHashTable *seen = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
  GArray *zones = g_array_new(FALSE, FALSE, sizeof(int)); /* open zones: their numbers */
  GPtrArray *routing = g_ptr_array_new_with_free_func(g_free); /* by zone number */
  GMatchInfo *m = NULL;
  gboolean ok = TRUE;
  int line = 1;
  const char *counted = text;
  g_regex_match(tag, text, 0, &m);
  for (; ok && g_match_info_matches(m); g_match_info_next(m, NULL)) {
    int start, end;
    g_match_info_fetch_pos(m, 0, &start, &end);
    for (; counted < text + start; counted++) line += *counted == '\n';
    char *close = g_match_info_fetch(m, 1), *name = g_match_info_fetch(m, 2),
         *attrs = g_match_info_fetch(m, 3);
    GPtrArray *kv = tag_attrs(attrs);
    const char *src = attr_get(kv, "src"), *dst = attr_get(kv, "dst");
    const char *sym = attr_get(kv, "symmetrical"), *rt = attr_get(kv, "routing");
    const gboolean self_closed = g_str_has_suffix(attrs, "/");
    if (!strcmp(name, "zone") && *close && zones->len) {
      g_array_set_size(zones, zones->len - 1);
    } else if (!strcmp(name, "zone") && !*close && !self_closed) {
      const int z = (int)routing->len;
      g_ptr_array_add(routing, g_strdup(rt ? rt : ""));
      g_array_append_val(zones, z);
    } else if (!*close && src && dst && zones->len) {
      const int z = g_array_index(zones, int, zones->len - 1);
      const char *r = g_ptr_array_index(routing, z);
      if (!strcmp(name, "route") && !strcmp(src, dst) && g_str_has_prefix(r, "Dijkstra")) {
        g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s:%d: route from %s to itself, which SimGrid's "
                    "%s routing cannot take (a Full zone takes it as the host's loopback)",
                    pl->path, line, src, r);
        ok = FALSE;
      }
      const gboolean both = !sym || g_ascii_strcasecmp(sym, "no") != 0;
      for (int k = 0; ok && k < (both && strcmp(src, dst) ? 2 : 1); k++) {
        char *key = g_strdup_printf("%d %s\n%s\n%s", z, name, k ? dst : src, k ? src : dst);
        const int was = GPOINTER_TO_INT(g_hash_table_lookup(seen, key)); /* 1 as given, 2 implied */
        if (was) {
          g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s:%d: %s from %s to %s given twice%s "
                      "(SimGrid stops on it)", pl->path, line, name, k ? dst : src,
                      k ? src : dst, k || was == 2 ? ", counting the reverse that a symmetrical "
                      "one implies" : "");
          ok = FALSE;
          g_free(key);
        } else {
          g_hash_table_insert(seen, key, GINT_TO_POINTER(1 + k));
        }
      }
    }
    g_ptr_array_unref(kv);
    g_free(close);
    g_free(name);
    g_free(attrs);
  }
  g_match_info_free(m);
  g_hash_table_destroy(seen);
  g_array_free(zones, TRUE);
  g_ptr_array_free(routing, TRUE);
  g_regex_unref(tag);
  g_free(text);
  return ok;
}

/* Loads `file` (shown as pl->path in messages) through dlsim-sgplat. */
static gboolean load_file(plat *pl, const char *file, const char *const *cfg, GError **err) {
  char *text = NULL; /* what SimGrid would take without a word, checked on the file's text */
  if (g_file_get_contents(file, &text, NULL, NULL)) { /* unreadable: the loader says why */
    /* a generated cluster's routes are the generator's, one per pair (a 100,000-GPU file holds
     * hundreds of thousands): not checked again */
    const gboolean generated = g_strstr_len(text, 4096, "<!-- written by dlsim platform:") != NULL;
    const gboolean ok = check_radicals(pl, text, err) && check_static(pl, text, err) &&
                        (generated || check_routes(pl, text, err));
    g_free(text);
    if (!ok) return FALSE;
  }
  char *exe = sgplat_path();
  GPtrArray *argv = g_ptr_array_new_with_free_func(g_free);
  g_ptr_array_add(argv, exe);
  g_ptr_array_add(argv, g_strdup(file));
  /* the network settings reported back (plat_config): the others (smpi/ ones among them) are
   * declared only inside smpirun, which checks them */
  static const char *const net_keys[] = {
      "network/model",          "network/TCP-gamma",        "network/crosstraffic",
      "network/weight-S",       "network/latency-factor",   "network/bandwidth-factor",
      "smpi/bw-factor",         "smpi/lat-factor",          NULL};
  for (int i = 0; cfg && cfg[i]; i++) {
    const char *colon = strchr(cfg[i], ':');
    for (int k = 0; colon && net_keys[k]; k++)
      if ((size_t)(colon - cfg[i]) == strlen(net_keys[k]) &&
          strncmp(cfg[i], net_keys[k], strlen(net_keys[k])) == 0)
        g_ptr_array_add(argv, g_strdup_printf("--cfg=%s", cfg[i]));
  }
  g_ptr_array_add(argv, NULL);
  gboolean ok = dl_child_talk_open((const char *const *)argv->pdata, &pl->sg, err);
  g_ptr_array_free(argv, TRUE);
  if (!ok) return FALSE;
  char *first = sg_line(pl);
  ok = first && strcmp(first, "dlsim-sgplat\t1") == 0;
  g_free(first);
  gboolean ready = FALSE;
  while (ok && !ready) {
    char *line = sg_line(pl);
    if (!line) {
      ok = FALSE;
      break;
    }
    if (strcmp(line, "ready") == 0) ready = TRUE;
    else {
      char **f = g_strsplit(line, "\t", 6);
      ok = header_record(pl, f, (int)g_strv_length(f), err);
      g_strfreev(f);
      if (!ok) {
        g_free(line);
        return FALSE;
      }
    }
    g_free(line);
  }
  if (!ready) {
    sg_failed(pl, file, cfg, err);
    return FALSE;
  }
  if (pl->hosts->len == 0) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: no <host> found", pl->path);
    return FALSE;
  }
  read_generator_comment(pl, file);
  check_structure(pl);
  pl->nics = pl->structured && pl->s_nics > 0 ? pl->s_nics : plat_gpus_per_node(pl);
  return read_netcfg(pl, cfg, err);
}

static plat *plat_new(const char *path) {
  plat *pl = g_new0(plat, 1);
  pl->path = g_strdup(path);
  pl->file = g_strdup(path);
  pl->hosts = g_array_new(FALSE, TRUE, sizeof(plat_host));
  pl->links = g_array_new(FALSE, TRUE, sizeof(plat_link));
  pl->strings = g_string_chunk_new(4096);
  pl->config = g_hash_table_new(g_str_hash, g_str_equal);
  pl->routes = g_hash_table_new_full(g_int64_hash, g_int64_equal, g_free, g_free);
  pl->sg.pid = -1;
  pl->s_topo = -1;
  return pl;
}

plat *plat_load_xml(const char *path, const char *xml, gsize len, GError **err) {
  char *dir = dl_tmpdir_new("platform", err);
  if (!dir) return NULL;
  char *file = g_build_filename(dir, "platform.xml", NULL);
  plat *pl = NULL;
  if (g_file_set_contents(file, xml, (gssize)len, NULL)) {
    pl = plat_new(path);
    if (!load_file(pl, file, NULL, err)) g_clear_pointer(&pl, plat_free);
  } else {
    g_set_error(err, DL_ERROR, DL_ERR_IO, "%s: cannot write a temporary copy", path);
  }
  g_free(file);
  dl_tmpdir_remove(dir);
  return pl;
}

/* "PRESET:NODES" (e.g. "thetagpu:64"): the preset with that many nodes, written once into a cache
 * directory so that smpirun can read the same file. Returns the file's path, or NULL with
 * DL_ERR_INPUT. */
static char *scaled_preset(const char *spec, GError **err) {
  const char *colon = strchr(spec, ':');
  char *preset = g_strndup(spec, (gsize)(colon - spec));
  char *end = NULL;
  long nodes = strtol(colon + 1, &end, 10);
  char *path = NULL;
  plat_gen_params p;
  if (end == colon + 1 || *end || nodes < 1 || nodes > 65536) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--platform %s: expected PRESET:NODES with 1..65536 "
                "nodes", spec);
    goto out;
  }
  if (!plat_gen_preset(preset, &p, err)) goto out;
  p.nodes = (int)nodes;
  char *xml = plat_generate_xml(&p, err);
  if (!xml) goto out;
  char *dir = g_build_filename(g_get_user_cache_dir(), "dlsim", "platforms", NULL);
  char *file = g_strdup_printf("%s-%ld.xml", preset, nodes);
  path = g_build_filename(dir, file, NULL);
  if (g_mkdir_with_parents(dir, 0755) != 0 ||
      !dl_write_file_atomic(path, xml, strlen(xml), err)) {
    if (err && !*err)
      g_set_error(err, DL_ERROR, DL_ERR_IO, "%s: cannot create the platform cache", dir);
    g_clear_pointer(&path, g_free);
  }
  g_free(file);
  g_free(dir);
  g_free(xml);
out:
  g_free(preset);
  return path;
}

plat *plat_load_cfg(const char *name_or_path, const char *const *cfg, GError **err) {
  gboolean scaled = strchr(name_or_path, ':') && !strchr(name_or_path, '/') &&
                    !g_file_test(name_or_path, G_FILE_TEST_EXISTS);
  char *path = scaled ? scaled_preset(name_or_path, err)
                      : dl_resolve("--platform", "platforms", name_or_path, ".xml", err);
  if (!path) return NULL;
  plat *pl = NULL;
  if (access(path, R_OK) != 0) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: %s", path, g_strerror(errno));
  } else {
    pl = plat_new(path);
    if (!load_file(pl, path, cfg, err)) g_clear_pointer(&pl, plat_free);
  }
  g_free(path);
  return pl;
}

plat *plat_load(const char *name_or_path, GError **err) {
  return plat_load_cfg(name_or_path, NULL, err);
}

const char *plat_config(const plat *pl, const char *key) {
  return g_hash_table_lookup(pl->config, key);
}

const plat_factor *plat_bw_factor(const plat *pl) {
  return pl->bw_factor.n ? &pl->bw_factor : NULL;
}

const plat_factor *plat_lat_factor(const plat *pl) {
  return pl->lat_factor.n ? &pl->lat_factor : NULL;
}

void plat_smpi_cfg_defaults(const plat *pl, GPtrArray *out) {
  for (const char *const *c = plat_smpi_cfg(); *c; c++) {
    char *key = g_strndup(*c, (gsize)(strchr(*c, ':') - *c));
    if (!plat_config(pl, key)) g_ptr_array_add(out, g_strdup(*c));
    g_free(key);
  }
}

void plat_free(plat *pl) {
  if (!pl) return;
  if (pl->sg.pid > 0) dl_child_talk_close(&pl->sg, NULL, NULL);
  g_free(pl->path);
  g_free(pl->file);
  if (pl->tmpdir) dl_tmpdir_remove(pl->tmpdir); /* frees it */
  g_hash_table_destroy(pl->config);
  plat_factor_clear(&pl->bw_factor);
  plat_factor_clear(&pl->lat_factor);
  g_array_free(pl->hosts, TRUE);
  g_array_free(pl->links, TRUE);
  g_string_chunk_free(pl->strings);
  g_hash_table_destroy(pl->routes);
  g_free(pl);
}

/* ---- queries --------------------------------------------------------------------------------- */

const char *plat_path(const plat *pl) { return pl->path; }

const char *plat_file(const plat *pl) { return pl->file; }

int plat_n_hosts(const plat *pl) { return (int)pl->hosts->len; }

const plat_host *plat_host_at(const plat *pl, int i) {
  if (i < 0 || i >= (int)pl->hosts->len) return NULL;
  return &g_array_index(pl->hosts, plat_host, i);
}

int plat_host_index(const plat *pl, const char *id) {
  for (guint i = 0; i < pl->hosts->len; i++)
    if (strcmp(g_array_index(pl->hosts, plat_host, i).id, id) == 0) return (int)i;
  return -1;
}

int plat_n_links(const plat *pl) { return (int)pl->links->len; }

const plat_link *plat_link_at(const plat *pl, int i) {
  if (i < 0 || i >= (int)pl->links->len) return NULL;
  return &g_array_index(pl->links, plat_link, i);
}

int plat_nics_per_node(const plat *pl) { return pl->nics; }

int plat_gpus_per_node(const plat *pl) {
  GHashTable *count = g_hash_table_new(g_direct_hash, g_direct_equal);
  int best = 0;
  for (guint i = 0; i < pl->hosts->len; i++) {
    gpointer key = GINT_TO_POINTER(g_array_index(pl->hosts, plat_host, i).node);
    int c = GPOINTER_TO_INT(g_hash_table_lookup(count, key)) + 1;
    g_hash_table_insert(count, key, GINT_TO_POINTER(c));
    best = MAX(best, c);
  }
  g_hash_table_destroy(count);
  return best;
}

/* The parts of host h that plat_route_class compares: the host, its node, its leaf group, its
 * GPU's rail and index, and whether its leaf group is the smaller last one. */
enum { PART_HOST, PART_NODE, PART_LEAF, PART_RAIL, PART_GPU, N_PARTS };
static void route_parts(const plat *pl, int h, int part[N_PARTS], gboolean *partial) {
  const int g = pl->s_gpn, npl = pl->s_npl, node = h / g;
  const int pg = pl->s_nodes % npl ? pl->s_nodes / npl : -1;
  const int per_nic = pl->s_nics > 0 ? g / pl->s_nics : g;
  part[PART_HOST] = h, part[PART_NODE] = node, part[PART_LEAF] = node / npl;
  part[PART_RAIL] = (h % g) / per_nic, part[PART_GPU] = h % g;
  *partial = node / npl == pg;
}

/* Whether host h has a route class: a host of a generated cluster. */
static gboolean classed(const plat *pl, int h) {
  return pl->structured && h >= 0 && h < (int)pl->hosts->len;
}

gboolean plat_route_class(const plat *pl, int a, int b, gint64 *key) {
  if (!classed(pl, a) || !classed(pl, b)) return FALSE;
  /* one host; two GPUs of one node (NVLink, whichever GPUs); else: same leaf group, whether
   * each end is in the last group when that one is smaller (its uplink is narrower), and the
   * GPU indices (rails: GPUs behind one NIC) */
  int pa[N_PARTS], pb[N_PARTS];
  gboolean fa, fb;
  route_parts(pl, a, pa, &fa);
  route_parts(pl, b, pb, &fb);
  if (a == b) *key = -1;
  else if (pa[PART_NODE] == pb[PART_NODE]) *key = -2;
  else
    *key = (((gint64)(pa[PART_LEAF] == pb[PART_LEAF]) * 2 + fa) * 2 + fb) * 4 +
           (pa[PART_RAIL] == pb[PART_RAIL]) * 2 + (pa[PART_GPU] == pb[PART_GPU]);
  return TRUE;
}

/* Whether the hosts of A and B fall alike into every part of route_parts: for each part, the
 * first i sharing A[j]'s value is the first sharing B[j]'s, and the last-group flags agree. Then
 * every pair's class, made of those equalities and flags, is the same in both. */
static gboolean parts_alike(const plat *pl, const int *A, const int *B, int n) {
  GHashTable *first[2][N_PARTS];
  for (int s = 0; s < 2; s++)
    for (int q = 0; q < N_PARTS; q++) first[s][q] = g_hash_table_new(g_direct_hash, NULL);
  gboolean same = TRUE;
  for (int j = 0; j < n && same; j++) {
    int part[2][N_PARTS];
    gboolean partial[2];
    route_parts(pl, A[j], part[0], &partial[0]);
    route_parts(pl, B[j], part[1], &partial[1]);
    same = partial[0] == partial[1];
    for (int q = 0; q < N_PARTS && same; q++) {
      int at[2];
      for (int s = 0; s < 2; s++) {
        const gpointer v = GINT_TO_POINTER(part[s][q] + 1);
        const gpointer got = g_hash_table_lookup(first[s][q], v);
        at[s] = got ? GPOINTER_TO_INT(got) - 1 : j;
        if (!got) g_hash_table_insert(first[s][q], v, GINT_TO_POINTER(j + 1));
      }
      same = at[0] == at[1];
    }
  }
  for (int s = 0; s < 2; s++)
    for (int q = 0; q < N_PARTS; q++) g_hash_table_destroy(first[s][q]);
  return same;
}

gboolean plat_routes_alike(const plat *pl, const int *A, const int *B, int n) {
  for (int j = 0; j < n; j++)
    if (!classed(pl, A[j]) || !classed(pl, B[j])) return FALSE;
  if (parts_alike(pl, A, B, n)) return TRUE;
  /* the parts may differ where the classes do not (rails across one node): pair by pair */
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++) {
      gint64 ka, kb;
      plat_route_class(pl, A[i], A[j], &ka);
      plat_route_class(pl, B[i], B[j], &kb);
      if (ka != kb) return FALSE;
    }
  return TRUE;
}

/* The route SimGrid gives from host a to host b, asked once (cached in pl). */
static const plat_route_rec *route_of(const plat *cpl, int a, int b, GError **err) {
  plat *pl = (plat *)cpl; /* the cache and the pipe change; what the plat says does not */
  const gint64 key = (gint64)a * (gint64)pl->hosts->len + b;
  plat_route_rec *r = g_hash_table_lookup(pl->routes, &key);
  if (r) return r;
  if (a == b) {
    r = g_malloc0(sizeof *r);
    r->bottleneck_bps = INFINITY;
  } else {
    char *line = NULL;
    if (pl->sg.in && fprintf(pl->sg.in, "%d %d\n", a, b) > 0 && fflush(pl->sg.in) == 0)
      line = sg_line(pl);
    if (!line) {
      /* SimGrid 3.32's Dijkstra zones crash on a pair with no route: the file's fault */
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: no route from %s to %s (SimGrid stopped on "
                  "it)", pl->path, plat_host_at(pl, a)->id, plat_host_at(pl, b)->id);
      return NULL;
    }
    char **f = g_strsplit(line, "\t", -1);
    const int nf = (int)g_strv_length(f);
    int n = nf >= 3 && strcmp(f[0], "route") == 0 ? atoi(f[2]) : -1;
    if (n < 0 || nf != 3 + n) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: no route from %s to %s", pl->path,
                  plat_host_at(pl, a)->id, plat_host_at(pl, b)->id);
      g_strfreev(f);
      g_free(line);
      return NULL;
    }
    r = g_malloc0(sizeof *r + (size_t)n * sizeof(int));
    r->latency_s = g_ascii_strtod(f[1], NULL);
    r->bottleneck_bps = INFINITY;
    r->n = n;
    for (int i = 0; i < n; i++) {
      r->links[i] = atoi(f[3 + i]);
      const plat_link *l = plat_link_at(pl, r->links[i]);
      if (!l) {
        g_set_error(err, DL_ERROR, DL_ERR_INTERNAL, "%s: dlsim-sgplat named link %d of %u",
                    pl->path, r->links[i], pl->links->len);
        g_free(r);
        g_strfreev(f);
        g_free(line);
        return NULL;
      }
      r->bottleneck_bps = MIN(r->bottleneck_bps, l->bps);
    }
    g_strfreev(f);
    g_free(line);
  }
  g_hash_table_insert(pl->routes, g_memdup2(&key, sizeof key), r);
  return r;
}

gboolean plat_route(const plat *pl, int src_host, int dst_host, plat_route_info *out,
                    GError **err) {
  int nh = (int)pl->hosts->len;
  if (src_host < 0 || src_host >= nh || dst_host < 0 || dst_host >= nh) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: route %d -> %d: host index out of 0..%d",
                pl->path, src_host, dst_host, nh - 1);
    return FALSE;
  }
  gint64 key;
  int a = src_host, b = dst_host;
  if (src_host != dst_host && plat_route_class(pl, src_host, dst_host, &key)) {
    /* a generated cluster: the route of the class's first pair: GPUs 0 and 1 of one node;
     * across nodes GPU 0 to GPU 0 (one GPU), to GPU 1 (one rail, two GPUs) or to the first GPU
     * of the next rail */
    const int g = pl->s_gpn, npl = pl->s_npl, na = src_host / g, nb = dst_host / g;
    int ga = src_host % g, gb = dst_host % g;
    const int pg = pl->s_nodes % npl ? pl->s_nodes / npl : -1; /* the smaller group, or -1 */
    const int same_node = na == nb, same_leaf = na / npl == nb / npl;
    const int pa = na / npl == pg, pb = nb / npl == pg;
    const int per_nic = pl->s_nics > 0 ? g / pl->s_nics : g;
    if (same_node) ga = 0, gb = 1;
    else if (ga == gb) ga = gb = 0;
    else if (ga / per_nic == gb / per_nic) ga = 0, gb = 1;
    else ga = 0, gb = per_nic;
    const int from = pa ? pg * npl : 0;
    const int to = same_node ? from : same_leaf ? from + 1 : pb ? pg * npl : from ? 0 : npl;
    a = from * g + ga;
    b = to * g + gb;
  }
  const plat_route_rec *r = route_of(pl, a, b, err);
  if (!r) return FALSE;
  out->latency_s = r->latency_s;
  out->bottleneck_bps = r->bottleneck_bps;
  out->n_links = r->n;
  out->links = r->links;
  return TRUE;
}

gboolean plat_barrier_routes(const plat *pl, int n, GError **err) {
  n = MIN(n, (int)pl->hosts->len);
  if (pl->structured || n < 2) return TRUE; /* a generated cluster routes every pair */
  int p2 = 1;
  while (2 * p2 <= n) p2 *= 2;
  plat_route_info r;
  for (int a = 0; a < n; a++) {
    /* OMPI's recursive doubling (the simulation's smpi/barrier): a rank past the largest power
     * of two pairs with a - p2, the others with a ^ mask */
    int peers[34], k = 0;
    if (a >= p2) peers[k++] = a - p2;
    else {
      if (a + p2 < n) peers[k++] = a + p2;
      for (int mask = 1; mask < p2; mask *= 2) peers[k++] = a ^ mask;
    }
    for (int i = 0; i < k; i++)
      if (!plat_route(pl, a, peers[i], &r, NULL)) {
        g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: no route from %s to %s: the simulation's "
                    "barrier joins rank %d with rank %d (recursive doubling over the first %d "
                    "hosts), so every such pair needs one", pl->path, plat_host_at(pl, a)->id,
                    plat_host_at(pl, peers[i])->id, a, peers[i], n);
        return FALSE;
      }
  }
  return TRUE;
}

gboolean plat_node_links_private(const plat *pl, GError **err) {
  const char *model = plat_config(pl, "network/model");
  if (!pl->structured || pl->s_nics <= 0 || pl->s_gpn < 2 || pl->crosstraffic ||
      pl->tcp_gamma_bytes > 0 || (model && strcmp(model, "SMPI") != 0))
    return FALSE;
  const int g = pl->s_gpn;
  const plat_route_rec **in = g_new0(const plat_route_rec *, (size_t)g * g);
  GHashTable *inside = g_hash_table_new(g_direct_hash, g_direct_equal); /* link + 1 */
  gboolean ok = TRUE, private = TRUE;
  for (int a = 0; a < g && ok; a++)
    for (int b = 0; b < g && ok; b++)
      if (a != b && (ok = (in[a * g + b] = route_of(pl, a, b, err)) != NULL))
        for (int i = 0; i < in[a * g + b]->n; i++)
          g_hash_table_add(inside, GINT_TO_POINTER(in[a * g + b]->links[i] + 1));
  /* two flows of unrelated ends inside the node */
  for (int x = 0; ok && private && x < g * g; x++)
    for (int y = 0; in[x] && private && y < g * g; y++) {
      if (!in[y] || x / g == y / g || x % g == y % g) continue;
      for (int i = 0; private && i < in[x]->n; i++)
        for (int j = 0; private && j < in[y]->n; j++) private = in[x]->links[i] != in[y]->links[j];
    }
  /* routes between node 0 and node 1 (of its leaf group) or the last node, GPU to GPU of the
   * same index (one rail); and every route between those two nodes */
  const struct { int na, nb; gboolean one_rail; } pairs[] = {
      {0, 1, TRUE}, {0, pl->s_nodes - 1, TRUE}, {1, pl->s_nodes - 1, FALSE}};
  for (size_t o = 0; ok && private && o < G_N_ELEMENTS(pairs); o++) {
    const int na = pairs[o].na, nb = pairs[o].nb;
    if (nb <= na || nb >= pl->s_nodes) continue;
    for (int a = na * g; ok && private && a < (na + 1) * g; a++)
      for (int y = nb * g; ok && private && y < (nb + 1) * g; y++) {
        if (pairs[o].one_rail && y % g != a % g) continue;
        for (int dir = 0; ok && private && dir < 2; dir++) {
          const plat_route_rec *r = dir ? route_of(pl, y, a, err) : route_of(pl, a, y, err);
          if (!(ok = r != NULL)) break;
          for (int i = 0; private && i < r->n; i++)
            private = !g_hash_table_contains(inside, GINT_TO_POINTER(r->links[i] + 1));
        }
      }
  }
  g_hash_table_destroy(inside);
  g_free(in);
  return ok && private;
}

/* ---- folding the rotations of a node ------------------------------------------------------- */

/* A leaf uplink's bandwidth, divided by k; a bandwidth it cannot read makes the copy bad. */
typedef struct {
  int k;
  gboolean bad;
} uplink_fold;

static gboolean divide_bandwidth(const GMatchInfo *m, GString *out, gpointer data) {
  uplink_fold *u = data;
  char *head = g_match_info_fetch(m, 1), *bw = g_match_info_fetch(m, 2);
  double bps = 0;
  char num[G_ASCII_DTOSTR_BUF_SIZE];
  if (plat_parse_bandwidth(bw, &bps) && bps > 0)
    g_string_append_printf(out, "%sbandwidth=\"%sBps\"", head,
                           g_ascii_formatd(num, sizeof num, "%.17g", bps / u->k));
  else
    u->bad = TRUE;
  g_free(head);
  g_free(bw);
  return u->bad; /* stop */
}

char *plat_fold_xml(const plat *pl, GError **err) {
  const char *model = plat_config(pl, "network/model");
  const int g = pl->s_gpn;
  if (!pl->structured || g < 2 || pl->s_nics != g ||
      (pl->s_topo != PLAT_TOPO_RAIL && pl->s_topo != PLAT_TOPO_FATTREE) ||
      (model && strcmp(model, "SMPI") && strcmp(model, "CM02") && strcmp(model, "LV08")))
    return NULL;
  char *xml = NULL;
  GError *e = NULL;
  if (!g_file_get_contents(pl->file, &xml, NULL, &e)) { /* loaded from text: nothing to fold */
    g_error_free(e);
    return NULL;
  }
  /* every GPU's route to its NVSwitch takes GPU 0's NVLink link */
  GRegex *nvl = g_regex_new("(<route src=\"n([0-9]+)g[0-9]+\" dst=\"n\\2_nvsw\"><link_ctn "
                            "id=\"n\\2g)[0-9]+(_nvl\")",
                            G_REGEX_OPTIMIZE, 0, NULL);
  GRegex *up = g_regex_new("(<link id=\"l[0-9]+_up\" )bandwidth=\"([^\"]*)\"", G_REGEX_OPTIMIZE,
                           0, NULL);
  g_assert(nvl && up);
  GMatchInfo *m = NULL;
  int routes = 0;
  for (g_regex_match(nvl, xml, 0, &m); g_match_info_matches(m); g_match_info_next(m, NULL))
    routes++;
  g_match_info_free(m);
  char *out = NULL;
  if (routes == pl->s_nodes * g) { /* as the generator writes them: one per GPU */
    char *merged = g_regex_replace(nvl, xml, -1, 0, "\\g<1>0\\g<3>", 0, err);
    uplink_fold u = {g, FALSE};
    out = merged && pl->s_topo == PLAT_TOPO_FATTREE
              ? g_regex_replace_eval(up, merged, -1, 0, 0, divide_bandwidth, &u, err)
              : g_steal_pointer(&merged);
    g_free(merged);
    if (u.bad) g_clear_pointer(&out, g_free); /* an uplink edited by hand: not folded */
  }
  g_regex_unref(nvl);
  g_regex_unref(up);
  g_free(xml);
  return out;
}

gboolean plat_rails_apart(const plat *pl) {
  return pl->structured && pl->s_gpn >= 2 && pl->s_nics == pl->s_gpn &&
         pl->s_topo == PLAT_TOPO_RAIL;
}

/* ---- concurrent flows ------------------------------------------------------------------------ */

/* A flow alone on route r is held to the route's narrowest link and to TCP's window. */
/* The route's own bound on a flow: its narrowest link, TCP-gamma / (2 latency). */
static double route_bound(const plat *pl, const plat_route_info *r) {
  double b = r->bottleneck_bps;
  if (pl->tcp_gamma_bytes > 0 && r->latency_s > 0)
    b = MIN(b, pl->tcp_gamma_bytes / (2.0 * r->latency_s));
  return b;
}

/* Counts flow f's rate into *out, by the class of its hosts. */
static void flow_rate(const plat *pl, int a, int b, double rate, plat_flow_info *out) {
  out->rate_bps = MIN(out->rate_bps, rate);
  const plat_host *ha = plat_host_at(pl, a), *hb = plat_host_at(pl, b);
  if (ha->node == hb->node) out->intra_rate_bps = MIN(out->intra_rate_bps, rate);
  else out->inter_rate_bps = MIN(out->inter_rate_bps, rate);
}

/* Flows per (host, side, class) on a generated cluster: key of flow f's source or destination.
 * A star gives a host one link for everything: one class. */
static gpointer side_key(const plat *pl, int host, int dst_side, int other) {
  const int intra =
      pl->s_nics > 0 && plat_host_at(pl, host)->node == plat_host_at(pl, other)->node;
  return GINT_TO_POINTER(4 * host + 2 * dst_side + intra + 1);
}

/* Flow f's rate and route latency into rates[f] and lats[f] where asked (a flow from a host to
 * itself: INFINITY and 0). */
static void each_flow(double *rates, double *lats, int f, double rate, double lat) {
  if (rates) rates[f] = rate;
  if (lats) lats[f] = lat;
}

/* One step's flows on a platform of named links, as SimGrid's CM02 network model (SMPI's) shares
 * them (its max-min system, src/kernel/resource/models/network_cm02.cpp and lmm): every flow
 * crosses its route's links with coefficient 1 (and, with crosstraffic, its reverse route's with
 * 0.05); its sharing penalty is its route latency plus weight-S over each link's bandwidth (1
 * where that is 0); a link of capacity C gives the flows still unfixed on it the level
 * lambda = (C - what fixed flows take) / sum(coef / penalty), and each flow lambda / penalty;
 * the lowest level is fixed first, then the next (progressive filling). A FATPIPE link's level
 * is C over the largest coef / penalty of its unfixed flows, and fixing them takes nothing from
 * it (lmm's non-shared constraint: alike flows each get all of C). A flow is also held to its
 * route's narrowest link and TCP's window (route_bound). A flow whose route latency is 0 has
 * penalty 1, as SimGrid gives it (the case of an smpi/lat-factor of 0 for some sizes, which
 * would give that too, is not followed: the rates here are for any size). When a flow ends, the
 * others share again. All start together: fin[f], the time flow f of bytes[f] ends (s, before
 * the bandwidth factor; 0 for a host to itself, INFINITY for a flow that never moves), lat[f]
 * its route latency. */
typedef struct {
  int n;
  int *slot;    /* the links it crosses (indices into the step's link table) */
  double *coef; /* and how much of each it takes per byte/s */
  double pen, bound;
} fluid_flow;

static gboolean fluid(const plat *pl, const int *src, const int *dst, const double *bytes, int n,
                      double *fin, double *lat, GError **err) {
  fluid_flow *fl = g_new0(fluid_flow, n);
  GHashTable *idx = g_hash_table_new(g_direct_hash, g_direct_equal); /* link + 1 -> slot + 1 */
  GArray *cap = g_array_new(FALSE, FALSE, sizeof(double));
  GArray *fat = g_array_new(FALSE, FALSE, sizeof(char));
  GArray *use_s = g_array_new(FALSE, FALSE, sizeof(int));
  GArray *use_c = g_array_new(FALSE, FALSE, sizeof(double));
  const double back = pl->crosstraffic ? 0.05 : 0; /* SimGrid's acknowledgement traffic */
  gboolean ok = TRUE;
  plat_route_info r;
  int *first = g_new0(int, n + 1);
  for (int f = 0; f < n && ok; f++) {
    first[f] = (int)use_s->len;
    fin[f] = 0;
    lat[f] = 0;
    fl[f].bound = INFINITY;
    fl[f].pen = 1;
    if (src[f] == dst[f]) continue;
    double pen = 0;
    for (int dir = 0; dir < (back > 0 ? 2 : 1) && ok; dir++) {
      if (!(ok = plat_route(pl, dir ? dst[f] : src[f], dir ? src[f] : dst[f], &r, err))) break;
      const double coef = dir ? back : 1.0;
      if (!dir) {
        lat[f] = pen = r.latency_s;
        fl[f].bound = route_bound(pl, &r);
      }
      for (int i = 0; i < r.n_links; i++) {
        const plat_link *l = &g_array_index(pl->links, plat_link, r.links[i]);
        if (!dir && pl->weight_s > 0) pen += pl->weight_s / l->bps;
        gpointer key = GINT_TO_POINTER(r.links[i] + 1);
        int slot = GPOINTER_TO_INT(g_hash_table_lookup(idx, key)) - 1;
        if (slot < 0) {
          const char is_fat = l->policy == PLAT_FATPIPE;
          slot = (int)cap->len;
          g_array_append_val(cap, l->bps);
          g_array_append_val(fat, is_fat);
          g_hash_table_insert(idx, key, GINT_TO_POINTER(slot + 1));
        }
        g_array_append_val(use_s, slot);
        g_array_append_val(use_c, coef);
      }
    }
    fl[f].pen = lat[f] > 0 ? pen : 1; /* SimGrid: penalty 1 where the latency is 0 */
  }
  if (!ok) goto out;
  first[n] = (int)use_s->len;
  for (int f = 0; f < n; f++) {
    fl[f].n = first[f + 1] - first[f];
    fl[f].slot = fl[f].n ? (int *)(void *)use_s->data + first[f] : NULL;
    fl[f].coef = fl[f].n ? (double *)(void *)use_c->data + first[f] : NULL;
  }
  const int L = (int)cap->len;
  double *left = g_new(double, L), *usage = g_new(double, L), *rem = g_new(double, n),
         *rate = g_new(double, n);
  char *on = g_new0(char, n), *fixed = g_new(char, n);
  int active = 0;
  const char *is_fat = fat->data;
  for (int f = 0; f < n; f++) {
    if (src[f] == dst[f] || !(bytes[f] > 0)) continue;
    if (!(fl[f].pen < INFINITY)) fin[f] = INFINITY; /* a link of bandwidth 0 under weight-S */
    else on[f] = 1, rem[f] = bytes[f], active++;
  }
  double t = 0;
  while (ok && active > 0) {
    /* progressive filling of the flows still on */
    if (L) memcpy(left, cap->data, sizeof(double) * (size_t)L);
    int unfixed = 0;
    for (int f = 0; f < n; f++) fixed[f] = !on[f], unfixed += on[f], rate[f] = 0;
    while (unfixed > 0) {
      for (int l = 0; l < L; l++) usage[l] = 0;
      for (int f = 0; f < n; f++)
        for (int i = 0; !fixed[f] && i < fl[f].n; i++) {
          const int l = fl[f].slot[i];
          const double u = fl[f].coef[i] / fl[f].pen;
          usage[l] = is_fat[l] ? MAX(usage[l], u) : usage[l] + u;
        }
      double lvl = INFINITY;
      int by_link = -1, by_flow = -1;
      for (int l = 0; l < L; l++)
        if (usage[l] > 0 && MAX(left[l], 0) / usage[l] < lvl)
          lvl = MAX(left[l], 0) / usage[l], by_link = l, by_flow = -1;
      for (int f = 0; f < n; f++)
        if (!fixed[f] && fl[f].bound * fl[f].pen < lvl)
          lvl = fl[f].bound * fl[f].pen, by_flow = f, by_link = -1;
      for (int f = 0; f < n; f++) {
        if (fixed[f]) continue;
        gboolean hit = f == by_flow || (by_link < 0 && by_flow < 0);
        for (int i = 0; !hit && i < fl[f].n; i++) hit = fl[f].slot[i] == by_link;
        if (!hit) continue;
        rate[f] = f == by_flow ? fl[f].bound : lvl / fl[f].pen;
        fixed[f] = 1, unfixed--;
        for (int i = 0; i < fl[f].n; i++)
          if (!is_fat[fl[f].slot[i]]) left[fl[f].slot[i]] -= rate[f] * fl[f].coef[i];
      }
    }
    /* to the next flow's end (at once where nothing holds a flow back) */
    double dt = INFINITY;
    for (int f = 0; f < n; f++)
      if (on[f] && !(rate[f] < INFINITY)) fin[f] = t, on[f] = 0, active--;
    for (int f = 0; f < n; f++)
      if (on[f]) dt = MIN(dt, rem[f] / rate[f]);
    if (!active) break;
    if (!(dt < INFINITY)) { /* a flow held to 0 (a link of bandwidth 0): it never ends */
      for (int f = 0; f < n; f++)
        if (on[f]) fin[f] = INFINITY, on[f] = 0;
      break;
    }
    t += dt;
    for (int f = 0; f < n; f++) {
      if (!on[f]) continue;
      rem[f] -= rate[f] * dt;
      if (rem[f] <= 1e-12 * bytes[f]) fin[f] = t, on[f] = 0, active--;
    }
  }
  g_free(left);
  g_free(usage);
  g_free(rem);
  g_free(rate);
  g_free(on);
  g_free(fixed);
out:
  g_free(first);
  g_free(fl);
  g_hash_table_destroy(idx);
  g_array_free(cap, TRUE);
  g_array_free(fat, TRUE);
  g_array_free(use_s, TRUE);
  g_array_free(use_c, TRUE);
  return ok;
}

/* bytes: each flow's (NULL: alike); a cluster written by `dlsim platform` shares by endpoint
 * counts whatever they are. */
static gboolean flows(const plat *pl, const int *src, const int *dst, const double *bytes, int n,
                      plat_flow_info *out, double *rates, double *lats, GError **err) {
  for (int f = 0; f < n; f++) each_flow(rates, lats, f, INFINITY, 0);
  out->rate_bps = out->intra_rate_bps = out->inter_rate_bps = INFINITY;
  out->latency_s = 0;
  if (n < 1) return TRUE;
  if (pl->structured) {
    GHashTable *cnt = g_hash_table_new(g_direct_hash, g_direct_equal);
    for (int f = 0; f < n; f++) {
      if (src[f] == dst[f]) continue;
      for (int side = 0; side < 2; side++) {
        gpointer k = side_key(pl, side ? dst[f] : src[f], side, side ? src[f] : dst[f]);
        g_hash_table_insert(cnt, k, GINT_TO_POINTER(GPOINTER_TO_INT(g_hash_table_lookup(cnt, k)) + 1));
      }
    }
    plat_route_info r;
    gboolean ok = TRUE;
    for (int f = 0; f < n && ok; f++) {
      if (src[f] == dst[f]) continue;
      if (!(ok = plat_route(pl, src[f], dst[f], &r, err))) break;
      const int share = MAX(
          GPOINTER_TO_INT(g_hash_table_lookup(cnt, side_key(pl, src[f], 0, dst[f]))),
          GPOINTER_TO_INT(g_hash_table_lookup(cnt, side_key(pl, dst[f], 1, src[f]))));
      flow_rate(pl, src[f], dst[f], route_bound(pl, &r) / share, out);
      out->latency_s = MAX(out->latency_s, r.latency_s);
      each_flow(rates, lats, f, route_bound(pl, &r) / share, r.latency_s);
    }
    g_hash_table_destroy(cnt);
    return ok;
  }
  double *b = g_new(double, n), *fin = g_new(double, n), *lat = g_new(double, n);
  for (int f = 0; f < n; f++) b[f] = bytes ? bytes[f] : 1;
  const gboolean ok = fluid(pl, src, dst, b, n, fin, lat, err);
  for (int f = 0; ok && f < n; f++) {
    if (src[f] == dst[f]) continue;
    const double rate = fin[f] > 0 ? b[f] / fin[f] : INFINITY; /* over the time it takes */
    flow_rate(pl, src[f], dst[f], rate, out);
    out->latency_s = MAX(out->latency_s, lat[f]);
    each_flow(rates, lats, f, rate, lat[f]);
  }
  g_free(b);
  g_free(fin);
  g_free(lat);
  return ok;
}

gboolean plat_flows(const plat *pl, const int *src, const int *dst, int n, plat_flow_info *out,
                    GError **err) {
  return flows(pl, src, dst, NULL, n, out, NULL, NULL, err);
}

gboolean plat_flows_each(const plat *pl, const int *src, const int *dst, int n, double *rates,
                         double *lats, GError **err) {
  plat_flow_info out;
  return flows(pl, src, dst, NULL, n, &out, rates, lats, err);
}

gboolean plat_flows_bytes(const plat *pl, const int *src, const int *dst, const double *bytes,
                          int n, double *rates, double *lats, GError **err) {
  plat_flow_info out;
  return flows(pl, src, dst, bytes, n, &out, rates, lats, err);
}

/* ---- degraded copies --------------------------------------------------------------------------- */

plat *plat_degrade(const plat *pl, const char *const *cfg, const char *const *names,
                   const double *factors, int n, GError **err) {
  char *xml = NULL;
  gsize len = 0;
  if (!g_file_get_contents(pl->file, &xml, &len, NULL)) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "--degrade: %s: cannot read the platform again",
                pl->path);
    return NULL;
  }
  char *scaled = plat_xml_scale_links(pl->path, xml, names, factors, n, err);
  g_free(xml);
  if (!scaled) return NULL;
  char *dir = dl_tmpdir_new("platform", err);
  plat *cp = NULL;
  if (dir) {
    char *file = g_build_filename(dir, "platform.xml", NULL);
    if (dl_write_file_atomic(file, scaled, strlen(scaled), err)) {
      cp = plat_new(pl->path);
      g_free(cp->file);
      cp->file = file;
      file = NULL;
      cp->tmpdir = dir;
      dir = NULL;
      if (!load_file(cp, cp->file, cfg, err)) g_clear_pointer(&cp, plat_free);
    }
    g_free(file);
    if (dir) dl_tmpdir_remove(dir);
  }
  g_free(scaled);
  if (cp) {
    /* load_file checked that the GPUs' and nodes' links of the copy are still alike (every NIC
     * scaled alike keeps a cluster's classes); a scaled leaf or spine link, which that check
     * does not compare, makes the copy routed pair by pair. The comment's NICs per node hold. */
    for (int i = 0; i < n && cp->structured; i++)
      cp->structured = names[i][0] == 'n' && g_ascii_isdigit(names[i][1]);
    cp->nics = pl->nics;
  }
  return cp;
}

GPtrArray *plat_nic_links(const plat *pl) {
  /* the generator's comment names them (a cluster of several pods too, which is routed pair by
   * pair); hosts as it writes them */
  if (pl->s_nodes <= 0 || pl->s_gpn <= 0 || pl->s_nics <= 0 ||
      pl->hosts->len != (guint)pl->s_nodes * (guint)pl->s_gpn)
    return NULL;
  GPtrArray *out = g_ptr_array_new_with_free_func(g_free);
  const int per = pl->s_gpn / pl->s_nics;
  for (int node = 0; node < pl->s_nodes; node++)
    for (int k = 0; k < pl->s_nics; k++)
      g_ptr_array_add(out, per == 1 ? g_strdup_printf("n%dg%d_nic", node, k)
                                    : g_strdup_printf("n%d_nic%d", node, k));
  return out;
}
