/* wt/options.h: a backend's settings as a tool or a config file names
 * them (KEY=VALUE), and the helpers both halves of a backend parse them
 * with: the trainer engines' init_info (wt-push --option KEY=VALUE) and the
 * worker engines' options (wt-server --engine-option BACKEND.KEY=VALUE).
 * Libraries read no environment variables: a tool that takes a setting
 * from the environment turns it into one of these. */
#ifndef WT_OPTIONS_H
#define WT_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wt/status.h"
#include "wt/v1/wt.pb-c.h"
#include "wt/visibility.h"

#ifdef __cplusplus
extern "C" {
#endif

WT_API_BEGIN

/* One setting of a backend. Borrowed. */
typedef struct wt_backend_option {
  const char *key;
  const char *value;
} wt_backend_option;

/* Helpers for backends' init_info: "64M", "1GiB", "4096" (binary multiples)
 * and plain numbers, INVALID_ARGUMENT naming the option; and the error for
 * a key the backend does not know, listing `known` (a NULL-terminated
 * list). */
wt_status *wt_option_size(const wt_backend_option *o, uint64_t *out);
wt_status *wt_option_u32(const wt_backend_option *o, uint32_t *out);
/* "1", "true", "0", "false"; INVALID_ARGUMENT naming the option else. */
wt_status *wt_option_bool(const wt_backend_option *o, bool *out);
wt_status *wt_option_unknown(const char *backend, const wt_backend_option *o,
                             const char *const *known);
/* The packing options of the device backends (ipc, nccl): "packed" into
 * *packed, "bucket_size" into *buffer_size and "num_buffers" into
 * *num_buffers (fields of their init infos, malloc'd as below); every
 * other key is INVALID_ARGUMENT from wt_option_unknown(backend). */
wt_status *wt_option_packing(const char *backend, const wt_backend_option *o,
                             protobuf_c_boolean *packed,
                             Wt__V1__UInt64Value **buffer_size,
                             Wt__V1__UInt32Value **num_buffers);
/* The same into an init info's wrapper field: *slot is malloc'd when NULL
 * (freed with the info by wt_pb_free) and set to the option's value. */
wt_status *wt_option_size_field(const wt_backend_option *o,
                                Wt__V1__UInt64Value **slot);
wt_status *wt_option_u32_field(const wt_backend_option *o,
                               Wt__V1__UInt32Value **slot);

WT_API_END

#ifdef __cplusplus
}
#endif

#endif /* WT_OPTIONS_H */
