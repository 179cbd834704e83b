// sgcfg.cpp — what SimGrid's C API does not give: the value of a string setting (the network
// model's factor lists) as SimGrid itself holds it, whether it comes from the platform file's
// <config>, the command line or SimGrid's defaults.
#include <xbt/config.hpp>

#include <cstdlib>
#include <cstring>
#include <string>

extern "C" char *dl_sg_cfg_string(const char *key) {
  try {
    return strdup(simgrid::config::get_value<std::string>(key).c_str());
  } catch (...) {
    return nullptr;
  }
}
