/* options.h — the command line of `dlsim run` (and of the commands that take its options:
 * kbench). The only place that parses a run's argv: executors read the resolved configuration
 * from the driver's request (exec/exec.h). */
#ifndef DL_CLI_OPTIONS_H
#define DL_CLI_OPTIONS_H

#include <glib.h>

#include "core/config.h"

/* Parses `dlsim run` options into `c`, which holds the defaults from cfg_init(), with `extra`
 * (may be NULL) as a further group of options (kbench's own) and `summary` (NULL: run's) atop
 * the help. Checks each
 * value at the door: spelling, range, finite numbers; cfg_resolve() checks the combination.
 * `command` names the command in messages ("run", "kbench"). With -h/--help the options are
 * printed and *help set (nothing else is checked). DL_ERR_INPUT naming the option on failure. */
gboolean cfg_parse_args(cfg_run *c, const char *command, const GOptionEntry *extra,
                        const char *summary, int *argc, char ***argv, gboolean *help,
                        GError **err);

/* Parses argv with `ctx` as every dlsim command does: -h/--help prints the options to stdout and
 * sets *help (never exits); an unknown or malformed option is DL_ERR_INPUT "COMMAND: ... (see dlsim
 * COMMAND --help)". */
gboolean cli_parse(GOptionContext *ctx, const char *command, int *argc, char ***argv,
                   gboolean *help, GError **err);

/* A finite number from `text` within [lo, hi] (decimal or with an exponent: 15e12);
 * DL_ERR_INPUT "OPT: expected EXPECTED, got 'TEXT'" otherwise. */
gboolean cli_number(const char *opt, const char *text, double lo, double hi,
                    const char *expected, double *out, GError **err);

#endif
