/* dtype.c: placeholder, being written. */
