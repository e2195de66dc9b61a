/* Every internal header of the rendezvous server at once, for the unit tests that look inside
 * it; the server's own files include only what they use (service.h, sjob.h, handler.h,
 * http.h). */
#ifndef MUSTER_RDZV_SERVER_PRIV_H
#define MUSTER_RDZV_SERVER_PRIV_H

#include "handler.h"
#include "http.h"
#include "service.h"
#include "sjob.h"

#endif
