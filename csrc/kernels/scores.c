/*
** The scores of functions/scalar.c's bm25_score, hybrid_score and temporal_decay (Requirements 6,
** 7 and 8), and the dates and times temporal_decay reads.  Nothing here knows SQLite;
** kernels/scores.h is what crosses.
*/
#include "kernels/scores.h"

#include <math.h>
#include <string.h>

double hs_bm25_score(double rank, double saturation) {
  double r = rank < 0 ? -rank : 0.0, sum = saturation + r;
  if (isinf(sum)) return (r / 2) / (saturation / 2 + r / 2); /* both near the largest double */
  return r / sum;
}

double hs_decay(double age_days, double half_life_days) {
  /* Not age 0: a tiny half life makes the rate infinite, and infinity times 0 is NaN. */
  if (!(age_days > 0)) return 1.0;
  return exp(-log(2.0) / half_life_days * age_days);
}

/* Days from 1970-01-01 to a civil date (Howard Hinnant's algorithm). */
static int64_t days_from_civil(int64_t y, int64_t m, int64_t d) {
  y -= m <= 2;
  int64_t era = (y >= 0 ? y : y - 399) / 400;
  int64_t yoe = y - era * 400;
  int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

static int days_in_month(int64_t y, int64_t m) {
  static const int dm[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  return dm[m - 1] + (m == 2 && leap);
}

static int digits(const char *s, int n, int64_t *v) {
  int64_t x = 0;
  for (int i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9') return 0;
    x = x * 10 + (s[i] - '0');
  }
  *v = x;
  return 1;
}

/* Parses YYYY-MM-DD at s (10 bytes) into days since the epoch. */
static int parse_date(const char *s, int64_t *days) {
  int64_t y, m, d;
  if (!digits(s, 4, &y) || s[4] != '-' || !digits(s + 5, 2, &m) || s[7] != '-' ||
      !digits(s + 8, 2, &d))
    return 0;
  if (m < 1 || m > 12 || d < 1 || d > days_in_month(y, m)) return 0;
  *days = days_from_civil(y, m, d);
  return 1;
}

int hs_path_date(const char *path, int64_t n, int64_t *days) {
  int64_t start = 0;
  for (int64_t i = 0; i < n; i++) {
    if (path[i] == '/' || path[i] == '\\') start = i + 1;
  }
  const char *name = path + start;
  return n - start == 13 && memcmp(name + 10, ".md", 3) == 0 && parse_date(name, days);
}

int hs_parse_time(const char *s, int64_t n, double *unix_seconds) {
  int64_t days, hh = 0, mm = 0, ss = 0, oh = 0, om = 0;
  double frac = 0;
  if (n < 10 || !parse_date(s, &days)) return 0;
  int64_t i = 10;
  if (i < n && (s[i] == 'T' || s[i] == ' ')) {
    if (n - i < 6 || !digits(s + i + 1, 2, &hh) || s[i + 3] != ':' || !digits(s + i + 4, 2, &mm))
      return 0;
    i += 6;
    if (i < n && s[i] == ':') {
      if (n - i < 3 || !digits(s + i + 1, 2, &ss)) return 0;
      i += 3;
      if (i < n && s[i] == '.') {
        double scale = 0.1;
        int64_t start = ++i;
        for (; i < n && s[i] >= '0' && s[i] <= '9'; i++, scale /= 10) frac += (s[i] - '0') * scale;
        if (i == start) return 0;
      }
    }
    if (hh > 23 || mm > 59 || ss > 59) return 0;
    if (i < n && s[i] == 'Z') {
      i++;
    } else if (i < n && (s[i] == '+' || s[i] == '-')) {
      int sign = s[i] == '-' ? -1 : 1;
      if (n - i >= 6 && s[i + 3] == ':' && digits(s + i + 1, 2, &oh) && digits(s + i + 4, 2, &om)) {
        i += 6;
      } else if (n - i >= 5 && digits(s + i + 1, 2, &oh) && digits(s + i + 3, 2, &om)) {
        i += 5;
      } else {
        return 0;
      }
      if (oh > 23 || om > 59) return 0;
      oh *= sign;
      om *= sign;
    }
  }
  if (i != n) return 0;
  *unix_seconds = (double)(days * 86400 + hh * 3600 + mm * 60 + ss - oh * 3600 - om * 60) + frac;
  return 1;
}
