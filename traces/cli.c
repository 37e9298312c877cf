/* cli.c — `rehearse trace` front (being written). */
#include "traces/cli.h"

#include <stdio.h>

int trace_main(int argc, char **argv)
{
    (void)argc; (void)argv;
    fprintf(stderr, "rehearse trace: not built yet\n");
    return 1;
}
