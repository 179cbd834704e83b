/* interval.h — the prediction interval of a result's iteration time: the run-to-run spread of
 * its kernel draws (--samples) compounded with the model's own error on the validation cases of
 * its kernel database (kdb_validation).
 *
 * A validation case i is a real training iteration and dlsim's prediction of it with the same
 * database: its error is e_i = ln(real_i / predicted_i). The interval takes every draw t_s (the
 * run's iteration time alone without --samples) times every exp(e_i): the 5th, 50th and 95th
 * percentiles of those products (res_percentile) are the stated 90 % interval and its median.
 * A biased model moves the interval off the point prediction, as it should.
 *
 * Its coverage is checked by leave-one-out: case i is covered when its error lies between the
 * 5th and 95th percentiles of the other cases' errors (the interval built without it contains
 * its real time); the share of covered cases is reported beside the stated 90 %.
 *
 * The cases are single-GPU training iterations: the interval holds the error of composing
 * kernels, not that of the network model, which no measured multi-GPU case checks yet.
 */
#ifndef DL_INTERVAL_H
#define DL_INTERVAL_H

#include <glib.h>

#include "kdb/kdb.h"
#include "out/result.h"

/* The leave-one-out check of n >= 2 errors e[0..n-1] (ln(real/predicted)): for each case, the
 * 5th and 95th percentiles of the others into lo[i], hi[i] (may be NULL); returns the number of
 * cases whose error lies within them. */
int interval_loo(const double *e, int n, double *lo, double *hi);

/* Sets r's interval from its iteration time or its draws (r->samples_s) and database `db`'s
 * validation cases. Without cases, the draws' own 5th to 95th percentile where there are draws
 * (r->interval_cases 0: the model's error unknown), else no interval (r->interval FALSE). */
void interval_set(res_result *r, const kdb *db);

#endif
