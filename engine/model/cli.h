/* cli.h — `rehearse model`: info, list, generate, save. */
#ifndef RH_MODEL_CLI_H
#define RH_MODEL_CLI_H

int model_main(int argc, char **argv);

#endif
