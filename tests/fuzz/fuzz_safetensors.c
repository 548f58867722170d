/* fuzz_safetensors.c: libFuzzer target for the safetensors reader.
 *
 * The input is a whole file. Besides memory safety (ASan/UBSan), it checks
 * what wt/safetensors.h promises: errors are INVALID_ARGUMENT naming the
 * buffer, and an accepted file's tensors lie inside the data region, cover
 * it exactly, agree with their dtype and shape, and can be found by name. */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wt/dtype.h"
#include "wt/safetensors.h"

#define WHAT "fuzz input"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *why, const char *detail) {
  fprintf(stderr, "fuzz_safetensors: %s: %s\n", why, detail ? detail : "");
  abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  wt_safetensors *f = NULL;
  wt_status *st = wt_safetensors_open_buffer(data, size, WHAT, &f);
  if (st != NULL) {
    wt_code code = wt_status_code(st);
    const char *msg = wt_status_message(st);
    if (code != WT_INVALID_ARGUMENT && code != WT_RESOURCE_EXHAUSTED)
      fail("unexpected error code", wt_code_name(code));
    if (code == WT_INVALID_ARGUMENT && strstr(msg, WHAT) == NULL)
      fail("error message does not name the buffer", msg);
    if (f != NULL) fail("error but *out was set", msg);
    wt_status_free(st);
    return 0;
  }
  if (f == NULL) fail("success but *out is NULL", NULL);

  /* An accepted file has a header length that fits, so this is safe. */
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = hlen << 8 | data[i];
  const uint8_t *region = data + 8 + hlen;
  uint64_t region_len = size - 8 - hlen;

  uint64_t covered = 0, prev_end = 0;
  volatile uint8_t sink = 0;
  size_t n = wt_safetensors_count(f);
  for (size_t i = 0; i < n; i++) {
    const wt_st_tensor *t = wt_safetensors_at(f, i);
    if (t == NULL) fail("wt_safetensors_at returned NULL in range", NULL);
    const char *name = t->meta.name;
    if (name == NULL) fail("tensor without a name", NULL);
    if (t->meta.nbytes != t->meta.numel * wt_dtype_itemsize(t->meta.dtype))
      fail("nbytes != numel * itemsize", name);
    if (t->offset < prev_end) fail("tensors not in data-offset order", name);
    if (t->offset > region_len || t->meta.nbytes > region_len - t->offset)
      fail("tensor outside the data region", name);
    if ((const uint8_t *)t->data != region + t->offset)
      fail("data pointer does not match offset", name);
    if (t->meta.nbytes > 0) {
      const uint8_t *b = t->data;
      sink ^= b[0] ^ b[t->meta.nbytes - 1]; /* ASan checks both ends */
    }
    prev_end = t->offset + t->meta.nbytes;
    covered += t->meta.nbytes;
    if (wt_safetensors_find(f, name) != t) fail("find(name) != at(i)", name);
  }
  if (covered != region_len) fail("tensors do not cover the data region", NULL);
  if (wt_safetensors_at(f, n) != NULL) fail("at(count) is not NULL", NULL);
  (void)wt_safetensors_metadata(f, "format");
  wt_safetensors_close(f);
  (void)sink;
  return 0;
}
