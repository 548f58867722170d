/* safetensors_index.c: sharded checkpoints, `*.safetensors.index.json`
 * and its shards, opened as one (see wt/safetensors.h). */

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
#include "wt/secure.h"
#include "safetensors_internal.h"

/* ---- checkpoints ------------------------------------------------------ */

typedef struct {
  const wt_st_tensor *t;
  size_t shard;
} ckpt_entry;

struct wt_checkpoint {
  char *path;
  wt_safetensors **shards;
  char **shard_names; /* as the index spells them */
  size_t nshards;
  const wt_st_tensor **tensors; /* shard by shard */
  ckpt_entry *by_name;          /* sorted by tensor name */
  size_t n;
  uint64_t total_bytes;
};

static int cmp_entry_name(const void *a, const void *b) {
  return strcmp(((const ckpt_entry *)a)->t->meta.name,
                ((const ckpt_entry *)b)->t->meta.name);
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* A shard named by the index must stay inside the index's folder. */
static int shard_name_ok(const char *name) {
  if (name[0] == '\0' || name[0] == '/') return 0;
  for (const char *p = name; *p;) {
    const char *slash = strchr(p, '/');
    size_t len = slash ? (size_t)(slash - p) : strlen(p);
    if (len == 2 && p[0] == '.' && p[1] == '.') return 0;
    p += len + (slash ? 1 : 0);
  }
  return 1;
}

/* Reads the index, fills c->shard_names (sorted, unique) and returns the
 * weight_map through *wmap (a new reference). */
static wt_status *read_index(wt_checkpoint *c, json_t **wmap) {
  wt_status *st = NULL;
  json_t *root = NULL;
  const char **names = NULL; /* borrowed from the JSON */
  int fd = -1;
  WT_CHECK(wt_open_regular("checkpoint index", c->path, &fd, NULL));
  FILE *fp = fdopen(fd, "r");
  if (fp == NULL) {
    st = wt_status_from_errno(errno, "checkpoint index '%s'", c->path);
    close(fd);
    goto out;
  }
  json_error_t jerr;
  root = json_loadf(fp, JSON_REJECT_DUPLICATES, &jerr);
  fclose(fp);
  if (root == NULL)
    WT_FAIL(WT_INVALID_ARGUMENT,
            "%s: checkpoint index is not valid JSON: %s (line %d, column %d)",
            c->path, jerr.text, jerr.line, jerr.column);
  json_t *map =
      json_is_object(root) ? json_object_get(root, "weight_map") : NULL;
  if (!json_is_object(map))
    WT_FAIL(WT_INVALID_ARGUMENT,
            "%s: checkpoint index must be an object with a 'weight_map' "
            "object (tensor name -> shard file)",
            c->path);
  size_t n = json_object_size(map);
  names = malloc((n + 1) * sizeof(*names));
  c->shard_names = calloc(n + 1, sizeof(*c->shard_names));
  if (names == NULL || c->shard_names == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "%s: out of memory", c->path);
  const char *name;
  json_t *value;
  size_t k = 0;
  json_object_foreach(map, name, value) {
    if (!json_is_string(value))
      WT_FAIL(WT_INVALID_ARGUMENT,
              "%s: weight_map['%s'] is %s, expected a shard file name", c->path,
              name, wt_st_json_type_name(value));
    if (!shard_name_ok(json_string_value(value)))
      WT_FAIL(WT_INVALID_ARGUMENT,
              "%s: weight_map['%s']: shard file '%s' must be a relative path "
              "inside the index's folder",
              c->path, name, json_string_value(value));
    names[k++] = json_string_value(value);
  }
  if (k > 0) qsort(names, k, sizeof(*names), cmp_str);
  for (size_t i = 0; i < k; i++) {
    if (i > 0 && strcmp(names[i - 1], names[i]) == 0) continue;
    c->shard_names[c->nshards] = strdup(names[i]);
    if (c->shard_names[c->nshards] == NULL)
      WT_FAIL(WT_RESOURCE_EXHAUSTED, "%s: out of memory", c->path);
    c->nshards++;
  }
  *wmap = json_incref(map);
out:
  free(names);
  json_decref(root);
  return st;
}

static wt_status *open_shards(wt_checkpoint *c) {
  wt_status *st = NULL;
  char *root = NULL;
  char *dir = strdup(c->path);
  if (dir == NULL) return wt_status_new(WT_RESOURCE_EXHAUSTED, "out of memory");
  char *slash = strrchr(dir, '/');
  if (slash != NULL)
    slash[1] = '\0';
  else
    dir[0] = '\0';
  if (c->nshards > 0) {
    c->shards = calloc(c->nshards, sizeof(*c->shards));
    if (c->shards == NULL)
      WT_FAIL(WT_RESOURCE_EXHAUSTED, "%s: out of memory", c->path);
  }
  /* The folder as the kernel resolves it: a shard whose real path (every
   * symlink followed) lies outside it is refused, so an index cannot make
   * the server read, and serve as weights, a file elsewhere. */
  root = realpath(dir[0] ? dir : ".", NULL);
  if (root == NULL)
    WT_FAIL(WT_INVALID_ARGUMENT, "%s: cannot resolve the index's folder: %s",
            c->path, strerror(errno));
  size_t rootlen = strlen(root);
  for (size_t i = 0; i < c->nshards; i++) {
    char *shard_path = NULL;
    if (asprintf(&shard_path, "%s%s", dir, c->shard_names[i]) < 0)
      WT_FAIL(WT_RESOURCE_EXHAUSTED, "%s: out of memory", c->path);
    char *real = realpath(shard_path, NULL);
    free(shard_path);
    if (real == NULL)
      WT_FAIL(WT_NOT_FOUND, "%s: shard '%s': %s", c->path, c->shard_names[i],
              strerror(errno));
    if (strncmp(real, root, rootlen) != 0 ||
        (real[rootlen] != '/' && rootlen > 1)) {
      st = wt_status_new(WT_INVALID_ARGUMENT,
                         "%s: shard '%s' resolves to '%s', outside the "
                         "index's folder '%s' (a symlink out of it?)",
                         c->path, c->shard_names[i], real, root);
      free(real);
      goto out;
    }
    wt_status *sst = wt_safetensors_open(real, &c->shards[i]);
    free(real);
    if (sst != NULL) {
      st = wt_status_prefix(sst, "%s: shard '%s'", c->path, c->shard_names[i]);
      goto out;
    }
  }
out:
  free(root);
  free(dir);
  return st;
}

/* Lists every tensor shard by shard and checks the shards against each other
 * and against the index's weight_map (NULL for a single file). */
static wt_status *index_tensors(wt_checkpoint *c, json_t *wmap) {
  wt_status *st = NULL;
  size_t n = 0;
  for (size_t i = 0; i < c->nshards; i++)
    n += wt_safetensors_count(c->shards[i]);
  if (n > 0) {
    c->tensors = calloc(n, sizeof(*c->tensors));
    c->by_name = calloc(n, sizeof(*c->by_name));
    if (c->tensors == NULL || c->by_name == NULL)
      WT_FAIL(WT_RESOURCE_EXHAUSTED, "%s: out of memory for %zu tensors",
              c->path, n);
  }
  size_t k = 0;
  for (size_t i = 0; i < c->nshards; i++) {
    for (size_t j = 0; j < wt_safetensors_count(c->shards[i]); j++) {
      const wt_st_tensor *t = wt_safetensors_at(c->shards[i], j);
      c->tensors[k] = t;
      c->by_name[k] = (ckpt_entry){t, i};
      c->total_bytes += t->meta.nbytes;
      k++;
    }
  }
  c->n = n;
  if (n > 0) qsort(c->by_name, n, sizeof(*c->by_name), cmp_entry_name);
  for (size_t i = 1; i < n; i++) {
    if (strcmp(c->by_name[i - 1].t->meta.name, c->by_name[i].t->meta.name) ==
        0) {
      size_t a = c->by_name[i - 1].shard, b = c->by_name[i].shard;
      WT_FAIL(WT_INVALID_ARGUMENT,
              "%s: tensor '%s' is in two shards: '%s' and '%s'", c->path,
              c->by_name[i].t->meta.name, c->shard_names[a < b ? a : b],
              c->shard_names[a < b ? b : a]);
    }
  }
  if (wmap == NULL) goto out;
  for (size_t i = 0; i < c->nshards; i++) {
    for (size_t j = 0; j < wt_safetensors_count(c->shards[i]); j++) {
      const char *name = wt_safetensors_at(c->shards[i], j)->meta.name;
      const char *want = json_string_value(json_object_get(wmap, name));
      if (want == NULL)
        WT_FAIL(WT_INVALID_ARGUMENT,
                "%s: tensor '%s' in shard '%s' is not in the index's "
                "weight_map",
                c->path, name, c->shard_names[i]);
      if (strcmp(want, c->shard_names[i]) != 0)
        WT_FAIL(WT_INVALID_ARGUMENT,
                "%s: weight_map puts tensor '%s' in shard '%s', but it is in "
                "shard '%s'",
                c->path, name, want, c->shard_names[i]);
    }
  }
  const char *name;
  json_t *value;
  json_object_foreach(wmap, name, value) {
    if (wt_checkpoint_find(c, name) == NULL)
      WT_FAIL(WT_INVALID_ARGUMENT,
              "%s: weight_map puts tensor '%s' in shard '%s', which does not "
              "contain it",
              c->path, name, json_string_value(value));
  }
out:
  return st;
}

wt_status *wt_checkpoint_open(const char *path, wt_checkpoint **out) {
  wt_status *st = NULL;
  json_t *wmap = NULL;
  wt_checkpoint *c = NULL;
  if (out == NULL || path == NULL)
    return wt_status_new(WT_INVALID_ARGUMENT, "parameter '%s' is NULL",
                         out == NULL ? "out" : "path");
  *out = NULL;
  c = calloc(1, sizeof(*c));
  if (c == NULL || (c->path = strdup(path)) == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "%s: out of memory", path);
  if (ends_with(path, ".json")) {
    WT_CHECK(read_index(c, &wmap));
    WT_CHECK(open_shards(c));
  } else {
    c->shards = calloc(1, sizeof(*c->shards));
    c->shard_names = calloc(1, sizeof(*c->shard_names));
    if (c->shards == NULL || c->shard_names == NULL)
      WT_FAIL(WT_RESOURCE_EXHAUSTED, "%s: out of memory", path);
    c->nshards = 1;
    const char *base = strrchr(path, '/');
    c->shard_names[0] = strdup(base ? base + 1 : path);
    if (c->shard_names[0] == NULL)
      WT_FAIL(WT_RESOURCE_EXHAUSTED, "%s: out of memory", path);
    WT_CHECK(wt_safetensors_open(path, &c->shards[0]));
  }
  WT_CHECK(index_tensors(c, wmap));
  WT_LOGD("safetensors", "%s: %zu shards, %zu tensors, %" PRIu64 " bytes", path,
          c->nshards, c->n, c->total_bytes);
  *out = c;
  c = NULL;
out:
  json_decref(wmap);
  wt_checkpoint_close(c);
  return st;
}

size_t wt_checkpoint_count(const wt_checkpoint *c) {
  return c ? c->n : 0;
}

const wt_st_tensor *wt_checkpoint_at(const wt_checkpoint *c, size_t i) {
  return c && i < c->n ? c->tensors[i] : NULL;
}

const wt_st_tensor *wt_checkpoint_find(const wt_checkpoint *c,
                                       const char *name) {
  if (c == NULL || name == NULL) return NULL;
  size_t lo = 0, hi = c->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int cmp = strcmp(name, c->by_name[mid].t->meta.name);
    if (cmp == 0) return c->by_name[mid].t;
    if (cmp < 0)
      hi = mid;
    else
      lo = mid + 1;
  }
  return NULL;
}

uint64_t wt_checkpoint_total_bytes(const wt_checkpoint *c) {
  return c ? c->total_bytes : 0;
}

void wt_checkpoint_close(wt_checkpoint *c) {
  if (c == NULL) return;
  for (size_t i = 0; i < c->nshards; i++) {
    if (c->shards) wt_safetensors_close(c->shards[i]);
    if (c->shard_names) free(c->shard_names[i]);
  }
  free(c->shards);
  free(c->shard_names);
  free(c->tensors);
  free(c->by_name);
  free(c->path);
  free(c);
}
