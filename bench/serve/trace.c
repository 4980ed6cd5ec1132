/* Trace loading and replay windows (trace.h). */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "trace.h"

#define LINE_MAX_BYTES 4096

/* Days since 1970-01-01 of a proleptic Gregorian date (Hinnant's
 * days_from_civil, http://howardhinnant.github.io/date_algorithms.html). */
static long days_from_civil(long y, unsigned m, unsigned d)
{
    y -= m <= 2;
    long era = (y >= 0 ? y : y - 399) / 400;
    unsigned yoe = (unsigned)(y - era * 400);
    unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (long)doe - 719468;
}

/* "YYYY-MM-DD hh:mm:ss[.f]" or a plain number of seconds. */
static int parse_time(const char *s, double *out)
{
    long y;
    unsigned mo, d, h, mi;
    double sec;
    int used = 0;
    if (sscanf(s, "%ld-%u-%u %u:%u:%lf%n", &y, &mo, &d, &h, &mi, &sec, &used) == 6 && used > 0) {
        if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || !(sec >= 0 && sec < 61))
            return -1;
        *out = (double)days_from_civil(y, mo, d) * 86400.0 + h * 3600.0 + mi * 60.0 + sec;
        return 0;
    }
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    while (*end && isspace((unsigned char)*end))
        end++;
    if (errno || end == s || *end || !isfinite(v))
        return -1;
    *out = v;
    return 0;
}

static int parse_count(const char *s, uint32_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    while (*end && isspace((unsigned char)*end))
        end++;
    if (errno || end == s || *end || v > 1000000000ull || s[0] == '-')
        return -1;
    *out = (uint32_t)v;
    return 0;
}

/* Splits line (modified in place) at commas into at most cap fields. */
static size_t split_csv(char *line, char **fields, size_t cap)
{
    size_t n = 0;
    line[strcspn(line, "\r\n")] = '\0';
    for (char *p = line; n < cap;) {
        fields[n++] = p;
        char *c = strchr(p, ',');
        if (!c)
            break;
        *c = '\0';
        p = c + 1;
    }
    return n;
}

void serve_trace_free(serve_trace *t)
{
    free(t->t_s);
    free(t->prompt);
    free(t->output);
    *t = (serve_trace){0};
}

static int grow(serve_trace *t, size_t *cap)
{
    size_t c = *cap ? *cap * 2 : 1024;
    double *ts = realloc(t->t_s, c * sizeof *ts);
    if (ts)
        t->t_s = ts;
    uint32_t *p = realloc(t->prompt, c * sizeof *p);
    if (p)
        t->prompt = p;
    uint32_t *o = realloc(t->output, c * sizeof *o);
    if (o)
        t->output = o;
    if (!ts || !p || !o)
        return -1;
    *cap = c;
    return 0;
}

int serve_trace_load(const char *path, serve_trace *out)
{
    *out = (serve_trace){0};
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "serve: %s: %s\n", path, strerror(errno));
        return -1;
    }
    char line[LINE_MAX_BYTES];
    char *fields[32];
    int col_t = -1, col_p = -1, col_o = -1;
    size_t lineno = 1, cap = 0;
    double t0 = 0, prev = -INFINITY;
    if (!fgets(line, sizeof line, f)) {
        fprintf(stderr, "serve: %s: empty file\n", path);
        goto fail;
    }
    size_t nf = split_csv(line, fields, 32);
    for (size_t i = 0; i < nf; i++) {
        char *name = fields[i];
        while (isspace((unsigned char)*name))
            name++;
        name[strcspn(name, " \t")] = '\0';
        if (!strcmp(name, "TIMESTAMP"))
            col_t = (int)i;
        else if (!strcmp(name, "ContextTokens"))
            col_p = (int)i;
        else if (!strcmp(name, "GeneratedTokens"))
            col_o = (int)i;
    }
    if (col_t < 0 || col_p < 0 || col_o < 0) {
        fprintf(stderr, "serve: %s:1: the header must name TIMESTAMP, ContextTokens and GeneratedTokens\n", path);
        goto fail;
    }
    while (fgets(line, sizeof line, f)) {
        lineno++;
        if (line[strspn(line, " \t\r\n")] == '\0')
            continue;
        nf = split_csv(line, fields, 32);
        double ts;
        uint32_t p, o;
        int maxcol = col_t > col_p ? (col_t > col_o ? col_t : col_o) : (col_p > col_o ? col_p : col_o);
        if ((int)nf <= maxcol || parse_time(fields[col_t], &ts) || parse_count(fields[col_p], &p) ||
            parse_count(fields[col_o], &o)) {
            fprintf(stderr, "serve: %s:%zu: expected a timestamp and two token counts\n", path, lineno);
            goto fail;
        }
        if (out->n == 0)
            t0 = ts;
        if (ts < prev) {
            fprintf(stderr, "serve: %s:%zu: timestamps must be in arrival order\n", path, lineno);
            goto fail;
        }
        prev = ts;
        if (out->n == cap && grow(out, &cap)) {
            fprintf(stderr, "serve: %s: out of memory\n", path);
            goto fail;
        }
        out->t_s[out->n] = ts - t0;
        out->prompt[out->n] = p ? p : 1;
        out->output[out->n] = o ? o : 1;
        out->n++;
    }
    if (ferror(f) || out->n == 0) {
        fprintf(stderr, "serve: %s: %s\n", path, out->n ? "read error" : "no requests");
        goto fail;
    }
    fclose(f);
    return 0;
fail:
    fclose(f);
    serve_trace_free(out);
    return -1;
}

int serve_trace_window(const serve_trace *t, size_t offset, size_t n, double rate_rps, int poisson,
                       uint64_t seed, uint32_t max_ctx, serve_arrival *out, serve_window_info *info)
{
    if (n == 0 || t->n == 0 || max_ctx < 2)
        return -1;
    *info = (serve_window_info){0};
    /* The window's own arrival times, made monotonic across a wrap. */
    double base = 0, last = 0;
    for (size_t i = 0; i < n; i++) {
        size_t k = (offset + i) % t->n;
        if (i > 0 && k == 0)
            base = last + (t->n > 1 ? t->t_s[t->n - 1] / (double)(t->n - 1) : 1.0);
        double ts = base + t->t_s[k];
        out[i].at_us = ts; /* seconds for now */
        last = ts;
        uint32_t p = t->prompt[k], o = t->output[k];
        if ((uint64_t)p + o > max_ctx) {
            info->capped++;
            if (p >= max_ctx)
                p = max_ctx - 1;
            o = max_ctx - p;
        }
        out[i].prompt = p;
        out[i].output = o;
        out[i].trace_index = (uint32_t)k;
    }
    double first = out[0].at_us, span = out[n - 1].at_us - first;
    info->natural_rps = n > 1 && span > 0 ? (double)(n - 1) / span : 0;
    if (rate_rps <= 0) {
        for (size_t i = 0; i < n; i++)
            out[i].at_us = 0;
        info->scale = 0;
        return 0;
    }
    if (poisson) {
        double *at = malloc(n * sizeof *at);
        if (!at)
            return -1;
        bench_poisson_arrivals(seed, rate_rps, n, at);
        for (size_t i = 0; i < n; i++)
            out[i].at_us = at[i] - at[0];
        free(at);
        info->scale = 0;
        return 0;
    }
    info->scale = info->natural_rps > 0 ? info->natural_rps / rate_rps : 0;
    for (size_t i = 0; i < n; i++)
        out[i].at_us = (out[i].at_us - first) * info->scale * 1e6;
    return 0;
}
