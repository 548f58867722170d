/* parse.c: sizes and numbers from text (see wt/parse.h). */

#include "wt/parse.h"

#include <errno.h>
#include <stdlib.h>
#include <strings.h>

/* strtoull takes leading blanks, a sign and wraps a negative number
 * around; a number here starts with a digit. */
static bool starts_with_digit(const char *s) {
  return s != NULL && *s >= '0' && *s <= '9';
}

bool wt_parse_size(const char *s, uint64_t *out) {
  char *end = NULL;
  if (!starts_with_digit(s)) return false;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  uint64_t mult = 1;
  if (end == s || errno == ERANGE) return false;
  if (*end) {
    switch (*end) {
      case 'k':
      case 'K':
        mult = 1ull << 10;
        break;
      case 'm':
      case 'M':
        mult = 1ull << 20;
        break;
      case 'g':
      case 'G':
        mult = 1ull << 30;
        break;
      default:
        return false;
    }
    end++;
    if (strcasecmp(end, "") != 0 && strcasecmp(end, "i") != 0 &&
        strcasecmp(end, "ib") != 0 && strcasecmp(end, "b") != 0)
      return false;
  }
  if (v > UINT64_MAX / mult) return false;
  *out = (uint64_t)v * mult;
  return true;
}

bool wt_parse_u64(const char *s, uint64_t *out) {
  char *end = NULL;
  if (!starts_with_digit(s)) return false;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (*end || errno == ERANGE) return false;
  *out = v;
  return true;
}
