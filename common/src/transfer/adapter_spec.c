/* adapter_spec.c: LoRA adapter sets' specs (wt/adapter_spec.h). */
#include "wt/adapter_spec.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "wt/dtype.h"

#define SUFFIX_A ".lora_A.weight"
#define SUFFIX_B ".lora_B.weight"

wt_status *wt_adapter_name_check(const char *name, const char *what) {
  size_t len = name ? strlen(name) : 0;
  if (len == 0)
    return wt_status_new(WT_INVALID_ARGUMENT, "%s: an adapter needs a name",
                         what);
  if (len > WT_ADAPTER_NAME_MAX)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "%s: an adapter name of %zu bytes; at most %d", what,
                         len, WT_ADAPTER_NAME_MAX);
  for (size_t i = 0; i < len; i++) {
    char ch = name[i];
    if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
          (ch >= '0' && ch <= '9') || ch == '_' || ch == '-'))
      return wt_status_new(WT_INVALID_ARGUMENT,
                           "%s: adapter name '%.*s' has byte 0x%02x at %zu; "
                           "names are [A-Za-z0-9_-]",
                           what, (int)len, name, (unsigned char)ch, i);
  }
  return NULL;
}

/* One tensor of a spec, for the checks: its module path is name[0..mod). */
typedef struct entry {
  const char *name;
  size_t mod;
  int kind; /* 0: lora_A, 1: lora_B */
  size_t index;
} entry;

static int entry_cmp(const void *a, const void *b) {
  const entry *x = a, *y = b;
  size_t n = x->mod < y->mod ? x->mod : y->mod;
  int c = memcmp(x->name, y->name, n);
  if (c != 0) return c;
  if (x->mod != y->mod) return x->mod < y->mod ? -1 : 1;
  return x->kind - y->kind;
}

static int str_cmp(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static bool ends_with(const char *s, size_t len, const char *suffix) {
  size_t k = strlen(suffix);
  return len > k && memcmp(s + len - k, suffix, k) == 0;
}

/* The module's last name: what PEFT's target_modules lists. */
static const char *last_name(const entry *e, size_t *len) {
  size_t at = e->mod;
  while (at > 0 && e->name[at - 1] != '.') at--;
  *len = e->mod - at;
  return e->name + at;
}

static bool is_float(wt_dtype dt) {
  return dt == WT_DTYPE_FLOAT16 || dt == WT_DTYPE_BFLOAT16 ||
         dt == WT_DTYPE_FLOAT32 || dt == WT_DTYPE_FLOAT64;
}

/* Each tensor on its own: PEFT's name, two dimensions, a float dtype. */
static wt_status *check_tensor(const char *adapter,
                               const Wt__V1__ParameterInfo *p, entry *e,
                               wt_tensor_meta *m) {
  wt_dtype dt;
  const char *name = p ? p->name : NULL;
  size_t len = name ? strlen(name) : 0;
  if (len == 0)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "adapter '%s': a tensor without a name", adapter);
  if (len > WT_ADAPTER_TENSOR_NAME_MAX)
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "adapter '%s': a tensor name of %zu bytes; at most %d",
                         adapter, len, WT_ADAPTER_TENSOR_NAME_MAX);
  if (ends_with(name, len, SUFFIX_A))
    e->kind = 0;
  else if (ends_with(name, len, SUFFIX_B))
    e->kind = 1;
  else
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "adapter '%s': tensor '%s' is not a LoRA weight in "
                         "PEFT's naming (<module>" SUFFIX_A
                         " or <module>" SUFFIX_B ")",
                         adapter, name);
  e->name = name;
  e->mod = len - strlen(SUFFIX_A);
  wt_status *st = wt_dtype_from_name(p->dtype ? p->dtype : "", &dt);
  if (st != NULL)
    return wt_status_prefix(st, "adapter '%s': tensor '%s'", adapter, name);
  if (!is_float(dt))
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "adapter '%s': tensor '%s' has dtype %s; LoRA weights "
                         "are float16, bfloat16, float32 or float64",
                         adapter, name, p->dtype);
  if (p->n_shape != 2 || p->shape[0] < 1 || p->shape[1] < 1) {
    char buf[128];
    wt_shape_format(p->shape, p->n_shape > WT_MAX_NDIM ? 0 : (int)p->n_shape,
                    buf, sizeof(buf));
    return wt_status_new(WT_INVALID_ARGUMENT,
                         "adapter '%s': tensor '%s' has shape %s; a LoRA "
                         "weight is a matrix",
                         adapter, name,
                         p->n_shape > WT_MAX_NDIM ? "(too many "
                                                    "dims)"
                                                  : buf);
  }
  st = wt_tensor_meta_init(m, name, dt, p->shape, 2);
  if (st != NULL)
    return wt_status_prefix(st, "adapter '%s': tensor '%s'", adapter, name);
  return NULL;
}

/* `t` against the `len` bytes at `last`, as strcmp orders them. */
static int name_cmp(const char *t, const char *last, size_t len) {
  size_t tl = strlen(t);
  int c = memcmp(t, last, tl < len ? tl : len);
  if (c != 0) return c;
  return tl < len ? -1 : tl > len ? 1 : 0;
}

/* The spec's targets equal the modules' last names (entries sorted by
 * module): the targets sorted, then each module's last name looked up in
 * them; n log n, whatever a stranger sends. */
static wt_status *check_targets(const Wt__V1__AdapterSpec *s, const entry *es,
                                size_t n) {
  wt_status *st = NULL;
  size_t nt = s->n_target_modules;
  const char **sorted = NULL;
  bool *used = NULL;
  if (nt > WT_ADAPTER_MAX_TARGETS)
    WT_FAIL(WT_INVALID_ARGUMENT, "adapter '%s': %zu target modules; at most %d",
            s->name, nt, WT_ADAPTER_MAX_TARGETS);
  sorted = malloc((nt ? nt : 1) * sizeof(*sorted));
  used = calloc(nt ? nt : 1, sizeof(*used));
  if (sorted == NULL || used == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "adapter '%s': out of memory", s->name);
  for (size_t i = 0; i < nt; i++) {
    const char *t = s->target_modules[i];
    if (t == NULL || *t == '\0' || strlen(t) > WT_ADAPTER_TENSOR_NAME_MAX)
      WT_FAIL(WT_INVALID_ARGUMENT,
              "adapter '%s': target_modules[%zu] is empty or longer than %d "
              "bytes",
              s->name, i, WT_ADAPTER_TENSOR_NAME_MAX);
    sorted[i] = t;
  }
  qsort(sorted, nt, sizeof(*sorted), str_cmp);
  for (size_t i = 0; i + 1 < nt; i++)
    if (strcmp(sorted[i], sorted[i + 1]) == 0)
      WT_FAIL(WT_INVALID_ARGUMENT,
              "adapter '%s': target module '%s' is listed twice", s->name,
              sorted[i]);
  /* Every module's last name among the targets (the first that is not,
   * named below), every target used by a module. */
  const entry *unlisted = NULL;
  for (size_t k = 0; k < n; k += 2) {
    size_t len;
    const char *last = last_name(&es[k], &len);
    size_t lo = 0, hi = nt;
    bool found = false;
    while (lo < hi && !found) {
      size_t mid = lo + (hi - lo) / 2;
      int c = name_cmp(sorted[mid], last, len);
      if (c == 0) {
        used[mid] = found = true;
      } else if (c < 0) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    if (!found && unlisted == NULL) unlisted = &es[k];
  }
  for (size_t i = 0; i < nt; i++)
    if (!used[i])
      WT_FAIL(WT_INVALID_ARGUMENT,
              "adapter '%s': target module '%s' has no tensor", s->name,
              sorted[i]);
  if (unlisted != NULL) {
    size_t len;
    const char *last = last_name(unlisted, &len);
    WT_FAIL(WT_INVALID_ARGUMENT,
            "adapter '%s': tensor '%s' is of module '%.*s', which "
            "target_modules does not list",
            s->name, unlisted->name, (int)len, last);
  }
out:
  free(sorted);
  free(used);
  return st;
}

wt_status *wt_adapter_spec_check(const Wt__V1__AdapterSpec *s,
                                 wt_tensor_meta **metas, size_t *n_out) {
  wt_status *st = NULL;
  entry *es = NULL;
  wt_tensor_meta *ms = NULL;
  size_t n = s ? s->n_tensors : 0;
  if (metas) *metas = NULL;
  if (n_out) *n_out = 0;
  if (s == NULL) return wt_status_new(WT_INVALID_ARGUMENT, "adapter: no spec");
  WT_CHECK(wt_adapter_name_check(s->name, "adapter.name"));
  if (n == 0)
    WT_FAIL(WT_INVALID_ARGUMENT, "adapter '%s': the spec lists no tensors",
            s->name);
  if (n > WT_ADAPTER_MAX_TENSORS)
    WT_FAIL(WT_INVALID_ARGUMENT, "adapter '%s': %zu tensors; at most %d",
            s->name, n, WT_ADAPTER_MAX_TENSORS);
  es = calloc(n, sizeof(*es));
  ms = calloc(n, sizeof(*ms));
  if (es == NULL || ms == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "adapter '%s': out of memory", s->name);
  for (size_t i = 0; i < n; i++) {
    es[i].index = i;
    WT_CHECK(check_tensor(s->name, s->tensors[i], &es[i], &ms[i]));
  }
  if (s->rank == 0 || s->rank > WT_ADAPTER_MAX_RANK)
    WT_FAIL(WT_INVALID_ARGUMENT, "adapter '%s': rank %u; 1 to %d", s->name,
            s->rank, WT_ADAPTER_MAX_RANK);
  if (!isfinite(s->alpha) || s->alpha <= 0)
    WT_FAIL(WT_INVALID_ARGUMENT,
            "adapter '%s': alpha %g; lora_alpha is finite and positive",
            s->name, s->alpha);
  for (size_t i = 0; i < n; i++) {
    int64_t r = ms[i].shape[es[i].kind == 0 ? 0 : 1];
    if (r != (int64_t)s->rank)
      WT_FAIL(WT_INVALID_ARGUMENT,
              "adapter '%s': tensor '%s' of shape [%lld, %lld] has rank %lld; "
              "the adapter's rank is %u",
              s->name, es[i].name, (long long)ms[i].shape[0],
              (long long)ms[i].shape[1], (long long)r, s->rank);
  }
  qsort(es, n, sizeof(*es), entry_cmp);
  for (size_t i = 0; i + 1 < n; i++)
    if (entry_cmp(&es[i], &es[i + 1]) == 0)
      WT_FAIL(WT_INVALID_ARGUMENT, "adapter '%s': tensor '%s' is listed twice",
              s->name, es[i].name);
  for (size_t i = 0; i < n;) {
    /* Sorted by module, then A before B: a module is exactly A, B. */
    bool pair = i + 1 < n && es[i].kind == 0 && es[i + 1].kind == 1 &&
                es[i].mod == es[i + 1].mod &&
                memcmp(es[i].name, es[i + 1].name, es[i].mod) == 0;
    if (!pair)
      WT_FAIL(WT_INVALID_ARGUMENT,
              "adapter '%s': module '%.*s' has %s but no %s", s->name,
              (int)es[i].mod, es[i].name, es[i].kind == 0 ? "lora_A" : "lora_B",
              es[i].kind == 0 ? "lora_B" : "lora_A");
    i += 2;
  }
  WT_CHECK(check_targets(s, es, n));
  if (metas) {
    *metas = ms;
    ms = NULL;
  }
  if (n_out) *n_out = n;
out:
  if (ms != NULL) wt_tensor_meta_array_free(ms, n);
  free(es);
  return st;
}

static const Wt__V1__ParameterInfo *find_tensor(
    const Wt__V1__ParameterInfo *const *sorted, size_t n, const char *name) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = strcmp(sorted[mid]->name, name);
    if (c == 0) return sorted[mid];
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return NULL;
}

static int info_cmp(const void *a, const void *b) {
  return strcmp((*(const Wt__V1__ParameterInfo *const *)a)->name,
                (*(const Wt__V1__ParameterInfo *const *)b)->name);
}

wt_status *wt_adapter_spec_same(const Wt__V1__AdapterSpec *first,
                                const Wt__V1__AdapterSpec *s) {
  wt_status *st = NULL;
  const Wt__V1__ParameterInfo **sorted = NULL;
  const char *name = first->name;
  /* Tensors first, so a refusal names the tensor that differs. */
  sorted = malloc((first->n_tensors ? first->n_tensors : 1) * sizeof(*sorted));
  if (sorted == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "adapter '%s': out of memory", name);
  memcpy(sorted, first->tensors, first->n_tensors * sizeof(*sorted));
  qsort(sorted, first->n_tensors, sizeof(*sorted), info_cmp);
  for (size_t i = 0; i < s->n_tensors; i++) {
    const Wt__V1__ParameterInfo *p = s->tensors[i];
    const Wt__V1__ParameterInfo *q =
        find_tensor(sorted, first->n_tensors, p->name);
    if (q == NULL)
      WT_FAIL(WT_FAILED_PRECONDITION,
              "adapter '%s': tensor '%s' is not in the set its first round "
              "made (%zu tensors)",
              name, p->name, first->n_tensors);
    wt_dtype a, b;
    WT_CHECK(wt_dtype_from_name(p->dtype, &a));
    WT_CHECK(wt_dtype_from_name(q->dtype, &b));
    if (a != b || p->shape[0] != q->shape[0] || p->shape[1] != q->shape[1])
      WT_FAIL(WT_FAILED_PRECONDITION,
              "adapter '%s': tensor '%s' is %s [%lld, %lld], but its first "
              "round made it %s [%lld, %lld]",
              name, p->name, wt_dtype_torch_name(a), (long long)p->shape[0],
              (long long)p->shape[1], wt_dtype_torch_name(b),
              (long long)q->shape[0], (long long)q->shape[1]);
  }
  if (s->n_tensors != first->n_tensors) {
    /* Fewer (more would have named a stranger above): name one missing. */
    const Wt__V1__ParameterInfo **mine =
        malloc((s->n_tensors ? s->n_tensors : 1) * sizeof(*mine));
    if (mine == NULL)
      WT_FAIL(WT_RESOURCE_EXHAUSTED, "adapter '%s': out of memory", name);
    memcpy(mine, s->tensors, s->n_tensors * sizeof(*mine));
    qsort(mine, s->n_tensors, sizeof(*mine), info_cmp);
    const char *missing = sorted[0]->name;
    for (size_t i = 0; i < first->n_tensors; i++)
      if (find_tensor(mine, s->n_tensors, sorted[i]->name) == NULL) {
        missing = sorted[i]->name;
        break;
      }
    free(mine);
    WT_FAIL(WT_FAILED_PRECONDITION,
            "adapter '%s': tensor '%s' of its first round is missing (%zu "
            "tensors, its first round had %zu)",
            name, missing, s->n_tensors, first->n_tensors);
  }
  /* The same tensors make the same rank and targets; alpha is apart. */
  if (s->rank != first->rank)
    WT_FAIL(WT_FAILED_PRECONDITION,
            "adapter '%s': rank %u, but its first round set rank %u", name,
            s->rank, first->rank);
  if (s->alpha != first->alpha)
    WT_FAIL(WT_FAILED_PRECONDITION,
            "adapter '%s': alpha %g, but its first round set alpha %g", name,
            s->alpha, first->alpha);
out:
  free(sorted);
  return st;
}

/* Appends a malloc'd ParameterInfo of `m` to spec->tensors. */
static wt_status *add_tensor(Wt__V1__AdapterSpec *s, const wt_tensor_meta *m) {
  Wt__V1__ParameterInfo *p = calloc(1, sizeof(*p));
  if (p == NULL) return wt_status_new(WT_RESOURCE_EXHAUSTED, "out of memory");
  wt__v1__parameter_info__init(p);
  s->tensors[s->n_tensors++] = p; /* freed with the spec from here on */
  p->name = strdup(m->name);
  p->dtype = strdup(wt_dtype_torch_name(m->dtype));
  p->shape = malloc((m->ndim ? (size_t)m->ndim : 1) * sizeof(int64_t));
  if (p->name == NULL || p->dtype == NULL || p->shape == NULL)
    return wt_status_new(WT_RESOURCE_EXHAUSTED, "out of memory");
  memcpy(p->shape, m->shape, (size_t)m->ndim * sizeof(int64_t));
  p->n_shape = (size_t)m->ndim;
  p->nbytes = m->nbytes;
  return NULL;
}

/* The targets of the spec's tensors, sorted, each once. */
static wt_status *derive_targets(Wt__V1__AdapterSpec *s) {
  wt_status *st = NULL;
  size_t n = s->n_tensors;
  s->target_modules = calloc(n ? n : 1, sizeof(char *));
  if (s->target_modules == NULL)
    WT_FAIL(WT_RESOURCE_EXHAUSTED, "adapter '%s': out of memory", s->name);
  for (size_t i = 0; i < n; i++) {
    const char *name = s->tensors[i]->name;
    size_t len = strlen(name);
    if (!ends_with(name, len, SUFFIX_A) && !ends_with(name, len, SUFFIX_B))
      continue; /* the check names it */
    entry e = {.name = name, .mod = len - strlen(SUFFIX_A)};
    size_t tl;
    const char *t = last_name(&e, &tl);
    char *copy = strndup(t, tl);
    if (copy == NULL)
      WT_FAIL(WT_RESOURCE_EXHAUSTED, "adapter '%s': out of memory", s->name);
    s->target_modules[s->n_target_modules++] = copy;
  }
  qsort(s->target_modules, s->n_target_modules, sizeof(char *), str_cmp);
  size_t kept = 0;
  for (size_t i = 0; i < s->n_target_modules; i++) {
    if (kept > 0 &&
        strcmp(s->target_modules[kept - 1], s->target_modules[i]) == 0) {
      free(s->target_modules[i]);
      continue;
    }
    s->target_modules[kept++] = s->target_modules[i];
  }
  s->n_target_modules = kept;
out:
  return st;
}

wt_status *wt_adapter_spec_complete(Wt__V1__AdapterSpec *s,
                                    const wt_tensor_meta *metas, size_t n) {
  wt_status *st = NULL;
  WT_CHECK(wt_adapter_name_check(s->name, "adapter.name"));
  if (s->n_tensors == 0 && n > 0) {
    if (n > WT_ADAPTER_MAX_TENSORS)
      WT_FAIL(WT_INVALID_ARGUMENT, "adapter '%s': %zu tensors; at most %d",
              s->name, n, WT_ADAPTER_MAX_TENSORS);
    free(s->tensors);
    s->tensors = calloc(n, sizeof(*s->tensors));
    if (s->tensors == NULL)
      WT_FAIL(WT_RESOURCE_EXHAUSTED, "adapter '%s': out of memory", s->name);
    for (size_t i = 0; i < n; i++)
      WT_CHECK(
          wt_status_prefix(add_tensor(s, &metas[i]), "adapter '%s'", s->name));
  }
  if (s->rank == 0)
    for (size_t i = 0; i < s->n_tensors; i++) {
      const Wt__V1__ParameterInfo *p = s->tensors[i];
      if (p->name && ends_with(p->name, strlen(p->name), SUFFIX_A) &&
          p->n_shape == 2 && p->shape[0] > 0 &&
          p->shape[0] <= WT_ADAPTER_MAX_RANK) {
        s->rank = (uint32_t)p->shape[0];
        break;
      }
    }
  if (s->n_target_modules == 0) {
    free(s->target_modules);
    s->target_modules = NULL;
    WT_CHECK(derive_targets(s));
  }
  WT_CHECK(wt_adapter_spec_check(s, NULL, NULL));
out:
  return st;
}
