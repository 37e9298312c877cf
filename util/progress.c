/* progress.c — see progress.h. */
#include "util/progress.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

double rh_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int forced;   /* set once by a command's --progress, before any bar */

void rh_progress_force(int on)
{
    forced = on;
}

void rh_progress_begin(rh_progress *p, const char *label, uint64_t total)
{
    memset(p, 0, sizeof *p);
    p->label = label;
    p->total = total;
    p->t_start = p->t_last_draw = rh_now();
    const char *env = getenv("REHEARSE_PROGRESS");
    int tty = isatty(STDERR_FILENO);
    if (env && *env) p->enabled = atoi(env) != 0, p->silent = !p->enabled;
    else p->enabled = forced || tty;
    p->lines = !tty;
}

/* Not a terminal: one plain line. */
static void line(rh_progress *p, double now, int last)
{
    double el = now - p->t_start;
    if (p->total)
        fprintf(stderr, "%s: %llu/%llu (%.0f%%) after %02d:%02d %s%s\n", p->label, (unsigned long long)p->done,
                (unsigned long long)p->total, 100.0 * (double)p->done / (double)p->total, (int)(el / 60),
                (int)el % 60, p->extra, last ? " done" : "");
    else
        fprintf(stderr, "%s: %llu after %02d:%02d %s%s\n", p->label, (unsigned long long)p->done, (int)(el / 60),
                (int)el % 60, p->extra, last ? " done" : "");
    fflush(stderr);
    p->drawn = 1;
}

static void draw(rh_progress *p, double now)
{
    double el = now - p->t_start;
    double rate = el > 0 ? (double)p->done / el : 0;
    char bar[32];
    if (p->total) {
        int w = 24, fill = (int)((double)w * (double)p->done / (double)p->total);
        if (fill > w) fill = w;
        for (int i = 0; i < w; i++) bar[i] = i < fill ? '#' : '.';
        bar[w] = '\0';
        double eta = rate > 0 ? (double)(p->total - (p->done < p->total ? p->done : p->total)) / rate : 0;
        fprintf(stderr, "\r%s [%s] %llu/%llu  %.0f/s  ETA %02d:%02d %s\033[K", p->label, bar,
                (unsigned long long)p->done, (unsigned long long)p->total, rate,
                (int)(eta / 60), (int)eta % 60, p->extra);
    } else {
        fprintf(stderr, "\r%s %llu  %.0f/s  %02d:%02d %s\033[K", p->label,
                (unsigned long long)p->done, rate, (int)(el / 60), (int)el % 60, p->extra);
    }
    fflush(stderr);
    p->drawn = 1;
}

void rh_progress_update(rh_progress *p, uint64_t done)
{
    p->done = done;
    if (p->silent) return;
    double now = rh_now();
    if (p->lines) {   /* a forced bar every 2 s, a heartbeat every 30 s */
        if (now - p->t_last_draw < (p->enabled ? 2.0 : 30.0)) return;
        p->t_last_draw = now;
        line(p, now, 0);
        return;
    }
    if (!p->enabled || now - p->t_last_draw < 0.1) return;
    p->t_last_draw = now;
    draw(p, now);
}

void rh_progress_end(rh_progress *p)
{
    if (p->silent) return;
    if (p->total) p->done = p->total > p->done ? p->done : p->total;
    if (p->lines) {   /* closes what was shown; a short quiet run stays quiet */
        if (p->enabled || p->drawn) line(p, rh_now(), 1);
        return;
    }
    if (!p->enabled) return;
    draw(p, rh_now());
    fputc('\n', stderr);
}
