/* platform.c — reads a SimGrid platform file (GMarkup) and routes like SimGrid's DijkstraCache.
 *
 * Accepted: <platform> with <config>/<prop> (ignored here), one <zone> routed by Dijkstra or
 * DijkstraCache holding <host> (with <prop>), <router>, <link> (with <prop>) and <route> (with
 * <link_ctn>). Anything else that routes (<cluster>, nested zones, <zoneRoute>, <bypassRoute>,
 * Full/Floyd routing...) is refused with a message: the closed form needs an explicit graph.
 *
 * Routing (SimGrid 3.32 src/kernel/routing/DijkstraZone.cpp, re-implemented): each <route> is an
 * edge (and its reverse when symmetrical) whose cost is its number of links; graph vertices are
 * numbered in order of first appearance as a route's src then dst. A priority queue ordered by
 * (cost, vertex number) is seeded with every vertex; popping v relaxes v's out-edges in the order
 * they were declared with a strict "<", so ties go to the earliest-popped predecessor.
 */
#include "platform/platform.h"

#include "core/dl_common.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  double bps;   /* bandwidth, bytes/s */
  double lat_s; /* latency, s */
} plat_link;

typedef struct {
  int dst;      /* target vertex */
  int first;    /* index of the edge's first link in plat.edge_links */
  int n;        /* number of links */
} plat_edge;

struct plat {
  char *path;            /* file it came from */
  GArray *hosts;         /* plat_host, document order */
  GStringChunk *strings; /* host ids and properties */
  GHashTable *netpoints; /* name -> GINT_TO_POINTER(netpoint index + 1) */
  int n_netpoints;       /* hosts and routers declared */
  GArray *host_np;       /* int: netpoint index of host i */
  GArray *links;         /* plat_link */
  GHashTable *link_ids;  /* link name -> GINT_TO_POINTER(link index + 1) */
  GArray *vertex_of_np;  /* int per netpoint: graph vertex, or -1 (in no route) */
  GPtrArray *out_edges;  /* per vertex: GArray of plat_edge, declaration order */
  GArray *edge_links;    /* int: link indices of all edges */
  GHashTable *pred_cache;/* vertex (+1) -> int array of predecessors (-1 = unreachable) */
  /* a cluster written by `dlsim platform` (its comment, checked against the hosts): a route
   * depends only on whether the ends share a node or a leaf group and on their GPU indices */
  gboolean structured;
  int s_nodes, s_gpn, s_npl; /* nodes, GPUs per node, nodes per leaf group */
  int s_nics;                /* NICs per node (0: a star) */
  GHashTable *class_cache;   /* route class -> plat_route_info */
  GHashTable *config;        /* <config><prop id value>: key -> value (strings in `strings`) */
  plat_factor bw_factor, lat_factor; /* <config>'s smpi/bw-factor and lat-factor (n = 0: 1) */
};

/* ---- parsing --------------------------------------------------------------------------------- */

typedef struct {
  plat *pl;            /* being filled */
  int zone_depth;      /* open <zone> elements */
  int n_zones;         /* zones seen */
  int cur_host;        /* host whose <prop> children we read, or -1 */
  int route_src;       /* vertex of the open route's src, or -1 */
  int route_dst;       /* its dst */
  gboolean route_sym;  /* symmetrical="YES" */
  GArray *route_links; /* link indices of the open route */
  char *route_names[2];/* src and dst of the open route, for messages */
  gboolean doctype;    /* <!DOCTYPE platform ...> seen */
} parse_state;

static void set_err(GMarkupParseContext *ctx, parse_state *st, GError **err, const char *fmt, ...)
    G_GNUC_PRINTF(4, 5);
static void set_err(GMarkupParseContext *ctx, parse_state *st, GError **err, const char *fmt, ...) {
  int line = 0, col = 0;
  g_markup_parse_context_get_position(ctx, &line, &col);
  va_list ap;
  va_start(ap, fmt);
  char *msg = g_strdup_vprintf(fmt, ap);
  va_end(ap);
  g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s:%d: %s", st->pl->path, line, msg);
  g_free(msg);
}

static const char *attr(const char **names, const char **values, const char *key) {
  for (int i = 0; names[i]; i++)
    if (strcmp(names[i], key) == 0) return values[i];
  return NULL;
}

static int np_lookup(const plat *pl, const char *name) {
  return GPOINTER_TO_INT(g_hash_table_lookup(pl->netpoints, name)) - 1;
}

static gboolean np_add(GMarkupParseContext *ctx, parse_state *st, const char *id, GError **err) {
  plat *pl = st->pl;
  if (!id || !*id) {
    set_err(ctx, st, err, "<%s> without id", g_markup_parse_context_get_element(ctx));
    return FALSE;
  }
  if (np_lookup(pl, id) >= 0) {
    set_err(ctx, st, err, "'%s' is declared twice", id);
    return FALSE;
  }
  g_hash_table_insert(pl->netpoints, g_string_chunk_insert(pl->strings, id),
                      GINT_TO_POINTER(++pl->n_netpoints));
  int none = -1;
  g_array_append_val(pl->vertex_of_np, none);
  return TRUE;
}

static int vertex_of(plat *pl, int np) {
  int v = g_array_index(pl->vertex_of_np, int, np);
  if (v < 0) {
    v = (int)pl->out_edges->len;
    g_array_index(pl->vertex_of_np, int, np) = v;
    g_ptr_array_add(pl->out_edges, g_array_new(FALSE, FALSE, sizeof(plat_edge)));
  }
  return v;
}

static gboolean add_edge(GMarkupParseContext *ctx, parse_state *st, int src, int dst,
                         const int *links, int n, gboolean reverse, const char *sname,
                         const char *dname, GError **err) {
  plat *pl = st->pl;
  GArray *out = g_ptr_array_index(pl->out_edges, src);
  for (guint i = 0; i < out->len; i++)
    if (g_array_index(out, plat_edge, i).dst == dst) {
      set_err(ctx, st, err, "route from %s to %s already exists", sname, dname);
      return FALSE;
    }
  plat_edge e = {dst, (int)pl->edge_links->len, n};
  for (int i = 0; i < n; i++) g_array_append_val(pl->edge_links, links[reverse ? n - 1 - i : i]);
  g_array_append_val(out, e);
  return TRUE;
}

/* Where each element may appear (SimGrid's DTD 4.1, the part read here). */
static const struct { const char *el, *parents; } placement[] = {
    {"platform", ""},           {"config", "platform"},     {"zone", "platform"},
    {"AS", "platform"},         {"host", "zone AS"},        {"router", "zone AS"},
    {"link", "zone AS"},        {"route", "zone AS"},       {"link_ctn", "route"},
    {"prop", "config host link zone AS router"},
};

static gboolean placed(GMarkupParseContext *ctx, parse_state *st, const char *el,
                       const char *parent, GError **err) {
  for (size_t i = 0; i < G_N_ELEMENTS(placement); i++) {
    if (strcmp(el, placement[i].el) != 0) continue;
    if (!parent) {
      if (!*placement[i].parents) return TRUE;
    } else {
      char **ok = g_strsplit(placement[i].parents, " ", -1);
      gboolean in = g_strv_contains((const char *const *)ok, parent);
      g_strfreev(ok);
      if (in) return TRUE;
    }
    GString *where = g_string_new(NULL);
    char **ok = g_strsplit(placement[i].parents, " ", -1);
    for (char **p = ok; *p && **p; p++)
      g_string_append_printf(where, "%s<%s>", p == ok ? "" : " or ", *p);
    g_strfreev(ok);
    set_err(ctx, st, err, "<%s> %s%s%s: expected it %s%s", el, parent ? "inside <" : "",
            parent ? parent : "at the top", parent ? ">" : "", where->len ? "inside " : "",
            where->len ? where->str : "at the top (the root element)");
    g_string_free(where, TRUE);
    return FALSE;
  }
  return TRUE; /* unknown elements get their own message */
}

/* `what` of link or host `id` as a number in [lo, hi] with SimGrid units. */
static gboolean ranged(GMarkupParseContext *ctx, parse_state *st, gboolean parsed, double v,
                       double lo, gboolean open_lo, double hi, const char *unit,
                       const char *what, const char *id, const char *text, const char *example,
                       GError **err) {
  if (parsed && (open_lo ? v > lo : v >= lo) && v <= hi) return TRUE;
  set_err(ctx, st, err, "%s: %s: expected %s%g to %g %s, such as \"%s\", got \"%s\"", id, what,
          open_lo ? "more than " : "", lo, hi, unit, example, text ? text : "");
  return FALSE;
}

/* What the closed form takes as plausible: beyond these a file is wrong, and sums of such
 * figures would overflow. */
#define PLAT_MAX_LAT_S 3600.0
#define PLAT_MAX_BPS 1e18
#define PLAT_MAX_FLOPS 1e24

static void on_start(GMarkupParseContext *ctx, const char *el, const char **names,
                     const char **values, gpointer data, GError **err) {
  parse_state *st = data;
  plat *pl = st->pl;
  const char *parent = NULL;
  const GSList *stack = g_markup_parse_context_get_element_stack(ctx);
  if (stack && stack->next) parent = stack->next->data;
  if (!placed(ctx, st, el, parent, err)) return;

  if (strcmp(el, "platform") == 0) {
    const char *v = attr(names, values, "version");
    if (!st->doctype) {
      set_err(ctx, st, err, "expected <!DOCTYPE platform SYSTEM "
              "\"https://simgrid.org/simgrid.dtd\"> before <platform> (SimGrid reads no file "
              "without it)");
      return;
    }
    if (!v || !g_str_has_prefix(v, "4.")) {
      set_err(ctx, st, err, "<platform version=\"%s\">: expected version 4.x (DTD 4.1)",
              v ? v : "");
    }
  } else if (strcmp(el, "prop") == 0 && parent && strcmp(parent, "config") == 0) {
    /* SimGrid's settings for this platform (the network model's among them) */
    const char *id = attr(names, values, "id"), *v = attr(names, values, "value");
    if (id && v)
      g_hash_table_replace(pl->config, g_string_chunk_insert(pl->strings, id),
                           g_string_chunk_insert(pl->strings, v));
  } else if (strcmp(el, "config") == 0 || (strcmp(el, "prop") == 0 && parent &&
                                           (strcmp(parent, "link") == 0 ||
                                            strcmp(parent, "zone") == 0 ||
                                            strcmp(parent, "router") == 0))) {
    /* network settings and properties that do not change routes */
  } else if (strcmp(el, "zone") == 0 || strcmp(el, "AS") == 0) {
    const char *r = attr(names, values, "routing");
    if (st->zone_depth > 0 || st->n_zones > 0) {
      set_err(ctx, st, err, "nested or several zones are not supported: the closed form needs one "
              "explicit-graph zone as written by `dlsim platform`");
    } else if (!r || (strcmp(r, "Dijkstra") != 0 && strcmp(r, "DijkstraCache") != 0)) {
      set_err(ctx, st, err, "<zone routing=\"%s\"> is not supported: the closed form needs "
              "routing=\"DijkstraCache\" (an explicit graph as written by `dlsim platform`)",
              r ? r : "");
    }
    st->zone_depth++;
    st->n_zones++;
  } else if (strcmp(el, "host") == 0) {
    const char *id = attr(names, values, "id");
    if (!np_add(ctx, st, id, err)) return;
    plat_host h = {0};
    h.id = g_string_chunk_insert_const(pl->strings, id);
    h.node = (int)pl->hosts->len;
    h.gpu = 0;
    h.gpu_model = "";
    const char *sp = attr(names, values, "speed");
    char *first = sp ? g_strndup(sp, strcspn(sp, ",")) : NULL; /* pstates: "1Gf,500Mf" */
    gboolean ok = first && plat_parse_speed(g_strstrip(first), &h.speed_flops);
    g_free(first);
    char *what = g_strdup_printf("host %s", id);
    ok = ranged(ctx, st, ok, h.speed_flops, 0, TRUE, PLAT_MAX_FLOPS, "flop/s", "speed", what, sp,
                "312Tf", err);
    g_free(what);
    if (!ok) return;
    g_array_append_val(pl->hosts, h);
    int np = pl->n_netpoints - 1;
    g_array_append_val(pl->host_np, np);
    st->cur_host = (int)pl->hosts->len - 1;
  } else if (strcmp(el, "prop") == 0 && parent && strcmp(parent, "host") == 0) {
    if (st->cur_host < 0) return; /* a failed <host> reported already */
    plat_host *h = &g_array_index(pl->hosts, plat_host, st->cur_host);
    const char *id = attr(names, values, "id"), *v = attr(names, values, "value");
    if (!id || !v) {
      set_err(ctx, st, err, "<prop> needs id and value");
      return;
    }
    char *end = NULL;
    if (strcmp(id, "gpu_model") == 0) {
      h->gpu_model = g_string_chunk_insert_const(pl->strings, v);
    } else if (strcmp(id, "gpu_mem_bytes") == 0) {
      h->gpu_mem_bytes = g_ascii_strtod(v, &end);
      if (end == v || *end || !(h->gpu_mem_bytes >= 0 && h->gpu_mem_bytes <= 1e18))
        set_err(ctx, st, err, "host %s: gpu_mem_bytes: expected bytes, got \"%s\"", h->id, v);
    } else if (strcmp(id, "node") == 0 || strcmp(id, "gpu") == 0) {
      gint64 x = g_ascii_strtoll(v, &end, 10);
      if (end == v || *end || x < 0 || x > G_MAXINT)
        set_err(ctx, st, err, "host %s: %s: expected an index >= 0, got \"%s\"", h->id, id, v);
      else if (id[0] == 'n')
        h->node = (int)x;
      else
        h->gpu = (int)x;
    }
  } else if (strcmp(el, "router") == 0) {
    np_add(ctx, st, attr(names, values, "id"), err);
  } else if (strcmp(el, "link") == 0) {
    const char *id = attr(names, values, "id"), *bw = attr(names, values, "bandwidth"),
               *lat = attr(names, values, "latency");
    plat_link l = {0, 0};
    if (!id || !*id) {
      set_err(ctx, st, err, "<link> without id");
      return;
    }
    if (g_hash_table_lookup(pl->link_ids, id)) {
      set_err(ctx, st, err, "link '%s' is declared twice", id);
      return;
    }
    char *what = g_strdup_printf("link %s", id);
    const gboolean bw_ok = bw && plat_parse_bandwidth(bw, &l.bps),
                   lat_ok = !lat || plat_parse_time(lat, &l.lat_s);
    gboolean ok = ranged(ctx, st, bw_ok, l.bps, 0, TRUE, PLAT_MAX_BPS, "bytes/s", "bandwidth", what, bw,
                         "25GBps", err) &&
                  ranged(ctx, st, lat_ok, l.lat_s, 0, FALSE, PLAT_MAX_LAT_S, "s", "latency", what, lat,
                         "1us", err);
    g_free(what);
    if (!ok) return;
    const char *pol = attr(names, values, "sharing_policy");
    if (pol && strcmp(pol, "SHARED") != 0 && strcmp(pol, "SPLITDUPLEX") != 0 &&
        strcmp(pol, "FATPIPE") != 0) {
      set_err(ctx, st, err, "link %s: sharing_policy: expected SHARED, SPLITDUPLEX or FATPIPE, "
              "got \"%s\"", id, pol);
      return;
    }
    g_array_append_val(pl->links, l);
    g_hash_table_insert(pl->link_ids, g_string_chunk_insert(pl->strings, id),
                        GINT_TO_POINTER((int)pl->links->len));
  } else if (strcmp(el, "route") == 0) {
    const char *src = attr(names, values, "src"), *dst = attr(names, values, "dst"),
               *sym = attr(names, values, "symmetrical");
    int s = src ? np_lookup(pl, src) : -1, d = dst ? np_lookup(pl, dst) : -1;
    if (s < 0 || d < 0) {
      set_err(ctx, st, err, "<route src=\"%s\" dst=\"%s\">: unknown %s '%s' (declare hosts and "
              "routers before routes)", src ? src : "", dst ? dst : "", s < 0 ? "src" : "dst",
              s < 0 ? (src ? src : "") : (dst ? dst : ""));
      return;
    }
    st->route_src = vertex_of(pl, s);
    st->route_dst = vertex_of(pl, d);
    st->route_sym = !sym || g_ascii_strcasecmp(sym, "YES") == 0;
    g_free(st->route_names[0]);
    g_free(st->route_names[1]);
    st->route_names[0] = g_strdup(src);
    st->route_names[1] = g_strdup(dst);
    g_array_set_size(st->route_links, 0);
  } else if (strcmp(el, "link_ctn") == 0) {
    const char *id = attr(names, values, "id");
    int li = id ? GPOINTER_TO_INT(g_hash_table_lookup(pl->link_ids, id)) - 1 : -1;
    if (li < 0) {
      set_err(ctx, st, err, "<link_ctn id=\"%s\">: no such link", id ? id : "");
      return;
    }
    g_array_append_val(st->route_links, li);
  } else if (strcmp(el, "cluster") == 0 || strcmp(el, "cabinet") == 0) {
    set_err(ctx, st, err, "<%s> is not supported: the closed form needs an explicit-graph platform "
            "as written by `dlsim platform`", el);
  } else {
    set_err(ctx, st, err, "<%s> is not supported here: the closed form needs an explicit-graph "
            "platform as written by `dlsim platform`", el);
  }
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

static void on_passthrough(GMarkupParseContext *ctx, const char *text, gsize len, gpointer data,
                           GError **err) {
  (void)ctx;
  (void)err;
  parse_state *st = data;
  static const char dt[] = "<!DOCTYPE platform", gen[] = "<!-- written by dlsim platform:";
  if (len >= sizeof dt - 1 && strncmp(text, dt, sizeof dt - 1) == 0) st->doctype = TRUE;
  if (len >= sizeof gen - 1 && strncmp(text, gen, sizeof gen - 1) == 0 && !st->pl->structured) {
    char *t = g_strndup(text, len);
    plat *pl = st->pl;
    pl->s_nodes = comment_int(t, "nodes");
    pl->s_gpn = comment_int(t, "gpus-per-node");
    pl->s_npl = comment_int(t, "nodes-per-leaf");
    pl->s_nics = comment_int(t, "nics-per-node");
    if (pl->s_nics < 0 || (pl->s_gpn > 0 && pl->s_gpn % pl->s_nics)) pl->s_nics = 0;
    if (pl->s_npl < 0) pl->s_npl = pl->s_nodes;
    pl->structured = pl->s_nodes > 0 && pl->s_gpn > 0 && pl->s_npl > 0;
    g_free(t);
  }
}

/* The generator's comment holds only if the hosts are its n<node>g<gpu> in order. */
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
  /* and the GPUs' own links are the generator's: those whose ids differ only in their numbers
   * (n5g0_nic, n0g0_nic) are alike, so a route's class says what it costs; a file whose GPU
   * links were edited since is routed pair by pair. (Leaf and spine uplinks differ by design:
   * a partial leaf group has fewer.) */
  GHashTable *alike = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
  GHashTableIter it;
  gpointer key, val;
  g_hash_table_iter_init(&it, pl->link_ids);
  while (pl->structured && g_hash_table_iter_next(&it, &key, &val)) {
    const char *name = key;
    if (name[0] != 'n' || !g_ascii_isdigit(name[1])) continue; /* not a GPU's or node's link */
    char *shape = g_strdup(name);
    for (char *c = shape; *c; c++)
      if (g_ascii_isdigit(*c)) *c = '#';
    const plat_link *l = &g_array_index(pl->links, plat_link, GPOINTER_TO_INT(val) - 1);
    const plat_link *first = g_hash_table_lookup(alike, shape);
    if (!first) g_hash_table_insert(alike, shape, (gpointer)l);
    else {
      pl->structured = first->bps == l->bps && first->lat_s == l->lat_s;
      g_free(shape);
    }
  }
  g_hash_table_destroy(alike);
  if (pl->structured)
    pl->class_cache = g_hash_table_new_full(g_int64_hash, g_int64_equal, g_free, g_free);
}

static void on_end(GMarkupParseContext *ctx, const char *el, gpointer data, GError **err) {
  parse_state *st = data;
  if (strcmp(el, "zone") == 0 || strcmp(el, "AS") == 0) {
    st->zone_depth--;
  } else if (strcmp(el, "host") == 0) {
    st->cur_host = -1;
  } else if (strcmp(el, "route") == 0) {
    const int *links = (const int *)(void *)st->route_links->data;
    int n = (int)st->route_links->len;
    const char *a = st->route_names[0], *b = st->route_names[1];
    if (add_edge(ctx, st, st->route_src, st->route_dst, links, n, FALSE, a, b, err) &&
        st->route_sym)
      add_edge(ctx, st, st->route_dst, st->route_src, links, n, TRUE, b, a, err);
  }
}

plat *plat_load_xml(const char *path, const char *xml, gsize len, GError **err) {
  plat *pl = g_new0(plat, 1);
  pl->path = g_strdup(path);
  pl->hosts = g_array_new(FALSE, TRUE, sizeof(plat_host));
  pl->strings = g_string_chunk_new(4096);
  pl->config = g_hash_table_new(g_str_hash, g_str_equal);
  pl->netpoints = g_hash_table_new(g_str_hash, g_str_equal);
  pl->host_np = g_array_new(FALSE, FALSE, sizeof(int));
  pl->links = g_array_new(FALSE, FALSE, sizeof(plat_link));
  pl->link_ids = g_hash_table_new(g_str_hash, g_str_equal);
  pl->vertex_of_np = g_array_new(FALSE, FALSE, sizeof(int));
  pl->out_edges = g_ptr_array_new_with_free_func((GDestroyNotify)g_array_unref);
  pl->edge_links = g_array_new(FALSE, FALSE, sizeof(int));
  pl->pred_cache = g_hash_table_new_full(g_direct_hash, g_direct_equal, NULL, g_free);

  /* XML 1.0 allows no control characters but tab and newlines, and the text must be UTF-8;
   * GMarkup (GLib 2.74) reports some such bytes twice over, so they are refused here, by line */
  const char *bad_utf8 = NULL;
  if (!g_utf8_validate_len(xml, len, &bad_utf8)) {
    gsize line = 1;
    for (const char *q = xml; q < bad_utf8; q++) line += *q == '\n';
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s:%" G_GSIZE_FORMAT ": not UTF-8 (byte 0x%02x)",
                path, line, (unsigned char)*bad_utf8);
    plat_free(pl);
    return NULL;
  }
  for (gsize i = 0, line = 1; i < len; i++) {
    const unsigned char ch = (unsigned char)xml[i];
    if (ch == '\n') line++;
    if (ch < 0x20 && ch != '\t' && ch != '\n' && ch != '\r') {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s:%" G_GSIZE_FORMAT ": control character 0x%02x, "
                  "which XML does not allow", path, line, ch);
      plat_free(pl);
      return NULL;
    }
  }
  parse_state st = {.pl = pl, .cur_host = -1, .route_src = -1, .route_dst = -1,
                    .route_links = g_array_new(FALSE, FALSE, sizeof(int))};
  static const GMarkupParser parser = {on_start, on_end, NULL, on_passthrough, NULL};
  GMarkupParseContext *ctx = g_markup_parse_context_new(&parser, 0, &st, NULL);
  GError *e = NULL;
  gboolean ok = g_markup_parse_context_parse(ctx, xml, (gssize)len, &e) &&
                g_markup_parse_context_end_parse(ctx, &e);
  g_markup_parse_context_free(ctx);
  g_array_free(st.route_links, TRUE);
  g_free(st.route_names[0]);
  g_free(st.route_names[1]);
  if (!ok) {
    if (e->domain == DL_ERROR) g_propagate_error(err, e);
    else {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: malformed XML: %s", path, e->message);
      g_error_free(e);
    }
    goto fail;
  }
  if (pl->hosts->len == 0) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: no <host> found", path);
    goto fail;
  }
  check_structure(pl);
  /* SimGrid's per-message factors, as the file sets them; a constant 1 is no factor at all */
  const char *keys[] = {"smpi/bw-factor", "smpi/lat-factor"};
  plat_factor *fs[] = {&pl->bw_factor, &pl->lat_factor};
  for (int k = 0; k < 2; k++) {
    const char *v = plat_config(pl, keys[k]);
    if (!v) continue;
    gboolean ok = plat_factor_parse(v, fs[k]), one = TRUE;
    for (int i = 0; ok && i < fs[k]->n; i++) {
      one &= fs[k]->pairs[2 * i + 1] == 1.0;
      ok = k == 1 || fs[k]->pairs[2 * i + 1] > 0; /* a bandwidth factor of 0 stops every flow */
    }
    if (!ok) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: <config> %s '%s': expected SIZE:FACTOR;... "
                  "with sizes >= 0 and factors %s", path, keys[k], v, k == 0 ? "> 0" : ">= 0");
      goto fail;
    }
    if (one) plat_factor_clear(fs[k]);
  }
  for (guint i = 0; i < pl->hosts->len; i++) {
    int np = g_array_index(pl->host_np, int, i);
    if (g_array_index(pl->vertex_of_np, int, np) < 0 && pl->hosts->len > 1) {
      g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: host %s has no route", path,
                  g_array_index(pl->hosts, plat_host, i).id);
      goto fail;
    }
  }
  return pl;
fail:
  plat_free(pl);
  return NULL;
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

plat *plat_load(const char *name_or_path, GError **err) {
  gboolean scaled = strchr(name_or_path, ':') && !strchr(name_or_path, '/') &&
                    !g_file_test(name_or_path, G_FILE_TEST_EXISTS);
  char *path = scaled ? scaled_preset(name_or_path, err)
                      : dl_resolve("--platform", "platforms", name_or_path, ".xml", err);
  if (!path) return NULL;
  gsize len = 0;
  char *xml = dl_read_file(path, &len, err);
  plat *pl = xml ? plat_load_xml(path, xml, len, err) : NULL;
  g_free(xml);
  g_free(path);
  return pl;
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
  g_free(pl->path);
  if (pl->config) g_hash_table_destroy(pl->config);
  plat_factor_clear(&pl->bw_factor);
  plat_factor_clear(&pl->lat_factor);
  g_array_free(pl->hosts, TRUE);
  g_string_chunk_free(pl->strings);
  g_hash_table_destroy(pl->netpoints);
  g_array_free(pl->host_np, TRUE);
  g_array_free(pl->links, TRUE);
  g_hash_table_destroy(pl->link_ids);
  g_array_free(pl->vertex_of_np, TRUE);
  g_ptr_array_free(pl->out_edges, TRUE);
  g_array_free(pl->edge_links, TRUE);
  g_hash_table_destroy(pl->pred_cache);
  if (pl->class_cache) g_hash_table_destroy(pl->class_cache);
  g_free(pl);
}

/* ---- queries --------------------------------------------------------------------------------- */

const char *plat_path(const plat *pl) { return pl->path; }

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

/* Min-heap of (cost, vertex), ordered as std::pair with std::greater<> in SimGrid. */
typedef struct {
  double cost; /* path cost in links (ULONG_MAX as double for "unreached") */
  int v;       /* vertex */
} heap_elt;

static gboolean heap_less(heap_elt a, heap_elt b) {
  return a.cost < b.cost || (a.cost == b.cost && a.v < b.v);
}

static void heap_push(GArray *h, heap_elt x) {
  g_array_append_val(h, x);
  guint i = h->len - 1;
  heap_elt *d = (heap_elt *)(void *)h->data;
  while (i > 0 && heap_less(d[i], d[(i - 1) / 2])) {
    heap_elt t = d[i];
    d[i] = d[(i - 1) / 2];
    d[(i - 1) / 2] = t;
    i = (i - 1) / 2;
  }
}

static heap_elt heap_pop(GArray *h) {
  heap_elt *d = (heap_elt *)(void *)h->data;
  heap_elt top = d[0];
  d[0] = d[h->len - 1];
  g_array_set_size(h, h->len - 1);
  d = (heap_elt *)(void *)h->data;
  guint i = 0, n = h->len;
  for (;;) {
    guint l = 2 * i + 1, r = l + 1, m = i;
    if (l < n && heap_less(d[l], d[m])) m = l;
    if (r < n && heap_less(d[r], d[m])) m = r;
    if (m == i) break;
    heap_elt t = d[i];
    d[i] = d[m];
    d[m] = t;
    i = m;
  }
  return top;
}

/* Predecessor array of the shortest-path tree from vertex `src` (cached). */
static const int *preds_from(const plat *pl, int src) {
  int *pred = g_hash_table_lookup(pl->pred_cache, GINT_TO_POINTER(src + 1));
  if (pred) return pred;
  int nv = (int)pl->out_edges->len;
  const guint64 inf = G_MAXUINT64;
  guint64 *cost = g_new(guint64, nv);
  pred = g_new(int, nv);
  GArray *heap = g_array_sized_new(FALSE, FALSE, sizeof(heap_elt), (guint)nv * 2);
  for (int i = 0; i < nv; i++) {
    cost[i] = i == src ? 0 : inf;
    pred[i] = -1;
    heap_push(heap, (heap_elt){(double)cost[i], i});
  }
  while (heap->len) {
    int v = heap_pop(heap).v;
    if (cost[v] == inf) continue; /* unreachable from src */
    GArray *out = g_ptr_array_index(pl->out_edges, v);
    for (guint j = 0; j < out->len; j++) {
      const plat_edge *e = &g_array_index(out, plat_edge, j);
      guint64 c = cost[v] + (guint64)e->n;
      if (c < cost[e->dst]) {
        cost[e->dst] = c;
        pred[e->dst] = v;
        heap_push(heap, (heap_elt){(double)c, e->dst});
      }
    }
  }
  g_array_free(heap, TRUE);
  g_free(cost);
  g_hash_table_insert(pl->pred_cache, GINT_TO_POINTER(src + 1), pred);
  return pred;
}

static const plat_edge *find_edge(const plat *pl, int from, int to) {
  GArray *out = g_ptr_array_index(pl->out_edges, from);
  for (guint j = 0; j < out->len; j++)
    if (g_array_index(out, plat_edge, j).dst == to) return &g_array_index(out, plat_edge, j);
  return NULL;
}

static gboolean route_dijkstra(const plat *pl, int src_host, int dst_host, plat_route_info *out,
                               GError **err);

gboolean plat_route_class(const plat *pl, int a, int b, gint64 *key) {
  if (!pl->structured || a < 0 || b < 0 || a >= (int)pl->hosts->len || b >= (int)pl->hosts->len)
    return FALSE;
  /* one host; two GPUs of one node (NVLink, whichever GPUs); else: same leaf group, whether
   * each end is in the last group when that one is smaller (its uplink is narrower), and the
   * GPU indices (rails) */
  const int g = pl->s_gpn, npl = pl->s_npl, na = a / g, nb = b / g;
  const int pg = pl->s_nodes % npl ? pl->s_nodes / npl : -1;
  const int same_leaf = na / npl == nb / npl, pa = na / npl == pg, pb = nb / npl == pg;
  /* GPUs behind one NIC (a rail) */
  const int per_nic = pl->s_nics > 0 ? g / pl->s_nics : g;
  const int same_rail = (a % g) / per_nic == (b % g) / per_nic, same_gpu = a % g == b % g;
  if (a == b) *key = -1;
  else if (na == nb) *key = -2;
  else *key = (((gint64)same_leaf * 2 + pa) * 2 + pb) * 4 + same_rail * 2 + same_gpu;
  return TRUE;
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
  if (src_host == dst_host || !plat_route_class(pl, src_host, dst_host, &key))
    return route_dijkstra(pl, src_host, dst_host, out, err);
  /* a generated cluster: the route of the class's first pair */
  const int g = pl->s_gpn, npl = pl->s_npl, na = src_host / g, nb = dst_host / g;
  int ga = src_host % g, gb = dst_host % g;
  const int pg = pl->s_nodes % npl ? pl->s_nodes / npl : -1; /* the smaller group, or -1 */
  const int same_node = na == nb, same_leaf = na / npl == nb / npl;
  const int pa = na / npl == pg, pb = nb / npl == pg;
  plat_route_info *c = g_hash_table_lookup(pl->class_cache, &key);
  /* the class's first pair: GPUs 0 and 1 of one node; across nodes GPU 0 to GPU 0 (one GPU),
   * to GPU 1 (one rail, two GPUs) or to the first GPU of the next rail */
  const int per_nic = pl->s_nics > 0 ? g / pl->s_nics : g;
  if (same_node) ga = 0, gb = 1;
  else if (ga == gb) ga = gb = 0;
  else if (ga / per_nic == gb / per_nic) ga = 0, gb = 1;
  else ga = 0, gb = per_nic;
  if (!c) {
    const int from = pa ? pg * npl : 0;
    const int to = same_node ? from : same_leaf ? from + 1 : pb ? pg * npl : from ? 0 : npl;
    plat_route_info r;
    if (!route_dijkstra(pl, from * g + ga, to * g + gb, &r, err)) return FALSE;
    c = g_memdup2(&r, sizeof r);
    g_hash_table_insert(pl->class_cache, g_memdup2(&key, sizeof key), c);
  }
  *out = *c;
  return TRUE;
}

static gboolean route_dijkstra(const plat *pl, int src_host, int dst_host, plat_route_info *out,
                               GError **err) {
  out->latency_s = 0;
  out->bottleneck_bps = INFINITY;
  out->n_links = 0;
  if (src_host == dst_host) return TRUE;
  int s = g_array_index(pl->vertex_of_np, int, g_array_index(pl->host_np, int, src_host));
  int d = g_array_index(pl->vertex_of_np, int, g_array_index(pl->host_np, int, dst_host));
  const int *pred = (s >= 0 && d >= 0) ? preds_from(pl, s) : NULL;
  if (!pred || pred[d] < 0) {
    g_set_error(err, DL_ERROR, DL_ERR_INPUT, "%s: no route from %s to %s", pl->path,
                plat_host_at(pl, src_host)->id, plat_host_at(pl, dst_host)->id);
    return FALSE;
  }
  for (int v = d; v != s; v = pred[v]) {
    const plat_edge *e = find_edge(pl, pred[v], v);
    for (int i = 0; i < e->n; i++) {
      const plat_link *l =
          &g_array_index(pl->links, plat_link, g_array_index(pl->edge_links, int, e->first + i));
      out->latency_s += l->lat_s;
      out->bottleneck_bps = MIN(out->bottleneck_bps, l->bps);
      out->n_links++;
    }
  }
  return TRUE;
}
