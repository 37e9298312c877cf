/* testutil.h — small helpers shared by the CUnit suites. */
#ifndef RH_TESTUTIL_H
#define RH_TESTUTIL_H

#include <stddef.h>

/* Directory of the shared real traces (REHEARSE_SHARED_TRACES, else
 * ../shared/traces), or NULL after printing why the caller skips. */
const char *tu_shared_traces(const char *why_needed);
/* Full path of a shared trace file, or NULL (printed skip) when absent. */
const char *tu_shared_file(const char *name, char *buf, size_t n);
/* ../shared/gpu-profiles (or $REHEARSE_GPU_PROFILES) when present; else NULL
 * after printing that the test skipped and why. */
const char *tu_gpu_profiles(const char *why_needed);
/* A fresh path under build/tmp/ for this test (the file is not created). */
const char *tu_tmp_path(const char *name, char *buf, size_t n);
/* Path of the rehearse binary (REHEARSE_BIN, else ./rehearse). */
const char *tu_bin(void);
/* Runs a shell command, capturing stdout+stderr into out (NUL-terminated,
 * truncated); returns the exit status, or -1 if it could not run. */
int tu_run(const char *cmd, char *out, size_t n);
/* A CUnit assertion that got is within rel of want (relative to the larger);
 * on failure prints the expression `what`, the line and both values. */
int tu_close_rel(double got, double want, double rel, const char *what, int line);
/* Writes a file; 0 on success. */
int tu_write_file(const char *path, const void *data, size_t n);
int tu_file_exists(const char *path);
/* 1 when both files can be read and hold the same bytes. */
int tu_same_file(const char *a, const char *b);

/* A rehearse server started in the background: `rehearse serve ARGS`
 * (ARGS must include --port 0); url is what it prints it listens on. */
typedef struct tu_server {
    int pid;
    char url[128];
    char out[256], err[256];
} tu_server;
/* 0 once it listens (within 30 s), else -1 (the process is killed). */
int tu_server_start(tu_server *s, const char *name, char *const args[]);
/* The same for any subcommand that prints "listening on URL" as its first
 * line on stdout (`rehearse router ARGS`). */
int tu_command_start(tu_server *s, const char *name, const char *command, char *const args[]);
/* SIGTERM, then waits; the exit status (128 + signal when killed). */
int tu_server_stop(tu_server *s);

#endif
