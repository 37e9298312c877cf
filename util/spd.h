/* spd.h — small symmetric positive-definite systems (the normal equations
 * of a least-squares fit with a handful of unknowns): the inverse, by
 * Cholesky. Matrices are n × n, row-major, n <= RH_SPD_MAX. It refuses a
 * matrix that is not positive definite to working precision (a pivot at
 * most 1e-12 of its diagonal): the caller learns the unknowns are not all
 * determined, rather than getting a huge meaningless answer. */
#ifndef RH_UTIL_SPD_H
#define RH_UTIL_SPD_H

#define RH_SPD_MAX 16

/* inv = A⁻¹; 0, or when A is not positive definite 1 + the first column
 * that the columns before it (nearly) explain. */
int rh_spd_inverse(const double *A, double *inv, int n);

#endif
