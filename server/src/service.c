/* service.c: placeholder, being written. */
