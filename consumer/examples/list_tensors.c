/* The newest version wt committed, read in place: list_tensors SOCKET */
#include <stdio.h>
#include "wt/consumer.h"

int main(int argc, char **argv) {
  wt_consumer *c = NULL;
  wt_consumer_version *v = NULL;
  wt_status *st = argc == 2 ? wt_consumer_connect(argv[1], NULL, &c) : NULL;
  if (st == NULL && c != NULL) st = wt_consumer_acquire(c, NULL, &v);
  if (st != NULL || v == NULL)
    return fprintf(stderr, "%s\n", st ? wt_status_message(st) : "usage"), 1;
  printf("version %s: %zu tensors\n", v->version, v->n_tensors);
  for (size_t i = 0; i < v->n_tensors; i++) /* an engine loads them here */
    printf("%s %s %llu bytes at %p\n", v->tensors[i].name, v->tensors[i].dtype,
           (unsigned long long)v->tensors[i].nbytes, v->tensors[i].data);
  wt_status_free(wt_consumer_release(c, v));
  wt_consumer_close(c);
  return 0;
}
