/* wt/base64.h: standard base64 (RFC 4648, with padding; not URL-safe), as
 * vLLM's nccl_unique_id_b64. */
#ifndef WT_BASE64_H
#define WT_BASE64_H

#include <stddef.h>

#include "wt/status.h"
#include "wt/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

WT_API_BEGIN

/* encode writes 4 * ceil(n / 3) characters and a NUL into out (room for
 * that); decode takes exactly that form and writes at most `cap` bytes:
 * INVALID_ARGUMENT naming `what` otherwise. */
void wt_base64_encode(const unsigned char *in, size_t n, char *out);
wt_status *wt_base64_decode(const char *in, unsigned char *out, size_t cap,
                            size_t *n, const char *what);

WT_API_END

#ifdef __cplusplus
}
#endif

#endif /* WT_BASE64_H */
