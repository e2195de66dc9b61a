#include "json.h"

const char *mc_json_str(const json_t *o, const char *key, const char *def)
{
    const json_t *v = json_object_get(o, key);
    return json_is_string(v) ? json_string_value(v) : def;
}

double mc_json_num(const json_t *o, const char *key, double def)
{
    const json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : def;
}

long long mc_json_int(const json_t *o, const char *key, long long def)
{
    const json_t *v = json_object_get(o, key);
    return json_is_integer(v) ? (long long)json_integer_value(v) : def;
}
