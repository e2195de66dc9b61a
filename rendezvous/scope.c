/* The credential scope table (scope.h): a chained hash table, FNV-1a over the scope string, so
 * that a HELLO or a JOIN finds its scope in O(1) whatever the number of teams. */
#include "scope.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static unsigned bucket(const char *scope)
{
    uint32_t h = 2166136261u;

    for (const unsigned char *s = (const unsigned char *)scope; *s != '\0'; s++)
        h = (h ^ *s) * 16777619u;
    return h & (SRV_SCOPE_BUCKETS - 1);
}

struct rdzv__scope *rdzv__scope_find(const struct rdzv__scopes *t, const char *scope)
{
    for (struct rdzv__scope *s = t->buckets[bucket(scope)]; s != NULL; s = s->next)
        if (strcmp(s->scope, scope) == 0)
            return s;
    return NULL;
}

int rdzv__scope_get(struct rdzv__scopes *t, const char *scope, struct rdzv__scope **out)
{
    struct rdzv__scope *s = rdzv__scope_find(t, scope);
    unsigned b;

    if (s == NULL) {
        if (strlen(scope) > RDZV_ID_MAX)
            return -EINVAL;
        if ((s = calloc(1, sizeof(*s))) == NULL)
            return -ENOMEM;
        strcpy(s->scope, scope);
        b = bucket(scope);
        s->next = t->buckets[b];
        t->buckets[b] = s;
        t->n++;
    }
    s->refs++;
    *out = s;
    return 0;
}

void rdzv__scope_put(struct rdzv__scopes *t, struct rdzv__scope *s)
{
    struct rdzv__scope **pp;

    if (s == NULL || --s->refs > 0)
        return;
    for (pp = &t->buckets[bucket(s->scope)]; *pp != NULL; pp = &(*pp)->next)
        if (*pp == s) {
            *pp = s->next;
            t->n--;
            break;
        }
    free(s);
}

void rdzv__scopes_free(struct rdzv__scopes *t)
{
    for (unsigned b = 0; b < SRV_SCOPE_BUCKETS; b++)
        while (t->buckets[b] != NULL) {
            struct rdzv__scope *s = t->buckets[b];

            t->buckets[b] = s->next;
            free(s);
        }
    t->n = 0;
}
