// sgzone.cpp — libdlsim-sgzone.so: a cluster written by `dlsim platform`, loaded into SimGrid
// (`smpirun -platform libdlsim-sgzone.so`, the file's path in $DLSIM_PLATFORM_XML) with the very
// hosts, links and routes that SimGrid's XML loader and its DijkstraCache zone give it, but routed
// without SimGrid's per-source search of its own graph structures.
//
// Why: SimGrid's DijkstraCache zone runs one Dijkstra over the whole platform graph for every
// source host, on linked lists, and keeps an 8-byte predecessor per vertex and source. A 16,384-GPU
// cluster (about 19,000 vertices) spent 13 minutes there before its first op, and by their sizes
// its trees hold 2.5 GB.
// Here the graph is in flat arrays, the search is a bucket queue over hop counts that stops once
// the route asked is settled (a GPU's first routes go to its ring neighbours, a few hops away), a
// source's tree holds 2 bytes per vertex (or just the vertices a stopped search settled), and each
// route asked is walked from that tree once and kept.
//
// Same routes, link for link: SimGrid's Dijkstra pops (cost, vertex) pairs in ascending order and
// sets a vertex's predecessor on strict improvement only, so with every edge costing one or more
// links a vertex's predecessor is, among the neighbours v on a shortest path to it, the one with
// the least (distance, graph index), graph indices numbering the route ends in the order the
// routes first name them. SimGrid assembles a route by walking back from the destination,
// inserting each edge's links reversed at the front and adding their latencies in order; so does
// get_local_route here. `ctest -R sgzone` compares every pair's route, links and latency, with
// SimGrid's on the generated topologies.
//
// What it takes: the grammar `dlsim platform` writes (one zone routed Dijkstra or DijkstraCache;
// <config> props; hosts with a speed and props; routers; links with a bandwidth, a latency and a
// sharing policy; symmetrical routes of one or more link_ctn), in a file that says it was written
// by `dlsim platform`, whose routes join every vertex to every other. Anything else (an edited file
// with another element or attribute, an entity, a route twice, a graph in pieces) is handed to
// SimGrid's own loader unchanged, which then loads it or reports it as it always does.
// DLSIM_SGZONE_REPORT=1 says on standard error which of the two loaded the file.
#include <simgrid/kernel/routing/NetPoint.hpp>
#include <simgrid/kernel/routing/NetZoneImpl.hpp>
#include <simgrid/s4u.hpp>
#include <xbt/config.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace sg4 = simgrid::s4u;
using simgrid::kernel::routing::NetPoint;
using simgrid::kernel::routing::NetZoneImpl;
using simgrid::kernel::routing::Route;

namespace {

// ---- the file, read into plain records -----------------------------------------------------

struct Attrs {
  std::vector<std::pair<std::string, std::string>> kv;
  const std::string* get(const char* key) const
  {
    for (const auto& [k, v] : kv)
      if (k == key)
        return &v;
    return nullptr;
  }
  // every attribute is one of `allowed`
  bool only(std::initializer_list<const char*> allowed) const
  {
    for (const auto& kvp : kv) {
      const std::string& k = kvp.first;
      if (std::none_of(allowed.begin(), allowed.end(), [&k](const char* a) { return k == a; }))
        return false;
    }
    return true;
  }
};

struct HostRec {
  std::string id, speed;
  std::vector<std::pair<std::string, std::string>> props;
};
struct LinkRec {
  std::string id, bandwidth, latency, policy;
};
struct CtnRec {
  std::string id;
  sg4::LinkInRoute::Direction dir;
};
struct RouteRec {
  std::string src, dst;
  std::vector<CtnRec> ctn;
};
struct Platform {
  std::vector<std::pair<std::string, std::string>> cfg;
  std::string zone_id;
  std::vector<HostRec> hosts;
  std::vector<std::string> routers;
  std::vector<LinkRec> links;
  std::vector<RouteRec> routes;
};

// A tokenizer for the tags of a file: comments, the XML declaration and the DOCTYPE are skipped;
// text between tags must be blank. FALSE on anything it does not take.
class Tags {
public:
  explicit Tags(std::string_view text) : s_(text) {}
  bool marker_seen = false;

  // the next tag: its name ("/name" for a closing one), attributes, and whether it closes itself
  bool next(std::string& name, Attrs& attrs, bool& empty, bool& end)
  {
    attrs.kv.clear();
    for (;;) {
      while (pos_ < s_.size() && is_space(s_[pos_]))
        pos_++;
      if (pos_ >= s_.size()) {
        end = true;
        return true;
      }
      if (s_[pos_] != '<')
        return false;
      if (s_.compare(pos_, 4, "<!--") == 0) {
        size_t close = s_.find("-->", pos_ + 4);
        if (close == std::string_view::npos)
          return false;
        if (s_.substr(pos_, close - pos_).find("written by dlsim platform") != std::string_view::npos)
          marker_seen = true;
        pos_ = close + 3;
        continue;
      }
      if (s_.compare(pos_, 2, "<?") == 0) {
        size_t close = s_.find("?>", pos_);
        if (close == std::string_view::npos)
          return false;
        pos_ = close + 2;
        continue;
      }
      if (s_.compare(pos_, 9, "<!DOCTYPE") == 0) {
        size_t close = s_.find('>', pos_);
        // an internal DTD subset could declare entities: SimGrid's parser reads those
        if (close == std::string_view::npos || s_.substr(pos_, close - pos_).find('[') != std::string_view::npos)
          return false;
        pos_ = close + 1;
        continue;
      }
      break;
    }
    pos_++; // '<'
    size_t start = pos_;
    if (pos_ < s_.size() && s_[pos_] == '/')
      pos_++;
    while (pos_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_'))
      pos_++;
    name = std::string(s_.substr(start, pos_ - start));
    if (name.empty() || name == "/")
      return false;
    empty = false;
    end   = false;
    for (;;) {
      while (pos_ < s_.size() && is_space(s_[pos_]))
        pos_++;
      if (pos_ >= s_.size())
        return false;
      if (s_[pos_] == '>') {
        pos_++;
        return true;
      }
      if (s_.compare(pos_, 2, "/>") == 0) {
        pos_ += 2;
        empty = true;
        return name[0] != '/';
      }
      size_t k = pos_;
      while (pos_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_'))
        pos_++;
      if (k == pos_ || name[0] == '/')
        return false;
      std::string key(s_.substr(k, pos_ - k));
      while (pos_ < s_.size() && is_space(s_[pos_]))
        pos_++;
      if (pos_ >= s_.size() || s_[pos_] != '=')
        return false;
      pos_++;
      while (pos_ < s_.size() && is_space(s_[pos_]))
        pos_++;
      if (pos_ >= s_.size() || (s_[pos_] != '"' && s_[pos_] != '\''))
        return false;
      char q      = s_[pos_++];
      size_t stop = s_.find(q, pos_);
      if (stop == std::string_view::npos)
        return false;
      std::string value(s_.substr(pos_, stop - pos_));
      // entities and markup inside a value are SimGrid's parser's to read
      if (value.find_first_of("&<\n\r\t") != std::string_view::npos)
        return false;
      if (attrs.get(key.c_str()))
        return false;
      attrs.kv.emplace_back(std::move(key), std::move(value));
      pos_ = stop + 1;
    }
  }

private:
  static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
  std::string_view s_;
  size_t pos_ = 0;
};

// A <prop id=".." value=".."/> as its pair, or FALSE.
bool read_prop(const std::string& name, const Attrs& a, bool empty,
               std::vector<std::pair<std::string, std::string>>& into)
{
  if (name != "prop" || !empty || !a.only({"id", "value"}) || !a.get("id") || !a.get("value"))
    return false;
  into.emplace_back(*a.get("id"), *a.get("value"));
  return true;
}

bool read_direction(const std::string* d, sg4::LinkInRoute::Direction& out)
{
  if (!d || *d == "NONE")
    out = sg4::LinkInRoute::Direction::NONE;
  else if (*d == "UP")
    out = sg4::LinkInRoute::Direction::UP;
  else if (*d == "DOWN")
    out = sg4::LinkInRoute::Direction::DOWN;
  else
    return false;
  return true;
}

// The platform in `text`, if it is in the grammar above. FALSE hands the file to SimGrid.
bool parse(std::string_view text, Platform& p)
{
  // room for every record at once: no vector grows by doubling, freeing a mapped block (below)
  auto count = [text](std::string_view tag) {
    size_t n = 0;
    for (size_t at = text.find(tag); at != std::string_view::npos; at = text.find(tag, at + 1))
      n++;
    return n;
  };
  p.hosts.reserve(count("<host "));
  p.routers.reserve(count("<router "));
  p.links.reserve(count("<link "));
  p.routes.reserve(count("<route "));
  Tags tags(text);
  std::string name;
  Attrs a;
  bool empty = false;
  bool end   = false;
  enum { TOP, PLATFORM, CONFIG, ZONE, HOST, ROUTE, DONE } at = TOP;
  bool routes_begun = false;
  bool config_done  = false;
  while (tags.next(name, a, empty, end)) {
    if (end)
      return at == DONE && tags.marker_seen;
    switch (at) {
      case TOP:
        if (name != "platform" || empty || !a.only({"version"}) || !a.get("version") ||
            *a.get("version") != "4.1")
          return false;
        at = PLATFORM;
        break;
      case PLATFORM:
        if (name == "config" && !empty && !config_done && p.zone_id.empty() && a.only({"id"})) {
          at = CONFIG;
        } else if (name == "zone" && !empty && p.zone_id.empty() && a.only({"id", "routing"}) &&
                   a.get("id") && a.get("routing") &&
                   (*a.get("routing") == "DijkstraCache" || *a.get("routing") == "Dijkstra")) {
          p.zone_id = *a.get("id");
          at        = ZONE;
        } else if (name == "/platform" && !p.zone_id.empty()) {
          at = DONE;
        } else {
          return false;
        }
        break;
      case CONFIG:
        if (name == "/config") {
          config_done = true;
          at          = PLATFORM;
        } else if (!read_prop(name, a, empty, p.cfg)) {
          return false;
        }
        break;
      case ZONE:
        if (name == "/zone") {
          at = PLATFORM;
        } else if (name == "host" && !routes_begun && a.only({"id", "speed"}) && a.get("id") &&
                   a.get("speed") && a.get("speed")->find(',') == std::string_view::npos) {
          p.hosts.push_back({*a.get("id"), *a.get("speed"), {}});
          if (!empty)
            at = HOST;
        } else if (name == "router" && empty && !routes_begun && a.only({"id"}) && a.get("id")) {
          p.routers.push_back(*a.get("id"));
        } else if (name == "link" && empty && !routes_begun &&
                   a.only({"id", "bandwidth", "latency", "sharing_policy"}) && a.get("id") &&
                   a.get("bandwidth") && a.get("latency") &&
                   a.get("bandwidth")->find(',') == std::string_view::npos) {
          const std::string* pol = a.get("sharing_policy");
          std::string policy     = pol ? *pol : "SHARED";
          if (policy != "SHARED" && policy != "SPLITDUPLEX" && policy != "FATPIPE")
            return false;
          p.links.push_back({*a.get("id"), *a.get("bandwidth"), *a.get("latency"), policy});
        } else if (name == "route" && !empty && a.only({"src", "dst", "symmetrical"}) &&
                   a.get("src") && a.get("dst")) {
          // a one-way route would make the graph directed; SimGrid's search then adds a link
          // count to an unreached vertex's infinite cost, which wraps round: SimGrid's alone
          const std::string* sym = a.get("symmetrical");
          if (sym && *sym != "YES" && *sym != "yes")
            return false;
          p.routes.push_back({*a.get("src"), *a.get("dst"), {}});
          routes_begun = true;
          at           = ROUTE;
        } else {
          return false;
        }
        break;
      case HOST:
        if (name == "/host")
          at = ZONE;
        else if (!read_prop(name, a, empty, p.hosts.back().props))
          return false;
        break;
      case ROUTE:
        if (name == "link_ctn" && empty && a.only({"id", "direction"}) && a.get("id")) {
          sg4::LinkInRoute::Direction d;
          if (!read_direction(a.get("direction"), d))
            return false;
          p.routes.back().ctn.push_back({*a.get("id"), d});
        } else if (name == "/route" && !p.routes.back().ctn.empty()) {
          at = ZONE;
        } else {
          return false;
        }
        break;
      case DONE:
        return false;
    }
  }
  return false;
}

// The routes' graph: every name a route ends at, numbered in the order routes first name them
// (SimGrid's graph indices), its edges both ways; whether it holds each route once, is connected,
// and names only declared hosts, routers and links (with a direction for a split-duplex one).
bool check_graph(const Platform& p)
{
  std::unordered_map<std::string, const LinkRec*> links;
  for (const auto& l : p.links)
    if (!links.emplace(l.id, &l).second)
      return false;
  std::unordered_map<std::string, int> declared;
  for (const auto& h : p.hosts)
    if (!declared.emplace(h.id, 1).second)
      return false;
  for (const auto& r : p.routers)
    if (!declared.emplace(r, 1).second)
      return false;
  if (declared.count(p.zone_id))
    return false;
  std::unordered_map<std::string, uint32_t> index;
  std::vector<std::vector<uint32_t>> adj;
  std::map<std::pair<uint32_t, uint32_t>, int> seen;
  auto node = [&](const std::string& n) {
    auto [it, fresh] = index.emplace(n, static_cast<uint32_t>(adj.size()));
    if (fresh)
      adj.emplace_back();
    return it->second;
  };
  for (const auto& r : p.routes) {
    if (!declared.count(r.src) || !declared.count(r.dst) || r.src == r.dst)
      return false;
    for (const auto& c : r.ctn) {
      auto l = links.find(c.id);
      if (l == links.end())
        return false;
      if (l->second->policy == "SPLITDUPLEX" && c.dir == sg4::LinkInRoute::Direction::NONE)
        return false;
    }
    uint32_t s = node(r.src);
    uint32_t d = node(r.dst);
    if (!seen.emplace(std::make_pair(s, d), 1).second || !seen.emplace(std::make_pair(d, s), 1).second)
      return false;
    adj[s].push_back(d);
    adj[d].push_back(s);
  }
  if (adj.empty())
    return false;
  std::vector<char> reached(adj.size(), 0);
  std::vector<uint32_t> stack = {0};
  reached[0]                  = 1;
  size_t count                = 1;
  while (!stack.empty()) {
    uint32_t v = stack.back();
    stack.pop_back();
    for (uint32_t u : adj[v])
      if (!reached[u]) {
        reached[u] = 1;
        count++;
        stack.push_back(u);
      }
  }
  return count == adj.size();
}

// ---- the zone ------------------------------------------------------------------------------

constexpr uint32_t NONE = UINT32_MAX;

class ClusterZone final : public NetZoneImpl {
public:
  explicit ClusterZone(const std::string& name) : NetZoneImpl(name) {}

  void add_route(NetPoint* src, NetPoint* dst, NetPoint* gw_src, NetPoint* gw_dst,
                 const std::vector<sg4::LinkInRoute>& link_list, bool symmetrical) override
  {
    if (gw_src || gw_dst || link_list.empty() || !symmetrical)
      throw std::invalid_argument("dlsim's cluster zone takes symmetrical routes between its own "
                                  "hosts and routers only");
    NetZoneImpl::on_route_creation(symmetrical, src, dst, gw_src, gw_dst,
                                   get_link_list_impl(link_list, false));
    uint32_t s = vertex(src);
    uint32_t d = vertex(dst);
    add_edge(s, d, link_list, false);
    add_edge(d, s, link_list, true);
  }

protected:
  void get_local_route(const NetPoint* src, const NetPoint* dst, Route* into,
                       double* latency) override
  {
    uint32_t s = lookup(src);
    uint32_t t = lookup(dst);
    if (s == NONE || t == NONE)
      throw std::invalid_argument("No route from '" + src->get_name() + "' to '" + dst->get_name() +
                                  "'");
    if (s == t) {
      // SimGrid's zone adds a loopback edge to every vertex when the network model has one
      sg4::Link* loop = sg4::Engine::get_instance()->link_by_name_or_null("__loopback__");
      if (!loop)
        throw std::invalid_argument("No route from '" + src->get_name() + "' to '" + dst->get_name() +
                                    "'");
      into->link_list_.insert(into->link_list_.begin(), loop->get_impl());
      if (latency)
        *latency += loop->get_latency();
      return;
    }
    const Pair& r = pair(s, t);
    // as SimGrid: edges from the destination back, each one's links reversed at the front (the
    // list held), its latencies added in its own order (the list held, backwards)
    auto& out = into->link_list_;
    out.insert(out.begin(), r.n, nullptr);
    for (uint32_t i = 0; i < r.n; i++)
      out[i] = pair_links_[r.first + i]->get_impl();
    if (latency)
      for (uint32_t i = r.n; i-- > 0;)
        *latency += pair_links_[r.first + i]->get_latency();
  }

public:
  ~ClusterZone() override
  {
    if (const char* say = std::getenv("DLSIM_SGZONE_REPORT"); say && *say)
      std::fprintf(stderr, "sgzone: %zu searches for %zu routes between %u vertices\n", searches_,
                   pairs_.size(), n_vertices_);
  }

private:
  struct Edge {
    uint32_t from, to, first, n_links;
  };
  std::vector<Edge> edges_;
  std::vector<const sg4::Link*> link_; // the edges' links, as each route lists them
  std::vector<uint32_t> vertex_of_;    // NetPoint id -> graph index
  uint32_t n_vertices_ = 0;
  std::vector<uint32_t> out_begin_, out_;  // out-edges by vertex (built on the first search)
  std::vector<uint32_t> in_begin_, in_;    // in-edges by vertex
  std::vector<uint32_t> in_pos_;           // an edge's place among its end's in-edges
  bool narrow_ = true;                     // every vertex has fewer than 65,535 in-edges
  // A source's tree: each vertex's predecessor edge, as its place among the vertex's in-edges
  // (2 bytes a vertex where they all fit, 4 otherwise; none for a vertex not settled). A search
  // that stopped once the route asked was settled and settled few vertices keeps just those, as
  // sorted (vertex, place) pairs.
  struct Tree {
    std::vector<uint16_t> narrow;
    std::vector<uint32_t> wide;
    std::vector<std::pair<uint32_t, uint32_t>> part; // or the settled vertices alone
    bool sparse = false;
    bool full   = false; // every vertex settled
  };
  std::unordered_map<uint32_t, Tree> trees_;
  std::vector<uint32_t> pred_; // a search's predecessor edges
  size_t tree_bytes_ = 0;
  size_t searches_   = 0;
  struct Pair {
    uint32_t first, n; // in pair_links_
  };
  std::unordered_map<uint64_t, Pair> pairs_; // (source, destination) -> its route's links
  std::vector<const sg4::Link*> pair_links_;
  std::vector<uint32_t> path_;
  std::vector<uint32_t> cost_, level_;          // a search's working arrays
  std::vector<uint32_t> touched_;               // the vertices it reached (cost_ and pred_ reset)
  std::vector<std::vector<uint32_t>> bucket_;
  // A source's tree costs 2 bytes a vertex (38 kB on a 16,384-GPU cluster); routes asked are
  // kept pair by pair (about 100 bytes each), and trees up to this much, past which they are
  // dropped and searched again when a source asks for a destination not yet asked (a run asks
  // for its routes in no order that a smaller store serves: at 4,096 GPUs, with room for a
  // quarter of the sources' trees, 58,139 searches for 63,459 routes)
  static constexpr size_t TREE_BUDGET_BYTES = size_t{2} << 30;

  uint32_t lookup(const NetPoint* p) const
  {
    return p->id() < vertex_of_.size() ? vertex_of_[p->id()] : NONE;
  }

  uint32_t vertex(const NetPoint* p)
  {
    if (p->id() >= vertex_of_.size())
      vertex_of_.resize(p->id() + 1, NONE);
    if (vertex_of_[p->id()] == NONE)
      vertex_of_[p->id()] = n_vertices_++;
    return vertex_of_[p->id()];
  }

  void add_edge(uint32_t from, uint32_t to, const std::vector<sg4::LinkInRoute>& list, bool back)
  {
    Edge e{from, to, static_cast<uint32_t>(link_.size()), static_cast<uint32_t>(list.size())};
    std::vector<const sg4::Link*> one;
    for (const auto& l : list) {
      const sg4::Link* link = l.get_link();
      if (link->get_sharing_policy() == sg4::Link::SharingPolicy::SPLITDUPLEX) {
        const auto* sd = dynamic_cast<const sg4::SplitDuplexLink*>(link);
        if (!sd || l.get_direction() == sg4::LinkInRoute::Direction::NONE)
          throw std::invalid_argument("a split-duplex link in a route needs its direction");
        bool up = (l.get_direction() == sg4::LinkInRoute::Direction::UP) != back;
        link    = up ? sd->get_link_up() : sd->get_link_down();
      }
      one.push_back(link);
    }
    if (back) // SimGrid stores a route's reverse with its links in reverse order
      std::reverse(one.begin(), one.end());
    link_.insert(link_.end(), one.begin(), one.end());
    edges_.push_back(e);
    out_begin_.clear();
  }

  void build_out()
  {
    out_begin_.assign(n_vertices_ + 1, 0);
    in_begin_.assign(n_vertices_ + 1, 0);
    narrow_ = true;
    for (const Edge& e : edges_) {
      out_begin_[e.from + 1]++;
      in_begin_[e.to + 1]++;
    }
    for (uint32_t v = 0; v < n_vertices_; v++) {
      narrow_ = narrow_ && in_begin_[v + 1] < UINT16_MAX;
      out_begin_[v + 1] += out_begin_[v];
      in_begin_[v + 1] += in_begin_[v];
    }
    out_.assign(edges_.size(), 0);
    in_.assign(edges_.size(), 0);
    in_pos_.assign(edges_.size(), 0);
    std::vector<uint32_t> fill(out_begin_.begin(), out_begin_.end() - 1);
    std::vector<uint32_t> fill_in(in_begin_.begin(), in_begin_.end() - 1);
    for (uint32_t i = 0; i < edges_.size(); i++) {
      out_[fill[edges_[i].from]++] = i;
      in_pos_[i]                   = fill_in[edges_[i].to] - in_begin_[edges_[i].to];
      in_[fill_in[edges_[i].to]++] = i;
    }
  }

  // The predecessor edge of v in tree T, or NONE.
  uint32_t pred_edge(const Tree& T, uint32_t v) const
  {
    uint32_t k;
    if (T.sparse) {
      auto it = std::lower_bound(T.part.begin(), T.part.end(), std::make_pair(v, uint32_t{0}));
      k       = it != T.part.end() && it->first == v ? it->second : NONE;
    } else {
      k = narrow_ ? (T.narrow[v] == UINT16_MAX ? NONE : T.narrow[v]) : T.wide[v];
    }
    return k == NONE ? NONE : in_[in_begin_[v] + k];
  }

  // The route from s to t (s != t), kept once found: its links as SimGrid lists them.
  const Pair& pair(uint32_t s, uint32_t t)
  {
    const uint64_t key = (uint64_t{s} << 32) | t;
    auto it            = pairs_.find(key);
    if (it != pairs_.end())
      return it->second;
    const Tree& T = tree(s, t);
    path_.clear();
    for (uint32_t v = t; v != s;) {
      uint32_t e = pred_edge(T, v);
      if (e == NONE) // the graph was checked connected when loaded
        throw std::invalid_argument("No route from vertex " + std::to_string(s) + " to " +
                                    std::to_string(t));
      path_.push_back(e);
      v = edges_[e].from;
    }
    Pair r{static_cast<uint32_t>(pair_links_.size()), 0};
    for (auto e = path_.rbegin(); e != path_.rend(); ++e) {
      const Edge& E = edges_[*e];
      for (uint32_t i = E.n_links; i-- > 0;)
        pair_links_.push_back(link_[E.first + i]);
      r.n += E.n_links;
    }
    return pairs_.emplace(key, r).first->second;
  }

  // The predecessor edge of every vertex on its route from `s`: vertices taken by cost (links on
  // the way), an edge that reaches a vertex more cheaply taking it, and, between edges that reach
  // it at one cost, the one whose start is the cheaper, then the lower-numbered (SimGrid's order
  // of taking vertices, in which the first to reach a vertex at its least cost keeps it).
  // A source's first search stops once `t` is settled: every vertex of cost c is settled when
  // every bucket below c is through, for an edge costs one link or more, so bucket c and later
  // ones can neither lower nor tie c. Its route then lies among the vertices settled (a route's costs only
  // grow), and a route to a rank of the same node or leaf settles a few vertices, not the whole
  // graph. A destination that the partial tree lacks has the source searched whole.
  const Tree& tree(uint32_t s, uint32_t t)
  {
    auto it = trees_.find(s);
    if (it != trees_.end() && (it->second.full || pred_edge(it->second, t) != NONE))
      return it->second;
    const bool whole = it != trees_.end(); // a partial tree did not reach t
    if (whole)
      trees_.erase(it); // its bytes stay counted until the store is next cleared
    if (out_begin_.size() != n_vertices_ + 1u)
      build_out();
    std::vector<uint32_t>& pred = pred_;
    if (cost_.size() != n_vertices_) {
      pred.assign(n_vertices_, NONE);
      cost_.assign(n_vertices_, UINT32_MAX);
    }
    if (bucket_.empty())
      bucket_.resize(1);
    cost_[s] = 0;
    touched_.push_back(s);
    bucket_[0].push_back(s);
    uint32_t settled = UINT32_MAX; // the largest cost settled, when stopped early
    for (uint32_t c = 0; c < bucket_.size(); c++) {
      if (!whole && cost_[t] <= c) { // every bucket below t's cost is through
        settled = c;
        for (uint32_t d = c; d < bucket_.size(); d++)
          bucket_[d].clear();
        break;
      }
      level_.swap(bucket_[c]);
      for (uint32_t v : level_) {
        if (cost_[v] != c)
          continue; // reached more cheaply since
        for (uint32_t k = out_begin_[v]; k < out_begin_[v + 1]; k++) {
          const Edge& e = edges_[out_[k]];
          uint32_t nc   = c + e.n_links;
          if (nc < cost_[e.to]) {
            if (cost_[e.to] == UINT32_MAX)
              touched_.push_back(e.to);
            cost_[e.to] = nc;
            pred[e.to]  = out_[k];
            if (bucket_.size() <= nc)
              bucket_.resize(nc + 1);
            bucket_[nc].push_back(e.to);
          } else if (nc == cost_[e.to]) {
            uint32_t held = edges_[pred[e.to]].from;
            if (cost_[held] == c && v < held)
              pred[e.to] = out_[k];
          }
        }
      }
      level_.clear();
    }
    Tree T;
    T.full = settled == UINT32_MAX;
    size_t n_settled = 0;
    for (uint32_t v : touched_)
      n_settled += v != s && cost_[v] <= settled;
    const size_t dense = (narrow_ ? sizeof(uint16_t) : sizeof(uint32_t)) * n_vertices_;
    size_t bytes       = dense;
    if (!T.full && n_settled * sizeof(T.part[0]) < dense) {
      T.sparse = true;
      T.part.reserve(n_settled);
      for (uint32_t v : touched_)
        if (v != s && cost_[v] <= settled)
          T.part.emplace_back(v, in_pos_[pred[v]]);
      std::sort(T.part.begin(), T.part.end());
      bytes = sizeof(T.part[0]) * T.part.size();
    } else if (narrow_) {
      T.narrow.assign(n_vertices_, UINT16_MAX);
      for (uint32_t v : touched_)
        if (v != s && cost_[v] <= settled)
          T.narrow[v] = static_cast<uint16_t>(in_pos_[pred[v]]);
    } else {
      T.wide.assign(n_vertices_, NONE);
      for (uint32_t v : touched_)
        if (v != s && cost_[v] <= settled)
          T.wide[v] = in_pos_[pred[v]];
    }
    for (uint32_t v : touched_) {
      cost_[v] = UINT32_MAX;
      pred[v]  = NONE;
    }
    touched_.clear();
    if (tree_bytes_ + bytes > TREE_BUDGET_BYTES) {
      trees_.clear();
      tree_bytes_ = 0;
    }
    tree_bytes_ += bytes;
    searches_++;
    return trees_.emplace(s, std::move(T)).first->second;
  }
};

// The file is mapped, not read into memory from malloc, and the records are kept (see
// load_platform): glibc raises its threshold for serving allocations by mmap to the size of a
// mapped block freed, so a large block freed during the load moves the large blocks allocated
// after it (the actors' stacks among them) onto the heap. Measured on 16,384 GPUs, whose file is
// 10 MB, with the file read into a string and freed: 2.4 GB more at the peak (11.78 GiB against
// 7.69 GiB mapped, and 9.41 GiB with SimGrid's loader, which reads its file in small pieces).
class Mapped {
public:
  explicit Mapped(const char* path)
  {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
      return;
    struct stat st;
    if (fstat(fd, &st) == 0 && st.st_size > 0) {
      void* m = mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
      if (m != MAP_FAILED) {
        data_ = static_cast<const char*>(m);
        size_ = static_cast<size_t>(st.st_size);
      }
    }
    close(fd);
  }
  ~Mapped()
  {
    if (data_)
      munmap(const_cast<char*>(data_), size_);
  }
  Mapped(const Mapped&)            = delete;
  Mapped& operator=(const Mapped&) = delete;
  bool ok() const { return data_ != nullptr; }
  std::string_view text() const { return {data_, size_}; }

private:
  const char* data_ = nullptr;
  size_t size_      = 0;
};

sg4::Link::SharingPolicy policy_of(const std::string& p)
{
  return p == "FATPIPE" ? sg4::Link::SharingPolicy::FATPIPE : sg4::Link::SharingPolicy::SHARED;
}

// The platform built as SimGrid's XML loader builds it: settings the command line left at their
// defaults, then the zone, hosts, routers, links and routes in the file's order (the order SimGrid
// numbers them in and the network model lists them in).
void build(const Platform& p)
{
  for (const auto& [key, value] : p.cfg)
    if (simgrid::config::is_default(key.c_str()))
      simgrid::config::set_parse(key + ":" + value);
  auto* zone     = new ClusterZone(p.zone_id); // the first zone is the root (SimGrid's rule)
  sg4::NetZone* z = zone->get_iface();
  for (const auto& h : p.hosts) {
    sg4::Host* host = z->create_host(h.id, h.speed);
    for (const auto& [k, v] : h.props)
      host->set_property(k, v);
    host->seal();
  }
  for (const auto& r : p.routers)
    z->create_router(r);
  std::unordered_map<std::string, sg4::Link*> links;
  for (const auto& l : p.links) {
    sg4::Link* link = nullptr;
    if (l.policy == "SPLITDUPLEX") {
      link = z->create_split_duplex_link(l.id, l.bandwidth);
    } else {
      link = z->create_link(l.id, l.bandwidth);
      link->set_sharing_policy(policy_of(l.policy));
    }
    link->set_latency(l.latency);
    link->seal();
    links.emplace(l.id, link);
  }
  const sg4::Engine* e = sg4::Engine::get_instance();
  std::vector<sg4::LinkInRoute> list;
  for (const auto& r : p.routes) {
    list.clear();
    for (const auto& c : r.ctn)
      list.emplace_back(links.at(c.id), c.dir);
    z->add_route(e->netpoint_by_name(r.src), e->netpoint_by_name(r.dst), nullptr, nullptr, list,
                 true);
  }
  z->seal();
  sg4::Engine::on_platform_created();
}

} // namespace

extern "C" void load_platform(const sg4::Engine& engine)
{
  const char* path = std::getenv("DLSIM_PLATFORM_XML");
  if (!path || !*path)
    throw std::invalid_argument("libdlsim-sgzone.so loads the platform file named by "
                                "DLSIM_PLATFORM_XML, which is not set");
  // kept for the process's life (a few MB; 50 MB for 100,000 GPUs): freeing them would free
  // mapped blocks, with the effect described at Mapped
  static Platform p;
  bool ours = false;
  {
    Mapped file(path);
    ours = file.ok() && parse(file.text(), p) && check_graph(p);
  }
  if (const char* say = std::getenv("DLSIM_SGZONE_REPORT"); say && *say)
    std::fprintf(stderr, "sgzone: %s\n", ours ? "dlsim's routing" : "SimGrid's loader");
  if (ours)
    build(p);
  else
    engine.load_platform(path); // SimGrid's own loader, and its messages
}
