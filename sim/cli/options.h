/* options.h — the command line of `dlsim run` (and of the commands that take its options:
 * kbench). The only place that parses a run's argv: executors read the resolved configuration
 * from the driver's request (exec/exec.h). */
#ifndef DL_CLI_OPTIONS_H
#define DL_CLI_OPTIONS_H

#include <glib.h>

#include "core/config.h"

/* Parses `dlsim run` options (GOptionContext; --help prints them and exits) into `c`, which holds
 * the defaults from cfg_init(). Checks each value at the door: spelling, range, finite numbers;
 * cfg_resolve() checks the combination. `command` names the command in messages ("run",
 * "kbench"). DL_ERR_INPUT naming the option on failure. */
gboolean cfg_parse_args(cfg_run *c, const char *command, int *argc, char ***argv, GError **err);

#endif
