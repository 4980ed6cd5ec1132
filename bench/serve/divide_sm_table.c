/*
 * pdmux_divide_sm's answers for the inputs on stdin, for the unit test
 * divide_sm_agree (check_divide_sm.py), which compares them with
 * detshare.serving.divide_sm: SGLang's divide_sm exists once in C (pdmux.c,
 * for pdmux_static) and once in Python (the binding's PDMux), and the test
 * makes sure the two give the same splits.
 *
 * Reads lines "TOTAL_SMS PARTS" and prints, for each, "TOTAL_SMS PARTS:"
 * followed by the prefill SM counts (" 112 104 ..."; nothing after the colon
 * when there is no split). Exit 2 on input it cannot read.
 */
#include <stdint.h>
#include <stdio.h>

#include "pdmux.h"

int main(void)
{
    unsigned long total, parts;
    int got;
    while ((got = scanf("%lu %lu", &total, &parts)) == 2) {
        if (total > UINT32_MAX || parts > UINT32_MAX) {
            fprintf(stderr, "divide_sm_table: %lu %lu: out of range\n", total, parts);
            return 2;
        }
        uint32_t out[64]; /* pdmux_divide_sm writes at most 64 */
        uint32_t k = pdmux_divide_sm((uint32_t)total, (uint32_t)parts, out);
        printf("%lu %lu:", total, parts);
        for (uint32_t i = 0; i < k; i++)
            printf(" %u", out[i]);
        printf("\n");
    }
    if (got != EOF) {
        fprintf(stderr, "divide_sm_table: want lines of two unsigned integers\n");
        return 2;
    }
    return fflush(stdout) == 0 ? 0 : 1;
}
