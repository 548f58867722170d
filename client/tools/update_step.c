/* update_step.c: see update_step.h. */

#include "update_step.h"

#include <math.h>
#include <string.h>

static uint64_t splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* A uniform double in (0, 1]. */
static double unit(uint64_t *s) {
  return ((double)(splitmix(s) >> 11) + 1.0) / 9007199254740992.0;
}

void wt_update_step(const wt_tensor_meta *m, void *data, double fraction,
                    uint64_t seed, uint64_t step) {
  uint64_t s = seed * 0x100000001b3ull ^ step * 0x9e3779b97f4a7c15ull;
  for (const char *p = m->name; *p; p++)
    s = (s ^ (unsigned char)*p) * 0x100000001b3ull;
  unsigned char *b = data;
  if (fraction >= 1.0) { /* noise: every byte new */
    for (uint64_t i = 0; i < m->nbytes; i++) b[i] = (unsigned char)splitmix(&s);
    return;
  }
  if (fraction <= 0.0 || m->nbytes == 0) return;
  size_t width = m->dtype == WT_DTYPE_FLOAT32 ? 4 : 2;
  if (m->dtype == WT_DTYPE_UINT8 || m->dtype == WT_DTYPE_INT8 ||
      m->dtype == WT_DTYPE_BOOL)
    width = 1;
  uint64_t n = m->nbytes / width;
  double lq = log1p(-fraction);
  for (uint64_t i = 0;;) {
    /* The gap to the next changed element: geometric, so every element
     * changes independently with probability `fraction`. */
    double gap = floor(log(unit(&s)) / lq);
    if (gap >= (double)(n - i)) break;
    i += (uint64_t)gap;
    uint64_t r = splitmix(&s);
    int64_t by = (r % 10) ? 1 : 2 + (int64_t)((r >> 8) & 1);
    if (r & (1u << 20)) by = -by;
    unsigned char *e = b + i * width;
    if (width == 2) {
      uint16_t v;
      memcpy(&v, e, 2);
      v = (uint16_t)(v + by);
      memcpy(e, &v, 2);
    } else if (width == 4) {
      uint32_t v;
      memcpy(&v, e, 4);
      v = (uint32_t)((int64_t)v + by * 64); /* a bf16 ulp's worth, low bits */
      memcpy(e, &v, 4);
    } else {
      *e = (unsigned char)(*e + by);
    }
    i++;
    if (i >= n) break;
  }
}
