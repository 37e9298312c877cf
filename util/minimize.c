/* minimize.c — Nelder–Mead with the usual coefficients (reflect 1, expand
 * 2, contract 1/2, shrink 1/2). */
#include "util/minimize.h"

#include <string.h>

double rh_nelder_mead(rh_min_fn f, void *ctx, double *x, int n, double step, int iters, int restarts)
{
    double p[RH_MIN_MAX_DIM + 1][RH_MIN_MAX_DIM], v[RH_MIN_MAX_DIM + 1];
    double best = f(x, ctx);
    for (int round = 0; round <= restarts; round++) {
        for (int i = 0; i <= n; i++) {
            memcpy(p[i], x, (size_t)n * sizeof *x);
            if (i) p[i][i - 1] += step;
            v[i] = f(p[i], ctx);
        }
        for (int it = 0; it < iters; it++) {
            /* order: best first, worst last */
            for (int i = 1; i <= n; i++)
                for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
                    double t = v[j];
                    v[j] = v[j - 1], v[j - 1] = t;
                    double q[RH_MIN_MAX_DIM];
                    memcpy(q, p[j], sizeof q);
                    memcpy(p[j], p[j - 1], sizeof q);
                    memcpy(p[j - 1], q, sizeof q);
                }
            double c[RH_MIN_MAX_DIM] = {0}, r[RH_MIN_MAX_DIM], e[RH_MIN_MAX_DIM];
            for (int i = 0; i < n; i++)
                for (int j = 0; j < n; j++) c[j] += p[i][j] / n;
            for (int j = 0; j < n; j++) r[j] = c[j] + (c[j] - p[n][j]);
            double fr = f(r, ctx);
            if (fr < v[0]) {
                for (int j = 0; j < n; j++) e[j] = c[j] + 2 * (c[j] - p[n][j]);
                double fe = f(e, ctx);
                memcpy(p[n], fe < fr ? e : r, (size_t)n * sizeof *x);
                v[n] = fe < fr ? fe : fr;
            } else if (fr < v[n - 1]) {
                memcpy(p[n], r, (size_t)n * sizeof *x);
                v[n] = fr;
            } else {
                for (int j = 0; j < n; j++) e[j] = c[j] + 0.5 * (p[n][j] - c[j]);
                double fc = f(e, ctx);
                if (fc < v[n]) {
                    memcpy(p[n], e, (size_t)n * sizeof *x);
                    v[n] = fc;
                } else {
                    for (int i = 1; i <= n; i++) {
                        for (int j = 0; j < n; j++) p[i][j] = p[0][j] + 0.5 * (p[i][j] - p[0][j]);
                        v[i] = f(p[i], ctx);
                    }
                }
            }
        }
        int b = 0;
        for (int i = 1; i <= n; i++)
            if (v[i] < v[b]) b = i;
        if (v[b] < best) {
            best = v[b];
            memcpy(x, p[b], (size_t)n * sizeof *x);
        }
    }
    return best;
}
