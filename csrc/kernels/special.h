/* special.h: the special functions of ember.special, one float64 scalar function each
 * (special.c); cloops.c runs them per element (float32 through float64, rounded once). */
#ifndef EM_KERNELS_SPECIAL_H
#define EM_KERNELS_SPECIAL_H

double em_digamma(double x);
double em_zeta(double x, double q);
double em_erfinv(double y);
double em_erfcx(double x);
double em_ndtri(double p);
double em_i0(double x);
double em_i0e(double x);
double em_i1(double x);
double em_i1e(double x);

#endif
