/* test_browser.h — see test_browser.c */
#ifndef TPUSIM_TEST_BROWSER_H
#define TPUSIM_TEST_BROWSER_H

#include <stddef.h>

char       *test_slurp(const char *path, size_t *len);             /* whole file, NUL-terminated; NULL if unreadable */
void        test_tmp_path(char *buf, size_t n, const char *name);  /* a per-process path under $TMPDIR or /tmp */
const char *test_find_chromium(void);                              /* NULL when there is none */
/* Decodes an 8-bit RGB or RGBA, non-interlaced PNG into RGB (malloc'd). 0 on success. */
int         test_png_decode(const unsigned char *d, size_t n, int *w, int *h, unsigned char **rgb);
long        test_pixels_near(const unsigned char *rgb, int w, int h, unsigned col, int tol);   /* pixels near #rrggbb */

#endif
