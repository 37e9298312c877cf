/* spd.c — Cholesky factorisation and inverse (spd.h). */
#include "util/spd.h"

#include <math.h>

/* L with A = L Lᵀ (lower triangle of L filled): 0, or 1 + the column
 * whose pivot failed. */
static int cholesky(const double *A, double *L, int n)
{
    if (n < 1 || n > RH_SPD_MAX) return 1;
    for (int i = 0; i < n; i++) {
        for (int j = 0; j <= i; j++) {
            double s = A[i * n + j];
            for (int k = 0; k < j; k++) s -= L[i * n + k] * L[j * n + k];
            if (i == j) {
                if (!(s > 1e-12 * fabs(A[i * n + i])) || !(A[i * n + i] > 0)) return 1 + i;
                L[i * n + i] = sqrt(s);
            } else {
                L[i * n + j] = s / L[j * n + j];
            }
        }
    }
    return 0;
}

static void solve_with(const double *L, const double *b, double *x, int n)
{
    double y[RH_SPD_MAX];
    for (int i = 0; i < n; i++) {   /* L y = b */
        double s = b[i];
        for (int k = 0; k < i; k++) s -= L[i * n + k] * y[k];
        y[i] = s / L[i * n + i];
    }
    for (int i = n - 1; i >= 0; i--) {   /* Lᵀ x = y */
        double s = y[i];
        for (int k = i + 1; k < n; k++) s -= L[k * n + i] * x[k];
        x[i] = s / L[i * n + i];
    }
}

int rh_spd_inverse(const double *A, double *inv, int n)
{
    double L[RH_SPD_MAX * RH_SPD_MAX];
    int bad = cholesky(A, L, n);
    if (bad) return bad;
    for (int j = 0; j < n; j++) {
        double e[RH_SPD_MAX] = {0}, col[RH_SPD_MAX];
        e[j] = 1;
        solve_with(L, e, col, n);
        for (int i = 0; i < n; i++) inv[i * n + j] = col[i];
    }
    return 0;
}
