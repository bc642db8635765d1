/*
** Vector text (Requirements 1 and 9 of functions/scalar.c): a vector's JSON array read into
** float32, a float32 printed with the fewest digits that read back the same, and numbers in
** text with a '.' whatever the locale.  Nothing here knows SQLite; kernels/vectext.h is what
** crosses.
*/
#include "kernels/vectext.h"

#include <locale.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HS_MAX_NUMBER 511 /* the digits of one number in a JSON vector */

/*
** Numbers in text always have a '.' decimal point, whatever setlocale() a program has called,
** as in SQLite itself: under de_DE, strtod() would read "0.5" as 0 and printf() write "0,5".
** So the '.' is swapped for the locale's decimal point on the way in, and back on the way out.
*/
static const char *locale_point(void) {
  const char *dp = localeconv()->decimal_point;
  return dp && dp[0] && strlen(dp) <= 8 ? dp : ".";
}

/* strtod() of the n bytes of a C-locale number at s (n <= HS_MAX_NUMBER). */
static double c_strtod(const char *s, int64_t n) {
  char buf[HS_MAX_NUMBER + 16];
  const char *dp = locale_point();
  size_t dl = strlen(dp);
  int64_t j = 0;
  for (int64_t i = 0; i < n; i++) {
    if (s[i] == '.') {
      memcpy(buf + j, dp, dl); /* a JSON number has one '.' at most */
      j += (int64_t)dl;
    } else {
      buf[j++] = s[i];
    }
  }
  buf[j] = 0;
  return strtod(buf, 0);
}

/* snprintf(buf, cap, "%.*g", precision, x) with a '.' decimal point; returns the length. */
int c_format(char *buf, size_t cap, int precision, double x) {
  int len = snprintf(buf, cap, "%.*g", precision, x);
  const char *dp = locale_point();
  char *at = strstr(buf, dp);
  if (len > 0 && (size_t)len < cap && at && strcmp(dp, ".") != 0) {
    size_t dl = strlen(dp);
    *at = '.';
    memmove(at + 1, at + dl, strlen(at + dl) + 1);
    len -= (int)dl - 1;
  }
  return len;
}

/* Length of the JSON number at s (at most n bytes), 0 when there is none. */
static int64_t json_number_len(const char *s, int64_t n) {
  int64_t i = 0;
  if (i < n && s[i] == '-') i++;
  if (i < n && s[i] == '0') {
    i++;
  } else if (i < n && s[i] >= '1' && s[i] <= '9') {
    while (i < n && s[i] >= '0' && s[i] <= '9') i++;
  } else {
    return 0;
  }
  if (i < n && s[i] == '.') {
    int64_t start = ++i;
    while (i < n && s[i] >= '0' && s[i] <= '9') i++;
    if (i == start) return 0;
  }
  if (i < n && (s[i] == 'e' || s[i] == 'E')) {
    i++;
    if (i < n && (s[i] == '+' || s[i] == '-')) i++;
    int64_t start = i;
    while (i < n && s[i] >= '0' && s[i] <= '9') i++;
    if (i == start) return 0;
  }
  return i;
}

int hs_parse_json_vector(const char *s, int64_t n, float *out, int64_t cap, int64_t *dims,
                         int64_t *bad_index) {
  int64_t i = 0, d = 0;
  *dims = 0;
  *bad_index = -1;
  while (i < n && is_ws(s[i])) i++;
  if (i >= n || s[i] != '[') return HS_MALFORMED;
  i++;
  while (i < n && is_ws(s[i])) i++;
  if (i < n && s[i] == ']') {
    i++;
  } else {
    for (;;) {
      int64_t len = json_number_len(s + i, n - i);
      if (len == 0 || len > HS_MAX_NUMBER) return HS_MALFORMED;
      if (d >= cap) return HS_TOO_LONG;
      float f = (float)c_strtod(s + i, len);
      if (!isfinite(f) && *bad_index < 0) *bad_index = d;
      out[d++] = f;
      i += len;
      while (i < n && is_ws(s[i])) i++;
      if (i < n && s[i] == ',') {
        i++;
        while (i < n && is_ws(s[i])) i++;
        continue;
      }
      if (i < n && s[i] == ']') {
        i++;
        break;
      }
      return HS_MALFORMED;
    }
  }
  while (i < n && is_ws(s[i])) i++;
  if (i != n) return HS_MALFORMED;
  *dims = d;
  if (d == 0) return HS_EMPTY;
  return *bad_index >= 0 ? HS_NONFINITE : HS_OK;
}

int hs_format_float(float x, char *buf, int64_t cap) {
  int len = 0;
  for (int p = 6; p <= 9; p++) {
    len = c_format(buf, (size_t)cap, p, (double)x);
    if (len > 0 && (float)c_strtod(buf, len) == x) break;
  }
  return len;
}
