/* cmds.h — the subcommands of `dlsim`. Each takes its own argv (argv[0] is the subcommand name),
 * prints, and returns the process exit status: 0 success, 2 bad input (one line on stderr
 * "dlsim: ..."), 1 a failure of the system. */
#ifndef CMDS_H
#define CMDS_H

/* Prints "dlsim: MSG" to stderr as one line (control characters escaped: a message may quote
 * what a file holds). */
void cli_error(const char *msg);

int cmd_run(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_workload(int argc, char **argv);
int cmd_platform(int argc, char **argv);
int cmd_coll(int argc, char **argv);
int cmd_kbench(int argc, char **argv);
int cmd_sweep(int argc, char **argv);
int cmd_compare(int argc, char **argv);
int cmd_validate(int argc, char **argv);
int cmd_search(int argc, char **argv);

#endif
