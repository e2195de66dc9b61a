#include "tmpdir.h"

#include <stdlib.h>

const char *mc_tmpdir(void)
{
    const char *t = getenv("TMPDIR");
    return t != NULL && t[0] == '/' ? t : "/tmp";
}
