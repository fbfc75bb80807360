/* test_browser.c — helpers for tests that look at what tpusim draws: temporary files, a headless Chromium
 * found on PATH (or TPUSIM_CHROMIUM), and a small PNG decoder for its screenshots. */
#include "test.h"
#include "test_browser.h"

#include <stdlib.h>
#include <unistd.h>
#include <zlib.h>

char *test_slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    if (b) b[n] = 0;
    fclose(f);
    if (len) *len = (size_t)n;
    return b;
}

void test_tmp_path(char *buf, size_t n, const char *name)
{
    const char *d = getenv("TMPDIR");
    snprintf(buf, n, "%s/tpusim-test-%d-%s", d ? d : "/tmp", (int)getpid(), name);
}

/* ---- headless Chromium ---- */

const char *test_find_chromium(void)
{
    static char found[512];
    const char *env = getenv("TPUSIM_CHROMIUM");
    if (env && *env) return access(env, X_OK) == 0 ? env : NULL;
    const char *names[] = {"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome"};
    const char *path = getenv("PATH");
    if (!path) path = "/usr/bin:/bin";
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        const char *s = path;
        while (*s) {
            const char *e = strchr(s, ':');
            size_t n = e ? (size_t)(e - s) : strlen(s);
            snprintf(found, sizeof found, "%.*s/%s", (int)n, s, names[i]);
            if (n && access(found, X_OK) == 0) return found;
            if (!e) break;
            s = e + 1;
        }
    }
    return NULL;
}

static uint32_t be32(const unsigned char *p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }

/* Decodes an 8-bit RGB or RGBA, non-interlaced PNG into RGB. 0 on success. */
int test_png_decode(const unsigned char *d, size_t n, int *w, int *h, unsigned char **rgb)
{
    static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    if (n < 33 || memcmp(d, sig, 8)) return 1;
    size_t pos = 8, zlen = 0, zcap = 0;
    unsigned char *z = NULL;
    int bpp = 0, ok = 0;
    while (pos + 12 <= n) {
        uint32_t len = be32(d + pos);
        const unsigned char *type = d + pos + 4, *body = d + pos + 8;
        if (pos + 12 + len > n) break;
        if (!memcmp(type, "IHDR", 4)) {
            *w = (int)be32(body);
            *h = (int)be32(body + 4);
            if (body[8] != 8 || body[12] != 0 || (body[9] != 2 && body[9] != 6)) break;
            bpp = body[9] == 6 ? 4 : 3;
        } else if (!memcmp(type, "IDAT", 4)) {
            if (zlen + len > zcap) {
                zcap = (zlen + len) * 2;
                unsigned char *nz = realloc(z, zcap);
                if (!nz) break;
                z = nz;
            }
            memcpy(z + zlen, body, len);
            zlen += len;
        } else if (!memcmp(type, "IEND", 4)) {
            ok = 1;
            break;
        }
        pos += 12 + len;
    }
    if (!ok || !bpp || *w <= 0 || *h <= 0 || *w > 20000 || *h > 20000) {
        free(z);
        return 1;
    }
    size_t stride = (size_t)*w * bpp;
    uLongf rawlen = (uLongf)((stride + 1) * (size_t)*h);
    unsigned char *raw = malloc(rawlen), *out = malloc((size_t)*w * *h * 3), *cur = malloc(stride), *prev = calloc(stride, 1);
    int bad = !raw || !out || !cur || !prev || uncompress(raw, &rawlen, z, zlen) != Z_OK || rawlen != (stride + 1) * (size_t)*h;
    for (int y = 0; y < *h && !bad; y++) {
        const unsigned char *line = raw + y * (stride + 1);
        int f = line[0];
        for (size_t x = 0; x < stride; x++) {
            int a = x >= (size_t)bpp ? cur[x - bpp] : 0, b = prev[x], c = x >= (size_t)bpp ? prev[x - bpp] : 0, v = line[1 + x];
            switch (f) {
            case 0: break;
            case 1: v += a; break;
            case 2: v += b; break;
            case 3: v += (a + b) / 2; break;
            case 4: {
                int pp = a + b - c, pa = abs(pp - a), pb = abs(pp - b), pc = abs(pp - c);
                v += pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
                break;
            }
            default: bad = 1;
            }
            cur[x] = (unsigned char)v;
        }
        for (int x = 0; x < *w; x++) memcpy(out + ((size_t)y * *w + x) * 3, cur + (size_t)x * bpp, 3);
        memcpy(prev, cur, stride);
    }
    free(z);
    free(raw);
    free(cur);
    free(prev);
    if (bad) {
        free(out);
        return 1;
    }
    *rgb = out;
    return 0;
}

/* Pixels within `tol` of the colour #rrggbb. */
long test_pixels_near(const unsigned char *rgb, int w, int h, unsigned col, int tol)
{
    int r = (int)(col >> 16), g = (int)(col >> 8 & 255), b = (int)(col & 255);
    long n = 0;
    for (long i = 0; i < (long)w * h; i++) {
        const unsigned char *p = rgb + i * 3;
        if (abs(p[0] - r) <= tol && abs(p[1] - g) <= tol && abs(p[2] - b) <= tol) n++;
    }
    return n;
}

