/* synthetic.c: placeholder, being written. */
