/* safetensors_internal.h: what the safetensors reader, writer and sharded
 * index share. Not installed. */
#ifndef WT_SAFETENSORS_INTERNAL_H
#define WT_SAFETENSORS_INTERNAL_H

#include <jansson.h>

#include "wt/visibility.h"

/* The little-endian length before the JSON header. */
#define HEADER_LEN_BYTES 8
/* The header's reserved key for string metadata. */
#define METADATA_KEY "__metadata__"

/* "an object", "a string", ...: a JSON value's type in words. */
WT_HIDDEN const char *wt_st_json_type_name(const json_t *j);

#endif /* WT_SAFETENSORS_INTERNAL_H */
