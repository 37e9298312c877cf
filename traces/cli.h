/* cli.h — `rehearse trace ...`: import, export, cat, stats, slice, synth. */
#ifndef RH_TRACES_CLI_H
#define RH_TRACES_CLI_H

int trace_main(int argc, char **argv);

#endif
