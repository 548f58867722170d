/* sources.c: placeholder, being written. */
