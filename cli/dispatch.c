/* dispatch.c — see cli_dispatch in cli.h. */
#include <string.h>

#include "cli/cli.h"

int cli_dispatch(const cli_command *t, size_t n, const char *who, void (*usage)(FILE *f), int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 1;
    }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < n; i++)
        if (!strcmp(argv[1], t[i].name)) return t[i].main(argc - 1, argv + 1);
    fprintf(stderr, "%s: unknown command '%s'\n", who, argv[1]);
    usage(stderr);
    return 1;
}
