/* tool_format.c: output formatting shared by wt-push and wt-ctl. */
#include "tool_format.h"

#include <inttypes.h>
#include <stdio.h>

const char *wt_tool_human_bytes(uint64_t bytes, char *buf, size_t len) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)bytes;
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    u++;
  }
  if (u == 0)
    snprintf(buf, len, "%" PRIu64 " B", bytes);
  else
    snprintf(buf, len, "%.1f %s", v, units[u]);
  return buf;
}
