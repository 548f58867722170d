/* param_store.c: placeholder, being written. */
