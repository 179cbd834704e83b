/* harness.c — the timing loop (kh_time) and the CPU clock and cache flush. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include "harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Last-level cache size from sysfs (index3, else index2), default 32 MiB. */
static size_t llc_bytes(void) {
  size_t best = 0;
  for (int i = 0; i < 4; i++) {
    char path[96], buf[64];
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    if (fgets(buf, sizeof buf, f)) {
      char *end;
      unsigned long v = strtoul(buf, &end, 10);
      size_t b = v * (*end == 'M' ? 1024 * 1024 : *end == 'K' ? 1024 : 1);
      if (b > best) best = b;
    }
    fclose(f);
  }
  return best ? best : 32u << 20;
}

static float *flush_buf;
static size_t flush_n;
static volatile float flush_sink;

static void cpu_flush(void) {
  if (!flush_buf) {
    size_t b = 2 * llc_bytes();
    if (b > (256u << 20)) b = 256u << 20;
    flush_n = b / sizeof(float);
    flush_buf = calloc(flush_n, sizeof(float));
    if (!flush_buf) return;
  }
  float s = 0.0f;
  for (size_t i = 0; i < flush_n; i += 16) { /* one write per 64-byte line */
    flush_buf[i] += 1.0f;
    s += flush_buf[i];
  }
  flush_sink = s;
}

static double t0;
static void cpu_start(void) { t0 = now_s(); }
static double cpu_stop(void) { return now_s() - t0; }

const kh_device kh_cpu_device = {"cpu", cpu_flush, cpu_start, cpu_stop};

void kh_opts_default(kh_opts *o) {
  o->warmup = 2;
  o->min_repeats = 5;
  o->max_repeats = 100;
  o->budget_s = 0.3;
  o->tolerance = 0.02;
  o->flush = 1;
}

static int dcmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(const double *t, int n, double *tmp) {
  memcpy(tmp, t, sizeof(double) * n);
  qsort(tmp, n, sizeof(double), dcmp);
  return n % 2 ? tmp[n / 2] : 0.5 * (tmp[n / 2 - 1] + tmp[n / 2]);
}

int kh_time(kh_bench *b, const kh_device *dev, const kh_opts *o, kh_stats *st) {
  if (o->min_repeats < 1 || o->max_repeats < o->min_repeats) return -1;
  double *t = malloc(sizeof(double) * o->max_repeats);
  double *tmp = malloc(sizeof(double) * o->max_repeats);
  if (!t || !tmp) {
    free(t);
    free(tmp);
    return -1;
  }
  for (int i = 0; i < o->warmup; i++) {
    kh_bench_run(b);
  }
  dev->start(); /* drain the warm-up before the first timed launch */
  dev->stop();
  int n = 0, stable = 0;
  double total = 0, prev_median = 0;
  while (n < o->max_repeats) {
    if (o->flush) dev->flush();
    dev->start();
    kh_bench_run(b);
    t[n] = dev->stop();
    total += t[n];
    n++;
    if (n >= o->min_repeats && n % o->min_repeats == 0) {
      double med = median(t, n, tmp);
      if (prev_median > 0 && fabs(med - prev_median) <= o->tolerance * prev_median) {
        stable = 1;
        break;
      }
      prev_median = med;
      if (total >= o->budget_s) break;
    }
  }
  double mean = 0, var = 0, mn = INFINITY; /* n >= 1: the loop ran at least once */
  for (int i = 0; i < n; i++) {
    mean += t[i];
    mn = t[i] < mn ? t[i] : mn;
  }
  mean /= n;
  for (int i = 0; i < n; i++) var += (t[i] - mean) * (t[i] - mean);
  st->median_s = median(t, n, tmp);
  st->mean_s = mean;
  st->stddev_s = n > 1 ? sqrt(var / (n - 1)) : 0;
  st->min_s = mn;
  st->repeats = n;
  st->stable = stable;
  free(t);
  free(tmp);
  return 0;
}
