// sgplat.cpp — dlsim-sgplat: SimGrid loads a platform file and answers the driver's questions
// about it (sim/platform/platform.c is the other end), so that the closed form, `dlsim coll` and
// the SMPI executor read one platform the same way: SimGrid's parser, zones and routing.
//
//   dlsim-sgplat FILE [--cfg=KEY:VALUE ...]
//
// The settings are those smpirun gives (network/model:SMPI) with tracing off, then the --cfg
// items, then the file's <config> where those leave a setting at its default, as under smpirun.
// Output (stdout), one record per line, fields separated by tabs:
//   dlsim-sgplat 1                     first line
//   cfg KEY VALUE                      a network setting that is not at SimGrid's default
//   host NAME SPEED_FLOPS              hosts in the order the file declares them (rank order)
//   prop KEY VALUE                     a property of the host above (node, gpu, gpu_model,
//                                      gpu_mem_bytes, cpu_vendor)
//   link NAME BW_BPS LAT_S POLICY      every link, by name; the N-th such line is link N-1.
//                                      POLICY: SHARED, FATPIPE, WIFI or NONLINEAR (a SPLITDUPLEX
//                                      link is its two directions, NAME_UP and NAME_DOWN, each
//                                      SHARED)
//   ready
// then, for each line "SRC DST" (host indices) on stdin, one line:
//   route LAT_S N INDEX...             the links SimGrid routes SRC to DST through, in order
// or "noroute". A platform SimGrid cannot load ends the program with SimGrid's message on
// stderr and exit status 2. Numbers are printed with 17 significant digits.
#include <simgrid/s4u.hpp>
#include <smpi/smpi.h>
#include <xbt/config.hpp>

#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace sg4 = simgrid::s4u;

namespace {

const char* policy_name(sg4::Link::SharingPolicy p)
{
  switch (p) {
    case sg4::Link::SharingPolicy::FATPIPE:
      return "FATPIPE";
    case sg4::Link::SharingPolicy::SPLITDUPLEX:
      return "SPLITDUPLEX";
    case sg4::Link::SharingPolicy::WIFI:
      return "WIFI";
    case sg4::Link::SharingPolicy::NONLINEAR:
      return "NONLINEAR";
    default:
      return "SHARED";
  }
}

// A text field on one line: tabs and newlines would break the record.
std::string field(const char* s)
{
  std::string out = s ? s : "";
  for (char& c : out)
    if (c == '\t' || c == '\n' || c == '\r')
      c = ' ';
  return out;
}

// A setting SimGrid holds off its default, with its value as `show` writes it.
template <class T> void print_cfg(const char* key, std::string (*show)(const T&))
{
  try {
    if (not simgrid::config::is_default(key)) {
      std::string v = show(simgrid::config::get_value<T>(key));
      std::printf("cfg\t%s\t%s\n", key, field(v.c_str()).c_str());
    }
  } catch (const std::exception&) {
    // not a setting of this SimGrid
  }
}

std::string show_string(const std::string& v)
{
  return v;
}

std::string show_double(const double& v)
{
  char num[64];
  std::snprintf(num, sizeof num, "%.17g", v);
  return num;
}

std::string show_bool(const bool& v)
{
  return v ? "1" : "0";
}

// The reply to "SRC DST": the route's latency and link indices, or "noroute".
std::string route_line(const std::vector<sg4::Host*>& hosts,
                       const std::unordered_map<const sg4::Link*, int>& index, long src, long dst)
{
  const auto n = static_cast<long>(hosts.size());
  if (src < 0 || dst < 0 || src >= n || dst >= n)
    return "noroute";
  std::vector<sg4::Link*> links;
  double lat = 0;
  try {
    hosts[src]->route_to(hosts[dst], links, &lat);
  } catch (const std::exception&) {
    return "noroute";
  }
  if (links.empty() && lat <= 0 && src != dst) // SimGrid's own "no connecting path"
    return "noroute";
  std::string line = "route\t" + show_double(lat) + "\t" + std::to_string(links.size());
  for (const sg4::Link* l : links)
    line += "\t" + std::to_string(index.at(l)); // every route link is one of the engine's
  return line;
}

} // namespace

int main(int argc, char** argv)
{
  if (argc < 2 || argv[1][0] == '-') {
    std::fprintf(stderr, "usage: dlsim-sgplat PLATFORM.xml [--cfg=KEY:VALUE ...]\n");
    return 2;
  }
  std::string file = argv[1];
  // SimGrid reads its options from argv; the file is ours. smpirun's network model first.
  // No tracing, whatever the file's <config> says: the helper writes no file (a setting given on
  // the command line is no longer at its default, so the file's <config> leaves it alone).
  std::vector<std::string> args = {"dlsim-sgplat", "--cfg=network/model:SMPI", "--cfg=tracing:no",
                                   "--log=root.thresh:warning"};
  for (int i = 2; i < argc; i++)
    args.emplace_back(argv[i]);
  std::vector<char*> sg_argv;
  for (auto& a : args)
    sg_argv.push_back(a.data());
  sg_argv.push_back(nullptr);
  int sg_argc = static_cast<int>(args.size());

  // creation order is the file's order (a <cluster>'s hosts in radical order); SimGrid 3.32
  // signals a host's creation again when it seals it
  std::vector<sg4::Host*> hosts;
  std::unordered_set<const sg4::Host*> seen;
  sg4::Host::on_creation_cb([&hosts, &seen](sg4::Host& h) {
    if (seen.insert(&h).second)
      hosts.push_back(&h);
  });
  sg4::Engine engine(&sg_argc, sg_argv.data());
  // SMPI's own settings (smpi/os, smpi/privatization, ...) as smpirun declares them: a file's
  // <config> may hold them, as any file smpirun takes; the closed form does not use them
  smpi_init_options();
  try {
    engine.load_platform(file);
    // a file with no zone at all leaves SimGrid 3.32 without a root zone to seal (a crash): it
    // holds no host, which the driver reports as for an empty zone
    if (engine.get_netzone_root() == nullptr) {
      std::printf("dlsim-sgplat\t1\nready\n");
      std::fflush(stdout);
      return 0;
    }
    engine.seal_platform();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[sgplat/CRITICAL] %s\n", e.what());
    return 2;
  }

  std::printf("dlsim-sgplat\t1\n");
  for (const char* key : {"network/model", "smpi/bw-factor", "smpi/lat-factor"})
    print_cfg<std::string>(key, show_string);
  for (const char* key : {"network/TCP-gamma", "network/weight-S", "network/latency-factor",
                          "network/bandwidth-factor"})
    print_cfg<double>(key, show_double);
  print_cfg<bool>("network/crosstraffic", show_bool);
  for (const sg4::Host* h : hosts) {
    std::printf("host\t%s\t%.17g\n", field(h->get_cname()).c_str(), h->get_speed());
    for (const char* key : {"node", "gpu", "gpu_model", "gpu_mem_bytes", "cpu_vendor"})
      if (const char* v = h->get_property(key))
        std::printf("prop\t%s\t%s\n", key, field(v).c_str());
  }
  std::unordered_map<const sg4::Link*, int> index;
  for (const sg4::Link* l : engine.get_all_links()) {
    index.emplace(l, static_cast<int>(index.size()));
    std::printf("link\t%s\t%.17g\t%.17g\t%s\n", field(l->get_cname()).c_str(), l->get_bandwidth(),
                l->get_latency(), policy_name(l->get_sharing_policy()));
  }
  std::printf("ready\n");
  std::fflush(stdout);

  long src = 0;
  long dst = 0;
  while (std::scanf("%ld %ld", &src, &dst) == 2) {
    std::printf("%s\n", route_line(hosts, index, src, dst).c_str());
    std::fflush(stdout);
  }
  return 0;
}
