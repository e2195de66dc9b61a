#ifndef MUSTER_LAUNCHER_HELP_H
#define MUSTER_LAUNCHER_HELP_H

/* Prints the complete `muster run --help` text to stdout. */
void launcher_print_run_help(void);

/* Prints the README's table of `muster run` options (muster run --help-markdown, hidden). */
void launcher_print_run_markdown(void);

/* Prints `muster --help` to stdout. */
void launcher_print_main_help(void);

/* `muster` with no command: the commands, on stderr. */
void launcher_print_main_usage(void);

#endif
