/* tool_format.h: output formatting shared by wt-push and wt-ctl. */
#ifndef WT_TOOL_FORMAT_H
#define WT_TOOL_FORMAT_H

#include <stddef.h>
#include <stdint.h>

/* Writes `bytes` as "512 B", "1.5 MiB", ... into buf; returns buf. */
const char *wt_tool_human_bytes(uint64_t bytes, char *buf, size_t len);

#endif /* WT_TOOL_FORMAT_H */
