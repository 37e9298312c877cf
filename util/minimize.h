/* minimize.h — Nelder–Mead: the minimum of a smooth function of a few
 * unconstrained parameters without derivatives (for fits whose model has
 * a max() or a cube root in it). Restarts from the best point found, each
 * with a fresh simplex, so a collapsed simplex does not end the search. */
#ifndef RH_UTIL_MINIMIZE_H
#define RH_UTIL_MINIMIZE_H

#define RH_MIN_MAX_DIM 8

typedef double (*rh_min_fn)(const double *x, void *ctx);

/* Minimises f over x[0..n-1] from the x given (n <= RH_MIN_MAX_DIM); the
 * first simplex steps `step` in each coordinate. Returns the minimum and
 * leaves its point in x. */
double rh_nelder_mead(rh_min_fn f, void *ctx, double *x, int n, double step, int iters, int restarts);

#endif
