/* cli.h — `rehearse sim` and `rehearse run` fronts. */
#ifndef RH_SIM_CLI_H
#define RH_SIM_CLI_H

int sim_main(int argc, char **argv);
int run_main(int argc, char **argv);
int validate_main(int argc, char **argv);   /* sim/validate.c */

#endif
