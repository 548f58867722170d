/* safetensors_writer.c: writing a safetensors file atomically (see
 * wt/safetensors.h). */

#include "wt/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "wt/log.h"
#include "safetensors_internal.h"

/* ---- writing ---------------------------------------------------------- */

static wt_status *write_all(int fd, const void *buf, uint64_t len,
                            const char *path) {
  const uint8_t *p = buf;
  while (len > 0) {
    size_t chunk = len > (1u << 30) ? (1u << 30) : (size_t)len;
    ssize_t w = write(fd, p, chunk);
    if (w < 0) {
      if (errno == EINTR) continue;
      return wt_status_from_errno(errno, "%s: write failed", path);
    }
    p += w;
    len -= (uint64_t)w;
  }
  return NULL;
}

/* Builds the header object: `__metadata__` first, then the tensors in the
 * order given with contiguous offsets, as the reference writer lays them. */
static wt_status *build_header(const char *path,
                               const wt_st_write_tensor *tensors, size_t n,
                               const char *const *metadata, json_t **out) {
  wt_status *st = NULL;
  json_t *root = json_object();
  json_t *md = NULL;
  if (root == NULL) WT_FAIL(WT_RESOURCE_EXHAUSTED, "%s: out of memory", path);
  if (metadata != NULL && metadata[0] != NULL) {
    md = json_object();
    if (md == NULL) WT_FAIL(WT_RESOURCE_EXHAUSTED, "%s: out of memory", path);
    for (size_t i = 0; metadata[i] != NULL; i += 2) {
      const char *k = metadata[i], *v = metadata[i + 1];
      if (v == NULL)
        WT_FAIL(WT_INVALID_ARGUMENT,
                "%s: metadata key '%s' has no value (the array must hold "
                "key, value pairs)",
                path, k);
      if (json_object_get(md, k) != NULL)
        WT_FAIL(WT_INVALID_ARGUMENT, "%s: duplicate metadata key '%s'", path,
                k);
      json_t *jv = json_string(v);
      if (jv == NULL || json_object_set_new(md, k, jv) != 0)
        WT_FAIL(WT_INVALID_ARGUMENT,
                "%s: metadata key '%s': key or value is not valid UTF-8", path,
                k);
    }
    if (json_object_set_new(root, METADATA_KEY, md) != 0) {
      md = NULL;
      WT_FAIL(WT_RESOURCE_EXHAUSTED, "%s: out of memory", path);
    }
    md = NULL;
  }

  uint64_t offset = 0;
  for (size_t i = 0; i < n; i++) {
    const wt_st_write_tensor *t = &tensors[i];
    if (t->name == NULL)
      WT_FAIL(WT_INVALID_ARGUMENT, "%s: tensor %zu: name is NULL", path, i);
    if (strcmp(t->name, METADATA_KEY) == 0)
      WT_FAIL(WT_INVALID_ARGUMENT,
              "%s: tensor %zu: the name '" METADATA_KEY "' is reserved", path,
              i);
    if (json_object_get(root, t->name) != NULL)
      WT_FAIL(WT_INVALID_ARGUMENT, "%s: duplicate tensor name '%s'", path,
              t->name);
    const char *dtname = wt_dtype_safetensors_name(t->dtype);
    if (dtname == NULL)
      WT_FAIL(WT_INVALID_ARGUMENT, "%s: tensor '%s': invalid dtype %d", path,
              t->name, (int)t->dtype);
    if (t->ndim > 0 && t->shape == NULL)
      WT_FAIL(WT_INVALID_ARGUMENT,
              "%s: tensor '%s': shape is NULL with ndim %d", path, t->name,
              t->ndim);
    uint64_t nbytes;
    wt_status *nst = wt_tensor_nbytes(t->dtype, t->shape, t->ndim, &nbytes);
    if (nst != NULL) {
      st = wt_status_prefix(nst, "%s: tensor '%s'", path, t->name);
      goto out;
    }
    if (nbytes > 0 && t->data == NULL)
      WT_FAIL(WT_INVALID_ARGUMENT,
              "%s: tensor '%s': data is NULL for %" PRIu64 " bytes", path,
              t->name, nbytes);
    if (nbytes > UINT64_MAX - offset || offset + nbytes > INT64_MAX)
      WT_FAIL(WT_INVALID_ARGUMENT,
              "%s: tensor '%s': total size overflows 64 bits", path, t->name);

    json_t *entry = json_object();
    json_t *jshape = json_array();
    json_t *joff = json_array();
    int bad = entry == NULL || jshape == NULL || joff == NULL;
    for (int d = 0; !bad && d < t->ndim; d++)
      bad = json_array_append_new(jshape, json_integer(t->shape[d])) != 0;
    bad = bad ||
          json_array_append_new(joff, json_integer((json_int_t)offset)) ||
          json_array_append_new(joff,
                                json_integer((json_int_t)(offset + nbytes))) ||
          json_object_set_new(entry, "dtype", json_string(dtname)) ||
          json_object_set(entry, "shape", jshape) ||
          json_object_set(entry, "data_offsets", joff);
    json_decref(jshape);
    json_decref(joff);
    if (bad) {
      json_decref(entry);
      WT_FAIL(WT_RESOURCE_EXHAUSTED, "%s: tensor '%s': out of memory", path,
              t->name);
    }
    /* Fails for a name that is not UTF-8 (or out of memory). */
    if (json_object_set_new(root, t->name, entry) != 0)
      WT_FAIL(WT_INVALID_ARGUMENT, "%s: tensor %zu: name is not valid UTF-8",
              path, i);
    offset += nbytes;
  }
  *out = root;
  root = NULL;
out:
  json_decref(md);
  json_decref(root);
  return st;
}

/* Opens a fresh temporary file beside `path`, honouring the umask (which
 * mkstemp's 0600 would not). */
static wt_status *open_temp(const char *path, char **tmp_out, int *fd_out) {
  for (int attempt = 0; attempt < 64; attempt++) {
    uint64_t r;
    if (getrandom(&r, sizeof(r), 0) != (ssize_t)sizeof(r))
      r = ((uint64_t)getpid() << 32) ^ (uint64_t)time(NULL) ^ (uint64_t)attempt;
    char *tmp = NULL;
    if (asprintf(&tmp, "%s.tmp.%016" PRIx64, path, r) < 0)
      return wt_status_new(WT_RESOURCE_EXHAUSTED, "%s: out of memory", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) {
      *tmp_out = tmp;
      *fd_out = fd;
      return NULL;
    }
    int err = errno;
    free(tmp);
    if (err != EEXIST)
      return wt_status_from_errno(err, "%s: cannot create a temporary file",
                                  path);
  }
  return wt_status_new(WT_INTERNAL, "%s: no free temporary file name", path);
}

wt_status *wt_safetensors_write(const char *path,
                                const wt_st_write_tensor *tensors, size_t n,
                                const char *const *metadata) {
  wt_status *st = NULL;
  json_t *root = NULL;
  char *json = NULL;
  uint8_t *head = NULL;
  char *tmp = NULL;
  int fd = -1;
  if (path == NULL)
    return wt_status_new(WT_INVALID_ARGUMENT, "parameter 'path' is NULL");
  if (tensors == NULL && n > 0)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "%s: parameter 'tensors' is NULL with n = %zu", path,
                         n);

  WT_CHECK(build_header(path, tensors, n, metadata, &root));
  json = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
  if (json == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "%s: out of memory serializing the header",
            path);
  size_t jlen = strlen(json);
  /* Padded so that the data region starts 8-aligned, as the reference
   * writer does. */
  size_t hlen = (jlen + 7) & ~(size_t)7;
  if (hlen > WT_SAFETENSORS_MAX_HEADER)
    WT_FAIL(WT_INVALID_ARGUMENT,
            "%s: header would be %zu bytes, over the limit of %u", path, hlen,
            WT_SAFETENSORS_MAX_HEADER);
  head = malloc(HEADER_LEN_BYTES + hlen);
  if (head == NULL) WT_FAIL(WT_RESOURCE_EXHAUSTED, "%s: out of memory", path);
  for (int i = 0; i < 8; i++) head[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
  memcpy(head + HEADER_LEN_BYTES, json, jlen);
  memset(head + HEADER_LEN_BYTES + jlen, ' ', hlen - jlen);

  WT_CHECK(open_temp(path, &tmp, &fd));
  WT_CHECK(write_all(fd, head, HEADER_LEN_BYTES + hlen, tmp));
  for (size_t i = 0; i < n; i++) {
    uint64_t nbytes;
    /* Already validated by build_header. */
    WT_CHECK(wt_tensor_nbytes(tensors[i].dtype, tensors[i].shape,
                              tensors[i].ndim, &nbytes));
    WT_CHECK(write_all(fd, tensors[i].data, nbytes, tmp));
  }
  /* Durable before it becomes visible: a crash never leaves a short file
   * under the final name. */
  if (fsync(fd) != 0) {
    st = wt_status_from_errno(errno, "%s: fsync failed", tmp);
    goto out;
  }
  int rc = close(fd);
  fd = -1;
  if (rc != 0) {
    st = wt_status_from_errno(errno, "%s: close failed", tmp);
    goto out;
  }
  if (rename(tmp, path) != 0) {
    st = wt_status_from_errno(errno, "%s: cannot rename %s into place", path,
                              tmp);
    goto out;
  }
  free(tmp);
  tmp = NULL;
out:
  if (fd >= 0) close(fd);
  if (tmp != NULL) {
    unlink(tmp);
    free(tmp);
  }
  free(head);
  free(json);
  json_decref(root);
  return st;
}
