/* Small readers over jansson for documents muster did not write itself (other nodes' records,
 * the server's status): a missing key or one of another type gives the default, never a crash
 * or a NULL the caller forgot to test. */
#ifndef MUSTER_COMMON_JSON_H
#define MUSTER_COMMON_JSON_H

#include <jansson.h>

/* o[key] as a string, or def (may be NULL). o may be NULL. */
const char *mc_json_str(const json_t *o, const char *key, const char *def);
/* o[key] as a number (integer or real), or def. */
double mc_json_num(const json_t *o, const char *key, double def);
/* o[key] as an integer, or def. */
long long mc_json_int(const json_t *o, const char *key, long long def);

#endif
